package pull

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/service"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// Defaults of Config.
const (
	// MaxBodyBytes bounds a claim's body.
	MaxBodyBytes = 4 << 10
	// RetryAfter is the Retry-After of a 503 answer.
	RetryAfter = time.Second
	// idleBackoff is the pause between two empty receives of one claim
	// (the emulator answers an empty pull at once).
	idleBackoff = 100 * time.Millisecond
	// pullSlack is how long a pull may outlive the claim's wait.
	pullSlack = 500 * time.Millisecond
)

// Config configures the claim handler.
type Config struct {
	// Store applies the claim (required).
	Store *store.Store
	// Enqueuer knows the pools (its Workers) and signs the envelope's
	// token (required).
	Enqueuer *enqueue.Enqueuer
	// Transport receives the pools' messages (required).
	Transport *Transport
	// Identity verifies the caller (required): IDToken in production,
	// DevIdentity in the local stack.
	Identity Identity
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
	// Project, for trace correlation in logs.
	Project string
}

// Handler serves POST /v1/pools/{pool}/claim.
type Handler struct{ cfg Config }

// NewHandler returns the claim handler; when a required field of cfg is
// missing, it returns an error naming it, which wraps
// service.ErrMissingDependency.
func NewHandler(cfg Config) (*Handler, error) {
	switch {
	case cfg.Store == nil:
		return nil, service.Missing("pull", "Config.Store")
	case cfg.Enqueuer == nil:
		return nil, service.Missing("pull", "Config.Enqueuer")
	case cfg.Transport == nil:
		return nil, service.Missing("pull", "Config.Transport")
	case cfg.Identity == nil:
		return nil, service.Missing("pull", "Config.Identity")
	}
	cfg.Now, cfg.Logger = service.Clock(cfg.Now), cmp.Or(cfg.Logger, slog.Default())
	return &Handler{cfg: cfg}, nil
}

// ServeHTTP answers a claim. The pool is the path value "pool" (the route
// is /v1/pools/{pool}/claim).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := logs.WithTrace(r.Context(), r, h.cfg.Project)
	pool := r.PathValue("pool")
	log := h.cfg.Logger.With("pool", pool)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.fail(w, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "", "use POST")
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		h.fail(w, http.StatusUnsupportedMediaType, api.CodeUnsupportedMediaType, "", "the body must be application/json")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		h.fail(w, http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge, "", fmt.Sprintf("the body exceeds %d bytes", MaxBodyBytes))
		return
	}
	who, err := h.cfg.Identity(r)
	if err != nil {
		log.WarnContext(ctx, "claim refused: the caller's identity could not be verified", "error", err)
		h.fail(w, http.StatusUnauthorized, api.CodeUnauthenticated, "", "the caller's identity could not be verified")
		return
	}
	// An unknown pool is answered as a pool the caller may not claim
	// from, so that pool names cannot be probed.
	refuse := func(pool, field string) {
		log.WarnContext(ctx, "claim refused: no such pull pool, or the caller is not one of its service accounts", "caller", who, "refusedPool", truncate(pool, 64))
		code, status := api.CodePermissionDenied, http.StatusForbidden
		if who == "" {
			code, status = api.CodeUnauthenticated, http.StatusUnauthorized
		}
		h.fail(w, status, code, field, "the caller may not claim from pool "+truncate(pool, 64))
	}
	if !h.mayClaim(pool, who) {
		refuse(pool, "")
		return
	}
	var req api.ClaimRequest
	if field, msg := decodeClaim(body, &req); msg != "" {
		h.fail(w, http.StatusBadRequest, api.CodeInvalidRequest, field, msg)
		return
	}
	if fe := task.ValidateClaim(req); fe != nil {
		h.fail(w, http.StatusBadRequest, api.CodeInvalidRequest, fe.Field, fe.Message)
		return
	}
	if fe := task.ValidateThenPools(pool, req.ThenPools); fe != nil {
		h.fail(w, http.StatusBadRequest, api.CodeInvalidRequest, fe.Field, fe.Message)
		return
	}
	for i, p := range req.ThenPools {
		if !h.mayClaim(p, who) {
			refuse(p, fmt.Sprintf("thenPools[%d]", i))
			return
		}
	}
	pools := append([]string{pool}, req.ThenPools...)
	env, err := h.claim(ctx, log.With("workerId", req.WorkerID), pools, req)
	if err != nil {
		log.WarnContext(ctx, "claim failed; the worker retries", "workerId", req.WorkerID, "error", err)
		w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
		h.fail(w, http.StatusServiceUnavailable, api.CodeUnavailable, "", "the store or the pool's transport is unavailable; retry")
		return
	}
	if env != nil && ctx.Err() != nil {
		// The claimer left (a worker stopping: docs/contract.md §10) as
		// its claim committed: nobody will run the attempt, so it is
		// handed back now rather than when its lease runs out.
		h.handBack(context.WithoutCancel(ctx), log, req.WorkerID, env)
		return
	}
	h.write(w, http.StatusOK, api.ClaimResponse{Claimed: env != nil, Envelope: env, Disposition: api.Continue})
}

// handBack ends an attempt claimed for a caller that left before its
// answer: FAILED/INFRASTRUCTURE, retryable, as the worker's SDK reports an
// attempt claimed as it stops, so the task is retried after its backoff.
func (h *Handler) handBack(ctx context.Context, log *slog.Logger, workerID string, env *api.Envelope) {
	log = log.With("taskId", env.TaskID, "attempt", env.Attempt, "tenantId", env.TenantID, "workerId", workerID)
	retryable := true
	res, err := h.cfg.Store.Apply(ctx, env.TaskID, task.Event{
		Kind: task.EventCompleted, Attempt: env.Attempt, WorkerID: workerID, Now: h.cfg.Now().UTC(), Jitter: rand.Float64(),
		Completed: &api.CompletedRequest{Attempt: env.Attempt, WorkerID: workerID, Outcome: api.OutcomeFailed,
			Error: &api.ErrorInfo{Category: api.CategoryInfrastructure, Retryable: &retryable,
				Message: "claimed as the claimer left (a stopping worker): not started, handed back by Servo"}},
	})
	if err != nil {
		log.WarnContext(ctx, "could not hand back an attempt claimed after its claimer left; its lease expiry retries it", "error", err)
		return
	}
	log.InfoContext(ctx, "handed back an attempt claimed after its claimer left", "state", res.Task.State)
	if err := h.cfg.Enqueuer.FollowUp(ctx, res); err != nil {
		log.WarnContext(ctx, "handed back, but its retry could not be enqueued; the sweeper re-drives it", "error", err)
	}
}

// mayClaim reports whether who may claim from pool: a pull pool whose
// service accounts (when it names any) include who.
func (h *Handler) mayClaim(pool, who string) bool {
	wk, err := h.cfg.Enqueuer.Workers().Lookup(pool)
	return err == nil && wk.Pull && (len(wk.ServiceAccounts) == 0 || slices.Contains(wk.ServiceAccounts, who))
}

// claim receives the pools' messages until one starts an attempt for the
// worker or the wait runs out (nil, nil), the first pool's first
// (receiveFirst). Messages whose attempt is not claimable are acknowledged
// and dropped; a retry not due yet is held until it is; a message is
// acknowledged only after the claim commits.
func (h *Handler) claim(ctx context.Context, log *slog.Logger, pools []string, req api.ClaimRequest) (*api.Envelope, error) {
	waitCtx, cancel := context.WithTimeout(ctx, task.ClaimWait(req))
	defer cancel()
	// A pull cancelled just as Pub/Sub hands it a message hides that
	// message for the ack deadline; so a pull may outlive the wait by
	// pullSlack: a message it brings late is still settled and answered,
	// or handed back at once if the caller has gone, rather than lost for
	// the ack deadline.
	pullCtx, cancelPull := context.WithTimeout(context.WithoutCancel(ctx), task.ClaimWait(req)+pullSlack)
	defer cancelPull()
	for {
		i, m, err := h.receiveFirst(pullCtx, log, pools)
		if err != nil {
			return nil, err
		}
		pool := pools[i]
		if m != nil && ctx.Err() != nil {
			if herr := h.cfg.Transport.hold(context.WithoutCancel(ctx), pool, m.ackID, 0); herr != nil {
				log.WarnContext(ctx, "could not hand back a message that came after the caller left", "error", herr)
			}
			return nil, nil
		}
		if m == nil {
			if waitCtx.Err() != nil {
				return nil, nil
			}
			select {
			case <-waitCtx.Done():
				return nil, nil
			case <-time.After(idleBackoff):
			}
			continue
		}
		env, err := h.settle(context.WithoutCancel(ctx), log, pool, req.WorkerID, m)
		if env != nil {
			claimCommitted(ctx, pool)
		}
		if env != nil || err != nil {
			return env, err
		}
		if waitCtx.Err() != nil {
			return nil, nil
		}
	}
}

// receiveFirst pulls at once from every pool and returns the message of
// the first pool, in the claim's order, that had one, and that pool's
// index. Once a pool has brought a message, the pools before it get
// pickWindow to bring theirs. Every other message is handed back at once
// (hold 0), those of pulls still open when it returns too: such a pull
// goes on, to its deadline, and hands back what it brings, rather than
// being cancelled (a pull cancelled just as Pub/Sub hands it a message
// hides that message for the ack deadline). One pool pulls as before.
func (h *Handler) receiveFirst(ctx context.Context, log *slog.Logger, pools []string) (int, *received, error) {
	if len(pools) == 1 {
		m, err := h.cfg.Transport.receive(ctx, pools[0])
		return 0, m, err
	}
	type result struct {
		m   *received
		err error
	}
	res := make([]result, len(pools))
	done := make(chan int, len(pools))
	// The pulls outlive this call, not the claim's pull deadline.
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if dl, ok := ctx.Deadline(); ok {
		pctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), dl)
	}
	for i, p := range pools {
		go func() {
			m, err := h.cfg.Transport.receive(pctx, p)
			res[i] = result{m, err}
			done <- i
		}()
	}
	handBack := func(i int) {
		if m := res[i].m; m != nil {
			if err := h.cfg.Transport.hold(context.WithoutCancel(ctx), pools[i], m.ackID, 0); err != nil {
				log.WarnContext(ctx, "could not hand back a lower pool's message; Pub/Sub redelivers it after its ack deadline", "pool", pools[i], "error", err)
			}
		}
	}
	finished, n, best := make([]bool, len(pools)), 0, -1
	var window <-chan time.Time
wait:
	for n < len(pools) && (best < 0 || slices.Contains(finished[:best], false)) {
		select {
		case i := <-done:
			n++
			finished[i] = true
			if res[i].m != nil && (best < 0 || i < best) {
				best = i
			}
			if best >= 0 && window == nil {
				window = time.After(pickWindow)
			}
		case <-window:
			break wait
		}
	}
	var errs []error
	for i := range pools {
		switch {
		case !finished[i] || i == best:
		case res[i].err != nil:
			errs = append(errs, res[i].err)
		default:
			handBack(i)
		}
	}
	go func(open int) {
		for range open {
			handBack(<-done)
		}
		cancel()
	}(len(pools) - n)
	if best >= 0 {
		return best, res[best].m, nil
	}
	return 0, nil, errors.Join(errs...)
}

// pickWindow is how long receiveFirst waits, once a pool brought a
// message, for the pools before it.
const pickWindow = 100 * time.Millisecond

// claimHook, when set (a test's), is called with the claim request's
// context once an attempt is claimed for it, before the answer: the
// claimer may leave there.
var claimHook atomic.Pointer[func(ctx context.Context, pool string)]

func claimCommitted(ctx context.Context, pool string) {
	if f := claimHook.Load(); f != nil {
		(*f)(ctx, pool)
	}
}

// settle decides one message: claim it (its envelope), drop it, or hold it
// (nil, nil), or hand it back on a store failure (the error).
func (h *Handler) settle(ctx context.Context, log *slog.Logger, pool, workerID string, m *received) (*api.Envelope, error) {
	settleCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	now := h.cfg.Now().UTC()
	drop := func(why string, attrs ...any) {
		if err := h.cfg.Transport.ack(settleCtx, pool, m.ackID); err != nil {
			log.WarnContext(ctx, "could not acknowledge a dropped message; it comes back and is dropped again", "error", err)
		}
		log.InfoContext(ctx, "pool message dropped: "+why, attrs...)
	}
	if m.bad != nil {
		drop("not a pool message", "error", m.bad)
		return nil, nil
	}
	attrs := []any{"taskId", m.msg.TaskID, "attempt", m.msg.Attempt, "tenantId", m.msg.TenantID}
	if nb := m.msg.NotBefore; nb != nil && nb.After(now) {
		// A retry's backoff: Pub/Sub has no delivery time, so the message
		// is hidden until it is due.
		if err := h.cfg.Transport.hold(settleCtx, pool, m.ackID, nb.Sub(now)); err != nil {
			log.WarnContext(ctx, "could not hold a retry that is not due yet", append(attrs, "error", err)...)
		}
		return nil, nil
	}
	res, err := h.cfg.Store.Apply(settleCtx, m.msg.TaskID, task.Event{Kind: task.EventClaimed, Attempt: m.msg.Attempt, WorkerID: workerID, Now: now})
	switch {
	case errors.Is(err, store.ErrNotFound):
		drop("no such task", attrs...)
		return nil, nil
	case err != nil:
		// Not committed: hand the message back for the next claim.
		if herr := h.cfg.Transport.hold(settleCtx, pool, m.ackID, 0); herr != nil {
			log.WarnContext(ctx, "could not hand back a message; Pub/Sub redelivers it after its ack deadline", append(attrs, "error", herr)...)
		}
		return nil, fmt.Errorf("pull: claim %s attempt %d: %w", m.msg.TaskID, m.msg.Attempt, err)
	case res.Rejection != nil:
		drop("its attempt is not claimable", append(attrs, "code", res.Rejection.Code, "state", res.Task.State)...)
		return nil, nil
	}
	env, _, err := h.cfg.Enqueuer.Envelope(&res.Task, now)
	if err != nil {
		// Committed but no envelope: the claimer never runs it; the lease
		// expires and the sweeper retries the task.
		drop("claimed, but its envelope could not be built", append(attrs, "error", err)...)
		return nil, fmt.Errorf("pull: envelope of %s: %w", m.msg.TaskID, err)
	}
	if !m.publishedAt.IsZero() {
		env.EnqueuedAt = m.publishedAt.UTC()
	}
	if err := h.cfg.Transport.ack(settleCtx, pool, m.ackID); err != nil {
		// Committed: the redelivery finds the attempt started and is dropped.
		log.WarnContext(ctx, "claimed, but the message could not be acknowledged; its redelivery is dropped", append(attrs, "error", err)...)
	}
	log.InfoContext(ctx, "attempt claimed", attrs...)
	return &env, nil
}

func (h *Handler) fail(w http.ResponseWriter, status int, code, field, msg string) {
	d := api.Rejected
	if status == http.StatusServiceUnavailable {
		d = api.Retry
	}
	h.write(w, status, api.ClaimResponse{Disposition: d, Error: code, Field: field, Message: msg})
}

func (h *Handler) write(w http.ResponseWriter, status int, resp api.ClaimResponse) {
	resp.ServerTime = h.cfg.Now().UTC()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(resp)
}

// decodeClaim decodes a claim body: one JSON object with known fields and
// nothing after it, and a workerId without control characters (it goes
// into logs and the attempt). It returns the field at fault and a message
// ("" when the claim is well formed).
func decodeClaim(body []byte, req *api.ClaimRequest) (field, msg string) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		return jsonField(err), "the body is not a claim: " + err.Error()
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", "the body is not a claim: data after its JSON object"
	}
	if i := strings.IndexFunc(req.WorkerID, unicode.IsControl); i >= 0 {
		return "workerId", fmt.Sprintf("must not contain control characters (one at byte %d)", i)
	}
	return "", ""
}

// jsonField names the field a decoding error is about, if any.
func jsonField(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Field
	}
	var msg = err.Error()
	const unknown = `json: unknown field "`
	if i := bytes.Index([]byte(msg), []byte(unknown)); i >= 0 {
		rest := msg[i+len(unknown):]
		if j := bytes.IndexByte([]byte(rest), '"'); j >= 0 {
			return rest[:j]
		}
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ClaimPath is the claim route, with the pool as path value "pool".
const ClaimPath = "/v1/pools/{pool}/claim"
