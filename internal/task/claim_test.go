package task

import (
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
)

// A claim starts only an attempt nobody has started: a duplicate transport
// message (the attempt already RUNNING, even for the same worker id), a
// cancelled task and an older attempt are refused and change nothing.
func TestClaim(t *testing.T) {
	cases := []struct {
		name     string
		state    api.State
		attempt  int
		workerID string
		want     api.State
		code     string
	}{
		{"pending", api.Pending, 1, "w2", api.Running, ""},
		{"queued", api.Queued, 1, "w2", api.Running, ""},
		{"running, same worker", api.Running, 1, "w1", api.Running, api.CodeAttemptAlreadyStarted},
		{"running, another worker", api.Running, 1, "w2", api.Running, api.CodeAttemptAlreadyStarted},
		{"cancelling", api.Cancelling, 1, "w2", api.Cancelling, api.CodeAttemptAlreadyStarted},
		{"cancelled", api.Cancelled, 1, "w2", api.Cancelled, api.CodeTaskAlreadyTerminal},
		{"succeeded", api.Succeeded, 1, "w2", api.Succeeded, api.CodeTaskAlreadyTerminal},
		{"older attempt", api.Queued, 0, "w2", api.Queued, api.CodeAttemptMismatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk, a := taskIn(c.state)
			// Late enough that a RUNNING task's lease has run out: a claim
			// still does not apply the expiry.
			now := t0.Add(time.Hour)
			r := Apply(tk, a, Event{Kind: EventClaimed, Attempt: c.attempt, WorkerID: c.workerID, Now: now})
			if r.Task.State != c.want {
				t.Fatalf("state %s, want %s", r.Task.State, c.want)
			}
			if c.code == "" {
				if r.Rejection != nil || !r.Write || r.Attempt.WorkerID != c.workerID || r.Task.LeaseExpiresAt == nil || !r.Task.LeaseExpiresAt.After(now) {
					t.Fatalf("claim not applied: %+v", r)
				}
				if len(r.Transitions) != 1 || r.Transitions[0].Reason != api.ReasonStarted {
					t.Fatalf("transitions %+v", r.Transitions)
				}
				return
			}
			if r.Rejection == nil || r.Rejection.Code != c.code {
				t.Fatalf("rejection %v, want %s", r.Rejection, c.code)
			}
			if r.Write || len(r.Transitions) != 0 {
				t.Fatalf("a refused claim wrote: %+v", r)
			}
		})
	}
}

func TestJSONDepth(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want int
	}{
		{`1`, 0}, {`"[{"`, 0}, {`[]`, 1}, {`{"a":[1,{"b":[]}]}`, 4}, {`["]]]", "\"[[["]`, 1},
		{`{"a\\":{"b":1}}`, 2}, {`["a\"[[[", "\\"]`, 1}, {`[[[[[[[[[[]]]]]]]]]]`, 3}, // counted up to limit+1 (limit 2)
	} {
		limit := 100
		if c.want == 3 {
			limit = 2
		}
		if got := JSONDepth([]byte(c.raw), limit); got != c.want {
			t.Errorf("JSONDepth(%s) = %d, want %d", c.raw, got, c.want)
		}
	}
}

func TestValidText(t *testing.T) {
	for _, c := range []struct {
		s         string
		multiline bool
		ok        bool
	}{
		{"plain text, ünïcode ✓", false, true},
		{"tab\tok", false, true},
		{"two\nlines", true, true},
		{"windows\r\nlines", true, true},
		{"two\nlines", false, false},
		{"bare\rcr", true, false},
		{"esc\x1b[2J", true, false},
		{"nul\x00", true, false},
		{"del\x7f", true, false},
		{"c1\u009b", true, false},
		{"ends in cr\r", true, false},
	} {
		err := validText("f", c.s, c.multiline)
		if (err == nil) != c.ok {
			t.Errorf("validText(%q, multiline %v) = %v, want ok %v", c.s, c.multiline, err, c.ok)
		}
		if err != nil && err.Field != "f" {
			t.Errorf("field %q", err.Field)
		}
	}
}
