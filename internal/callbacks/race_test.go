package callbacks_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// newClient returns an HTTP client that keeps enough connections open for
// n concurrent callbacks.
func newClient(n int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = n
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

// TestConcurrentIdenticalCompleted sends 50 identical completed reports at
// once (a worker retrying through a flaky network, Cloud Tasks
// duplicates): every one answers 200 COMMITTED with the same finalState,
// and the history is written once: one attempt record with the outcome,
// one terminal transition in the outbox. With two instances the reports
// also race through Firestore transactions.
func TestConcurrentIdenticalCompleted(t *testing.T) {
	const n = 50
	for _, tc := range []struct {
		name      string
		queued    bool
		instances int
	}{
		{"RUNNING, one instance", false, 1},
		{"QUEUED (completed counts as the start), one instance", true, 1},
		{"RUNNING, two instances", false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			defer func() {
				if t.Failed() {
					t.Logf("logs:\n%s", e.logs.String())
				}
			}()
			var tk task.Task
			if tc.queued {
				tk = e.queued()
			} else {
				tk = e.running("w1")
			}
			urls := make([]string, tc.instances)
			for i := range urls {
				h := e.h
				if i > 0 {
					h = e.instance()
				}
				srv := httptest.NewServer(h)
				defer srv.Close()
				urls[i] = srv.URL
			}
			client := newClient(n)
			tok := e.token(tk, 1)
			body := completedReq(1, "w1", api.OutcomeSucceeded)
			replies := make([]reply, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Go(func() {
					<-start
					replies[i], errs[i] = httpPost(client, urls[i%len(urls)], callbacks.KindCompleted, tk.ID, tok, body)
				})
			}
			close(start)
			wg.Wait()
			for i, rp := range replies {
				if errs[i] != nil {
					t.Fatalf("reply %d: %v", i, errs[i])
				}
				if rp.status != http.StatusOK || rp.resp.Disposition != api.Committed || rp.resp.FinalState != api.Succeeded {
					t.Errorf("reply %d: %d %s", i, rp.status, rp.raw)
				}
			}
			got := e.get(tk.ID)
			if got.State != api.Succeeded || len(got.Attempts) != 1 || got.Attempts[0].Outcome != api.OutcomeSucceeded {
				t.Fatalf("task %s with attempts %+v", got.State, got.Attempts)
			}
			want := []string{">PENDING", "PENDING>QUEUED", "QUEUED>RUNNING", "RUNNING>SUCCEEDED"}
			if tr := e.outboxTransitions(tk.ID); !slices.Equal(tr, want) {
				t.Errorf("outbox %v, want %v", tr, want)
			}
			if got.Seq != int64(len(want)) {
				t.Errorf("seq %d, want %d", got.Seq, len(want))
			}
		})
	}
}

// TestConcurrentDifferentOutcomes sends two different completed reports of
// one attempt at once: exactly one is COMMITTED, the other is 409
// completion_conflict (REJECTED), and the stored outcome is the winner's.
func TestConcurrentDifferentOutcomes(t *testing.T) {
	e := newEnv(t, nil)
	// One instance per outcome, so that the two race through Firestore
	// transactions (an instance queues its own callbacks of a task).
	srvs := []*httptest.Server{httptest.NewServer(e.h), httptest.NewServer(e.instance())}
	for _, srv := range srvs {
		defer srv.Close()
	}
	client := newClient(2)
	bodies := []api.CompletedRequest{completedReq(1, "w1", api.OutcomeSucceeded), failedReq(1, "w1", api.CategoryDataQuality)}
	finals := []api.State{api.Succeeded, api.Failed}
	wins := [2]int{}
	for round := range 5 {
		tk := e.running("w1")
		tok := e.token(tk, 1)
		var replies [2]reply
		var errs [2]error
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 2 {
			wg.Go(func() {
				<-start
				replies[i], errs[i] = httpPost(client, srvs[i].URL, callbacks.KindCompleted, tk.ID, tok, bodies[i])
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		winner := -1
		for i, rp := range replies {
			switch {
			case rp.status == http.StatusOK && rp.resp.Disposition == api.Committed && rp.resp.FinalState == finals[i]:
				if winner >= 0 {
					t.Fatalf("round %d: both committed: %s / %s", round, replies[0].raw, replies[1].raw)
				}
				winner = i
			case rp.status == http.StatusConflict && rp.resp.Error == api.CodeCompletionConflict && rp.resp.Disposition == api.Rejected:
			default:
				t.Fatalf("round %d: reply %d: %d %s", round, i, rp.status, rp.raw)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: neither committed: %s / %s", round, replies[0].raw, replies[1].raw)
		}
		wins[winner]++
		got := e.get(tk.ID)
		if got.State != finals[winner] || got.Attempts[0].Outcome != bodies[winner].Outcome {
			t.Fatalf("round %d: stored %s / %s, winner reported %s", round, got.State, got.Attempts[0].Outcome, bodies[winner].Outcome)
		}
		tr := e.outboxTransitions(tk.ID)
		if last := tr[len(tr)-1]; last != "RUNNING>"+string(finals[winner]) || len(tr) != 4 {
			t.Fatalf("round %d: outbox %v", round, tr)
		}
	}
	t.Logf("wins: SUCCEEDED %d, FAILED %d", wins[0], wins[1])
}

// TestHeartbeatRacingExpiry races, for many tasks, a heartbeat arriving
// around the moment the lease runs out against the sweeper applying the
// lease expiry. Whoever wins, the outcome is one of exactly two:
//
//   - the heartbeat won: 200, the task stays RUNNING on attempt 1 with an
//     extended lease, the sweeper's event was a no-op, no zombie anywhere;
//   - the expiry won: the heartbeat is told to stop (410 task_expired when
//     the heartbeat itself found the lease gone and applied the zombie
//     transition; 409 attempt_mismatch when the sweeper had already moved
//     the task to attempt 2), attempt 1 is ZOMBIE, the task is QUEUED for
//     attempt 2, and the RUNNING→QUEUED transition is written once.
//
// Never both. The handler and the sweeper (another process, with its own
// store) use the real clock here.
func TestHeartbeatRacingExpiry(t *testing.T) {
	e := newEnv(t, func(c *callbacks.Config) { c.Now = func() time.Time { return time.Now().UTC() } })
	// The sweeper is another process: its own store connection.
	sweeper, err := store.New(e.ctx, e.project)
	if err != nil {
		t.Fatal(err)
	}
	defer sweeper.Close()
	offsets := []time.Duration{-time.Second, time.Second} // one sure outcome each way
	for ms := -8; ms <= 40; ms += 4 {
		offsets = append(offsets, time.Duration(ms)*time.Millisecond)
	}
	counts := map[string]int{}
	for _, off := range offsets {
		tk := e.queued()
		tok := e.tokenFor(scopeOf(tk, 1), time.Hour, time.Now())
		// Started so that the lease runs out off after both fire.
		fire := time.Now().Add(100 * time.Millisecond)
		e.apply(tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1",
			Now: fire.UTC().Add(off - testTiming.HeartbeatTimeout())})
		var (
			rp      reply
			rpErr   error
			sweep   task.Result
			sweepEr error
			wg      sync.WaitGroup
		)
		hb := mustJSON(t, heartbeatReq(1, "w1"))
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			rp, rpErr = serveErr(e.h, request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: tok, body: hb})
		})
		wg.Go(func() {
			<-start
			sweep, sweepEr = sweeper.Apply(e.ctx, tk.ID, task.Event{Kind: task.EventLeaseExpired, Attempt: 1, Now: time.Now().UTC()})
		})
		time.Sleep(time.Until(fire))
		close(start)
		wg.Wait()
		if rpErr != nil {
			t.Fatalf("offset %v: heartbeat: %v", off, rpErr)
		}
		if sweepEr != nil {
			t.Fatalf("offset %v: sweeper: %v", off, sweepEr)
		}
		got := e.get(tk.ID)
		zombies := 0
		for _, tr := range e.outboxTransitions(tk.ID) {
			if tr == "RUNNING>QUEUED" {
				zombies++
			}
		}
		expired := got.State == api.Queued && got.Attempt == 2 && got.Attempts[0].Outcome == api.OutcomeZombie && zombies == 1
		alive := got.State == api.Running && got.Attempt == 1 && got.Attempts[0].Outcome == "" && zombies == 0
		var outcome string
		switch {
		case rp.status == http.StatusOK && alive && !sweep.Write && got.LeaseExpiresAt.After(time.Now()):
			outcome = "heartbeat won"
		case rp.status == http.StatusGone && rp.resp.Error == api.CodeTaskExpired && expired && !sweep.Write:
			outcome = "expiry won (heartbeat applied it: 410)"
		case rp.status == http.StatusConflict && rp.resp.Error == api.CodeAttemptMismatch && expired && sweep.Write:
			outcome = "expiry won (sweeper applied it: 409)"
		default:
			t.Fatalf("offset %v: heartbeat %d %s; sweeper wrote %v; task %s attempt %d, attempt 1 outcome %q, zombie transitions %d",
				off, rp.status, rp.raw, sweep.Write, got.State, got.Attempt, got.Attempts[0].Outcome, zombies)
		}
		if rp.resp.Disposition != map[int]api.Disposition{200: api.Continue, 409: api.Cancel, 410: api.Cancel}[rp.status] {
			t.Errorf("offset %v: disposition %s on %d", off, rp.resp.Disposition, rp.status)
		}
		if off == time.Second && outcome != "heartbeat won" || off == -time.Second && outcome == "heartbeat won" {
			t.Errorf("offset %v: %s", off, outcome)
		}
		counts[outcome]++
	}
	t.Logf("outcomes over %d races: %v", len(offsets), counts)
}
