package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/service"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// DispatchPath is where the local stack serves the dispatch endpoint (in
// production it is the root of the ServoJobs function).
const DispatchPath = "/jobs/dispatch"

// MaxEnvelopeBytes is the largest envelope a job can be given: Cloud Run
// limits one environment variable's value to 32 768 bytes. A job worker's
// payload and checkpoints must keep the envelope below it (pass large
// inputs by reference).
const MaxEnvelopeBytes = 32 << 10

// Store is what the dispatch endpoint needs from the store; *store.Store
// has it.
type Store interface {
	GetTask(ctx context.Context, id string) (task.Task, error)
	Apply(ctx context.Context, id string, ev task.Event) (task.Result, error)
}

// Config configures the dispatch endpoint.
type Config struct {
	Store   Store
	Keys    *auth.KeyRing
	Workers enqueue.Workers
	Runner  Runner
	// Now defaults to time.Now.
	Now func() time.Time
	// Logger defaults to logs.Default().
	Logger *slog.Logger
	// Project puts trace ids in logs.
	Project string
}

// Handler is the dispatch endpoint: Cloud Tasks delivers a job worker's
// envelope to it (POST, the same body a push worker receives), and it
// starts the attempt's execution of the Cloud Run Job, at most one per
// attempt. See the package documentation.
type Handler struct {
	cfg Config
	log *slog.Logger
}

// NewHandler returns the dispatch endpoint. Store, Keys and Runner are
// required: without one, it returns an error naming it, which wraps
// service.ErrMissingDependency.
func NewHandler(cfg Config) (*Handler, error) {
	switch {
	case cfg.Store == nil:
		return nil, service.Missing("jobs", "Config.Store")
	case cfg.Keys == nil:
		return nil, service.Missing("jobs", "Config.Keys")
	case cfg.Runner == nil:
		return nil, service.Missing("jobs", "Config.Runner")
	}
	service.Defaults(&cfg.Now, &cfg.Logger)
	return &Handler{cfg: cfg, log: cfg.Logger.With("component", "jobs")}, nil
}

// Results of a dispatch, in the answer's "result".
const (
	// ResultStarted: a new execution was started and recorded.
	ResultStarted = "started"
	// ResultFound: the attempt's execution already existed (a repeated
	// delivery); none was started.
	ResultFound = "found"
	// ResultStale: the attempt is no longer waiting to start (the task
	// moved on, started, or ended); nothing was started.
	ResultStale = "stale"
	// ResultSuperseded: an execution was started, but another was recorded
	// for the attempt first (concurrent deliveries) or the task ended
	// meanwhile; the one started here was cancelled.
	ResultSuperseded = "superseded"
)

// Answer is the JSON answer of the dispatch endpoint (Cloud Tasks only
// looks at the status: 2xx ends the Cloud Task, anything else retries it).
type Answer struct {
	Result    string    `json:"result,omitempty"`
	TaskID    string    `json:"taskId,omitempty"`
	Attempt   int       `json:"attempt,omitempty"`
	State     api.State `json:"state,omitempty"`
	Execution string    `json:"execution,omitempty"`
	Error     string    `json:"error,omitempty"`
	Message   string    `json:"message,omitempty"`
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := logs.WithTrace(r.Context(), r, h.cfg.Project)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		write(w, http.StatusMethodNotAllowed, Answer{Error: api.CodeMethodNotAllowed, Message: "POST the envelope"})
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		write(w, http.StatusUnsupportedMediaType, Answer{Error: api.CodeUnsupportedMediaType, Message: "Content-Type must be application/json"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxEnvelopeBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.log.ErrorContext(ctx, "JOB NOT STARTED: the envelope exceeds what a Cloud Run Job execution can be given (one environment variable); keep job payloads small", "limit", MaxEnvelopeBytes)
			write(w, http.StatusRequestEntityTooLarge, Answer{Error: api.CodePayloadTooLarge, Message: fmt.Sprintf("the envelope exceeds %d bytes", MaxEnvelopeBytes)})
			return
		}
		write(w, http.StatusBadRequest, Answer{Error: api.CodeInvalidRequest, Message: "could not read the body"})
		return
	}
	status, ans := h.dispatch(ctx, body)
	write(w, status, ans)
}

func write(w http.ResponseWriter, status int, a Answer) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(a)
}

// dispatch starts the attempt's execution unless it exists or the attempt
// no longer waits to start.
func (h *Handler) dispatch(ctx context.Context, body []byte) (int, Answer) {
	var env api.Envelope
	if err := json.Unmarshal(body, &env); err != nil || env.TaskID == "" || env.Attempt < 1 || env.TaskToken == "" {
		return http.StatusBadRequest, Answer{Error: api.CodeInvalidRequest, Message: "the body must be a Servo envelope (taskId, attempt, taskToken)"}
	}
	ans := Answer{TaskID: env.TaskID, Attempt: env.Attempt}
	log := h.log.With("taskId", env.TaskID, "attempt", env.Attempt, "tenantId", env.TenantID)
	// The envelope's token, signed by Servo for exactly this attempt, is
	// what authorises the dispatch (besides IAM on the function).
	claims, err := h.cfg.Keys.Verify(env.TaskToken, h.cfg.Now())
	if err != nil {
		code := api.CodeInvalidToken
		if errors.Is(err, auth.ErrTaskTokenExpired) {
			code = api.CodeTokenExpired
		}
		log.WarnContext(ctx, "dispatch refused: the envelope's task token was not accepted", "error", code)
		ans.Error, ans.Message = code, "the envelope's task token was not accepted"
		return http.StatusUnauthorized, ans
	}
	if claims.TaskID != env.TaskID || claims.Attempt != env.Attempt {
		ans.Error, ans.Message = api.CodeTokenScopeMismatch, "the task token is for another task or attempt"
		return http.StatusForbidden, ans
	}
	t, err := h.cfg.Store.GetTask(ctx, env.TaskID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		ans.Error, ans.Message = api.CodeTaskNotFound, "no such task"
		return http.StatusNotFound, ans
	case err != nil:
		log.WarnContext(ctx, "dispatch: could not read the task; Cloud Tasks retries", "error", err)
		ans.Error, ans.Message = api.CodeUnavailable, "could not read the task"
		return http.StatusServiceUnavailable, ans
	}
	ans.State = t.State
	wk, err := h.cfg.Workers.Lookup(t.Worker)
	if err != nil || wk.Job == "" {
		log.ErrorContext(ctx, "dispatch refused: the task's worker is not a job worker here; check SERVO_WORKERS", "worker", t.Worker)
		ans.Error, ans.Message = api.CodeInvalidRequest, fmt.Sprintf("worker %q is not a job worker", t.Worker)
		return http.StatusBadRequest, ans
	}
	if t.Attempt != env.Attempt || (t.State != api.Pending && t.State != api.Queued) {
		log.InfoContext(ctx, "dispatch of an attempt that no longer waits to start: nothing started", "state", t.State, "taskAttempt", t.Attempt)
		ans.Result = ResultStale
		return http.StatusOK, ans
	}
	log = log.With("job", wk.Job)
	labels := Labels(t.ID, env.Attempt)
	found, ok, err := h.cfg.Runner.Find(ctx, wk.Job, labels)
	if err != nil {
		log.WarnContext(ctx, "dispatch: could not look the attempt's execution up; Cloud Tasks retries", "error", err)
		ans.Error, ans.Message = api.CodeUnavailable, "could not list the job's executions"
		return http.StatusServiceUnavailable, ans
	}
	previous := ""
	if ok {
		if !found.Done {
			ans.Execution = found.Name
			if status, a := h.record(ctx, log, ans, found.Name, "", false); a.Error != "" || a.Result != "" {
				return status, a
			}
			log.InfoContext(ctx, "dispatch repeated: the attempt's execution exists; none started", "execution", found.Name)
			ans.Result = ResultFound
			return http.StatusOK, ans
		}
		// The execution ended without starting the attempt (the task is
		// still waiting): it will never call Servo; a re-drive runs anew.
		log.WarnContext(ctx, "the attempt's execution ended before the attempt started; starting another", "execution", found.Name)
		previous = found.Name
	}
	ex, err := h.cfg.Runner.Run(ctx, wk.Job, body, labels)
	if err != nil {
		log.WarnContext(ctx, "dispatch: could not run the job; Cloud Tasks retries", "error", err)
		ans.Error, ans.Message = api.CodeUnavailable, "could not run the job"
		return http.StatusServiceUnavailable, ans
	}
	ans.Execution = ex.Name
	return h.record(ctx, log, ans, ex.Name, previous, true)
}

// record records the execution on the attempt. When the state machine
// refuses it and this call started it, the execution is cancelled.
func (h *Handler) record(ctx context.Context, log *slog.Logger, ans Answer, execution, previous string, started bool) (int, Answer) {
	r, err := h.cfg.Store.Apply(ctx, ans.TaskID, task.Event{Kind: task.EventExecution, Attempt: ans.Attempt, Now: h.cfg.Now().UTC(),
		Execution: execution, PreviousExecution: previous})
	if err != nil {
		// The execution runs; the retried delivery finds it and records it.
		log.WarnContext(ctx, "dispatch: could not record the execution; Cloud Tasks retries", "execution", execution, "error", err)
		ans.Error, ans.Message = api.CodeUnavailable, "could not record the execution"
		return http.StatusServiceUnavailable, ans
	}
	ans.State = r.Task.State
	if r.Rejection != nil {
		if started {
			cctx := context.WithoutCancel(ctx)
			if err := h.cfg.Runner.Cancel(cctx, execution); err != nil {
				log.ErrorContext(ctx, "could not cancel a superseded execution; its callbacks are refused", "execution", execution, "error", err)
			}
		}
		log.InfoContext(ctx, "execution not recorded: "+r.Rejection.Message, "execution", execution, "code", r.Rejection.Code)
		ans.Result = ResultSuperseded
		return http.StatusOK, ans
	}
	if started {
		log.InfoContext(ctx, "job execution started for the attempt", "execution", execution)
		ans.Result = ResultStarted
	}
	return http.StatusOK, ans
}
