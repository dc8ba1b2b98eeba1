package dispatcher

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// viewOf returns the API view of t (with t.Attempts, if read).
func viewOf(t *task.Task) api.Task {
	v := api.Task{
		TaskID: t.ID, RunID: t.RunID, TenantID: t.TenantID, WorkspaceID: t.WorkspaceID, TaskKey: t.TaskKey,
		AssetID: t.AssetID, Worker: t.Worker, State: t.State, Reason: t.Reason, CancelReason: t.CancelReason,
		Attempt: t.Attempt, Priority: task.PriorityOf(t.Priority), Payload: t.Payload, Resources: t.Resources, IdempotencyKey: t.IdempotencyKey,
		RerunOf: t.RerunOf, ScheduleID: t.ScheduleID, ScheduledFireAt: t.ScheduledFireAt,
		HeartbeatIntervalMs: t.Timing.HeartbeatIntervalMs, HeartbeatTimeoutMs: t.Timing.HeartbeatTimeoutMs,
		CancelGracePeriodMs: t.Timing.CancelGracePeriodMs, StartTimeoutMs: t.Timing.StartTimeoutMs,
		Retry: t.Retry, Deadline: t.Deadline, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, EndedAt: t.EndedAt,
		CancelDeadline: t.CancelDeadline,
	}
	if t.State == api.Queued {
		v.Delivery = t.Delivery
	}
	for _, a := range t.Attempts {
		av := a.View()
		if e := a.Error; e != nil && task.RetryableByDefault(e.Category) {
			p, _ := task.RetryFor(t.Retry, e.Category)
			av.RetryPolicy = &p
		}
		v.Attempts = append(v.Attempts, av)
	}
	if t.State == api.Queued || t.State == api.Pending {
		v.ScheduledAt = t.NotBefore
	}
	if t.State == api.Queued && t.WaitingSince != nil && !t.WaitingSince.After(time.Now()) {
		// Waiting for a run slot: the reason of its transition to QUEUED.
		// (A delayed start of a limited scope waits from its start on.)
		v.Reason, v.WaitingSince = task.ReasonQuotaWait, t.WaitingSince
	}
	return v
}

// viewTask reads the task the path's {id} names with read, for a caller
// who views its tenant; otherwise it answers (404 for a malformed id or no
// such task, the policy's refusal) and ok is false.
func (h *handler) viewTask(w http.ResponseWriter, r *http.Request, read func(context.Context, string) (task.Task, error)) (t task.Task, ok bool) {
	id := r.PathValue("id")
	if !task.ValidID(id, task.TaskIDPrefix) {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeTaskNotFound, Message: "no such task (task ids look like task_01H…)"})
		return task.Task{}, false
	}
	t, err := read(r.Context(), id)
	if err != nil {
		h.storeError(w, r, err, "taskId", id)
		return task.Task{}, false
	}
	if e := h.allowed(r, t.TenantID, auth.View); e != nil {
		h.fail(w, r, e)
		return task.Task{}, false
	}
	return t, true
}

// get serves GET /v1/tasks/{id}.
func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	t, ok := h.viewTask(w, r, h.cfg.Store.Get)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, viewOf(&t))
}

// trace serves GET /v1/tasks/{id}/trace with Config.Traces, for a caller
// who views the task's tenant.
func (h *handler) trace(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.viewTask(w, r, h.cfg.Store.GetTask); !ok {
		return
	}
	h.cfg.Traces.ServeHTTP(w, r)
}

// listParams are the query parameters GET /v1/tasks accepts.
var listParams = map[string]bool{"tenantId": true, "runId": true, "state": true, "worker": true, "order": true, "pageSize": true, "pageToken": true}

// listParamNames is listParams for error messages.
const listParamNames = "tenantId, runId, state, worker, order, pageSize, pageToken"

// listFilter parses and checks the query of GET /v1/tasks (and, without
// pageSize, pageToken and order, of GET /v1/tasks:counts).
func listFilter(r *http.Request, allowed map[string]bool, names string) (store.ListFilter, *apiError) {
	q := r.URL.Query()
	for k, vs := range q {
		if !allowed[k] {
			return store.ListFilter{}, invalid(k, "is not a known parameter (%s)", names)
		}
		if len(vs) > 1 {
			return store.ListFilter{}, invalid(k, "must be given at most once")
		}
	}
	f := store.ListFilter{TenantID: q.Get("tenantId"), RunID: q.Get("runId"), State: api.State(q.Get("state")), Worker: q.Get("worker"), PageToken: q.Get("pageToken")}
	if e := checkText("tenantId", f.TenantID, false, maxTenantIDBytes); e != nil {
		return f, e
	}
	if e := checkText("worker", f.Worker, false, maxWorkerNameBytes); e != nil {
		return f, e
	}
	if f.RunID != "" && !task.ValidID(f.RunID, task.RunIDPrefix) {
		return f, invalid("runId", "must be a Servo run id (%s followed by a ULID)", task.RunIDPrefix)
	}
	if f.State != "" && !f.State.Valid() {
		return f, invalid("state", "must be one of PENDING, QUEUED, RUNNING, CANCELLING, SUCCEEDED, FAILED, CANCELLED")
	}
	switch q.Get("order") {
	case "", "oldest":
	case "newest":
		f.NewestFirst = true
	default:
		return f, invalid("order", "must be newest or oldest")
	}
	if s := q.Get("pageSize"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 500 {
			return f, invalid("pageSize", "must be an integer from 1 to 500")
		}
		f.PageSize = n
	}
	return f, nil
}

// list serves GET /v1/tasks.
func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	f, e := listFilter(r, listParams, listParamNames)
	if e == nil {
		f.TenantIDs, e = h.tenantScope(r, f.TenantID, auth.View)
	}
	if e != nil {
		h.fail(w, r, e)
		return
	}
	tasks, next, err := h.cfg.Store.List(r.Context(), f)
	if errors.Is(err, store.ErrInvalidPageToken) {
		h.fail(w, r, invalid("pageToken", "is not a page token this API issued"))
		return
	}
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	resp := api.ListResponse{Tasks: make([]api.Task, 0, len(tasks)), NextPageToken: next}
	for i := range tasks {
		resp.Tasks = append(resp.Tasks, viewOf(&tasks[i]))
	}
	writeJSON(w, http.StatusOK, resp)
}
