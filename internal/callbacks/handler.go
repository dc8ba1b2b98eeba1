package callbacks

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/service"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/telemetry"
)

// Defaults of Config.
const (
	// DefaultMaxBodyBytes caps a callback body (413 above it).
	DefaultMaxBodyBytes = 1 << 20
	// DefaultStoreTimeout bounds the one transaction of a callback; when it
	// runs out the callback answers 503 unavailable.
	DefaultStoreTimeout = 20 * time.Second
	// DefaultFollowUpTimeout bounds the enqueue of a scheduled retry.
	DefaultFollowUpTimeout = 10 * time.Second
	// DefaultRetryAfter is the Retry-After of a 503 answer.
	DefaultRetryAfter = time.Second
)

// PathPrefix is where the callbacks live: PathPrefix + "{taskId}/{kind}".
// The handler also accepts the path behind any prefix (a Cloud Functions
// URL that keeps the function name, a reverse proxy), so it can be mounted
// anywhere.
const PathPrefix = "/v1/tasks/"

// Enqueuer performs what a committed result asks for after the commit
// (enqueue a retry). *enqueue.Enqueuer satisfies it.
type Enqueuer interface {
	FollowUp(ctx context.Context, r task.Result) error
}

// Config configures the callbacks handler.
type Config struct {
	// Store is the task state (required).
	Store *store.Store
	// Keys verifies task tokens and signs refreshed ones (required).
	Keys *auth.KeyRing
	// Enqueuer enqueues the attempts that callbacks schedule (a retry after
	// FAILED, or after a lease found expired). Nil leaves them to the
	// sweeper's re-drive.
	Enqueuer Enqueuer
	// Now is the server clock; defaults to time.Now.
	Now func() time.Time
	// Logger receives one line per callback; defaults to logs.Default().
	// An accepted heartbeat answered CONTINUE, the bulk of the callbacks,
	// is logged at DEBUG unless LogHeartbeats, and an accepted started
	// answered CONTINUE unless LogStarted (both are counted in the metric
	// servo.callbacks either way).
	Logger *slog.Logger
	// LogHeartbeats logs accepted heartbeats at INFO, as every other
	// callback (SERVO_LOG_HEARTBEATS).
	LogHeartbeats bool
	// LogStarted logs accepted started callbacks at INFO
	// (SERVO_LOG_STARTED).
	LogStarted bool
	// MaxBodyBytes caps request bodies; defaults to DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Project is the Google Cloud project, for trace fields in logs.
	Project string
	// StoreTimeout bounds the transaction; defaults to DefaultStoreTimeout.
	StoreTimeout time.Duration
	// FollowUpTimeout bounds Enqueuer.FollowUp; defaults to
	// DefaultFollowUpTimeout.
	FollowUpTimeout time.Duration
	// RetryAfter is the Retry-After of 503 answers; defaults to
	// DefaultRetryAfter.
	RetryAfter time.Duration
}

type handler struct{ cfg Config }

// NewHandler returns the handler of POST /v1/tasks/{taskId}/started,
// /heartbeat and /completed. If cfg has no Store or Keys, it returns an
// error naming the field (a missing dependency, see internal/service).
func NewHandler(cfg Config) (http.Handler, error) {
	switch {
	case cfg.Store == nil:
		return nil, service.Missing("callbacks", "Config.Store")
	case cfg.Keys == nil:
		return nil, service.Missing("callbacks", "Config.Keys")
	}
	service.Defaults(&cfg.Now, &cfg.Logger)
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.StoreTimeout <= 0 {
		cfg.StoreTimeout = DefaultStoreTimeout
	}
	if cfg.FollowUpTimeout <= 0 {
		cfg.FollowUpTimeout = DefaultFollowUpTimeout
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	return instrument(&handler{cfg: cfg}), nil
}

// SplitPath returns the task id and callback kind of a callback path
// ".../v1/tasks/{taskId}/{kind}"; ok is false for any other path.
func SplitPath(path string) (taskID string, kind Kind, ok bool) {
	i := strings.LastIndex(path, PathPrefix)
	if i < 0 {
		return "", "", false
	}
	id, k, found := strings.Cut(path[i+len(PathPrefix):], "/")
	if !found || id == "" || strings.Contains(k, "/") {
		return "", "", false
	}
	if _, known := Kind(k).event(); !known {
		return "", "", false
	}
	return id, Kind(k), true
}

// exchange is one callback as it goes through the handler: what the log
// line and the answer are made of.
type exchange struct {
	now      time.Time
	taskID   string
	kind     Kind
	attempt  int
	tenantID string
	workerID string
	status   int
	resp     api.CallbackResponse
	header   http.Header
	// logged only
	followUpErr error
	storeErr    error
	alarm       bool // log at ERROR whatever the status
	// rpcs tallies the Firestore RPCs of the callback's transaction.
	rpcs *atomic.Int64
}

func (x *exchange) answer(status int, resp api.CallbackResponse) {
	x.status = status
	resp.ServerTime = x.now
	x.resp = resp
}

func (x *exchange) reject(status int, disp api.Disposition, code, msg string) {
	x.answer(status, api.CallbackResponse{Disposition: disp, Error: code, Message: msg})
}

// ServeHTTP runs the checks of docs/contract.md §4.5 in their order: path
// (404), method (405), content type (415), size (413), token (401), scope
// (403), body (400); then one transaction (store.Apply).
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	x := &exchange{now: h.cfg.Now().UTC(), header: w.Header()}
	ctx := logs.WithTrace(r.Context(), r, h.cfg.Project)
	h.serve(ctx, r, x)
	h.write(w, x)
	latency := time.Since(start)
	h.log(ctx, x, latency)
	h.observe(ctx, x, latency)
}

func (h *handler) serve(ctx context.Context, r *http.Request, x *exchange) {
	taskID, kind, ok := SplitPath(r.URL.Path)
	x.taskID, x.kind = taskID, kind
	if !ok {
		x.reject(http.StatusNotFound, api.Rejected, api.CodeNotFound, "no such callback; POST /v1/tasks/{taskId}/started, /heartbeat or /completed")
		return
	}
	if r.Method != http.MethodPost {
		x.header.Set("Allow", http.MethodPost)
		x.reject(http.StatusMethodNotAllowed, api.Rejected, api.CodeMethodNotAllowed, "use POST")
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		x.reject(http.StatusUnsupportedMediaType, api.Rejected, api.CodeUnsupportedMediaType, "Content-Type must be application/json")
		return
	}
	body, ok := h.readBody(r, x)
	if !ok {
		return
	}
	// Receipt time (docs/contract.md §5): the request is received once its
	// body is, however slowly it came; the token, the lease and every timer
	// are judged at that time.
	x.now = h.cfg.Now().UTC()
	claims, ok := h.verify(r, x)
	if !ok {
		return
	}
	x.attempt, x.tenantID = claims.Attempt, claims.TenantID
	req, decodeErr := DecodeRequest(kind, body)
	x.workerID = req.WorkerID
	// Scope: the token names this task, and the body (when it names an
	// attempt at all) the token's attempt. Checked before the body is
	// judged, so that a body for another attempt is 403 whatever else is
	// wrong with it.
	if claims.TaskID != taskID || (req.Attempt != 0 && req.Attempt != claims.Attempt) {
		x.reject(http.StatusForbidden, api.Rejected, api.CodeTokenScopeMismatch, "the task token is for another task or attempt")
		return
	}
	if decodeErr == nil {
		decodeErr = req.Validate()
	}
	if decodeErr != nil {
		x.answer(http.StatusBadRequest, api.CallbackResponse{Disposition: api.Rejected, Error: api.CodeInvalidRequest,
			Field: decodeErr.Field, Message: decodeErr.Error()})
		return
	}
	h.apply(ctx, x, claims, req)
}

// readBody reads at most MaxBodyBytes; more is 413.
func (h *handler) readBody(r *http.Request, x *exchange) ([]byte, bool) {
	limit := h.cfg.MaxBodyBytes
	if r.ContentLength <= limit {
		body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
		if err != nil {
			x.reject(http.StatusBadRequest, api.Rejected, api.CodeInvalidRequest, "could not read the body")
			x.resp.Field = "body"
			return nil, false
		}
		if int64(len(body)) <= limit {
			return body, true
		}
	}
	x.reject(http.StatusRequestEntityTooLarge, api.Rejected, api.CodePayloadTooLarge,
		"the body exceeds "+strconv.FormatInt(limit, 10)+" bytes")
	return nil, false
}

// verify checks the bearer token; it never reads the store.
func (h *handler) verify(r *http.Request, x *exchange) (*auth.Claims, bool) {
	const bearer = "bearer "
	authz := r.Header.Get("Authorization")
	if len(authz) <= len(bearer) || !strings.EqualFold(authz[:len(bearer)], bearer) {
		x.header.Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		x.reject(http.StatusUnauthorized, api.Rejected, api.CodeInvalidToken, "Authorization: Bearer <task token> is required")
		return nil, false
	}
	claims, err := h.cfg.Keys.Verify(strings.TrimSpace(authz[len(bearer):]), x.now)
	var early *auth.EarlyError
	switch {
	case err == nil:
		return claims, true
	case errors.As(err, &early):
		// A delivery ahead of its schedule (a retry's Cloud Task run now):
		// not the worker's fault, and not to be dropped. It retries once
		// the token is valid.
		wait := max(time.Second, early.NotBefore.Sub(x.now))
		x.header.Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
		x.reject(http.StatusServiceUnavailable, api.Retry, api.CodeTooEarly,
			"the task token is valid from "+early.NotBefore.UTC().Format(time.RFC3339)+"; retry then with the same body")
	case errors.Is(err, auth.ErrTaskTokenExpired):
		x.header.Set("WWW-Authenticate", `Bearer error="invalid_token", error_description="expired"`)
		x.reject(http.StatusUnauthorized, api.Rejected, api.CodeTokenExpired, "the task token has expired")
	default:
		x.header.Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		// err's text is token-free by contract (auth.KeyRing.Verify).
		x.reject(http.StatusUnauthorized, api.Rejected, api.CodeInvalidToken, err.Error())
	}
	return nil, false
}

// apply runs the one transaction and maps its result to the answer.
func (h *handler) apply(ctx context.Context, x *exchange, claims *auth.Claims, req Request) {
	kind, _ := req.Kind.event()
	ev := task.Event{
		Kind: kind, Attempt: claims.Attempt, Now: x.now, WorkerID: req.WorkerID,
		TenantID: claims.TenantID, WorkspaceID: claims.WorkspaceID, RunID: claims.RunID,
		Heartbeat: req.Heartbeat, Completed: req.Completed, Jitter: rand.Float64(),
	}
	// A worker that hangs up must not abort the transaction half way.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.StoreTimeout)
	tctx, x.rpcs = telemetry.CountRPCs(tctx)
	res, err := h.cfg.Store.Apply(tctx, x.taskID, ev)
	cancel()
	if err != nil {
		x.storeErr = err
		switch {
		case errors.Is(err, store.ErrNotFound):
			x.reject(http.StatusNotFound, api.Rejected, api.CodeTaskNotFound, "no such task")
			return
		case errors.Is(err, store.ErrRejected):
			// Firestore refused the write as invalid: the same body would
			// fail again. Nothing was written; the lease runs out and the
			// sweeper retries the task.
			x.reject(http.StatusInternalServerError, api.Rejected, api.CodeInternal, "the task store refused the write")
			return
		}
		// ErrUnavailable (Firestore errors, contention outlasting the
		// retries, the store timeout) and anything else: the worker retries
		// the same body, which is safe whatever happened.
		x.header.Set("Retry-After", strconv.Itoa(int(max(1, h.cfg.RetryAfter.Round(time.Second)/time.Second))))
		x.reject(http.StatusServiceUnavailable, api.Retry, api.CodeUnavailable, "the task store is unavailable; retry with the same body")
		return
	}
	if res.Write && (res.Enqueue || res.Dequeue || res.CancelExecution != "") && h.cfg.Enqueuer != nil {
		// Committed: the retry exists in Firestore. Enqueue it before
		// answering; a failure changes nothing in the answer, since the
		// sweeper re-drives a QUEUED attempt that Cloud Tasks never got.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.FollowUpTimeout)
		x.followUpErr = h.cfg.Enqueuer.FollowUp(fctx, res)
		cancel()
	}
	t := &res.Task
	if rej := res.Rejection; rej != nil {
		// A token for this task but another tenant, workspace or run is
		// unreachable with tokens this control plane signed (task ids are
		// unique, and the signer copies the task's scope): the machine
		// refuses it before any write, and it is logged loudly.
		x.alarm = rej.Code == api.CodeTokenScopeMismatch
		h.rejection(x, rej)
		return
	}
	resp := api.CallbackResponse{Acknowledged: true, Disposition: api.Continue}
	switch req.Kind {
	case KindStarted:
		resp.NextHeartbeatInMs = task.NextHeartbeatIn(t, x.now, claims.ExpiresAtTime(), claims.Lifetime()).Milliseconds()
	case KindHeartbeat:
		should := res.ShouldCancel
		resp.ShouldCancel, resp.CancelReason = &should, res.CancelReason
		exp, lifetime := claims.ExpiresAtTime(), claims.Lifetime()
		if ttl := h.refreshToken(x, claims, t, &resp); ttl > 0 {
			exp, lifetime = *resp.TokenExpiresAt, ttl
		}
		resp.NextHeartbeatInMs = task.NextHeartbeatIn(t, x.now, exp, lifetime).Milliseconds()
	case KindCompleted:
		resp.Disposition = api.Committed
		resp.FinalState, resp.RetryScheduled, resp.NextAttempt = res.FinalState, res.RetryScheduled, res.NextAttempt
	}
	x.answer(http.StatusOK, resp)
}

// rejection maps a state-machine refusal to its row of docs/contract.md
// §4.4.
func (h *handler) rejection(x *exchange, rej *task.Rejection) {
	resp := api.CallbackResponse{Disposition: api.Cancel, Error: rej.Code, Message: rej.Message}
	status := http.StatusConflict
	switch rej.Code {
	case api.CodeTaskAlreadyTerminal:
		resp.State = rej.State
	case api.CodeAttemptMismatch:
		resp.ExpectedAttempt, resp.ReceivedAttempt = rej.Expected, rej.Received
	case api.CodeAttemptAlreadyStarted:
	case api.CodeTaskExpired:
		status = http.StatusGone
	case api.CodeCompletionConflict:
		resp.Disposition = api.Rejected
	case api.CodeTokenScopeMismatch:
		status, resp.Disposition = http.StatusForbidden, api.Rejected
	default:
		resp.Disposition = api.Rejected
	}
	x.answer(status, resp)
}

// refreshToken signs a fresh token for the same scope when the one the
// worker used would expire before the next heartbeat could arrive: less
// than task.RefreshBefore (a quarter of its lifetime, or two heartbeat
// intervals when that is more) left. It returns the fresh token's
// lifetime, 0 when it signed none.
func (h *handler) refreshToken(x *exchange, claims *auth.Claims, t *task.Task, resp *api.CallbackResponse) time.Duration {
	interval := t.Timing.HeartbeatInterval()
	if claims.ExpiresAtTime().Sub(x.now) >= task.RefreshBefore(claims.Lifetime(), interval) {
		return 0
	}
	ttl := task.TokenTTL(x.now, t.Deadline, interval)
	tok, expires, err := h.cfg.Keys.Sign(claims.Scope, ttl, x.now)
	if err != nil {
		h.cfg.Logger.ErrorContext(context.Background(), "could not refresh the task token", "taskId", t.ID, "attempt", claims.Attempt, "tenantId", t.TenantID, "error", err)
		return 0
	}
	expires = expires.UTC()
	resp.TaskToken, resp.TokenExpiresAt = tok, &expires
	return ttl
}

func (h *handler) write(w http.ResponseWriter, x *exchange) {
	body, err := json.Marshal(x.resp)
	if err != nil { // cannot happen: the response has only plain fields
		body = []byte(`{"acknowledged":false,"disposition":"RETRY","error":"unavailable"}`)
		x.status = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(x.status)
	_, _ = w.Write(append(body, '\n'))
}

// log writes the one line of a callback: never the token, never the body.
func (h *handler) log(ctx context.Context, x *exchange, latency time.Duration) {
	level := slog.LevelInfo
	switch {
	case x.alarm || x.status >= 500:
		level = slog.LevelError
	case x.status >= 400:
		level = slog.LevelWarn
	case x.kind == KindHeartbeat && x.resp.Disposition == api.Continue && !h.cfg.LogHeartbeats,
		x.kind == KindStarted && x.resp.Disposition == api.Continue && !h.cfg.LogStarted:
		level = slog.LevelDebug
	}
	attrs := []slog.Attr{
		slog.String("taskId", x.taskID),
		slog.Int("attempt", x.attempt),
		slog.String("tenantId", x.tenantID),
		slog.String("kind", string(x.kind)),
		slog.Int("status", x.status),
		slog.String("disposition", string(x.resp.Disposition)),
		slog.Float64("latencyMs", float64(latency.Microseconds())/1000),
	}
	if x.workerID != "" {
		attrs = append(attrs, slog.String("workerId", x.workerID))
	}
	if x.resp.Error != "" {
		attrs = append(attrs, slog.String("error", x.resp.Error))
	}
	if x.resp.Field != "" {
		attrs = append(attrs, slog.String("field", x.resp.Field))
	}
	if x.resp.FinalState != "" {
		attrs = append(attrs, slog.String("finalState", string(x.resp.FinalState)))
	}
	if x.resp.RetryScheduled {
		attrs = append(attrs, slog.Int("nextAttempt", x.resp.NextAttempt))
	}
	if x.resp.ShouldCancel != nil && *x.resp.ShouldCancel {
		attrs = append(attrs, slog.Bool("shouldCancel", true))
	}
	if x.resp.TaskToken != "" {
		attrs = append(attrs, slog.Bool("tokenRefreshed", true))
	}
	if x.storeErr != nil {
		attrs = append(attrs, slog.String("storeError", x.storeErr.Error()))
	}
	if x.followUpErr != nil {
		attrs = append(attrs, slog.String("followUpError", x.followUpErr.Error()))
	}
	h.cfg.Logger.LogAttrs(ctx, level, "callback", attrs...)
}
