package dispatcher

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// cancelReason reads the optional cancel body.
func (h *handler) cancelReason(w http.ResponseWriter, r *http.Request) (string, *apiError) {
	body, e := readBody(w, r, h.cfg.MaxBodyBytes, true)
	if e != nil {
		return "", e
	}
	var req api.CancelRequest
	if body != nil {
		if e := decodeObject(body, &req, ""); e != nil {
			return "", e
		}
	}
	if e := checkText("reason", req.Reason, false, maxReasonBytes); e != nil {
		return "", e
	}
	if req.Reason == "" {
		req.Reason = api.ReasonUserRequested
	}
	return req.Reason, nil
}

// cancel serves POST /v1/tasks/{id}/cancel: PENDING and QUEUED tasks become
// CANCELLED at once (their Cloud Task is deleted, best effort), RUNNING ones
// CANCELLING with a cancel deadline, terminal ones answer 409.
func (h *handler) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	reason, e := h.cancelReason(w, r)
	if e != nil {
		h.fail(w, r, e)
		return
	}
	if !task.ValidID(id, task.TaskIDPrefix) {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeTaskNotFound, Message: "no such task (task ids look like task_01H…)"})
		return
	}
	if all, _ := h.cfg.Access.Tenants(auth.Principal(r.Context()), auth.Operate); !all {
		// One read to learn the task's tenant, only for a caller who is
		// not an operator of every tenant.
		t, err := h.cfg.Store.GetTask(r.Context(), id)
		if err != nil {
			h.storeError(w, r, err, "taskId", id)
			return
		}
		if e := h.allowed(r, t.TenantID, auth.Operate); e != nil {
			h.fail(w, r, e)
			return
		}
	}
	res, err := h.cancelOne(r.Context(), id, reason)
	if err != nil {
		h.storeError(w, r, err, "taskId", id)
		return
	}
	if rej := res.Rejection; rej != nil {
		writeError(w, http.StatusConflict, &api.Error{Code: rej.Code, State: rej.State, Message: rej.Message})
		return
	}
	t := res.Task
	if as, err := h.cfg.Store.AttemptsOf(r.Context(), &t); err == nil {
		t.Attempts = as
	} else {
		// The cancel is committed: answer with what is known rather than
		// inviting a retry that would now be refused.
		h.log.WarnContext(r.Context(), "could not read attempts after cancel", append(taskAttrs(&t), "error", err)...)
		if res.Attempt != nil {
			t.Attempts = []task.Attempt{*res.Attempt}
		}
	}
	writeJSON(w, http.StatusOK, viewOf(&t))
}

// cancelOne applies a cancel to task id and deletes the Cloud Task of a
// task it cancelled (best effort, bounded by CloudTasksTimeout).
func (h *handler) cancelOne(ctx context.Context, id, reason string) (task.Result, error) {
	res, err := h.cfg.Store.Apply(ctx, id, task.Event{Kind: task.EventCancel, Reason: reason, Now: h.cfg.Now().UTC()})
	if err != nil {
		return res, err
	}
	t := &res.Task
	if res.Rejection != nil {
		h.log.InfoContext(ctx, "cancel refused", append(taskAttrs(t), "code", res.Rejection.Code, "state", res.Rejection.State)...)
		return res, nil
	}
	h.log.InfoContext(ctx, "cancel applied", append(taskAttrs(t), "state", t.State, "reason", reason)...)
	if res.Dequeue {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.CloudTasksTimeout)
		defer cancel()
		// FollowUp logs its own failure; a Cloud Task left behind is
		// delivered to a worker whose `started` is refused with 409.
		_ = h.cfg.Enqueuer.FollowUp(fctx, res)
	}
	return res, nil
}

// cancelRun serves POST /v1/runs/{runId}/cancel: every non-terminal task of
// the run is cancelled as by POST /v1/tasks/{id}/cancel.
func (h *handler) cancelRun(w http.ResponseWriter, r *http.Request) {
	runID := r.PathValue("runId")
	reason, e := h.cancelReason(w, r)
	if e != nil {
		h.fail(w, r, e)
		return
	}
	if !task.ValidID(runID, task.RunIDPrefix) {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeRunNotFound, Message: "no such run (run ids look like run_01H…)"})
		return
	}
	tenants, e := h.tenantScope(r, "", auth.Operate)
	if e != nil {
		h.fail(w, r, e)
		return
	}
	resp := api.RunCancelResponse{RunID: runID}
	var mu sync.Mutex
	count := func(f func()) {
		mu.Lock()
		defer mu.Unlock()
		f()
	}
	ctx := r.Context()
	page := ""
	for {
		tasks, next, err := h.cfg.Store.List(ctx, store.ListFilter{RunID: runID, TenantIDs: tenants, PageSize: h.runPageSize, PageToken: page})
		if err != nil {
			h.storeError(w, r, err, "runId", runID)
			return
		}
		resp.Matched += len(tasks)
		var wg sync.WaitGroup
		sem := make(chan struct{}, h.cfg.BatchParallelism)
		for _, t := range tasks {
			if t.State.Terminal() {
				count(func() { resp.AlreadyTerminal++ })
				continue
			}
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				res, err := h.cancelOne(ctx, t.ID, reason)
				switch {
				case err != nil:
					h.log.WarnContext(ctx, "run cancel: task not cancelled", append(taskAttrs(&t), "runId", runID, "error", err)...)
					count(func() { resp.Failed++ })
				case res.Rejection != nil:
					count(func() { resp.AlreadyTerminal++ })
				case res.Task.State == api.Cancelled:
					count(func() { resp.Cancelled++ })
				case res.Task.State == api.Cancelling:
					count(func() { resp.Cancelling++ })
				default:
					// Only a terminal task keeps another state; counted above.
					count(func() { resp.AlreadyTerminal++ })
				}
			})
		}
		wg.Wait()
		if next == "" {
			break
		}
		page = next
	}
	switch {
	case resp.Matched == 0:
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeRunNotFound, Message: "the run has no tasks"})
	case resp.Failed > 0:
		// Retrying is safe: cancelled tasks are skipped, cancelling ones unchanged.
		resp.Error, resp.Message = api.CodeUnavailable, fmt.Sprintf("%d tasks could not be cancelled now; retry the same request", resp.Failed)
		w.Header().Set("Retry-After", fmt.Sprint(retryAfter))
		writeJSON(w, http.StatusServiceUnavailable, resp)
	default:
		writeJSON(w, http.StatusOK, resp)
	}
}
