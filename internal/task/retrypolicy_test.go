package task

import (
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
)

// fail is one failed attempt of a retry-policy history: a FAILED report
// with a category, or a lease expiry (zombie, counted as INFRASTRUCTURE).
type fail struct {
	cat    api.Category
	zombie bool
}

// TestRetryByCategory drives a task through failed attempts and checks,
// after each, whether a retry was scheduled, with which un-jittered
// backoff, or why the task ended: each category with a policy of its own
// counts its own attempts; the others share the rest; the total is
// bounded too (docs/contract.md §6.2).
func TestRetryByCategory(t *testing.T) {
	base := api.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 30_000, BackoffCoefficient: 2, MaxBackoffMs: 600_000}
	with := func(f func(*api.RetryPolicy)) api.RetryPolicy {
		p := base
		f(&p)
		return p
	}
	s := time.Second
	conflict, user, infra := fail{cat: api.CategoryConflict}, fail{cat: api.CategoryUserCode}, fail{cat: api.CategoryInfrastructure}
	zombie := fail{cat: api.CategoryInfrastructure, zombie: true}
	// want[i]: the backoff cap scheduled after failure i, or 0 for the
	// end (the last failure, with reason).
	cases := []struct {
		name   string
		policy api.RetryPolicy
		fails  []fail
		want   []time.Duration
		reason string
	}{
		{"without conflicts as before", base, []fail{user, infra, user},
			[]time.Duration{30 * s, 60 * s, 0}, api.ReasonRetriesExhausted},
		{"CONFLICT's default: 5 s doubling to a minute, 5 attempts", base, []fail{conflict, conflict, conflict, conflict, conflict},
			[]time.Duration{5 * s, 10 * s, 20 * s, 40 * s, 0}, api.ReasonRetriesExhausted},
		{"conflicts do not use up the other categories' attempts", base, []fail{conflict, user, conflict, user, user},
			[]time.Duration{5 * s, 30 * s, 10 * s, 60 * s, 0}, api.ReasonRetriesExhausted},
		{"the total bounds them together", with(func(p *api.RetryPolicy) { p.MaxTotalAttempts = 4 }), []fail{conflict, user, conflict, user},
			[]time.Duration{5 * s, 30 * s, 10 * s, 0}, api.ReasonRetriesExhausted},
		{"the default total is the largest maxAttempts", base, []fail{conflict, conflict, user, user, conflict},
			[]time.Duration{5 * s, 10 * s, 30 * s, 60 * s, 0}, api.ReasonRetriesExhausted},
		{"an entry of its own", with(func(p *api.RetryPolicy) {
			p.ByCategory = map[api.Category]api.CategoryRetry{api.CategoryInfrastructure: {MaxAttempts: 4, InitialBackoffMs: 1000, BackoffCoefficient: 3, MaxBackoffMs: 5000}}
		}), []fail{infra, user, infra, infra},
			[]time.Duration{1 * s, 30 * s, 3 * s, 5 * s}, ""},
		{"a zombie is INFRASTRUCTURE", with(func(p *api.RetryPolicy) {
			p.ByCategory = map[api.Category]api.CategoryRetry{api.CategoryInfrastructure: {MaxAttempts: 2, InitialBackoffMs: 1000, BackoffCoefficient: 2, MaxBackoffMs: 5000}}
		}), []fail{zombie, user, zombie},
			[]time.Duration{1 * s, 30 * s, 0}, api.ReasonHeartbeatTimeout},
		{"a CONFLICT entry replaces its default", with(func(p *api.RetryPolicy) {
			p.MaxAttempts = 2
			p.ByCategory = map[api.Category]api.CategoryRetry{api.CategoryConflict: {MaxAttempts: 3, InitialBackoffMs: 200, BackoffCoefficient: 1, MaxBackoffMs: 200}}
		}), []fail{conflict, conflict, conflict},
			[]time.Duration{200 * time.Millisecond, 200 * time.Millisecond, 0}, api.ReasonRetriesExhausted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk, a := newTestTask()
			tk.Retry = c.policy
			now := t0
			for i, f := range c.fails {
				n := i + 1
				r := Apply(tk, &a, Event{Kind: EventStarted, Attempt: n, WorkerID: "w1", Now: now})
				if r.Rejection != nil {
					t.Fatalf("attempt %d: started refused: %+v", n, r.Rejection)
				}
				tk, a = r.Task, *r.Attempt
				ev := Event{Kind: EventCompleted, Attempt: n, WorkerID: "w1", Now: now.Add(s), Jitter: 0.999999}
				if f.zombie {
					ev = Event{Kind: EventLeaseExpired, Attempt: n, Now: tk.LeaseExpiresAt.Add(s), Jitter: 0.999999}
				} else {
					cr := completion(api.OutcomeFailed, f.cat)
					cr.Attempt = n
					ev.Completed = cr
				}
				r = Apply(tk, &a, ev)
				if r.Rejection != nil {
					t.Fatalf("attempt %d: failure refused: %+v", n, r.Rejection)
				}
				last := r.Transitions[len(r.Transitions)-1]
				if c.want[i] == 0 {
					if r.Task.State != api.Failed || last.Reason != c.reason || i != len(c.fails)-1 {
						t.Fatalf("after failure %d (%s): %s %s, want FAILED %s as the last", n, f.cat, r.Task.State, last.Reason, c.reason)
					}
					return
				}
				if r.Task.State != api.Queued || r.Next == nil {
					t.Fatalf("after failure %d (%s): %s %s, want a retry after %v", n, f.cat, r.Task.State, last.Reason, c.want[i])
				}
				got := r.Task.NotBefore.Sub(ev.Now)
				if got > c.want[i] || got < c.want[i]*99/100 {
					t.Fatalf("after failure %d (%s): backoff %v, want just under %v", n, f.cat, got, c.want[i])
				}
				tk, a, now = r.Task, *r.Next, *r.Task.NotBefore
			}
			if c.reason != "" {
				t.Fatalf("the task never ended (%s)", c.reason)
			}
		})
	}
}

// TestRetryPolicyValidation: entries name retryable categories, and each
// field is checked as the task's own are, under the entry's name.
func TestRetryPolicyValidation(t *testing.T) {
	ok := api.CategoryRetry{MaxAttempts: 2, InitialBackoffMs: 1000, BackoffCoefficient: 2, MaxBackoffMs: 5000}
	base := api.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 30_000, BackoffCoefficient: 2, MaxBackoffMs: 600_000}
	cases := []struct {
		name  string
		total int
		by    map[api.Category]api.CategoryRetry
		field string
	}{
		{"fine", 0, map[api.Category]api.CategoryRetry{api.CategoryConflict: ok, api.CategoryUserCode: ok}, ""},
		{"unknown category", 0, map[api.Category]api.CategoryRetry{"conflict": ok}, "retry.byCategory.conflict"},
		{"never retried", 0, map[api.Category]api.CategoryRetry{api.CategoryDataQuality: ok}, "retry.byCategory.DATA_QUALITY"},
		{"attempts", 0, map[api.Category]api.CategoryRetry{api.CategoryConflict: {MaxAttempts: 101, InitialBackoffMs: 1000, BackoffCoefficient: 2, MaxBackoffMs: 5000}}, "retry.byCategory.CONFLICT.maxAttempts"},
		{"backoff", 0, map[api.Category]api.CategoryRetry{api.CategoryTimeout: {MaxAttempts: 2, InitialBackoffMs: 10, BackoffCoefficient: 2, MaxBackoffMs: 5000}}, "retry.byCategory.TIMEOUT.initialBackoffMs"},
		{"coefficient", 0, map[api.Category]api.CategoryRetry{api.CategoryTimeout: {MaxAttempts: 2, InitialBackoffMs: 1000, BackoffCoefficient: 11, MaxBackoffMs: 5000}}, "retry.byCategory.TIMEOUT.backoffCoefficient"},
		{"maximum", 0, map[api.Category]api.CategoryRetry{api.CategoryTimeout: {MaxAttempts: 2, InitialBackoffMs: 1000, BackoffCoefficient: 2, MaxBackoffMs: 500}}, "retry.byCategory.TIMEOUT.maxBackoffMs"},
		{"total", 101, nil, "retry.maxTotalAttempts"},
	}
	for _, c := range cases {
		p := base
		p.MaxTotalAttempts, p.ByCategory = c.total, c.by
		fe := ValidateRetry(p, MinTimerLocal)
		switch {
		case c.field == "" && fe != nil:
			t.Errorf("%s: refused: %+v", c.name, fe)
		case c.field != "" && (fe == nil || fe.Field != c.field):
			t.Errorf("%s: got %+v, want an error on %s", c.name, fe, c.field)
		}
	}
}
