package dispatcher

import (
	"net/http"
	"time"

	"github.com/servo-dev/servo/internal/store"
)

// HealthResponse answers GET /v1/health: what operators check to tell
// whether Servo's background work is alive.
type HealthResponse struct {
	// ServerTime is the API's clock.
	ServerTime time.Time `json:"serverTime"`
	// Sweeper is the latest sweeper pass; nil when none was ever recorded.
	Sweeper *SweeperHealth `json:"sweeper"`
}

// SweeperHealth is the latest sweeper pass as GET /v1/health shows it.
type SweeperHealth struct {
	store.SweepStatus
	// AgeMs is the time since that pass ended, by the API's clock.
	AgeMs int64 `json:"ageMs"`
}

// health serves GET /v1/health (one document read).
func (h *handler) health(w http.ResponseWriter, r *http.Request) {
	now := h.cfg.Now().UTC()
	resp := HealthResponse{ServerTime: now}
	st, found, err := h.cfg.Store.LastSweep(r.Context())
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	if found {
		resp.Sweeper = &SweeperHealth{SweepStatus: st, AgeMs: max(0, now.Sub(st.LastPassAt).Milliseconds())}
	}
	writeJSON(w, http.StatusOK, resp)
}
