package events

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

var t0 = time.Date(2025, 11, 21, 9, 30, 0, 123e6, time.UTC)

func transition(id string, seq int64, from, to api.State) task.Transition {
	return task.Transition{
		EventID: task.EventID(id, seq), TaskID: id, RunID: "run_1", TenantID: "acme", WorkspaceID: "ws",
		Worker: "etl", Attempt: 1, From: from, To: to, Reason: "R", Seq: seq, OccurredAt: t0,
	}
}

func TestEventMessage(t *testing.T) {
	tr := transition("task_A", 4, api.Running, api.Queued)
	tr.Outcome, tr.NextAttempt = api.OutcomeFailed, 2
	tr.Error = &api.ErrorInfo{Category: api.CategoryUserCode, Message: "boom"}
	tr.DeadLetter = false
	msg, err := EventMessage(tr)
	if err != nil {
		t.Fatal(err)
	}
	if msg.OrderingKey != "task_A" {
		t.Errorf("ordering key = %q, want the task id", msg.OrderingKey)
	}
	wantAttrs := map[string]string{
		"type": TypeTransition, "eventId": tr.EventID, "tenantId": "acme", "workspaceId": "ws",
		"taskId": "task_A", "runId": "run_1", "state": "QUEUED",
	}
	if !reflect.DeepEqual(msg.Attributes, wantAttrs) {
		t.Errorf("attributes = %v, want %v", msg.Attributes, wantAttrs)
	}
	// The body has exactly the documented fields.
	var raw map[string]any
	if err := json.Unmarshal(msg.Data, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"eventId", "taskId", "runId", "tenantId", "workspaceId", "worker", "attempt", "priority", "from", "to",
		"reason", "occurredAt", "outcome", "error", "nextAttempt", "seq"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("body lacks %q: %s", k, msg.Data)
		}
	}
	if len(raw) != 16 {
		t.Errorf("body has %d fields, want 16: %s", len(raw), msg.Data)
	}
	// A transition of a task stored before priorities shows the default.
	if raw["priority"] != float64(task.DefaultPriority) {
		t.Errorf("priority = %v, want %d", raw["priority"], task.DefaultPriority)
	}
	if raw["occurredAt"] != "2025-11-21T09:30:00.123Z" {
		t.Errorf("occurredAt = %v", raw["occurredAt"])
	}
	got, err := DecodeEvent(msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	if want := EventOf(tr); !reflect.DeepEqual(got, want) {
		t.Errorf("round trip = %+v, want %+v", got, want)
	}
}

func TestDecodeEventErrors(t *testing.T) {
	for _, data := range []string{``, `not json`, `{}`, `{"eventId":"e"}`} {
		if _, err := DecodeEvent([]byte(data)); err == nil {
			t.Errorf("DecodeEvent(%q) succeeded", data)
		}
		if _, err := DecodeDeadLetter([]byte(data)); err == nil {
			t.Errorf("DecodeDeadLetter(%q) succeeded", data)
		}
	}
}

func TestDeadLetterOf(t *testing.T) {
	workerErr := &api.ErrorInfo{Category: api.CategoryDataQuality, Message: "bad row"}
	attemptErr := &api.ErrorInfo{Category: api.CategoryInfrastructure, Message: "no heartbeat within the heartbeat timeout"}
	history := []task.Attempt{
		{Attempt: 1, Outcome: api.OutcomeFailed, Error: &api.ErrorInfo{Category: api.CategoryUserCode, Message: "first"}},
		{Attempt: 2, Outcome: api.OutcomeZombie, Error: attemptErr},
	}
	tests := []struct {
		name     string
		reason   string
		trErr    *api.ErrorInfo
		attempts []task.Attempt
		want     *api.ErrorInfo
	}{
		{"transition error wins", api.ReasonNonRetryable, workerErr, history, workerErr},
		{"falls back to the last attempt's error", api.ReasonHeartbeatTimeout, nil, history, attemptErr},
		{"deadline synthesized", api.ReasonDeadlineExceeded, nil, history[:1], &api.ErrorInfo{Category: api.CategoryTimeout, Message: "the task's deadline passed"}},
		{"dispatch synthesized", api.ReasonDispatchTimeout, nil, nil, &api.ErrorInfo{Category: api.CategoryTimeout, Message: "the task never started: re-drives exhausted"}},
		{"cancel timeout synthesized", api.ReasonCancelTimeout, nil, nil, &api.ErrorInfo{Category: api.CategoryTimeout, Message: "the worker did not finish within the cancel grace period"}},
		{"other synthesized", "SOMETHING", nil, nil, &api.ErrorInfo{Category: api.CategoryInfrastructure, Message: "task failed: SOMETHING"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := transition("task_A", 6, api.Running, api.Failed)
			tr.Attempt, tr.Reason, tr.Error, tr.DeadLetter = 2, tt.reason, tt.trErr, true
			d := DeadLetterOf(tr, tt.attempts)
			if !reflect.DeepEqual(d.Error, tt.want) {
				t.Errorf("error = %+v, want %+v", d.Error, tt.want)
			}
			if d.State != api.Failed || d.Reason != tt.reason || d.EventID != tr.EventID || d.Attempt != 2 {
				t.Errorf("dead letter = %+v", d)
			}
			if d.Attempts == nil || len(d.Attempts) != len(tt.attempts) {
				t.Errorf("attempts = %v, want %d records (never null)", d.Attempts, len(tt.attempts))
			}
			msg, err := DeadLetterMessage(d)
			if err != nil {
				t.Fatal(err)
			}
			if msg.OrderingKey != "" || msg.Attributes["type"] != TypeDeadLetter || msg.Attributes["state"] != "FAILED" ||
				msg.Attributes["reason"] != tt.reason || msg.Attributes["eventId"] != tr.EventID || msg.Attributes["tenantId"] != "acme" {
				t.Errorf("message = %+v", msg)
			}
			back, err := DecodeDeadLetter(msg.Data)
			if err != nil || !reflect.DeepEqual(back.Error, tt.want) || len(back.Attempts) != len(tt.attempts) {
				t.Errorf("round trip = %+v, %v", back, err)
			}
		})
	}
}

// TestItemsOf: one commit's transitions are sorted by task then seq, each
// with the outbox document the commit stored it in (its task's last
// transition's), and the input is left as it was.
func TestItemsOf(t *testing.T) {
	in := []task.Transition{
		transition("task_B", 2, api.Pending, api.Queued),
		transition("task_A", 3, api.Queued, api.Running),
		transition("task_B", 1, "", api.Pending),
		transition("task_A", 1, "", api.Pending),
		transition("task_A", 2, api.Pending, api.Queued),
	}
	orig := append([]task.Transition(nil), in...)
	var keys []string
	for _, it := range itemsOf(in) {
		doc := "?"
		for _, tr := range in {
			if tr.EventID == it.docID() {
				doc = tr.TaskID + "#" + string(rune('0'+tr.Seq))
			}
		}
		keys = append(keys, it.tr.TaskID+"#"+string(rune('0'+it.tr.Seq))+"@"+doc)
	}
	if want := "task_A#1@task_A#3 task_A#2@task_A#3 task_A#3@task_A#3 task_B#1@task_B#2 task_B#2@task_B#2"; strings.Join(keys, " ") != want {
		t.Errorf("items = %s, want %s", strings.Join(keys, " "), want)
	}
	if !reflect.DeepEqual(in, orig) {
		t.Error("itemsOf modified its input")
	}
}

// TestByDoc: a document is deleted only when every event of it in the
// batch went out and its own (last) transition is among them; a document
// with a failure is backed off once, recorded with its own transition's
// eventPublished.
func TestByDoc(t *testing.T) {
	a1, a2 := transition("task_A", 1, "", api.Pending), transition("task_A", 2, api.Pending, api.Queued)
	b1 := transition("task_B", 1, "", api.Pending)
	in := func(tr task.Transition, doc task.Transition, published bool) item {
		return item{tr: tr, doc: doc.EventID, tries: 2, eventPublished: published}
	}
	legacy := item{tr: b1} // an older version's entry: its own document
	for _, tt := range []struct {
		name      string
		ok, fail  []item
		done      []string
		bad       []string // doc ids
		published []bool
	}{
		{"all delivered", []item{in(a1, a2, true), in(a2, a2, true), legacy}, nil, []string{a2.EventID, b1.EventID}, nil, nil},
		{"the last event refused", []item{in(a1, a2, true)}, []item{in(a2, a2, false)}, nil, []string{a2.EventID}, []bool{false}},
		{"the first event refused", []item{in(a2, a2, true)}, []item{in(a1, a2, false)}, nil, []string{a2.EventID}, []bool{true}},
		{"only the dead letter refused", []item{in(a1, a2, true)}, []item{in(a2, a2, true)}, nil, []string{a2.EventID}, []bool{true}},
		{"both refused: one failure", nil, []item{in(a1, a2, false), in(a2, a2, false)}, nil, []string{a2.EventID}, []bool{false}},
		{"the document's own event not in the batch", []item{in(a1, a2, true)}, nil, nil, nil, nil},
		{"one document fails, the other goes", []item{legacy}, []item{in(a1, a2, false), in(a2, a2, false)}, []string{b1.EventID}, []string{a2.EventID}, []bool{false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			done, bad := byDoc(tt.ok, tt.fail)
			if !slices.Equal(done, tt.done) {
				t.Errorf("done = %v, want %v", done, tt.done)
			}
			var ids []string
			var pub []bool
			for _, b := range bad {
				ids, pub = append(ids, b.docID()), append(pub, b.eventPublished)
				if b.tries != 2 {
					t.Errorf("failure of %s: tries %d, want the document's 2", b.docID(), b.tries)
				}
			}
			if !slices.Equal(ids, tt.bad) || !slices.Equal(pub, tt.published) {
				t.Errorf("bad = %v %v, want %v %v", ids, pub, tt.bad, tt.published)
			}
		})
	}
}

func TestNames(t *testing.T) {
	tests := []struct{ got, want string }{
		{TopicName("p", "servo-task-events"), "projects/p/topics/servo-task-events"},
		{TopicName("p", "projects/q/topics/t"), "projects/q/topics/t"},
		{SubscriptionName("p", "s"), "projects/p/subscriptions/s"},
		{SubscriptionName("p", "projects/q/subscriptions/s"), "projects/q/subscriptions/s"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestTailFilterAndMatches(t *testing.T) {
	ev := EventOf(transition("task_A", 1, "", api.Pending))
	tests := []struct {
		opts   TailOptions
		filter string
		match  bool
	}{
		{TailOptions{}, "", true},
		{TailOptions{TaskID: "task_A"}, `attributes.taskId = "task_A"`, true},
		{TailOptions{TaskID: "task_B"}, `attributes.taskId = "task_B"`, false},
		{TailOptions{RunID: "run_1"}, `attributes.runId = "run_1"`, true},
		{TailOptions{TaskID: "task_A", RunID: "run_2"}, `attributes.taskId = "task_A" AND attributes.runId = "run_2"`, false},
	}
	for _, tt := range tests {
		if got := tailFilter(tt.opts); got != tt.filter {
			t.Errorf("tailFilter(%+v) = %q, want %q", tt.opts, got, tt.filter)
		}
		if got := tt.opts.Matches(ev); got != tt.match {
			t.Errorf("%+v.Matches = %v, want %v", tt.opts, got, tt.match)
		}
	}
}

func TestTableRow(t *testing.T) {
	created := EventOf(transition("task_A", 1, "", api.Pending))
	created.Reason = api.ReasonSubmitted
	retry := EventOf(transition("task_A", 4, api.Running, api.Queued))
	retry.Reason, retry.Outcome, retry.NextAttempt = api.ReasonRetryScheduled, api.OutcomeFailed, 2
	retry.Error = &api.ErrorInfo{Category: api.CategoryUserCode, Message: "boom"}
	tests := []struct {
		ev   api.Event
		want []string
	}{
		{created, []string{"2025-11-21T09:30:00.123Z", "task_A", "∅ → PENDING", "SUBMITTED"}},
		{retry, []string{"RUNNING → QUEUED", "RETRY_SCHEDULED", "outcome=FAILED", "nextAttempt=2", `error="USER_CODE: boom"`}},
	}
	for _, tt := range tests {
		row := TableRow(tt.ev)
		if !strings.HasSuffix(row, "\n") || strings.Count(row, "\n") != 1 {
			t.Errorf("row %q is not one line", row)
		}
		for _, w := range tt.want {
			if !strings.Contains(row, w) {
				t.Errorf("row %q lacks %q", row, w)
			}
		}
	}
	if h := TableHeader(); !strings.HasPrefix(h, "TIME") || !strings.Contains(h, "TRANSITION") {
		t.Errorf("header = %q", h)
	}
}

// TestOccurredAtAsStored: the hook publishes from memory (nanoseconds),
// Redrive from Firestore (microseconds); both bodies must be identical.
func TestOccurredAtAsStored(t *testing.T) {
	tr := transition("task_A", 1, "", api.Pending)
	tr.OccurredAt = time.Date(2025, 11, 21, 9, 30, 0, 123456789, time.FixedZone("X", 3600))
	stored := tr
	stored.OccurredAt = time.Date(2025, 11, 21, 8, 30, 0, 123456000, time.UTC)
	a, _ := EventMessage(tr)
	b, _ := EventMessage(stored)
	if string(a.Data) != string(b.Data) {
		t.Errorf("bodies differ:\n%s\n%s", a.Data, b.Data)
	}
	if d1, d2 := DeadLetterOf(tr, nil), DeadLetterOf(stored, nil); !d1.OccurredAt.Equal(d2.OccurredAt) || d1.OccurredAt.Location() != time.UTC {
		t.Errorf("dead letter times %v, %v", d1.OccurredAt, d2.OccurredAt)
	}
}

// TestDeadLetterCappedUnit: a dead letter under the cap is unchanged;
// over it, large fields are cut with a marker and, with many attempts,
// the oldest ones are left out, so the body always fits.
func TestDeadLetterCappedUnit(t *testing.T) {
	big := json.RawMessage(`"` + strings.Repeat("é", 40<<10) + `"`)
	mid := json.RawMessage(`"` + strings.Repeat("é", 2<<10) + `"`)
	mk := func(n int, out json.RawMessage) api.DeadLetter {
		var as []task.Attempt
		for i := 1; i <= n; i++ {
			as = append(as, task.Attempt{Attempt: i, Outcome: api.OutcomeFailed, Output: out, Checkpoint: out, PartialProgress: out,
				Message: strings.Repeat("m", 4<<10), Error: &api.ErrorInfo{Category: api.CategoryUserCode, Message: "x", StackTrace: strings.Repeat("s", 16<<10)}})
		}
		return DeadLetterOf(transition("task_1", int64(n), api.Running, api.Failed), as)
	}
	tests := []struct {
		name         string
		d            api.DeadLetter
		limit        int
		truncated    bool
		wantOmitted  bool
		wantAttempts int
	}{
		{"small: unchanged", mk(3, json.RawMessage(`{"ok":1}`)), MaxDeadLetterBytes, false, false, 3},
		{"20 large attempts: fields cut", mk(20, big), MaxDeadLetterBytes, true, false, 20},
		{"300 attempts: oldest left out", mk(300, mid), MaxDeadLetterBytes, true, true, 0},
		{"tiny cap: no attempt fits", mk(5, big), 2 << 10, true, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Capped(tc.d, tc.limit)
			data, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			if c.Truncated != tc.truncated || (c.OmittedAttempts > 0) != tc.wantOmitted {
				t.Fatalf("truncated %v omitted %d", c.Truncated, c.OmittedAttempts)
			}
			if len(c.Attempts)+c.OmittedAttempts != len(tc.d.Attempts) {
				t.Fatalf("%d attempts + %d omitted of %d", len(c.Attempts), c.OmittedAttempts, len(tc.d.Attempts))
			}
			if tc.wantAttempts > 0 && len(c.Attempts) != tc.wantAttempts {
				t.Fatalf("%d attempts, want %d", len(c.Attempts), tc.wantAttempts)
			}
			if tc.limit >= 64<<10 && len(data) > tc.limit {
				t.Fatalf("%d bytes over the cap %d", len(data), tc.limit)
			}
			if !tc.truncated {
				return
			}
			if len(c.Attempts) > 0 {
				a := c.Attempts[len(c.Attempts)-1]
				if a.Attempt != len(tc.d.Attempts) || !strings.Contains(a.Error.StackTrace, TruncatedMarker) || !strings.Contains(a.Message, TruncatedMarker) || !json.Valid(a.Output) || !utf8.ValidString(a.Message) {
					t.Fatalf("last attempt kept %+v", a.Attempt)
				}
			}
			// The original is untouched.
			if len(tc.d.Attempts[0].Output) < TruncatedFieldBytes || strings.Contains(tc.d.Attempts[0].Error.StackTrace, TruncatedMarker) {
				t.Fatal("Capped modified its receiver")
			}
		})
	}
}
