package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/spanattr"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/telemetry"
)

// Bounds of the caller-supplied strings, in bytes.
const (
	maxTenantIDBytes       = 128
	maxWorkspaceIDBytes    = 128
	maxTaskKeyBytes        = 512
	maxAssetIDBytes        = 512
	maxIdempotencyKeyBytes = 256
	maxReasonBytes         = 1024
)

// maxEnvelopeBytes is the largest envelope a submit may produce: Cloud
// Tasks' task size limit (enqueue.MaxTaskBytes) less room for what a retry
// adds (the checkpoint to resume from, up to api.MaxCheckpointBytes), for
// the running attempt's own checkpoint (kept on the task document, see
// task.Task.Live) and for the task's other fields, so that every later
// attempt's envelope fits in a Cloud Task and the task in a Firestore
// document (also 1 MiB).
const maxEnvelopeBytes = enqueue.MaxTaskBytes - 2*api.MaxCheckpointBytes - 8<<10

// submit serves POST /v1/tasks.
func (h *handler) submit(w http.ResponseWriter, r *http.Request) {
	reject := func(e *apiError) {
		telemetry.RecordSubmit(r.Context(), telemetry.SubmitRejected, 1)
		h.fail(w, r, e)
	}
	body, e := readBody(w, r, h.cfg.MaxBodyBytes, false)
	if e != nil {
		reject(e)
		return
	}
	var req api.SubmitRequest
	if e := decodeObject(body, &req, ""); e != nil {
		reject(e)
		return
	}
	now := h.cfg.Now().UTC()
	t, e := h.prepare(&req, "", now, "")
	if e == nil {
		e = h.allowedSubmit(r, &t, "")
	}
	if e == nil {
		e = h.checkRerun(r, &t, "")
	}
	if e != nil {
		reject(e)
		return
	}
	// The task keeps the submit's trace context, so later hops can link
	// to it (55 bytes on the task document).
	t.Trace = telemetry.TraceParent(r.Context())
	trace.SpanFromContext(r.Context()).SetAttributes(spanattr.TaskAttrs(t.ID, 1, t.TenantID, t.Worker)...)
	resp, created, err := h.submitOne(r.Context(), t, now)
	if err != nil {
		h.storeError(w, r, err, taskAttrs(&t)...)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, resp)
}

// submitBatch serves POST /v1/tasks:batch.
func (h *handler) submitBatch(w http.ResponseWriter, r *http.Request) {
	body, e := readBody(w, r, h.cfg.MaxBatchBodyBytes, false)
	if e != nil {
		h.fail(w, r, e)
		return
	}
	var raw struct {
		RunID string            `json:"runId"`
		Tasks []json.RawMessage `json:"tasks"`
	}
	if e := decodeObject(body, &raw, ""); e != nil {
		h.fail(w, r, e)
		return
	}
	if n := len(raw.Tasks); n == 0 || n > api.MaxBatchTasks {
		h.fail(w, r, invalid("tasks", "must hold 1 to %d tasks (got %d)", api.MaxBatchTasks, n))
		return
	}
	now := h.cfg.Now().UTC()
	runID := raw.RunID
	if runID != "" && !task.ValidID(runID, task.RunIDPrefix) {
		h.fail(w, r, invalid("runId", "must be a Servo run id (%s followed by a ULID)", task.RunIDPrefix))
		return
	}
	if runID == "" {
		runID = task.NewRunID(now)
	}
	// Validate every task before storing any: a bad batch changes nothing.
	tasks := make([]task.Task, len(raw.Tasks))
	keys := make(map[[2]string]int)
	for i, item := range raw.Tasks {
		prefix := fmt.Sprintf("tasks[%d].", i)
		var req api.SubmitRequest
		if e := decodeObject(item, &req, prefix); e != nil {
			h.fail(w, r, e)
			return
		}
		t, e := h.prepare(&req, runID, now, prefix)
		if e == nil {
			e = h.allowedSubmit(r, &t, prefix)
		}
		if e == nil {
			e = h.checkRerun(r, &t, prefix)
		}
		if e != nil {
			h.fail(w, r, e)
			return
		}
		if t.IdempotencyKey != "" {
			k := [2]string{t.TenantID, t.IdempotencyKey}
			if j, dup := keys[k]; dup {
				h.fail(w, r, invalid(prefix+"idempotencyKey", "repeats tasks[%d].idempotencyKey for the same tenant", j))
				return
			}
			keys[k] = i
		}
		t.Trace = telemetry.TraceParent(r.Context())
		tasks[i] = t
	}

	resp := api.BatchResponse{RunID: runID, Tasks: make([]api.BatchResult, len(tasks))}
	stored := h.cfg.Store.CreateMany(r.Context(), tasks, now, true)
	var wg sync.WaitGroup
	sem := make(chan struct{}, h.cfg.BatchParallelism)
	for i := range tasks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			t := tasks[i]
			res := api.BatchResult{TaskID: t.ID, RunID: t.RunID}
			sr, created, err := h.afterCreate(r.Context(), stored[i])
			switch {
			case err != nil:
				status, eb := h.storeStatus(r, err, taskAttrs(&t)...)
				res.Status, res.Error, res.Message = status, eb.Code, eb.Message
			default:
				res.TaskID, res.RunID, res.Attempt, res.State = sr.TaskID, sr.RunID, sr.Attempt, sr.State
				res.Status = http.StatusOK
				if created {
					res.Status = http.StatusCreated
				}
			}
			resp.Tasks[i] = res
		})
	}
	wg.Wait()
	unavailable, overQuota := 0, 0
	for _, res := range resp.Tasks {
		if res.Status == http.StatusTooManyRequests {
			overQuota++
		}
		switch res.Status {
		case http.StatusCreated:
			resp.Created++
		case http.StatusOK:
			resp.Existing++
		case http.StatusServiceUnavailable:
			unavailable++
			resp.Failed++
		default:
			resp.Failed++
		}
	}
	status := http.StatusCreated
	switch {
	case resp.Failed == len(tasks) && overQuota == resp.Failed:
		status = http.StatusTooManyRequests
		resp.Error, resp.Message = api.CodeQuotaExceeded, "no task was admitted: the tenant or worker is at maxQueued; retry later"
		w.Header().Set("Retry-After", fmt.Sprint(quotaRetryAfter))
	case resp.Failed == len(tasks) && unavailable < resp.Failed:
		status = http.StatusInternalServerError
		resp.Error, resp.Message = api.CodeInternal, "no task could be stored"
	case resp.Failed == len(tasks):
		status = http.StatusServiceUnavailable
		resp.Error, resp.Message = api.CodeUnavailable, "no task could be stored; retry the same request"
		w.Header().Set("Retry-After", fmt.Sprint(retryAfter))
	case resp.Failed > 0:
		status = http.StatusMultiStatus
	case resp.Created == 0:
		status = http.StatusOK
	}
	writeJSON(w, status, resp)
}

// prepare validates req and builds the task to store. defaultRunID is used
// when req names no run (a new run id is generated when both are empty);
// prefix is prepended to field names ("tasks[3].").
func (h *handler) prepare(req *api.SubmitRequest, defaultRunID string, now time.Time, prefix string) (task.Task, *apiError) {
	pf := func(e *apiError) *apiError {
		if e != nil {
			e.body.Field = prefix + e.body.Field
		}
		return e
	}
	for _, c := range []struct {
		field    string
		v        string
		required bool
		max      int
	}{
		{"tenantId", req.TenantID, true, maxTenantIDBytes},
		{"workspaceId", req.WorkspaceID, true, maxWorkspaceIDBytes},
		{"taskKey", req.TaskKey, true, maxTaskKeyBytes},
		{"assetId", req.AssetID, false, maxAssetIDBytes},
		{"idempotencyKey", req.IdempotencyKey, false, maxIdempotencyKeyBytes},
	} {
		if e := checkText(c.field, c.v, c.required, c.max); e != nil {
			return task.Task{}, pf(e)
		}
	}
	runID, ownRun := req.RunID, false
	switch {
	case runID != "" && !task.ValidID(runID, task.RunIDPrefix):
		return task.Task{}, pf(invalid("runId", "must be a Servo run id (%s followed by a ULID)", task.RunIDPrefix))
	case runID == "" && defaultRunID != "":
		runID = defaultRunID
	case runID == "":
		runID, ownRun = task.NewRunID(now), true
	}
	if req.RerunOf != "" && !task.ValidID(req.RerunOf, task.TaskIDPrefix) {
		return task.Task{}, pf(invalid("rerunOf", "must be a Servo task id (%s followed by a ULID)", task.TaskIDPrefix))
	}
	if req.Worker == "" {
		return task.Task{}, pf(invalid("worker", "is required: name a configured worker"))
	}
	workers := h.cfg.Enqueuer.Workers()
	w, err := workers.Lookup(req.Worker)
	if err != nil {
		return task.Task{}, pf(invalid("worker", "unknown worker %q: name one of the configured workers (%s); URLs are not accepted",
			truncate(req.Worker, 64), strings.Join(workers.Names(), ", ")))
	}
	if !w.Serves(req.TenantID) {
		// Bound to other tenants (a pull pool's members act only for
		// those); the message names none of them.
		return task.Task{}, pf(&apiError{status: http.StatusForbidden, body: api.Error{Code: api.CodePermissionDenied, Field: "worker",
			Message: fmt.Sprintf("worker %q does not take tenant %q's tasks", truncate(req.Worker, 64), truncate(req.TenantID, 128))}})
	}
	payload, e := compactJSON("payload", req.Payload)
	if e != nil {
		return task.Task{}, pf(e)
	}
	resources, e := compactJSON("resources", req.Resources)
	if e != nil {
		return task.Task{}, pf(e)
	}
	if len(resources) > 0 && resources[0] != '{' {
		return task.Task{}, pf(invalid("resources", "must be a JSON object"))
	}
	var deadline *time.Time
	if req.Deadline != "" {
		d, err := time.Parse(time.RFC3339, req.Deadline)
		if err != nil {
			return task.Task{}, pf(invalid("deadline", "must be an RFC 3339 time such as 2030-01-15T12:00:00Z"))
		}
		if !d.After(now) {
			return task.Task{}, pf(invalid("deadline", "must be in the future (server time %s)", now.Format(time.RFC3339)))
		}
		d = d.UTC()
		deadline = &d
	}
	notBefore, enqueueAt, e := h.start(req, w, deadline, now)
	if e != nil {
		return task.Task{}, pf(e)
	}
	timing := h.timing(req)
	if fe := task.ValidateTiming(timing, h.cfg.MinTimer); fe != nil {
		return task.Task{}, fromFieldError(prefix, fe)
	}
	retry := retryPolicy(req.Retry)
	if req.Retry != nil && req.Retry.MaxTotalAttempts != nil && *req.Retry.MaxTotalAttempts < 1 {
		return task.Task{}, pf(invalid("retry.maxTotalAttempts", "must be between 1 and %d (leave it out for the largest maxAttempts of the policies in force)", api.MaxAttemptsLimit))
	}
	if fe := task.ValidateRetry(retry, h.cfg.MinTimer); fe != nil {
		return task.Task{}, fromFieldError(prefix, fe)
	}
	priority := task.DefaultPriority
	if req.Priority != nil {
		if p := *req.Priority; p < task.HighestPriority || p > task.LowestPriority {
			return task.Task{}, pf(invalid("priority", "must be between %d (highest) and %d (lowest); the default is %d", task.HighestPriority, task.LowestPriority, task.DefaultPriority))
		}
		priority = *req.Priority
	}
	t := task.Task{
		ID: task.NewTaskID(now), RunID: runID, OwnRun: ownRun, TenantID: req.TenantID, WorkspaceID: req.WorkspaceID,
		TaskKey: req.TaskKey, AssetID: req.AssetID, Worker: req.Worker, Payload: payload, Resources: resources,
		IdempotencyKey: req.IdempotencyKey, RerunOf: req.RerunOf, Timing: timing, Retry: retry, Deadline: deadline, Priority: priority,
		NotBefore: notBefore, EnqueueAt: enqueueAt,
	}
	// The envelope must fit in a Cloud Task, now and on a retry that adds
	// a checkpoint: check it before storing.
	stored, _, _ := task.NewTask(t, now)
	_, body, err := h.cfg.Enqueuer.Envelope(&stored, now)
	switch {
	case errors.Is(err, enqueue.ErrEnvelopeTooLarge) || (err == nil && len(body) > maxEnvelopeBytes):
		return task.Task{}, &apiError{status: http.StatusRequestEntityTooLarge, body: api.Error{
			Code: api.CodePayloadTooLarge, Field: prefix + "payload", LimitBytes: maxEnvelopeBytes,
			Message: fmt.Sprintf("the task envelope (payload, resources and task fields) would exceed %d bytes: "+
				"Cloud Tasks' task size limit is %d bytes, and %d are reserved for a retry's checkpoint and bookkeeping",
				maxEnvelopeBytes, enqueue.MaxTaskBytes, enqueue.MaxTaskBytes-maxEnvelopeBytes)}}
	case err != nil:
		return task.Task{}, &apiError{status: http.StatusInternalServerError, body: api.Error{Code: api.CodeInternal, Message: "could not build the task envelope"}}
	}
	return t, nil
}

// start reads a submit's delayed start: the time its first attempt is
// due (nil: now) and, when that is further ahead than the worker's
// transport holds a delivery (a Cloud Task's 30 days, a pull message's
// 10 minutes), when the sweeper is to hand it over (EnqueueAt).
func (h *handler) start(req *api.SubmitRequest, w enqueue.Worker, deadline *time.Time, now time.Time) (notBefore, enqueueAt *time.Time, _ *apiError) {
	var at time.Time
	switch {
	case req.StartAt != "" && req.StartDelayMs != nil:
		return nil, nil, invalid("startDelayMs", "give startAt or startDelayMs, not both")
	case req.StartAt != "":
		t, err := time.Parse(time.RFC3339, req.StartAt)
		if err != nil {
			return nil, nil, invalid("startAt", "must be an RFC 3339 time such as 2030-01-15T12:00:00Z")
		}
		at = t.UTC()
		if at.Sub(now) > task.MaxStartDelay {
			return nil, nil, invalid("startAt", "must be at most a year ahead (server time %s)", now.Format(time.RFC3339))
		}
	case req.StartDelayMs != nil: // bounded to a year here
		if d := *req.StartDelayMs; d < 0 || d > task.MaxStartDelay.Milliseconds() {
			return nil, nil, invalid("startDelayMs", "must be between 0 and %d ms (a year)", task.MaxStartDelay.Milliseconds())
		}
		at = now.Add(time.Duration(*req.StartDelayMs) * time.Millisecond)
	default:
		return nil, nil, nil
	}
	if !at.After(now) {
		return nil, nil, nil // already due: start now
	}
	if deadline != nil && !deadline.After(at) {
		return nil, nil, invalid("deadline", "must be after the start (%s)", at.Format(time.RFC3339))
	}
	horizon := task.EnqueueHorizon
	if w.Pull {
		horizon = task.PullHorizon
	}
	if at.Sub(now) > horizon {
		e := at.Add(-horizon)
		return &at, &e, nil
	}
	return &at, nil, nil
}

// checkRerun checks that the task t reruns, if any, exists, is of a
// tenant the caller operates and has finished (one read, only for a
// rerun): 400 naming the field when it does not exist or is of a tenant
// the caller is not operator on (the same answer: nothing of another
// tenant's task is learnt), 409 task_not_terminal while it has not
// finished.
func (h *handler) checkRerun(r *http.Request, t *task.Task, prefix string) *apiError {
	if t.RerunOf == "" {
		return nil
	}
	orig, err := h.cfg.Store.GetTask(r.Context(), t.RerunOf)
	switch {
	case errors.Is(err, store.ErrNotFound),
		err == nil && !h.cfg.Access.Allows(auth.Principal(r.Context()), orig.TenantID, auth.Operate):
		return invalid(prefix+"rerunOf", "names no task")
	case err != nil:
		status, body := h.storeStatus(r, err, "rerunOf", t.RerunOf)
		return &apiError{status: status, body: *body}
	case !orig.State.Terminal():
		return &apiError{status: http.StatusConflict, body: api.Error{Code: api.CodeTaskNotTerminal, Field: prefix + "rerunOf", State: orig.State,
			Message: fmt.Sprintf("task %s is %s: only a finished task can be rerun", orig.ID, orig.State)}}
	}
	return nil
}

// timing builds the task's timers: explicit values as given (Validate
// rejects zero and negative ones), the configured start timeout, and
// api.Timing.WithDefaults for the rest.
func (h *handler) timing(req *api.SubmitRequest) api.Timing {
	t := api.Timing{
		HeartbeatIntervalMs: valueOf(req.HeartbeatIntervalMs),
		HeartbeatTimeoutMs:  valueOf(req.HeartbeatTimeoutMs),
		CancelGracePeriodMs: valueOf(req.CancelGracePeriodMs),
	}.WithDefaults()
	// WithDefaults takes a zero for unset: an explicit zero is kept, for
	// Validate to reject. (The heartbeat timeout it derives from a zero
	// interval's default, 3 × 30 s, is the one of any interval ≤ 30 s.)
	given(&t.HeartbeatIntervalMs, req.HeartbeatIntervalMs)
	given(&t.HeartbeatTimeoutMs, req.HeartbeatTimeoutMs)
	given(&t.CancelGracePeriodMs, req.CancelGracePeriodMs)
	t.StartTimeoutMs = h.cfg.DefaultStartTimeout.Milliseconds()
	return t
}

// retryPolicy builds the task's retry policy: explicit values as given,
// api.RetryPolicy.WithDefaults for the rest.
func retryPolicy(r *api.RetryRequest) api.RetryPolicy {
	if r == nil {
		r = &api.RetryRequest{}
	}
	p := api.RetryPolicy{
		MaxAttempts:        valueOf(r.MaxAttempts),
		InitialBackoffMs:   valueOf(r.InitialBackoffMs),
		BackoffCoefficient: valueOf(r.BackoffCoefficient),
		MaxBackoffMs:       valueOf(r.MaxBackoffMs),
	}.WithDefaults()
	// As in timing: an explicit zero is kept. (The maximum backoff it
	// derives from a zero initial backoff's default is the default.)
	given(&p.MaxAttempts, r.MaxAttempts)
	given(&p.InitialBackoffMs, r.InitialBackoffMs)
	given(&p.BackoffCoefficient, r.BackoffCoefficient)
	given(&p.MaxBackoffMs, r.MaxBackoffMs)
	given(&p.MaxTotalAttempts, r.MaxTotalAttempts)
	if len(r.ByCategory) > 0 {
		p.ByCategory = make(map[api.Category]api.CategoryRetry, len(r.ByCategory))
		for c, e := range r.ByCategory {
			p.ByCategory[c] = categoryRetry(c, p, e)
		}
	}
	return p
}

// categoryRetry is category c's entry: the fields e gives, the rest from
// c's policy without an entry (the task's, CONFLICT's default). A null
// entry gives nothing of its own.
func categoryRetry(c api.Category, p api.RetryPolicy, e *api.CategoryRetryRequest) api.CategoryRetry {
	base, _ := task.RetryFor(api.RetryPolicy{MaxAttempts: p.MaxAttempts, InitialBackoffMs: p.InitialBackoffMs,
		BackoffCoefficient: p.BackoffCoefficient, MaxBackoffMs: p.MaxBackoffMs}, c)
	if e == nil {
		return base
	}
	given(&base.MaxAttempts, e.MaxAttempts)
	given(&base.InitialBackoffMs, e.InitialBackoffMs)
	given(&base.BackoffCoefficient, e.BackoffCoefficient)
	given(&base.MaxBackoffMs, e.MaxBackoffMs)
	if e.MaxBackoffMs == nil && base.MaxBackoffMs < base.InitialBackoffMs {
		// As the task's own default: never below the initial backoff.
		base.MaxBackoffMs = base.InitialBackoffMs
	}
	return base
}

// valueOf returns *p, or the zero value when p is nil.
func valueOf[T any](p *T) T {
	var v T
	if p != nil {
		v = *p
	}
	return v
}

// given sets *v to *req when the request gave a value.
func given[T any](v, req *T) {
	if req != nil {
		*v = *req
	}
}

// compactJSON returns raw compacted, or nil for an absent or null value.
func compactJSON(field string, raw json.RawMessage) (json.RawMessage, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, invalid(field, "must be valid JSON")
	}
	if task.JSONDepth(buf.Bytes(), api.MaxJSONDepth) > api.MaxJSONDepth {
		return nil, invalid(field, "nests more than %d levels of arrays and objects", api.MaxJSONDepth)
	}
	return buf.Bytes(), nil
}

// submitOne stores t (or finds the task its idempotency key names) and
// enqueues it. created is false for a repeat.
func (h *handler) submitOne(ctx context.Context, t task.Task, now time.Time) (api.SubmitResponse, bool, error) {
	return h.afterCreate(ctx, h.cfg.Store.CreateMany(ctx, []task.Task{t}, now, true)[0])
}

// afterCreate creates the Cloud Task of a task just stored QUEUED (one
// commit, then one CreateTask), or re-drives the enqueue of a repeat that is
// still PENDING, and logs the submit. created is false for a repeat.
func (h *handler) afterCreate(ctx context.Context, c store.CreateResult) (api.SubmitResponse, bool, error) {
	if c.Err != nil {
		return api.SubmitResponse{}, false, c.Err
	}
	stored := c.Task
	state := stored.State
	var cloudTask string // the Cloud Task this submit created, named on its line
	switch {
	case stored.WaitingSince != nil:
		// Waiting for a run slot (quotas): the sweeper's admit duty
		// enqueues it when one frees.
	case stored.EnqueueAt != nil:
		// A start beyond its transport's horizon: the sweeper's dispatch
		// duty enqueues it at EnqueueAt.
	case !c.Existed:
		state, cloudTask = h.enqueue(ctx, stored, true)
	case state == api.Pending:
		// A repeat of a task still PENDING re-drives its enqueue: safe, the
		// Cloud Task name is deterministic.
		state, _ = h.enqueue(ctx, stored, false)
	}
	result := telemetry.SubmitCreated
	if c.Existed {
		result = telemetry.SubmitExisting
	}
	telemetry.RecordSubmit(ctx, result, 1)
	attrs := append(taskAttrs(&stored), "runId", stored.RunID, "worker", stored.Worker, "state", state, "repeat", c.Existed)
	if cloudTask != "" {
		attrs = append(attrs, "cloudTask", cloudTask)
	}
	h.log.InfoContext(ctx, "task submitted", attrs...)
	return api.SubmitResponse{TaskID: stored.ID, RunID: stored.RunID, Attempt: stored.Attempt, State: state}, !c.Existed, nil
}

// enqueue creates the Cloud Task of a stored task (QUEUED by the submit's
// commit, or PENDING) and returns its state: QUEUED, or PENDING when Cloud
// Tasks failed. With first (the submit that stored it), the Cloud Task's
// name is returned for the submit's line, and the enqueuer writes no line
// of its own for it ([enqueue.Enqueuer.EnqueueSubmitted]). A task stored QUEUED whose Cloud Task could not be created
// goes back to PENDING with its dispatch check due (one more transaction,
// on this failure path only), so the sweeper's next pass re-drives it;
// should that transaction fail too, the dispatch check of the QUEUED task
// re-drives it after the start timeout. The enqueue outlives a caller that
// hangs up, bounded by CloudTasksTimeout; the record of its failure has a
// budget of its own (RequestTimeout), since a stalled Cloud Tasks uses up
// all of the enqueue's.
func (h *handler) enqueue(ctx context.Context, t task.Task, first bool) (api.State, string) {
	ctx = context.WithoutCancel(ctx)
	ectx, cancel := context.WithTimeout(ctx, h.cfg.CloudTasksTimeout)
	var cloudTask string
	var err error
	if first {
		cloudTask, err = h.cfg.Enqueuer.EnqueueSubmitted(ectx, t)
	} else {
		err = h.cfg.Enqueuer.Enqueue(ectx, t)
	}
	cancel()
	if err == nil {
		return api.Queued, cloudTask
	}
	h.log.WarnContext(ctx, "task stored but not enqueued; the sweeper will re-drive it", append(taskAttrs(&t), "error", err)...)
	if t.State != api.Queued {
		return api.Pending, ""
	}
	rctx, cancel := context.WithTimeout(ctx, h.cfg.RequestTimeout)
	defer cancel()
	ev := task.Event{Kind: task.EventDispatchFailed, Attempt: t.Attempt, Now: h.cfg.Now().UTC()}
	r, aerr := h.cfg.Store.Apply(rctx, t.ID, ev)
	if aerr != nil {
		h.log.WarnContext(ctx, "could not record the failed enqueue; the dispatch check re-drives it", append(taskAttrs(&t), "error", aerr)...)
		return api.Queued, ""
	}
	return r.Task.State, ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
