package dispatcher

import (
	"reflect"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
)

// A submit's timers and retry policy are the request's values as given,
// an explicit zero or negative one included (validation rejects it), and
// api.Timing.WithDefaults / api.RetryPolicy.WithDefaults for the rest; the
// start timeout is the configured one.
func TestTimingAndRetryDefaults(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	h := &handler{cfg: Config{DefaultStartTimeout: 7 * time.Minute}}
	const start = 7 * 60 * 1000
	timings := []struct {
		name string
		req  api.SubmitRequest
		want api.Timing
	}{
		{"none", api.SubmitRequest{}, api.Timing{HeartbeatIntervalMs: 30000, HeartbeatTimeoutMs: 90000, CancelGracePeriodMs: 30000, StartTimeoutMs: start}},
		{"short interval", api.SubmitRequest{HeartbeatIntervalMs: i64(1000)}, api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 90000, CancelGracePeriodMs: 30000, StartTimeoutMs: start}},
		{"long interval", api.SubmitRequest{HeartbeatIntervalMs: i64(60000)}, api.Timing{HeartbeatIntervalMs: 60000, HeartbeatTimeoutMs: 180000, CancelGracePeriodMs: 30000, StartTimeoutMs: start}},
		{"all given", api.SubmitRequest{HeartbeatIntervalMs: i64(1000), HeartbeatTimeoutMs: i64(3000), CancelGracePeriodMs: i64(500)},
			api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 3000, CancelGracePeriodMs: 500, StartTimeoutMs: start}},
		{"zero interval", api.SubmitRequest{HeartbeatIntervalMs: i64(0)}, api.Timing{HeartbeatIntervalMs: 0, HeartbeatTimeoutMs: 90000, CancelGracePeriodMs: 30000, StartTimeoutMs: start}},
		{"negative interval", api.SubmitRequest{HeartbeatIntervalMs: i64(-5)}, api.Timing{HeartbeatIntervalMs: -5, HeartbeatTimeoutMs: 90000, CancelGracePeriodMs: 30000, StartTimeoutMs: start}},
		{"zero timeout", api.SubmitRequest{HeartbeatTimeoutMs: i64(0)}, api.Timing{HeartbeatIntervalMs: 30000, HeartbeatTimeoutMs: 0, CancelGracePeriodMs: 30000, StartTimeoutMs: start}},
		{"zero grace", api.SubmitRequest{CancelGracePeriodMs: i64(0)}, api.Timing{HeartbeatIntervalMs: 30000, HeartbeatTimeoutMs: 90000, CancelGracePeriodMs: 0, StartTimeoutMs: start}},
	}
	for _, c := range timings {
		if got := h.timing(&c.req); got != c.want {
			t.Errorf("timing %s = %+v, want %+v", c.name, got, c.want)
		}
	}
	if got := (&handler{cfg: Config{DefaultStartTimeout: time.Microsecond}}).timing(&api.SubmitRequest{}); got.StartTimeoutMs != 0 {
		t.Errorf("a start timeout under 1 ms gave startTimeoutMs %d, want 0 (as configured, for validation)", got.StartTimeoutMs)
	}

	n := func(v int) *int { return &v }
	f := func(v float64) *float64 { return &v }
	def := api.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 30000, BackoffCoefficient: 2, MaxBackoffMs: 600000}
	retries := []struct {
		name string
		req  *api.RetryRequest
		want api.RetryPolicy
	}{
		{"none", nil, def},
		{"empty", &api.RetryRequest{}, def},
		{"long initial backoff", &api.RetryRequest{InitialBackoffMs: i64(900000)}, api.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 900000, BackoffCoefficient: 2, MaxBackoffMs: 900000}},
		{"all given", &api.RetryRequest{MaxAttempts: n(5), InitialBackoffMs: i64(200), BackoffCoefficient: f(3), MaxBackoffMs: i64(5000)},
			api.RetryPolicy{MaxAttempts: 5, InitialBackoffMs: 200, BackoffCoefficient: 3, MaxBackoffMs: 5000}},
		{"zero attempts", &api.RetryRequest{MaxAttempts: n(0)}, api.RetryPolicy{MaxAttempts: 0, InitialBackoffMs: 30000, BackoffCoefficient: 2, MaxBackoffMs: 600000}},
		{"zero initial backoff", &api.RetryRequest{InitialBackoffMs: i64(0)}, api.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 0, BackoffCoefficient: 2, MaxBackoffMs: 600000}},
		{"zero coefficient", &api.RetryRequest{BackoffCoefficient: f(0)}, api.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 30000, BackoffCoefficient: 0, MaxBackoffMs: 600000}},
		{"zero max backoff", &api.RetryRequest{MaxBackoffMs: i64(0)}, api.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 30000, BackoffCoefficient: 2, MaxBackoffMs: 0}},
		{"total attempts", &api.RetryRequest{MaxTotalAttempts: n(7)}, api.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 30000, BackoffCoefficient: 2, MaxBackoffMs: 600000, MaxTotalAttempts: 7}},
		// An entry's absent fields are the task's, CONFLICT's are its
		// default's; an initial backoff above the inherited maximum raises it.
		{"by category", &api.RetryRequest{MaxAttempts: n(4), ByCategory: map[api.Category]*api.CategoryRetryRequest{
			api.CategoryConflict:       {MaxAttempts: n(8)},
			api.CategoryInfrastructure: {InitialBackoffMs: i64(1_000_000)},
			api.CategoryTimeout:        nil,
		}}, api.RetryPolicy{MaxAttempts: 4, InitialBackoffMs: 30000, BackoffCoefficient: 2, MaxBackoffMs: 600000, ByCategory: map[api.Category]api.CategoryRetry{
			api.CategoryConflict:       {MaxAttempts: 8, InitialBackoffMs: 5000, BackoffCoefficient: 2, MaxBackoffMs: 60000},
			api.CategoryInfrastructure: {MaxAttempts: 4, InitialBackoffMs: 1_000_000, BackoffCoefficient: 2, MaxBackoffMs: 1_000_000},
			api.CategoryTimeout:        {MaxAttempts: 4, InitialBackoffMs: 30000, BackoffCoefficient: 2, MaxBackoffMs: 600000},
		}}},
	}
	for _, c := range retries {
		if got := retryPolicy(c.req); !reflect.DeepEqual(got, c.want) {
			t.Errorf("retryPolicy %s = %+v, want %+v", c.name, got, c.want)
		}
	}
}
