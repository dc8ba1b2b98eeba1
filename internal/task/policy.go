package task

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/servo-dev/servo/api"
)

// Timer bounds.
const (
	// MinTimerProduction is the smallest timer a production deployment accepts.
	MinTimerProduction = time.Second
	// MinTimerLocal is the smallest timer the local stack and tests accept.
	MinTimerLocal = 100 * time.Millisecond
	// MaxTimer bounds every timer.
	MaxTimer = 24 * time.Hour
)

// Delayed starts (startAt, startDelayMs; docs/contract.md §9.2).
const (
	// MaxStartDelay is how far ahead a task may be asked to start.
	MaxStartDelay = 366 * 24 * time.Hour
	// EnqueueHorizon is how far ahead a Cloud Task is created for a
	// delayed start (Cloud Tasks takes a scheduleTime up to 30 days
	// ahead; a day of margin): a later start waits in Firestore alone
	// until then (Task.EnqueueAt).
	EnqueueHorizon = 29 * 24 * time.Hour
	// PullHorizon is the same for a pull pool, whose message a claim can
	// hide for at most 10 minutes at a time (pull.MaxDefer).
	PullHorizon = 10 * time.Minute
)

// Token lifetimes (docs/contract.md §3.2).
const (
	DefaultTokenTTL = 3600 * time.Second
	MaxTokenTTL     = 7200 * time.Second
)

// FieldError is a validation failure naming the offending field.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// ValidateTiming checks the timers against min (MinTimerProduction or
// MinTimerLocal), the interval against half the maximum token lifetime (no
// refresh could cover a longer one) and the invariant timeout ≥ 2 ×
// interval (docs/contract.md §5.2).
func ValidateTiming(t api.Timing, min time.Duration) *FieldError {
	// Each timer's range, said whole in its message: the interval's upper
	// bound is half the maximum token lifetime (no refresh could cover a
	// longer one), the others' MaxTimer.
	intervalMax := MaxTokenTTL / 2
	if MaxTimer < intervalMax {
		intervalMax = MaxTimer
	}
	for _, f := range []struct {
		name string
		ms   int64
		max  time.Duration
		why  string
	}{
		{"heartbeatIntervalMs", t.HeartbeatIntervalMs, intervalMax, " (at most half the maximum task token lifetime, so that a heartbeat can always refresh the token in time)"},
		{"heartbeatTimeoutMs", t.HeartbeatTimeoutMs, MaxTimer, ""},
		{"cancelGracePeriodMs", t.CancelGracePeriodMs, MaxTimer, ""},
		{"startTimeoutMs", t.StartTimeoutMs, MaxTimer, ""},
	} {
		if d := time.Duration(f.ms) * time.Millisecond; d < min || d > f.max {
			return fieldErr(f.name, "must be between %d and %d ms%s", min.Milliseconds(), f.max.Milliseconds(), f.why)
		}
	}
	if t.HeartbeatTimeoutMs < 2*t.HeartbeatIntervalMs {
		return fieldErr("heartbeatTimeoutMs", "must be at least 2 × heartbeatIntervalMs (%d)", 2*t.HeartbeatIntervalMs)
	}
	return nil
}

// ValidateRetry checks the policy; min is the smallest accepted backoff.
func ValidateRetry(p api.RetryPolicy, min time.Duration) *FieldError {
	if fe := validateCategoryRetry("retry.", RetryBase(p), min); fe != nil {
		return fe
	}
	if p.MaxTotalAttempts < 0 || p.MaxTotalAttempts > api.MaxAttemptsLimit {
		return fieldErr("retry.maxTotalAttempts", "must be between 1 and %d", api.MaxAttemptsLimit)
	}
	for _, c := range sortedCategories(p.ByCategory) {
		prefix := "retry.byCategory." + string(c)
		switch {
		case !c.Valid():
			return fieldErr(prefix, "is not an error category (one of %s)", categoryList())
		case !RetryableByDefault(c):
			return fieldErr(prefix, "%s is never retried (docs/contract.md §6.1): a policy for it would never apply", c)
		}
		if fe := validateCategoryRetry(prefix+".", p.ByCategory[c], min); fe != nil {
			return fe
		}
	}
	return nil
}

func validateCategoryRetry(prefix string, p api.CategoryRetry, min time.Duration) *FieldError {
	switch {
	case p.MaxAttempts < 1 || p.MaxAttempts > api.MaxAttemptsLimit:
		return fieldErr(prefix+"maxAttempts", "must be between 1 and %d", api.MaxAttemptsLimit)
	case time.Duration(p.InitialBackoffMs)*time.Millisecond < min || time.Duration(p.InitialBackoffMs)*time.Millisecond > MaxTimer:
		return fieldErr(prefix+"initialBackoffMs", "must be between %d and %d ms", min.Milliseconds(), MaxTimer.Milliseconds())
	case math.IsNaN(p.BackoffCoefficient) || p.BackoffCoefficient < 1 || p.BackoffCoefficient > 10:
		return fieldErr(prefix+"backoffCoefficient", "must be between 1 and 10")
	case p.MaxBackoffMs < p.InitialBackoffMs || time.Duration(p.MaxBackoffMs)*time.Millisecond > MaxTimer:
		return fieldErr(prefix+"maxBackoffMs", "must be between initialBackoffMs and %d ms", MaxTimer.Milliseconds())
	}
	return nil
}

// sortedCategories is m's keys in a stable order, so that the first error
// reported is the same on every try.
func sortedCategories[V any](m map[api.Category]V) []api.Category {
	cs := make([]api.Category, 0, len(m))
	for c := range m {
		cs = append(cs, c)
	}
	slices.Sort(cs)
	return cs
}

func categoryList() string {
	s := make([]string, len(Categories))
	for i, c := range Categories {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

// TokenTTL is the lifetime of an attempt token valid from from (when its
// delivery can start, or when a heartbeat refreshes it): the default, at
// least two heartbeat intervals so that one heartbeat can always refresh it,
// and long enough to cover the deadline (plus a minute), all within the
// maximum; heartbeat responses refresh tokens for longer tasks.
func TokenTTL(from time.Time, deadline *time.Time, interval time.Duration) time.Duration {
	ttl := max(DefaultTokenTTL, 2*interval)
	if deadline != nil {
		ttl = max(ttl, deadline.Sub(from)+time.Minute)
	}
	return min(ttl, MaxTokenTTL)
}

// RefreshBefore is how much life a token may have left when a heartbeat
// arrives before the answer must carry a fresh one: a quarter of its
// lifetime, or two heartbeat intervals when that is more, so the next
// heartbeat never arrives with an expired token.
func RefreshBefore(lifetime, interval time.Duration) time.Duration {
	return max(lifetime/4, 2*interval)
}

// BackoffCap is the un-jittered delay before the attempt after failed
// attempt n (n ≥ 1): min(max, initial × coefficient^(n-1)).
func BackoffCap(p api.CategoryRetry, n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := float64(p.InitialBackoffMs) * math.Pow(p.BackoffCoefficient, float64(n-1))
	if math.IsInf(d, 0) || math.IsNaN(d) || d > float64(p.MaxBackoffMs) {
		d = float64(p.MaxBackoffMs)
	}
	return time.Duration(d) * time.Millisecond
}

// Backoff is the delay before the attempt after failed attempt n with full
// jitter: r × BackoffCap(n), for r drawn uniformly from [0, 1).
func Backoff(p api.CategoryRetry, n int, r float64) time.Duration {
	if r < 0 || math.IsNaN(r) {
		r = 0
	}
	if r >= 1 {
		r = math.Nextafter(1, 0)
	}
	return time.Duration(r * float64(BackoffCap(p, n)))
}

// Priorities (docs/contract.md §9.2): 1 is the highest, 5 the lowest.
const (
	HighestPriority = 1
	LowestPriority  = 5
	DefaultPriority = 3
)

// PriorityOf is p, or DefaultPriority for 0 (a task stored before
// priorities existed).
func PriorityOf(p int) int {
	if p == 0 {
		return DefaultPriority
	}
	return p
}

// MaxThenPools caps a claim's thenPools (docs/contract.md §10).
const MaxThenPools = 9

// DefaultConflictRetry is CONFLICT's policy when the task gives it none:
// 5 s, doubling, capped at a minute, 5 attempts.
var DefaultConflictRetry = api.CategoryRetry{MaxAttempts: 5, InitialBackoffMs: 5_000, BackoffCoefficient: 2, MaxBackoffMs: 60_000}

// RetryBase is the policy of p's categories without one of their own.
func RetryBase(p api.RetryPolicy) api.CategoryRetry {
	return api.CategoryRetry{MaxAttempts: p.MaxAttempts, InitialBackoffMs: p.InitialBackoffMs,
		BackoffCoefficient: p.BackoffCoefficient, MaxBackoffMs: p.MaxBackoffMs}
}

// RetryFor is p's policy in force for category c, and whether it is c's
// own (an entry in ByCategory, or CONFLICT's default) rather than
// RetryBase.
func RetryFor(p api.RetryPolicy, c api.Category) (api.CategoryRetry, bool) {
	if e, ok := p.ByCategory[c]; ok {
		return e, true
	}
	if c == api.CategoryConflict {
		return DefaultConflictRetry, true
	}
	return RetryBase(p), false
}

// TotalAttempts is p's bound on a task's attempts overall:
// MaxTotalAttempts, or when it is 0 the largest MaxAttempts of RetryBase,
// every ByCategory entry and CONFLICT's policy.
func TotalAttempts(p api.RetryPolicy) int {
	if p.MaxTotalAttempts > 0 {
		return p.MaxTotalAttempts
	}
	c, _ := RetryFor(p, api.CategoryConflict)
	n := max(p.MaxAttempts, c.MaxAttempts)
	for _, e := range p.ByCategory {
		n = max(n, e.MaxAttempts)
	}
	return n
}
