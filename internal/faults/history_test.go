package faults

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
func ptr[T any](v T) *T   { return &v }

func ev(seq int64, attempt int, from, to api.State, ms int) api.Event {
	return api.Event{EventID: task.EventID("task_1", seq), TaskID: "task_1", Attempt: attempt, From: from, To: to, Seq: seq, OccurredAt: at(ms)}
}

func cb(kind string, attempt, status int, d api.Disposition, code string, sent int) Call {
	c := Call{TaskID: "task_1", Kind: kind, Attempt: attempt, WorkerID: "w1", Sent: at(sent), Received: at(sent + 20), Status: status,
		Answer: api.CallbackResponse{Disposition: d, Error: code}}
	if status == 200 && kind != "completed" {
		c.Answer.NextHeartbeatInMs = 300 // the interval
	}
	return c
}

// retried is a good history: attempt 1 goes silent and is declared a
// zombie, attempt 2 succeeds; the worker of attempt 2 crashed after its
// completed was committed and repeated it.
func retried() *History {
	done := cb("completed", 2, 200, api.Committed, "", 5000)
	done.Outcome, done.Answer.FinalState = api.OutcomeSucceeded, api.Succeeded
	zombieToQueued := ev(4, 1, api.Running, api.Queued, 3000)
	zombieToQueued.Outcome, zombieToQueued.NextAttempt, zombieToQueued.Reason = api.OutcomeZombie, 2, api.ReasonRetryScheduled
	h := &History{MaxLatency: time.Second, Start: at(0), End: at(10000), Lease: 3 * time.Second, CancelGrace: time.Second,
		Interval: 300 * time.Millisecond}
	th := h.Task("task_1")
	th.Deliveries = []Delivery{{"task_1", 1, at(50)}, {"task_1", 2, at(3600)}}
	th.Calls = []Call{
		cb("started", 1, 200, api.Continue, "", 100),
		cb("heartbeat", 1, 503, api.Retry, api.CodeUnavailable, 200),
		cb("started", 2, 200, api.Continue, "", 4000),
		cb("heartbeat", 2, 200, api.Continue, "", 4500),
		done,
		done, // the repeat after the crash: an identical COMMITTED replay
		cb("heartbeat", 1, 409, api.Cancel, api.CodeAttemptMismatch, 6000),
	}
	th.Calls[1].RetryAfter = "1"
	th.Events = []api.Event{
		ev(1, 1, "", api.Pending, 0), ev(2, 1, api.Pending, api.Queued, 10), ev(3, 1, api.Queued, api.Running, 100),
		zombieToQueued, ev(5, 2, api.Queued, api.Running, 4000), ev(6, 2, api.Running, api.Succeeded, 5000),
		ev(6, 2, api.Running, api.Succeeded, 5000), // a duplicate delivery
	}
	th.Final = &api.Task{TaskID: "task_1", State: api.Succeeded, Attempt: 2, Attempts: []api.Attempt{
		{Attempt: 1, Outcome: api.OutcomeZombie, StartedAt: ptr(at(100))},
		{Attempt: 2, Outcome: api.OutcomeSucceeded, StartedAt: ptr(at(4000)), LastHeartbeatAt: ptr(at(4500)), CompletedAt: ptr(at(5000))},
	}}
	h.Submits = []Call{{Kind: KindSubmit, Key: "k1", TaskID: "task_1", Status: 201}, {Kind: KindSubmit, Key: "k1", Status: 0}, {Kind: KindSubmit, Key: "k1", TaskID: "task_1", Status: 200}}
	h.Tokens = []string{"eyJhbGciOiJIUzI1NiJ9.eyJ0YXNrSWQiOiJ0YXNrXzEifQ.c2lnbmF0dXJlLW9mLXRoZS10b2tlbg"}
	h.Log = []byte(`{"level":"INFO","msg":"callback","taskId":"task_1"}` + "\n")
	return h
}

func TestCheckAcceptsAGoodHistory(t *testing.T) {
	h := retried()
	vs, st := Check(h)
	if len(vs) != 0 {
		t.Fatalf("violations in a good history:\n%s", Report(h, vs))
	}
	if st.Tasks != 1 || st.Callbacks != 7 || st.Answers503 != 1 || st.DuplicateEvents != 1 || st.Final[api.Succeeded] != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestCheckCatchesEachViolation(t *testing.T) {
	th := func(h *History) *TaskHistory { return h.Tasks["task_1"] }
	for _, tc := range []struct {
		name, inv, msg string
		break_         func(h *History)
	}{
		{"left running", InvNotTerminal, "left RUNNING", func(h *History) { th(h).Final.State = api.Running }},
		{"final unknown", InvNotTerminal, "could not be read", func(h *History) { th(h).Final = nil }},
		{"a 500", InvAnswer, "answered 500", func(h *History) { th(h).Calls[1].Status, th(h).Calls[1].Answer.Error = 500, api.CodeInternal }},
		{"a 401 to a conforming worker", InvAnswer, "answered 401", func(h *History) {
			th(h).Calls[3].Status, th(h).Calls[3].Answer = 401, api.CallbackResponse{Disposition: api.Rejected, Error: api.CodeInvalidToken}
		}},
		{"503 without Retry-After", InvAnswer, "without Retry-After", func(h *History) { th(h).Calls[1].RetryAfter = "" }},
		{"wrong disposition", InvAnswer, `disposition "CONTINUE", want "CANCELLED"`, func(h *History) { th(h).Calls[6].Answer.Disposition = api.Continue }},
		{"API 500", InvAnswer, "submit answered 500", func(h *History) {
			th(h).Calls = append(th(h).Calls, Call{TaskID: "task_1", Kind: KindSubmit, Status: 500, Code: "internal", Sent: at(1), Received: at(2)})
		}},
		{"blocked past the store timeout", InvLatency, "answered after 3s", func(h *History) { th(h).Calls[1].Received = at(3200) }},
		{"COMMITTED disagrees", InvCommitted, "COMMITTED as FAILED, but the task ended SUCCEEDED", func(h *History) { th(h).Calls[4].Answer.FinalState = api.Failed }},
		{"COMMITTED outcome lost", InvCommitted, "the attempt's record says \"FAILED\"", func(h *History) { th(h).Final.Attempts[1].Outcome = api.OutcomeFailed }},
		{"retry promised, never made", InvCommitted, "ended at attempt 2", func(h *History) {
			c := cb("completed", 2, 200, api.Committed, "", 5100)
			c.Outcome, c.Answer.FinalState, c.Answer.RetryScheduled, c.Answer.NextAttempt = api.OutcomeFailed, api.Queued, true, 3
			th(h).Calls = append(th(h).Calls, c)
		}},
		{"attempt went back", InvAttemptOrder, "attempt 3 was seen", func(h *History) { th(h).Deliveries = append(th(h).Deliveries, Delivery{"task_1", 3, at(9000)}) }},
		{"event attempt decreases", InvAttemptOrder, "seq 6 is of attempt 1", func(h *History) { th(h).Events[5].Attempt = 1; th(h).Events[6].Attempt = 1 }},
		{"stale attempt accepted", InvStaleAttempt, "heartbeat of attempt 1 sent at 12:00:06.000 accepted", func(h *History) {
			th(h).Calls[6] = cb("heartbeat", 1, 200, api.Continue, "", 6000)
		}},
		{"zombie lease came back", InvZombie, "lease was declared lost", func(h *History) {
			th(h).Calls = append(th(h).Calls, cb("heartbeat", 1, 200, api.Continue, "", 3100))
		}},
		{"zombie record overwritten", InvZombie, "declared a zombie but its record says", func(h *History) { th(h).Final.Attempts[0].Outcome = api.OutcomeSucceeded }},
		{"zombie attempt in events", InvZombie, "whose lease was lost at seq 4", func(h *History) { th(h).Events[4].Attempt = 1 }},
		{"event gap", InvEvents, "gap: seq 6 follows 4", func(h *History) { th(h).Events = append(th(h).Events[:4], th(h).Events[5:]...) }},
		{"no events", InvEvents, "no event was read", func(h *History) { th(h).Events = nil }},
		{"event off the machine", InvEvents, "seq 4: RUNNING→PENDING is no edge", func(h *History) {
			th(h).Events[3].To, th(h).Events[4].From = api.Pending, api.Pending
		}},
		{"events end elsewhere", InvEvents, "enters SUCCEEDED but the task is FAILED", func(h *History) {
			th(h).Final.State = api.Failed
			th(h).Calls = th(h).Calls[:4]
		}},
		{"conflicting duplicates", InvEvents, "two different events with seq 6", func(h *History) { th(h).Events[6].To = api.Failed }},
		{"first event", InvEvents, "want the creation", func(h *History) { th(h).Events[0].To = api.Queued }},
		{"two terminal events", InvNotTerminal, "2 distinct events enter a terminal state", func(h *History) {
			e := ev(7, 2, api.Succeeded, api.Failed, 5500)
			th(h).Events = append(th(h).Events, e)
		}},
		{"worker clock trusted", InvServerTime, "lastHeartbeatAt is 13:00:04.500", func(h *History) { th(h).Final.Attempts[1].LastHeartbeatAt = ptr(at(4500).Add(time.Hour)) }},
		{"doubled by a retried submit", InvDuplicateTask, `key "k1" made 2 tasks`, func(h *History) { h.Submits[2].TaskID = "task_2" }},
		{"lease honoured after it ran out", InvLease, "was accepted: the lease (3s after the previous accepted callback was answered at 12:00:05.020, outages credited) had run out at 12:00:08.020", func(h *History) {
			th(h).Calls = append(th(h).Calls, cb("heartbeat", 2, 200, api.Continue, "", 9100))
		}},
		{"lease expired early by a callback", InvLease, "answered task_expired at 12:00:05.520, but the lease ran until 12:00:07.500", func(h *History) {
			th(h).Calls = append(th(h).Calls, cb("heartbeat", 2, 410, api.Cancel, api.CodeTaskExpired, 5500))
		}},
		{"zombie before the lease ran out, by receipt time", InvLease, "declared a zombie at 12:00:03.000, but its lease ran until 12:00:05.500", func(h *History) {
			th(h).Calls[0].BodyDone = at(2500) // its body trickled in
		}},
		{"accepted past the cancel grace", InvCancelGrace, "completed of attempt 2 first sent at 12:00:05.000 accepted (COMMITTED)", func(h *History) {
			th(h).Calls = append(th(h).Calls, Call{TaskID: "task_1", Kind: KindCancel, Status: 202, Sent: at(2500), Received: at(2520)})
		}},
		{"a pacing hint under the interval", InvPacing, "nextHeartbeatInMs 100ms, under the interval 300ms", func(h *History) {
			th(h).Calls[0].Answer.NextHeartbeatInMs = 100
		}},
		{"a pacing hint beyond half the grace", InvPacing, "nextHeartbeatInMs 900ms, beyond half the cancel grace 1s", func(h *History) {
			th(h).Calls[3].Answer.NextHeartbeatInMs = 900
		}},
		{"a pacing hint without the lease's margin", InvPacing, "answered nextHeartbeatInMs 4s: a heartbeat then leaves under 750ms of the lease", func(h *History) {
			th(h).CancelGrace = 20 * time.Second
			th(h).Calls[3].Answer.NextHeartbeatInMs = 4000
		}},
		{"a pacing hint without an answer's field", InvPacing, "answered 200 without nextHeartbeatInMs", func(h *History) {
			th(h).Calls[3].Answer.NextHeartbeatInMs = 0
		}},
		{"on time by the hint, yet expired", InvPacing, "heartbeat of attempt 2, first sent at 12:00:04.700 within the pacing hint (300ms after the answer that arrived at 12:00:04.520), was answered task_expired", func(h *History) {
			th(h).Calls = append(th(h).Calls, cb("heartbeat", 2, 410, api.Cancel, api.CodeTaskExpired, 4700))
		}},
		{"on time by the hint, yet a zombie", InvPacing, "attempt 1 was declared a zombie at 12:00:02.000, before its heartbeat first sent at 12:00:02.050 within the pacing hint", func(h *History) {
			th(h).CancelGrace = 20 * time.Second
			th(h).Calls[0].Answer.NextHeartbeatInMs = 2000
			th(h).Calls[1].Sent, th(h).Calls[1].Received = at(1500), at(1520) // a 503: the hint still holds
			th(h).Calls = append(th(h).Calls, cb("heartbeat", 1, 409, api.Cancel, api.CodeAttemptMismatch, 2050))
			th(h).Calls[len(th(h).Calls)-1].FirstSent = at(2050)
			th(h).Events[3].OccurredAt = at(2000)
		}},
		{"a second worker accepted", InvOneWorker, "attempt 2: heartbeat of worker w2 accepted after worker w1's", func(h *History) {
			th(h).Calls[3].WorkerID = "w2"
		}},
		{"delivered before its start", InvEarlyStart, "attempt 1 was delivered at", func(h *History) {
			start := th(h).Deliveries[0].At.Add(time.Second)
			th(h).Final.Attempts[0].ScheduledAt = &start
		}},
		{"token in the log", InvTokenInLog, "log line 2 holds a task token", func(h *History) {
			h.Log = append(h.Log, []byte(`{"msg":"oops","auth":"Bearer `+h.Tokens[0]+`"}`+"\n")...)
		}},
		{"token signature alone in the log", InvTokenInLog, "log line 1", func(h *History) {
			h.Log = []byte(`{"sig":"c2lnbmF0dXJlLW9mLXRoZS10b2tlbg"}`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := retried()
			tc.break_(h)
			vs, _ := Check(h)
			var found bool
			for _, v := range vs {
				if v.Invariant == tc.inv && strings.Contains(v.Message, tc.msg) {
					found = true
				}
			}
			if !found {
				t.Fatalf("want a %s violation saying %q; got:\n%s", tc.inv, tc.msg, Report(h, vs))
			}
			rep := Report(h, vs)
			if vs[0].TaskID != "" && !strings.Contains(rep, "--- history of task_1 ---") {
				t.Errorf("the report does not print the task's history:\n%s", rep)
			}
		})
	}
}

// TestLeaseFollowsTheSkipRule: a plain heartbeat with more than half the
// lease left does not renew it (docs/contract.md §5.3), so a zombie
// declared a lease after the callback before it is on time; a heartbeat
// that reports something renews it.
func TestLeaseFollowsTheSkipRule(t *testing.T) {
	// Attempt 1 of retried() starts at 0.1 s and is declared a zombie at
	// 3 s (lease 3 s); these heartbeats are added to it.
	beat := func(ms int, plain bool) Call {
		c := cb("heartbeat", 1, 200, api.Continue, "", ms)
		c.Plain = plain
		return c
	}
	for _, c := range []struct {
		name  string
		beats []Call
		early bool // the zombie at 3 s is before the lease (to 4.3 s)
	}{
		{"a plain heartbeat with 2.5 s left is not written: lease to 3.8 s", []Call{beat(800, false), beat(1300, true)}, false},
		{"the second heartbeat reports progress", []Call{beat(800, false), beat(1300, false)}, true},
		{"an attempt's first plain heartbeat follows the rule too: 1.8 s left, not written", []Call{beat(1300, true)}, false},
		{"an attempt's first heartbeat reports progress", []Call{beat(1300, false)}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := retried()
			h.Interval = 300 * time.Millisecond
			tk := h.Tasks["task_1"]
			tk.Calls = append(append(tk.Calls[:2:2], c.beats...), tk.Calls[2:]...)
			vs, _ := Check(h)
			found := false
			for _, v := range vs {
				found = found || (v.Invariant == InvLease && strings.Contains(v.Message, "declared a zombie at 12:00:03.000, but its lease ran until 12:00:04.300"))
			}
			if found != c.early || (!c.early && len(vs) != 0) {
				t.Fatalf("zombie at 3 s reported early: %v, want %v; violations:\n%s", found, c.early, Report(h, vs))
			}
		})
	}
}

// TestCheckCreditsOutages: a lease or cancel grace that spans an outage
// (Servo down, Firestore frozen) is held to the credited rule
// (docs/contract.md §5.3): it runs out once it has lasted its length
// outside the outages, counted at least (each less CreditSlack) when it
// ends, at most (each and every may-credit span CreditSlack longer at
// both ends) when it is honoured.
func TestCheckCreditsOutages(t *testing.T) {
	// Attempt 1 of retried() starts at 0.1 s (lease 3 s) and is declared a
	// zombie at 3 s; attempt 2's last callback is answered at 5.02 s.
	late := cb("heartbeat", 2, 200, api.Continue, "", 9100)
	cancel := Call{TaskID: "task_1", Kind: KindCancel, Status: 202, Sent: at(2500), Received: at(2520)}
	for _, c := range []struct {
		name               string
		outages, mayCredit []Window
		calls              []Call
		want               string // a violation's text; "" none
	}{
		{"an outage spans the lease and the grace: honoured later", []Window{{From: at(3000), To: at(7000)}}, nil, []Call{late, cancel}, ""},
		{"an outage credited at most: 3–7 s, the heartbeat at 9.1 s is within 5.02 + 3 + 7 s", []Window{{From: at(6000), To: at(7000)}}, nil, []Call{late}, ""},
		{"too short an outage to cover the heartbeat at 15.1 s", []Window{{From: at(6000), To: at(7000)}}, nil,
			[]Call{cb("heartbeat", 2, 200, api.Continue, "", 15100)}, "first sent at 12:00:15.100 was accepted"},
		{"a Pub/Sub freeze may be credited", nil, []Window{{From: at(6000), To: at(7000)}}, []Call{late}, ""},
		// Attempt 1's lease (0.1 + 3 s) spans a store outage from 1 s to
		// 5 s, credited at least from 2 s: to 6.1 s. The zombie at 3 s is
		// early.
		{"the zombie at 3 s, inside a store outage: early by the credited rule", []Window{{From: at(1000), To: at(5000), Slack: StoreSlack}}, nil, nil,
			"declared a zombie at 12:00:03.000, but its lease ran until 12:00:06.100"},
		// Servo down from -1 s to 9.5 s: credited at least from 2 s, 7.5 s
		// in all: the lease runs to 10.6 s.
		{"Servo down, credited less CreditSlack", []Window{{From: at(-1000), To: at(9500)}}, nil, nil, "but its lease ran until 12:00:10.600"},
		// A Pub/Sub freeze need not be credited: the zombie at 3 s is not early.
		{"a Pub/Sub freeze need not be credited", nil, []Window{{From: at(1000), To: at(5000)}}, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := retried()
			th := h.Tasks["task_1"]
			th.Calls[0].BodyDone = at(100) // attempt 1's started, received in full
			th.Calls = append(th.Calls, c.calls...)
			h.Outages, h.MayCredit = c.outages, c.mayCredit
			vs, _ := Check(h)
			if c.want == "" {
				if len(vs) != 0 {
					t.Fatalf("violations:\n%s", Report(h, vs))
				}
				return
			}
			if len(vs) == 0 || vs[0].Invariant != InvLease || !strings.Contains(vs[0].Message, c.want) {
				t.Fatalf("want a lease violation saying %q; got:\n%s", c.want, Report(h, vs))
			}
		})
	}
}

func TestCreditedEnd(t *testing.T) {
	h := &History{Outages: []Window{{From: at(2000), To: at(10000)}, {From: at(5000), To: at(12000)}}, MayCredit: []Window{{From: at(20000), To: at(21000)}}}
	for _, c := range []struct {
		from, d int
		most    bool
		want    int
	}{
		{0, 3000, false, 3000},  // before the outages (credited from 5 s)
		{0, 6000, false, 13000}, // 5–12 s credited (the first less 3 s)
		{0, 6000, true, 28000},  // 0–15 s credited (both 3 s longer at each end), then 17–24 s
		{13000, 2000, false, 15000},
		{16000, 2000, true, 25000}, // the may-credit span, 3 s longer at each end: 17–24 s
	} {
		if got := h.creditedEnd(at(c.from), time.Duration(c.d)*time.Millisecond, c.most); !got.Equal(at(c.want)) {
			t.Errorf("from %d ms for %d ms (most %v): %s, want %s", c.from, c.d, c.most, ts(got), ts(at(c.want)))
		}
	}
}

// TestRandomScheduleHasEveryFault: the long mode's schedule starts with a
// store outage longer than the store timeout and, over its duration, has
// every kind of fault, one at a time.
func TestRandomScheduleHasEveryFault(t *testing.T) {
	for seed := range uint64(5) {
		s := RandomSchedule(rand.New(rand.NewPCG(seed, seed)), 5*time.Minute)
		if len(s) == 0 || s[0].Kind != FaultFirestoreFreeze || s[0].For <= StoreTimeout {
			t.Fatalf("seed %d: the schedule does not start with a Firestore freeze longer than %v: %v", seed, StoreTimeout, s)
		}
		kinds := map[string]bool{}
		for i, st := range s {
			kinds[st.Kind] = true
			if i > 0 && st.At < s[i-1].At+s[i-1].For {
				t.Errorf("seed %d: step %d (%v) starts before step %d ends", seed, i, st, i-1)
			}
			if st.At+st.For > 5*time.Minute {
				t.Errorf("seed %d: step %d (%v) ends after the duration", seed, i, st)
			}
		}
		for _, k := range FaultKinds {
			if !kinds[k] {
				t.Errorf("seed %d: no %s in %v", seed, k, s)
			}
		}
	}
}

func TestReportPrintsTheWholeHistory(t *testing.T) {
	h := retried()
	h.Tasks["task_1"].Final.State = api.Running
	vs, _ := Check(h)
	rep := Report(h, vs)
	for _, want := range []string{
		"VIOLATION terminal: task_1: left RUNNING",
		"delivered attempt 1", "started attempt=1 worker=w1: 200 CONTINUE",
		"heartbeat attempt=1 worker=w1: 503 RETRY unavailable",
		"event seq=4 attempt=1 RUNNING→QUEUED RETRY_SCHEDULED outcome=ZOMBIE next=2",
		"completed attempt=2 worker=w1: 200 COMMITTED  in 20ms outcome=SUCCEEDED → finalState=SUCCEEDED",
		"final: RUNNING", "attempt 1: outcome=ZOMBIE",
	} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
}

// TestCheckSchedules: each expected fire made once, none made before its
// time by Servo's record or delivered before it by the workers' clock.
func TestCheckSchedules(t *testing.T) {
	fire := func(id string, fireMs, createdMs int) api.Task {
		return api.Task{TaskID: id, ScheduledFireAt: ptr(at(fireMs)), CreatedAt: at(createdMs)}
	}
	for _, c := range []struct {
		name      string
		tasks     []api.Task
		delivered int // ms at which task f2 was delivered (0: not seen)
		want      string
	}{
		{"each fire once, on time", []api.Task{fire("f1", 1000, 1010), fire("f2", 2000, 2050)}, 2060, ""},
		{"a fire made twice", []api.Task{fire("f1", 1000, 1010), fire("f2", 2000, 2050), fire("f3", 2000, 2100)}, 0, "the fire at 12:00:02.000 was made 2 times"},
		{"a fire never made", []api.Task{fire("f1", 1000, 1010)}, 0, "the fire at 12:00:02.000 was never made"},
		{"made before its time", []api.Task{fire("f1", 1000, 1010), fire("f2", 2000, 1990)}, 0, "was made at 12:00:01.990, before its time"},
		{"recorded on time, delivered before it", []api.Task{fire("f1", 1000, 1010), fire("f2", 2000, 2000)}, 1500, "was delivered at 12:00:01.500, before its time"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &History{Schedules: []ScheduleRecord{{ID: "every", Expected: []time.Time{at(1000), at(2000)}, Tasks: c.tasks}}}
			if c.delivered > 0 {
				h.Task("f2").Deliveries = []Delivery{{"f2", 1, at(c.delivered)}}
			}
			cc := &checker{h: h}
			cc.schedules()
			var got []string
			for _, v := range cc.vs {
				got = append(got, v.Message)
			}
			if joined := strings.Join(got, "\n"); (c.want == "") != (len(got) == 0) || !strings.Contains(joined, c.want) {
				t.Errorf("violations %q, want one saying %q", got, c.want)
			}
		})
	}
}

// prioritized is a history of the priority workload: worker simq
// (maxRunning 2), task p of priority 1 submitted (answered) at 1 s, read
// waiting for a run slot from 1.1 s to 3 s, not at 3.3 s, started at
// 3.5 s; the priority-5 tasks l1 to l4, created before it: l1 started at
// 0.5 s (before it came), l2 and l3 at 1.5 s and 2.5 s (the two that held
// slots when it came), l4 at 4 s (after it).
func prioritized() *History {
	h := &History{MaxRunning: map[string]int{"simq": 2}}
	add := func(id string, prio, createdMs, startMs int) *TaskHistory {
		th := h.Task(id)
		th.Final = &api.Task{TaskID: id, TenantID: "faults", Worker: "simq", Priority: prio, CreatedAt: at(createdMs), State: api.Succeeded, Attempt: 1}
		if startMs >= 0 {
			c := cb("started", 1, 200, api.Continue, "", startMs)
			c.TaskID = id
			th.Calls = append(th.Calls, c)
		}
		return th
	}
	for i, ms := range []int{500, 1500, 2500, 4000} {
		add(fmt.Sprintf("l%d", i+1), 5, -1000+i, ms)
	}
	p := add("p", 1, 980, 3500)
	p.Calls = append(p.Calls, Call{TaskID: "p", Kind: KindSubmit, Status: 201, Sent: at(950), Received: at(1000)})
	for ms := 1100; ms <= 3000; ms += 250 {
		p.Slot = append(p.Slot, SlotSeen{Sent: at(ms), Received: at(ms + 20), State: api.Queued, Waiting: true})
	}
	p.Slot = append(p.Slot, SlotSeen{Sent: at(3300), Received: at(3320), State: api.Queued})
	return h
}

// TestCheckPriority: a priority-1 task waiting for a run slot of a
// limited worker is passed only by the lower-priority tasks that held
// the slots when it came, and it starts.
func TestCheckPriority(t *testing.T) {
	late := func(h *History, id string, prio, createdMs, startMs int) *TaskHistory {
		th := h.Task(id)
		th.Final = &api.Task{TaskID: id, TenantID: "faults", Worker: "simq", Priority: prio, CreatedAt: at(createdMs), State: api.Succeeded, Attempt: 1}
		c := cb("started", 1, 200, api.Continue, "", startMs)
		c.TaskID = id
		th.Calls = append(th.Calls, c)
		return th
	}
	for _, c := range []struct {
		name  string
		edit  func(h *History)
		want  string // a violation's text; "" none
		ahead int    // Stats.PriorityAhead when none
	}{
		{"the two slot holders start before it", func(*History) {}, "", 2},
		{"a third lower-priority task starts while it waits", func(h *History) { late(h, "l5", 5, -500, 2800) },
			"3 tasks of lower priority, created before it, started in between, more than the 2 slots held when it arrived: l2 (priority 5, started 12:00:01.520), l3", 0},
		{"the default priority is lower too", func(h *History) { late(h, "l5", 0, -500, 2800) }, "l5 (priority 3, started 12:00:02.820)", 0},
		{"it never starts", func(h *History) { h.Tasks["p"].Calls = h.Tasks["p"].Calls[1:] }, "priority-1 task of worker simq never started (4 tasks", 0},
		{"a lower-priority task created after it may take a slot free at its creation", func(h *History) { late(h, "l5", 5, 1200, 2800) }, "", 2},
		{"another tenant's task is not its rival", func(h *History) { late(h, "l5", 5, -500, 2800).Final.TenantID = "other" }, "", 2},
		{"an unlimited worker's task is not its rival", func(h *History) { late(h, "l5", 5, -500, 2800).Final.Worker = "sim" }, "", 2},
		{"a task of its own priority may go first", func(h *History) { late(h, "l5", 1, -500, 2800) }, "", 2},
		{"a priority-5 task that waited 20 minutes longer outranks it", func(h *History) {
			late(h, "l5", 5, 980-int(4*task.PriorityAging/time.Millisecond), 2800)
		}, "", 2},
		{"a start first sent before it came, answered after", func(h *History) {
			l := late(h, "l5", 5, -500, 2800)
			l.Calls[0].FirstSent = at(990)
		}, "", 2},
		{"a start after it was admitted, before its own (its Cloud Task re-driven)", func(h *History) { late(h, "l5", 5, -500, 3100) }, "", 2},
		{"a start answered after the last read that saw it waiting was sent", func(h *History) { late(h, "l5", 5, -500, 2990) }, "", 2},
		{"not watched: nothing to judge but its start", func(h *History) { h.Tasks["p"].Slot = nil; late(h, "l5", 5, -500, 2800) }, "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := prioritized()
			c.edit(h)
			cc := &checker{h: h, st: Stats{Final: map[api.State]int{}}}
			cc.priority()
			var got []string
			for _, v := range cc.vs {
				if v.Invariant != InvPriority || v.TaskID != "p" {
					t.Errorf("violation %v, want priority violations of p only", v)
				}
				got = append(got, v.Message)
			}
			joined := strings.Join(got, "\n")
			if (c.want == "") != (len(got) == 0) || !strings.Contains(joined, c.want) {
				t.Fatalf("violations %q, want one saying %q", got, c.want)
			}
			if c.want == "" && (cc.st.Priority < 1 || cc.st.PriorityAhead != c.ahead) {
				t.Errorf("stats %+v, want p judged, %d ahead", cc.st, c.ahead)
			}
		})
	}
	// Check runs it, and the report shows the reads.
	h := prioritized()
	late(h, "l5", 5, -500, 2800)
	vs, st := Check(h)
	if st.Priority != 1 || st.PriorityWaited != 1 || st.PriorityAhead != 3 {
		t.Errorf("stats %+v, want 1 task judged, seen waiting, 3 ahead", st)
	}
	found := false
	for _, v := range vs {
		found = found || v.Invariant == InvPriority
	}
	if rep := Report(h, vs); !found || !strings.Contains(rep, "read: QUEUED, waiting for a run slot") || !strings.Contains(rep, "worker=simq priority=1") {
		t.Errorf("Check does not report the priority violation with the reads:\n%s", rep)
	}
}
