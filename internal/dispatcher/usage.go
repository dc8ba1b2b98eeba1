package dispatcher

import (
	"net/http"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/store"
)

// usage serves GET /v1/tenants/{tenant}/usage.
func (h *handler) usage(w http.ResponseWriter, r *http.Request) {
	tenant := r.PathValue("tenant")
	if e := checkText("tenant", tenant, true, maxTenantIDBytes); e != nil {
		h.fail(w, r, e)
		return
	}
	if e := h.allowed(r, tenant, auth.View); e != nil {
		h.fail(w, r, e)
		return
	}
	limits := h.cfg.Store.Quotas().For(quota.KindTenant, tenant)
	resp := api.UsageResponse{TenantID: tenant, Limits: api.Limits{MaxRunning: limits.MaxRunning, MaxQueued: limits.MaxQueued}}
	if limits.Limited() {
		u, err := h.cfg.Store.QuotaUsage(r.Context(), quota.KindTenant, tenant)
		if err != nil {
			h.storeError(w, r, err)
			return
		}
		resp.Running, resp.Queued, resp.Source = u.Running, u.Queued, "counters"
		writeJSON(w, http.StatusOK, resp)
		return
	}
	counts, err := h.cfg.Store.CountByState(r.Context(), store.ListFilter{TenantID: tenant})
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	resp.Running = counts[api.Running] + counts[api.Cancelling]
	resp.Queued = counts[api.Pending] + counts[api.Queued]
	resp.Source = "tasks"
	writeJSON(w, http.StatusOK, resp)
}
