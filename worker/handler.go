package worker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/spanattr"
)

// Func does the work of one attempt. It returns the output (JSON-encoded
// into `completed`; nil for none; a json.RawMessage is sent as is) or an
// error, categorised with [Error] (see [UserCode], [DataQuality], ...).
//
// ctx ends when Servo asks the attempt to stop: context.Cause(ctx) is then
// a [*CancelledError] (Servo wants a graceful stop: return soon, the SDK
// reports CANCELLED with the last checkpoint), a [*LeaseLostError] or a
// [*RejectedError] (the attempt has no authority any more: stop at once,
// make no side effects; nothing is reported), or [ErrDeadlineExceeded]
// (the task's deadline passed). ctx does not end when Cloud Tasks closes the
// delivery's connection: the attempt's fate is Servo's to decide.
//
// A Func must honour ctx: the delivery is answered only after it returns. A
// panic in the Func's goroutine is recovered and reported as
// FAILED/USER_CODE with the stack; a panic in a goroutine it starts is not
// (it crashes the process, and Servo's lease expiry retries the attempt).
type Func func(ctx context.Context, t *Task) (any, error)

// MaxEnvelopeBytes bounds a delivery's body (Cloud Tasks tasks are at most
// 1 MiB).
const MaxEnvelopeBytes = 1 << 20

const userAgent = "servo-worker-go/1"

// Defaults of the options.
const (
	DefaultRequestTimeout   = 30 * time.Second
	DefaultBackoffInitial   = 250 * time.Millisecond
	DefaultBackoffMax       = 15 * time.Second
	DefaultStartRetryWindow = time.Minute
)

type config struct {
	workerID         string
	logger           *slog.Logger
	client           *http.Client
	requestTimeout   time.Duration
	backoffInitial   time.Duration
	backoffMax       time.Duration
	startRetryWindow time.Duration
	deliveryCheck    func(*http.Request) error
	tracerProvider   trace.TracerProvider
	meterProvider    metric.MeterProvider
	project          string
	now              func() time.Time
}

// Option configures [Handler].
type Option func(*config)

// WithWorkerID sets the worker id reported to Servo. It must be unique per
// process (Servo tells duplicate deliveries apart by it) and at most 256
// bytes. The default is the Cloud Run revision (K_REVISION) and/or host
// name plus a random suffix, drawn once per Handler.
func WithWorkerID(id string) Option { return func(c *config) { c.workerID = id } }

// WithLogger sets the logger (default NewLogger(os.Stderr, slog.LevelInfo): JSON lines for Cloud
// Logging on stderr).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// NewLogger returns a JSON logger in Cloud Logging's shape ("severity",
// "message", "time", and the trace fields of the line's span), writing to
// w: the SDK's default logger is NewLogger(os.Stderr, slog.LevelInfo).
func NewLogger(w io.Writer, level slog.Leveler) *slog.Logger { return logs.New(w, level) }

// WithHTTPClient sets the client for callbacks (default: a client with
// http.DefaultTransport's settings but 64 idle connections kept per host,
// shared by the process's handlers; per-request timeouts come from
// WithRequestTimeout).
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.client = hc } }

// WithRequestTimeout bounds each callback request; a request that times
// out is retried like a transport error (default DefaultRequestTimeout).
// Keep it above the callbacks' store timeout (20 s), after which Servo
// answers 503 itself.
func WithRequestTimeout(d time.Duration) Option { return func(c *config) { c.requestTimeout = d } }

// WithRetryBackoff sets the exponential backoff of callback retries: the
// first delay and the cap (defaults DefaultBackoffInitial,
// DefaultBackoffMax); each delay is jittered uniformly in [d/2, d).
func WithRetryBackoff(initial, maxDelay time.Duration) Option {
	return func(c *config) { c.backoffInitial, c.backoffMax = initial, maxDelay }
}

// WithStartRetryWindow bounds how long `started` is retried while Servo
// cannot be reached before the delivery is answered 503 so that Cloud Tasks
// redelivers it later (default DefaultStartRetryWindow; never beyond the
// token's expiry). `heartbeat` and `completed` are retried until the token
// expires.
func WithStartRetryWindow(d time.Duration) Option {
	return func(c *config) { c.startRetryWindow = d }
}

// WithDeliveryCheck makes the handler answer 401 to every delivery for
// which check returns an error, before reading its body. Package
// worker/googleauth's VerifyOIDC is this option with a check of the Cloud
// Tasks OIDC token. Off by default: Cloud Run's IAM invoker check already
// verifies that token; turn it on when the service allows unauthenticated
// invocations or runs elsewhere.
func WithDeliveryCheck(check func(r *http.Request) error) Option {
	return func(c *config) { c.deliveryCheck = check }
}

// Handler returns the http.Handler that receives Cloud Tasks pushes of a
// Servo envelope and runs fn for the attempt under the callback protocol
// (docs/contract.md §4, §14): `started` (fn is not run unless Servo answers
// CONTINUE), heartbeats while fn runs, then exactly one `completed`. See
// the package documentation for how deliveries are answered.
func Handler(fn Func, opts ...Option) http.Handler {
	if fn == nil {
		panic("worker: Handler needs a Func")
	}
	cfg := config{
		requestTimeout:   DefaultRequestTimeout,
		backoffInitial:   DefaultBackoffInitial,
		backoffMax:       DefaultBackoffMax,
		startRetryWindow: DefaultStartRetryWindow,
		project:          os.Getenv(logs.ProjectID),
		now:              time.Now,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.workerID == "" {
		cfg.workerID = defaultWorkerID()
	}
	cfg.workerID = truncate(cfg.workerID, 256)
	if cfg.logger == nil {
		cfg.logger = logs.Default()
	}
	if cfg.client == nil {
		cfg.client = &http.Client{Transport: defaultTransport()}
	}
	cfg.requestTimeout = max(cfg.requestTimeout, time.Millisecond)
	cfg.backoffInitial = max(cfg.backoffInitial, time.Millisecond)
	cfg.backoffMax = max(cfg.backoffMax, cfg.backoffInitial)
	return &handler{fn: fn, cfg: cfg, inst: newInstruments(cfg.tracerProvider, cfg.meterProvider), inflight: map[attemptKey]*run{}}
}

// defaultTransport is the callbacks' transport unless WithHTTPClient says
// otherwise: http.DefaultTransport's, keeping up to 64 idle connections to
// Servo where it keeps 2 per host, so that a worker running more attempts
// at once does not open a new connection (and, in production, make a TLS
// handshake) for most of its callbacks.
var defaultTransport = sync.OnceValue(func() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return t
})

func defaultWorkerID() string {
	var parts []string
	if rev := os.Getenv("K_REVISION"); rev != "" {
		parts = append(parts, rev)
	}
	if host, _ := os.Hostname(); host != "" && host != "localhost" {
		parts = append(parts, host)
	}
	if len(parts) == 0 {
		parts = append(parts, "worker")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return truncate(strings.Join(parts, "/"), 200) + "-" + hex.EncodeToString(b)
}

type attemptKey struct {
	taskID  string
	attempt int
}

type handler struct {
	fn   Func
	cfg  config
	inst *instruments

	mu       sync.Mutex
	inflight map[attemptKey]*run
}

// answer is the JSON body of the answer to Cloud Tasks (informational:
// Cloud Tasks only looks at the status).
type answer struct {
	TaskID   string `json:"taskId,omitempty"`
	Attempt  int    `json:"attempt,omitempty"`
	WorkerID string `json:"workerId"`
	// Result is one of the result* constants.
	Result     string    `json:"result"`
	Code       string    `json:"code,omitempty"`
	Outcome    string    `json:"outcome,omitempty"`
	FinalState api.State `json:"finalState,omitempty"`
	Detail     string    `json:"detail,omitempty"`
}

// Results in the answer to Cloud Tasks.
const (
	resultCommitted        = "committed"          // completed answered COMMITTED (200)
	resultDiscarded        = "discarded"          // completed answered CANCELLED (409/410) (200)
	resultNotStarted       = "not_started"        // started answered CANCELLED (409/410): fn not run (200)
	resultLeaseLost        = "lease_lost"         // authority lost while running; nothing reported (200)
	resultRejected         = "rejected"           // Servo answered REJECTED (200)
	resultUnreachable      = "servo_unreachable"  // Servo could not be reached (503)
	resultBadEnvelope      = "bad_envelope"       // 400
	resultUnauthenticated  = "unauthenticated"    // OIDC verification failed (401)
	resultMethodNotAllowed = "method_not_allowed" // 405
	resultEnvelopeTooLarge = "envelope_too_large" // 413
	resultClientGone       = "client_gone"        // a joined duplicate delivery whose caller left
	resultInternal         = "internal_error"     // a report could not be encoded (500; not expected)
)

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Continue the trace the delivery carries (W3C traceparent, put in the
	// Cloud Task's headers by Servo's enqueue).
	ctx := logs.WithTrace(spanattr.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header)), r, h.cfg.project)
	log := h.cfg.logger.With("workerId", h.cfg.workerID)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.write(w, http.StatusMethodNotAllowed, answer{Result: resultMethodNotAllowed})
		return
	}
	if h.cfg.deliveryCheck != nil {
		if err := h.cfg.deliveryCheck(r); err != nil {
			log.WarnContext(ctx, "delivery refused: its credentials were not accepted", "error", err)
			h.write(w, http.StatusUnauthorized, answer{Result: resultUnauthenticated, Detail: err.Error()})
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxEnvelopeBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			log.ErrorContext(ctx, "BAD DELIVERY: envelope too large; Cloud Tasks retries 4xx answers until the queue's retry limit", "limit", MaxEnvelopeBytes)
			h.write(w, http.StatusRequestEntityTooLarge, answer{Result: resultEnvelopeTooLarge})
			return
		}
		log.WarnContext(ctx, "could not read the delivery", "error", err)
		h.write(w, http.StatusBadRequest, answer{Result: resultBadEnvelope, Detail: err.Error()})
		return
	}
	env, err := parseEnvelope(body)
	if err != nil {
		// Cloud Tasks retries 4xx like 5xx: a broken envelope is redelivered
		// until the queue's retry limit. Say so loudly.
		log.ErrorContext(ctx, "BAD DELIVERY: not a valid Servo envelope; answering 400 (Cloud Tasks retries it until the queue's retry limit: check the queue's target and Servo's worker configuration)",
			"taskId", env.TaskID, "attempt", env.Attempt, "tenantId", env.TenantID, "error", err)
		h.write(w, http.StatusBadRequest, answer{TaskID: env.TaskID, Attempt: env.Attempt, Result: resultBadEnvelope, Detail: err.Error()})
		return
	}
	ctx, span := h.inst.tracer.Start(ctx, "process "+env.Worker, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(append(spanattr.TaskAttrs(env.TaskID, env.Attempt, env.TenantID, env.Worker),
			attribute.String("http.request.method", r.Method), attribute.String("servo.worker_id", h.cfg.workerID))...))
	status, ans := h.deliver(ctx, env)
	span.SetAttributes(attribute.Int("http.response.status_code", status), attribute.String("servo.result", ans.Result))
	if ans.Outcome != "" {
		span.SetAttributes(attribute.String("servo.outcome", ans.Outcome))
	}
	if status >= 500 {
		span.SetStatus(codes.Error, ans.Result)
	}
	span.End()
	h.write(w, status, ans)
}

func (h *handler) write(w http.ResponseWriter, status int, a answer) {
	a.WorkerID = h.cfg.workerID
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(a)
}

// deliver runs the attempt, or joins this process's run of it when Cloud
// Tasks delivers the same attempt again while it runs (dispatch deadline
// passed, or an at-least-once duplicate): the duplicate waits and gets the
// same answer, and the function runs once.
func (h *handler) deliver(ctx context.Context, env api.Envelope) (int, answer) {
	k := attemptKey{env.TaskID, env.Attempt}
	h.mu.Lock()
	if cur := h.inflight[k]; cur != nil {
		h.mu.Unlock()
		cur.log.InfoContext(ctx, "duplicate delivery of an attempt this worker is running; waiting for it")
		select {
		case <-cur.done:
			return cur.status, cur.ans
		case <-ctx.Done():
			return http.StatusServiceUnavailable, answer{TaskID: env.TaskID, Attempt: env.Attempt, Result: resultClientGone}
		}
	}
	ru := newRun(h, env)
	h.inflight[k] = ru
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.inflight, k)
		h.mu.Unlock()
		close(ru.done)
	}()
	ru.status, ru.ans = ru.execute(ctx)
	ru.ans.TaskID, ru.ans.Attempt = env.TaskID, env.Attempt
	ru.record(ctx)
	return ru.status, ru.ans
}

// record counts the executed attempt in the SDK's metrics, by its outcome
// when Servo committed it and by the answer's result otherwise.
func (ru *run) record(ctx context.Context) {
	outcome := ru.ans.Outcome
	if outcome == "" || ru.ans.Result != resultCommitted {
		outcome = cmp.Or(outcome+"/", "") + ru.ans.Result
	}
	ru.h.inst.recordRun(ctx, outcome, ru.category, ru.env.Attempt, ru.ranFor)
}

// parseEnvelope decodes and checks a delivery. On error the returned
// envelope holds whatever could be decoded, for the log line.
func parseEnvelope(body []byte) (api.Envelope, error) {
	var env api.Envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return env, fmt.Errorf("decode envelope: %w", err)
	}
	switch {
	case env.TaskID == "" || len(env.TaskID) > 256:
		return env, errors.New("taskId is required (at most 256 bytes)")
	case env.Attempt < 1:
		return env, errors.New("attempt must be a positive integer")
	case env.TaskToken == "":
		return env, errors.New("taskToken is required")
	case env.HeartbeatIntervalMs <= 0:
		return env, errors.New("heartbeatIntervalMs must be positive")
	}
	u, err := url.Parse(env.CallbackBaseURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return env, errors.New("callbackBaseUrl must be an absolute http(s) URL")
	}
	env.CallbackBaseURL = strings.TrimRight(env.CallbackBaseURL, "/")
	if env.TokenExpiresAt.IsZero() {
		exp, ok := tokenExpiry(env.TaskToken)
		if !ok {
			return env, errors.New("tokenExpiresAt is required")
		}
		env.TokenExpiresAt = exp
	}
	return env, nil
}

// tokenExpiry reads the exp claim of a JWT without verifying it (the
// worker cannot; it only needs to know how long to keep retrying).
func tokenExpiry(tok string) (time.Time, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var c struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(raw, &c) != nil || c.Exp <= 0 {
		return time.Time{}, false
	}
	return time.Unix(c.Exp, 0).UTC(), true
}
