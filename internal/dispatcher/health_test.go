package dispatcher

import (
	"net/http"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
)

// TestHealthShowsTheLastSweep: GET /v1/health answers sweeper null before
// any pass and the recorded pass, with its age, after one.
func TestHealthShowsTheLastSweep(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	var h api.HealthResponse
	r := e.do("GET", "/v1/health", nil, "")
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	r.decode(t, &h)
	if h.Sweeper != nil || h.ServerTime.IsZero() {
		t.Fatalf("before any pass: %s", r.body)
	}
	at := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	if err := e.st.RecordSweep(e.ctx, api.SweepStatus{LastPassAt: at, PassMs: 12, Duties: map[string]api.SweepDuty{"lease": {Due: 3, Applied: 2, MaxLagMs: 900}}}); err != nil {
		t.Fatal(err)
	}
	r = e.do("GET", "/v1/health", nil, "")
	h = api.HealthResponse{}
	r.decode(t, &h)
	s := h.Sweeper
	if s == nil || !s.LastPassAt.Equal(at) || s.Passes != 1 || s.PassMs != 12 || s.Duties["lease"].Applied != 2 || s.Duties["lease"].MaxLagMs != 900 || s.AgeMs < 60000 {
		t.Fatalf("after a pass: %s", r.body)
	}
	if r := e.do("POST", "/v1/health", nil, ""); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", r.status)
	}
}
