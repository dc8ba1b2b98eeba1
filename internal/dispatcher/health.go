package dispatcher

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
)

// healthStoreTimeout bounds GET /v1/health's one Firestore read: a caller
// (servo doctor, an uptime check) learns that Firestore is the failing
// dependency well before its own deadline, rather than the request's
// whole store timeout later.
const healthStoreTimeout = 5 * time.Second

// health serves GET /v1/health (one document read, within
// healthStoreTimeout).
func (h *handler) health(w http.ResponseWriter, r *http.Request) {
	now := h.cfg.Now().UTC()
	resp := api.HealthResponse{ServerTime: now, Identity: api.IdentityHealth{
		Accepts: append([]string{}, h.cfg.Identity.Kinds()...), Problems: h.cfg.IdentityProblems}}
	ctx, cancel := context.WithTimeout(r.Context(), healthStoreTimeout)
	defer cancel()
	st, found, err := h.cfg.Store.LastSweep(ctx)
	if err != nil && r.Context().Err() == nil && (ctx.Err() != nil || errors.Is(err, store.ErrUnavailable)) {
		h.log.WarnContext(r.Context(), "firestore unavailable", "route", "health", "error", err)
		writeError(w, http.StatusServiceUnavailable, &api.Error{Code: api.CodeUnavailable,
			Message: "Firestore did not answer the health read within " + healthStoreTimeout.String() + " (the API is up; its task store is not)"})
		return
	}
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	if found {
		resp.Sweeper = &api.SweeperHealth{SweepStatus: st, AgeMs: max(0, now.Sub(st.LastPassAt).Milliseconds())}
	}
	writeJSON(w, http.StatusOK, resp)
}
