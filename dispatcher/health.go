package dispatcher

import (
	"net/http"

	"github.com/servo-dev/servo/api"
)

// health serves GET /v1/health (one document read).
func (h *handler) health(w http.ResponseWriter, r *http.Request) {
	now := h.cfg.Now().UTC()
	resp := api.HealthResponse{ServerTime: now}
	st, found, err := h.cfg.Store.LastSweep(r.Context())
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	if found {
		resp.Sweeper = &api.SweeperHealth{SweepStatus: st, AgeMs: max(0, now.Sub(st.LastPassAt).Milliseconds())}
	}
	writeJSON(w, http.StatusOK, resp)
}
