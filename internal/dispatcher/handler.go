package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/openapi"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/service"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// Limits and defaults of the control API.
const (
	// DefaultMaxBodyBytes caps the body of a single submit or cancel.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxBatchBodyBytes caps the body of a batch submit (the HTTP
	// request limit of Cloud Functions).
	DefaultMaxBatchBodyBytes = 32 << 20
	// DefaultBatchParallelism bounds the concurrent submits of one batch
	// (and the concurrent cancels of one run).
	DefaultBatchParallelism = 16
	// DefaultCloudTasksTimeout bounds one enqueue or Cloud Task deletion.
	DefaultCloudTasksTimeout = 10 * time.Second
	// DefaultRequestTimeout bounds the store work of one request.
	DefaultRequestTimeout = 50 * time.Second
	// retryAfter is the Retry-After, in seconds, of a 503 answer.
	retryAfter = 2
)

// Config configures the control API handler.
type Config struct {
	// Store is the task store (required).
	Store *store.Store
	// Enqueuer hands attempts to Cloud Tasks and knows the configured
	// workers and the signing keys (required).
	Enqueuer *enqueue.Enqueuer
	// Now is the server clock; nil means time.Now.
	Now func() time.Time
	// Logger receives the handler's logs; nil means logs.Default().
	Logger *slog.Logger
	// MinTimer is the smallest timer and backoff a submit may ask for:
	// task.MinTimerProduction (the default) or task.MinTimerLocal for the
	// local stack and tests.
	MinTimer time.Duration
	// DefaultStartTimeout is how long a new task may stay PENDING or QUEUED
	// before the sweeper re-drives it; 0 means api.DefaultStartTimeout.
	DefaultStartTimeout time.Duration
	// MaxBodyBytes caps a submit or cancel body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxBatchBodyBytes caps a batch body; 0 means DefaultMaxBatchBodyBytes.
	MaxBatchBodyBytes int64
	// BatchParallelism bounds the concurrent submits of a batch and the
	// concurrent cancels of a run; 0 means DefaultBatchParallelism.
	BatchParallelism int
	// CloudTasksTimeout bounds each call to Cloud Tasks made while
	// answering (enqueue, delete); 0 means DefaultCloudTasksTimeout.
	CloudTasksTimeout time.Duration
	// RequestTimeout bounds the store work of one request, so that a
	// Firestore outage is answered 503 instead of hanging; 0 means
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Project, when set, puts the request's trace into log lines.
	Project string
	// Access is the access policy (package auth); nil is the open
	// policy: every caller IAM lets through may do everything.
	Access *auth.Policy
	// Identity checks the callers' identity tokens (auth.GoogleVerifier
	// in production; auth.DevVerifier in servo dev; IAP's signed header
	// only when Identity.IAP is set). With no verifier, the open policy
	// ignores the Authorization header and any other policy refuses every
	// request.
	Identity auth.Verifiers
	// IdentityProblems are configuration problems of Identity that GET
	// /v1/health reports (servo doctor fails on them): an unset API
	// audience.
	IdentityProblems []string
	// Traces, when set, serves GET /v1/tasks/{id}/trace (servo dev's span
	// recorder), behind the API's checks: an identity the policy accepts
	// and the viewer role on the task's tenant.
	Traces http.Handler
	// Events, when set, serves GET /v1/events: it calls ready once it
	// delivers every event published from then on, then each for each
	// event that passes opts, until ctx ends (events.Stream on the events
	// topic).
	Events func(ctx context.Context, opts events.StreamOptions, ready func(), each func(api.Event) error) error
	// MaxStreams bounds the event streams (each a Pub/Sub subscription)
	// one instance holds open, MaxStreamsPerCaller those of one caller;
	// defaults DefaultMaxStreams and DefaultMaxStreamsPerCaller. Past
	// either, GET /v1/events is 429 with Retry-After.
	MaxStreams, MaxStreamsPerCaller int
	// SweepEvery is the sweeper's cadence: a schedule's finest everyMs
	// (default 15 s, zombie.DefaultEvery).
	SweepEvery time.Duration
	// MaxStreamDuration bounds one event stream (default and most:
	// events.MaxStreamDuration, an hour); it then ends with an "expired"
	// event, as when its token expires.
	MaxStreamDuration time.Duration
}

// Defaults of Config.MaxStreams and Config.MaxStreamsPerCaller.
const (
	DefaultMaxStreams          = 200
	DefaultMaxStreamsPerCaller = 8
)

// handler serves the control API.
type handler struct {
	cfg Config
	log *slog.Logger
	mux *http.ServeMux
	// patterns are the mux's patterns, in registration order.
	patterns []string
	// runPageSize is the page size of a run cancel's listing.
	runPageSize int
	// streams counts the open event streams: all and by caller.
	streams streamCount
}

// NewHandler returns the control API handler. When cfg.Store or
// cfg.Enqueuer is nil, it returns an error naming the field (a missing
// dependency, see internal/service).
func NewHandler(cfg Config) (http.Handler, error) {
	h, err := newHandler(cfg)
	if err != nil {
		return nil, err
	}
	return routed{instrument(h), h.patterns}, nil
}

// routed is a handler with the patterns it serves: Routes lists them, so
// that the access test of every route finds a route without an entry.
type routed struct {
	http.Handler
	patterns []string
}

// Routes returns the registered patterns.
func (r routed) Routes() []string { return slices.Clone(r.patterns) }

func newHandler(cfg Config) (*handler, error) {
	switch {
	case cfg.Store == nil:
		return nil, service.Missing("dispatcher", "Config.Store")
	case cfg.Enqueuer == nil:
		return nil, service.Missing("dispatcher", "Config.Enqueuer")
	}
	service.Defaults(&cfg.Now, &cfg.Logger)
	if cfg.MinTimer <= 0 {
		cfg.MinTimer = task.MinTimerProduction
	}
	if cfg.DefaultStartTimeout <= 0 {
		cfg.DefaultStartTimeout = api.DefaultStartTimeout
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxBatchBodyBytes <= 0 {
		cfg.MaxBatchBodyBytes = DefaultMaxBatchBodyBytes
	}
	if cfg.BatchParallelism <= 0 {
		cfg.BatchParallelism = DefaultBatchParallelism
	}
	if cfg.CloudTasksTimeout <= 0 {
		cfg.CloudTasksTimeout = DefaultCloudTasksTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.MaxStreamDuration <= 0 || cfg.MaxStreamDuration > events.MaxStreamDuration {
		cfg.MaxStreamDuration = events.MaxStreamDuration
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.MaxStreamsPerCaller <= 0 {
		cfg.MaxStreamsPerCaller = DefaultMaxStreamsPerCaller
	}
	h := &handler{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), runPageSize: 500, streams: streamCount{by: map[string]int{}}}
	h.routes()
	return h, nil
}

// routes registers the API. Each path also has a method-less pattern that
// answers 405 in JSON with the Allow header; everything else is 404.
func (h *handler) routes() {
	handle := func(pattern string, f http.HandlerFunc) {
		h.patterns = append(h.patterns, pattern)
		h.mux.HandleFunc(pattern, f)
	}
	handle("POST /v1/tasks", h.submit)
	handle("GET /v1/tasks", h.list)
	handle("/v1/tasks", methodNotAllowed("GET, HEAD, POST"))
	handle("POST /v1/tasks:batch", h.submitBatch)
	handle("/v1/tasks:batch", methodNotAllowed("POST"))
	handle("GET /v1/tasks:counts", h.counts)
	handle("/v1/tasks:counts", methodNotAllowed("GET, HEAD"))
	handle("GET /v1/tasks/{id}", h.get)
	handle("/v1/tasks/{id}", methodNotAllowed("GET, HEAD"))
	handle("POST /v1/tasks/{id}/cancel", h.cancel)
	handle("/v1/tasks/{id}/cancel", methodNotAllowed("POST"))
	if h.cfg.Traces != nil {
		handle("GET /v1/tasks/{id}/trace", h.trace)
		handle("/v1/tasks/{id}/trace", methodNotAllowed("GET, HEAD"))
	}
	handle("GET /v1/tasks/{id}/events", h.taskEvents)
	handle("/v1/tasks/{id}/events", methodNotAllowed("GET, HEAD"))
	if h.cfg.Events != nil {
		handle("GET "+eventsPath, h.eventStream)
		handle(eventsPath, methodNotAllowed("GET, HEAD"))
	}
	handle("GET /v1/runs", h.runs)
	handle("/v1/runs", methodNotAllowed("GET, HEAD"))
	handle("GET /v1/runs/{runId}/events", h.runEvents)
	handle("/v1/runs/{runId}/events", methodNotAllowed("GET, HEAD"))
	handle("POST /v1/runs/{runId}/cancel", h.cancelRun)
	handle("/v1/runs/{runId}/cancel", methodNotAllowed("POST"))
	h.scheduleRoutes(handle)
	handle("GET /v1/health", h.health)
	handle("/v1/health", methodNotAllowed("GET, HEAD"))
	handle("GET /v1/openapi.json", openapi.Handler().ServeHTTP)
	handle("/v1/openapi.json", methodNotAllowed("GET, HEAD"))
	handle("GET /v1/tenants/{tenant}/usage", h.usage)
	handle("/v1/tenants/{tenant}/usage", methodNotAllowed("GET, HEAD"))
	handle("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Message: "no such endpoint: " + r.URL.Path})
	})
}

// ServeHTTP serves the API.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	timeout := h.cfg.RequestTimeout
	if r.URL.Path == eventsPath {
		// A stream lasts until the caller leaves (or the function's own
		// request timeout).
		timeout = 24 * time.Hour
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	if h.cfg.Project != "" {
		ctx = logs.WithTrace(ctx, r, h.cfg.Project)
	}
	who, e := h.authenticate(r.WithContext(ctx))
	if e != nil {
		w.Header().Set("WWW-Authenticate", "Bearer")
		h.fail(w, r, e)
		return
	}
	ctx = auth.WithPrincipal(ctx, who)
	h.mux.ServeHTTP(w, r.WithContext(ctx))
}

func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, &api.Error{Code: api.CodeMethodNotAllowed,
			Message: fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow)})
	}
}

// apiError is an error answer: a status and its body.
type apiError struct {
	status int
	body   api.Error
}

func (e *apiError) Error() string { return e.body.Code + ": " + e.body.Message }

func invalid(field, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, body: api.Error{Code: api.CodeInvalidRequest, Field: field, Message: fmt.Sprintf(format, args...)}}
}

func fromFieldError(prefix string, fe *task.FieldError) *apiError {
	return invalid(prefix+fe.Field, "%s", fe.Message)
}

func tooLarge(field string, limit int64, what string) *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, body: api.Error{Code: api.CodePayloadTooLarge, Field: field, LimitBytes: limit,
		Message: fmt.Sprintf("%s exceeds the limit of %d bytes", what, limit)}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, body *api.Error) {
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", fmt.Sprint(retryAfter))
	}
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", fmt.Sprint(quotaRetryAfter))
	}
	writeJSON(w, status, body)
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, e *apiError) {
	writeError(w, e.status, &e.body)
}

// storeError answers a store error: 404 for ErrNotFound, 503 with
// Retry-After for ErrUnavailable (and a request whose context ended), 500
// otherwise.
func (h *handler) storeError(w http.ResponseWriter, r *http.Request, err error, attrs ...any) {
	status, body := h.storeStatus(r, err, attrs...)
	writeError(w, status, body)
}

func (h *handler) storeStatus(r *http.Request, err error, attrs ...any) (int, *api.Error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound, &api.Error{Code: api.CodeTaskNotFound, Message: "no such task"}
	case errors.Is(err, quota.ErrExceeded):
		return http.StatusTooManyRequests, &api.Error{Code: api.CodeQuotaExceeded, Message: err.Error() + "; retry later"}
	case errors.Is(err, store.ErrUnavailable), r.Context().Err() != nil:
		h.log.WarnContext(r.Context(), "firestore unavailable", append(attrs, "error", err)...)
		return http.StatusServiceUnavailable, &api.Error{Code: api.CodeUnavailable, Message: "the task store is unavailable; retry the same request"}
	}
	h.log.ErrorContext(r.Context(), "control API failed", append(attrs, "error", err)...)
	return http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: "internal error"}
}

func taskAttrs(t *task.Task) []any {
	return []any{"taskId", t.ID, "attempt", t.Attempt, "tenantId", t.TenantID}
}
