package dispatcher

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/oklog/ulid/v2"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// maxWorkerNameBytes bounds the worker filter of GET /v1/tasks.
const maxWorkerNameBytes = 128

// countParams are the query parameters GET /v1/tasks:counts accepts.
var countParams = map[string]bool{"tenantId": true, "runId": true, "worker": true}

// counts serves GET /v1/tasks:counts?tenantId=&runId=&worker=.
func (h *handler) counts(w http.ResponseWriter, r *http.Request) {
	f, e := listFilter(r, countParams, "tenantId, runId, worker")
	if e == nil {
		f.TenantIDs, e = h.tenantScope(r, f.TenantID, auth.View)
	}
	if e != nil {
		h.fail(w, r, e)
		return
	}
	counts, err := h.cfg.Store.CountByState(r.Context(), f)
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	resp := api.CountsResponse{Counts: counts}
	for _, n := range counts {
		resp.Total += n
	}
	writeJSON(w, http.StatusOK, resp)
}

// taskEvents serves GET /v1/tasks/{id}/events.
func (h *handler) taskEvents(w http.ResponseWriter, r *http.Request) {
	t, ok := h.viewTask(w, r, h.cfg.Store.GetTask)
	if !ok {
		return
	}
	trs, err := h.cfg.Store.TaskEvents(r.Context(), t)
	h.writeEvents(w, r, trs, err)
}

// runEvents serves GET /v1/runs/{runId}/events.
func (h *handler) runEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("runId")
	if !task.ValidID(id, task.RunIDPrefix) {
		h.fail(w, r, invalid("runId", "must be a Servo run id (%s followed by a ULID)", task.RunIDPrefix))
		return
	}
	tenants, e := h.tenantScope(r, "", auth.View)
	if e != nil {
		h.fail(w, r, e)
		return
	}
	trs, err := h.cfg.Store.RunEvents(r.Context(), id, tenants)
	h.writeEvents(w, r, trs, err)
}

func (h *handler) writeEvents(w http.ResponseWriter, r *http.Request, trs []task.Transition, err error) {
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	resp := api.EventsResponse{Events: make([]api.Event, 0, len(trs))}
	for _, tr := range trs {
		resp.Events = append(resp.Events, events.EventOf(tr))
	}
	writeJSON(w, http.StatusOK, resp)
}

// runsParams are the query parameters GET /v1/runs accepts.
var runsParams = map[string]bool{"tenantId": true, "pageSize": true, "pageToken": true}

// runs serves GET /v1/runs?tenantId=&pageSize=&pageToken=: one run
// document read per run listed, no task read.
func (h *handler) runs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k, vs := range q {
		if !runsParams[k] {
			h.fail(w, r, invalid(k, "is not a known parameter (tenantId, pageSize, pageToken)"))
			return
		}
		if len(vs) > 1 {
			h.fail(w, r, invalid(k, "must be given at most once"))
			return
		}
	}
	f := store.RunFilter{TenantID: q.Get("tenantId"), After: q.Get("pageToken")}
	e := checkText("tenantId", f.TenantID, false, maxTenantIDBytes)
	if e == nil {
		f.TenantIDs, e = h.tenantScope(r, f.TenantID, auth.View)
	}
	if e != nil {
		h.fail(w, r, e)
		return
	}
	if s := q.Get("pageSize"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			h.fail(w, r, invalid("pageSize", "must be an integer from 1 to 100"))
			return
		}
		f.PageSize = n
	}
	runs, next, err := h.cfg.Store.ListRuns(r.Context(), f)
	if errors.Is(err, store.ErrInvalidPageToken) {
		h.fail(w, r, invalid("pageToken", "is not a page token this API issued"))
		return
	}
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	resp := api.RunsResponse{Runs: make([]api.Run, 0, len(runs)), NextPageToken: next}
	for _, run := range runs {
		v := api.Run{RunID: run.RunID, TenantID: run.TenantID, LastSubmitAt: run.LastSubmitAt}
		if id, err := ulid.ParseStrict(strings.TrimPrefix(run.RunID, task.RunIDPrefix)); err == nil {
			v.CreatedAt = ulid.Time(id.Time()).UTC()
		}
		resp.Runs = append(resp.Runs, v)
	}
	writeJSON(w, http.StatusOK, resp)
}
