package dispatcher

import (
	"net/http"

	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// UsageResponse answers GET /v1/tenants/{tenant}/usage.
type UsageResponse struct {
	TenantID string `json:"tenantId"`
	// Running counts the tenant's tasks holding a run slot: RUNNING or
	// CANCELLING, and (for a limited tenant) those enqueued to their worker
	// and not yet started.
	Running int `json:"running"`
	// Queued counts the tenant's tasks PENDING or QUEUED.
	Queued int `json:"queued"`
	// Limits are the tenant's limits (0: unlimited).
	Limits quota.Limits `json:"limits"`
	// Source says where the figures come from: "counters" (the quota
	// counter shards of a limited tenant, one query) or "tasks" (count
	// aggregations over the tenant's tasks).
	Source string `json:"source"`
}

// usage serves GET /v1/tenants/{tenant}/usage.
func (h *handler) usage(w http.ResponseWriter, r *http.Request) {
	tenant := r.PathValue("tenant")
	if e := checkText("tenant", tenant, true, MaxTenantIDBytes); e != nil {
		h.fail(w, r, e)
		return
	}
	if e := h.allowed(r, tenant, auth.View); e != nil {
		h.fail(w, r, e)
		return
	}
	resp := UsageResponse{TenantID: tenant, Limits: h.cfg.Store.Quotas().For(quota.KindTenant, tenant)}
	if resp.Limits.Limited() {
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
	resp.Running = counts[task.Running] + counts[task.Cancelling]
	resp.Queued = counts[task.Pending] + counts[task.Queued]
	resp.Source = "tasks"
	writeJSON(w, http.StatusOK, resp)
}
