package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/servo-dev/servo/api"
)

// Defaults of PullConfig.
const (
	DefaultPullConcurrency = 1
	DefaultPullMaxWait     = 20 * time.Second
	DefaultPullGrace       = 30 * time.Second
	// DevIdentityHeader carries PullConfig.DevIdentity (the local stack
	// only; the same name as internal/pull.DevIdentityHeader).
	DevIdentityHeader = "X-Servo-Dev-Identity"
)

// ErrStopping is the cause of a Func's context when [Pull] stops it at the
// end of its grace period; the attempt is reported FAILED/INFRASTRUCTURE,
// so Servo retries it (from its last checkpoint) on another worker.
var ErrStopping = errors.New("worker: stopping: the grace period for running tasks is over")

// errClaimedWhileStopping is the report of an attempt whose claim was
// answered as [Pull] began to stop: the Func is not run, and the attempt
// (started by the claim) is handed back as FAILED/INFRASTRUCTURE,
// retryable, so that Servo schedules its retry at once (after the task's
// retry backoff) rather than when its lease runs out.
var errClaimedWhileStopping = &Error{Category: api.CategoryInfrastructure, Retryable: ptr(true),
	Err: errors.New("worker stopping: the attempt was claimed as the worker began to stop; not started, handed back for a retry")}

// errAbandoned: the claim was abandoned because Pull's context ended
// before its answer began.
var errAbandoned = errors.New("worker: claim abandoned: the worker is stopping")

// PullConfig configures [Pull].
type PullConfig struct {
	// API is the base URL that serves POST /v1/pools/{pool}/claim: the
	// ServoClaim function's URL in production, `servo dev`'s address
	// locally (required).
	API string
	// Pool is the pull pool's name (required).
	Pool string
	// ThenPools are further pull pools to claim from, in priority order
	// after Pool: each claim takes an attempt of the first of Pool,
	// ThenPools[0], ThenPools[1], ... that has one (docs/contract.md §10).
	// At most 9, distinct, none equal to Pool, each one the caller may
	// claim from: Servo refuses the claim otherwise (400 invalid_request,
	// or 403 permission_denied for a pool the caller may not claim from;
	// the field is thenPools[i], or thenPools for too many), and Pull
	// returns that *[api.Error]. Empty: Pool alone.
	ThenPools []string
	// Concurrency is how many attempts run at once (default 1). A claim is
	// made only while a slot is free.
	Concurrency int
	// MaxWait is each claim's long-poll (default 20 s, at most 60 s).
	MaxWait time.Duration
	// Grace is how long, once ctx ends, running attempts may go on; then
	// their contexts are cancelled with ErrStopping (default 30 s).
	Grace time.Duration
	// Client sends the claims. A deployed API needs an ID token on each:
	// worker/googleauth.Client makes such a client from Application
	// Default Credentials. Default: a plain client, for an http:// API
	// (`servo dev`); required for an https:// one.
	Client *http.Client
	// DevIdentity, when set, is sent in the DevIdentityHeader header: the
	// identity `servo dev` takes on trust. Production ignores it.
	DevIdentity string
	// Options configure the attempt machinery as for [Handler]
	// (WithWorkerID, WithLogger, WithRetryBackoff, ...). The retry backoff
	// also paces claims that come back empty or unavailable.
	Options []Option
}

// Pull claims attempts from a pull pool and runs fn for each, with the
// same machinery as [Handler] (heartbeats, checkpoints, cancel, lease
// fence, exactly one `completed`), at most cfg.Concurrency at a time. The
// claim is the attempt's `started`. Empty claims and Servo's 503 are
// followed by a backoff; a claim refused for good (4xx) ends Pull with a
// *[api.Error].
//
// When ctx ends (cancel it on SIGTERM, e.g. with signal.NotifyContext) Pull
// makes no new claim and abandons the claim then open: its request is
// cancelled at once, and Servo hands a message that comes after the caller
// left back to the pool for another worker (docs/contract.md §10). A claim
// whose answer had begun to arrive is read in full: an attempt in it is not
// started (fn is not called) but reported at once as FAILED/INFRASTRUCTURE,
// retryable, so that Servo retries it after the task's retry backoff
// instead of when its lease runs out. Running attempts may finish within
// cfg.Grace; then they are cancelled (ErrStopping). Pull returns nil once
// every report is in.
func Pull(ctx context.Context, cfg PullConfig, fn Func) error {
	if cfg.API == "" || cfg.Pool == "" {
		return errors.New("worker: PullConfig.API and Pool are required")
	}
	h, ok := Handler(fn, cfg.Options...).(*handler)
	if !ok {
		return errors.New("worker: unexpected handler")
	}
	if cfg.Concurrency < 1 {
		cfg.Concurrency = DefaultPullConcurrency
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultPullMaxWait
	}
	cfg.MaxWait = min(cfg.MaxWait, api.MaxClaimWait)
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultPullGrace
	}
	cfg.ThenPools = slices.Clone(cfg.ThenPools) // the caller's slice may change while Pull runs
	if cfg.Client == nil {
		var err error
		if cfg.Client, err = defaultClaimClient(cfg); err != nil {
			return err
		}
	}
	p := &puller{cfg: cfg, h: h, running: map[*run]bool{}}
	return p.loop(ctx)
}

func defaultClaimClient(cfg PullConfig) (*http.Client, error) {
	u, err := url.Parse(cfg.API)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("worker: PullConfig.API %q is not an absolute URL", cfg.API)
	}
	if u.Scheme == "https" {
		return nil, fmt.Errorf("worker: PullConfig.Client is required for the https API %s: claims need an ID token (worker/googleauth.Client makes such a client)", cfg.API)
	}
	return &http.Client{}, nil
}

type puller struct {
	cfg PullConfig
	h   *handler

	mu      sync.Mutex
	running map[*run]bool
	wg      sync.WaitGroup
}

func (p *puller) loop(ctx context.Context) error {
	log := p.h.cfg.logger.With("pool", p.cfg.Pool, "workerId", p.h.cfg.workerID)
	if len(p.cfg.ThenPools) > 0 {
		log = log.With("thenPools", p.cfg.ThenPools)
	}
	// Claims and runs outlive ctx by the grace period at most.
	graceCtx, stopGrace := context.WithCancel(context.WithoutCancel(ctx))
	defer stopGrace()
	go func() {
		select {
		case <-ctx.Done():
		case <-graceCtx.Done():
			return
		}
		t := time.NewTimer(p.cfg.Grace)
		defer t.Stop()
		select {
		case <-t.C:
			p.stopRunning()
			stopGrace()
		case <-graceCtx.Done():
		}
	}()
	slots := make(chan struct{}, p.cfg.Concurrency)
	var fatal error
	empty := 0
	for fatal == nil {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		env, wait, err := p.claim(ctx, graceCtx)
		var ce *api.Error
		switch {
		case errors.Is(err, errAbandoned):
			log.InfoContext(ctx, "claim abandoned: the worker is stopping")
		case errors.As(err, &ce):
			log.ErrorContext(ctx, "claim refused; stopping", "status", ce.Status, "code", ce.Code, "field", ce.Field, "message", ce.Message)
			fatal = err
		case err != nil:
			log.WarnContext(ctx, "claim failed; backing off", "error", redactURL(err))
		}
		if env == nil {
			<-slots
			if fatal != nil || ctx.Err() != nil {
				continue
			}
			empty++
			if err == nil {
				// An empty long-poll: a short pause before the next one.
				wait = max(wait, backoff(min(empty, 3), p.h.cfg.backoffInitial, p.h.cfg.backoffMax))
			} else {
				wait = max(wait, backoff(empty, p.h.cfg.backoffInitial, p.h.cfg.backoffMax))
			}
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
			continue
		}
		empty = 0
		// A long-poll's sending says nothing of when Servo leased the
		// attempt (any time within MaxWait): its lease is counted from the
		// answer's arrival, every heartbeat's from its sending. An attempt
		// claimed as the worker began to stop is handed back unstarted.
		p.start(*env, time.Now(), slots, ctx.Err() != nil)
	}
	p.wg.Wait()
	return fatal
}

// start runs a claimed attempt (its claim answered at claimedAt) in its
// own goroutine, freeing its slot at the end. When stopping, the Func is
// not run: the attempt is reported FAILED/INFRASTRUCTURE, retryable.
func (p *puller) start(env api.Envelope, claimedAt time.Time, slots chan struct{}, stopping bool) {
	ru := newRun(p.h, env)
	ru.claimed, ru.claimedAt = true, claimedAt
	if stopping {
		ru.refuse = errClaimedWhileStopping
	}
	k := attemptKey{env.TaskID, env.Attempt}
	p.mu.Lock()
	p.running[ru] = true
	p.mu.Unlock()
	p.h.mu.Lock()
	p.h.inflight[k] = ru
	p.h.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer func() { <-slots }()
		ru.status, ru.ans = ru.execute(context.Background())
		ru.record(context.Background())
		p.h.mu.Lock()
		delete(p.h.inflight, k)
		p.h.mu.Unlock()
		p.mu.Lock()
		delete(p.running, ru)
		p.mu.Unlock()
		close(ru.done)
	}()
}

// stopRunning cancels the running attempts' Funcs with ErrStopping.
func (p *puller) stopRunning() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ru := range p.running {
		ru.mu.Lock()
		cancel := ru.cancelFn
		ru.mu.Unlock()
		if cancel != nil {
			ru.log.Warn("grace period over; stopping the function")
			cancel(ErrStopping)
		}
	}
}

// claimResponse is api.ClaimResponse with the envelope kept raw, for
// parseEnvelope's checks.
type claimResponse struct {
	Claimed     bool            `json:"claimed"`
	Envelope    json.RawMessage `json:"envelope"`
	Disposition api.Disposition `json:"disposition"`
	Error       string          `json:"error"`
	Field       string          `json:"field"`
	Message     string          `json:"message"`
}

// claim makes one claim. While its answer has not begun to arrive, the
// claim is abandoned as soon as ctx ends: the request is cancelled, and
// Servo hands back a message that comes after the caller left
// (errAbandoned). An answer that has begun (its first byte is in) is read
// in full under graceCtx, so that an attempt Servo claimed as ctx ended is
// handed back by its `completed` rather than lost until its lease runs
// out. It returns the envelope (nil when nothing was claimed), a
// Retry-After to honour, and an error (*api.Error: final).
func (p *puller) claim(ctx, graceCtx context.Context) (*api.Envelope, time.Duration, error) {
	body, _ := json.Marshal(api.ClaimRequest{WorkerID: p.h.cfg.workerID, MaxWaitMs: ptr(p.cfg.MaxWait.Milliseconds()),
		ThenPools: p.cfg.ThenPools})
	rctx, cancel := context.WithTimeout(graceCtx, p.cfg.MaxWait+p.h.cfg.requestTimeout)
	defer cancel()
	var (
		mu       sync.Mutex
		answered bool // the answer has begun: a stop no longer abandons the claim
	)
	begun := func() {
		mu.Lock()
		answered = true
		mu.Unlock()
	}
	rctx = httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{GotFirstResponseByte: begun})
	stopAbandon := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !answered {
			cancel()
		}
	})
	defer stopAbandon()
	u := strings.TrimSuffix(p.cfg.API, "/") + "/v1/pools/" + url.PathEscape(p.cfg.Pool) + "/claim"
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, 0, &api.Error{Code: "bad_url", Message: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if p.cfg.DevIdentity != "" {
		req.Header.Set(DevIdentityHeader, p.cfg.DevIdentity)
	}
	res, err := p.cfg.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, errAbandoned
		}
		return nil, 0, err
	}
	begun() // for a transport that does not call the trace's hooks
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, MaxEnvelopeBytes+maxResponseBytes))
	if err != nil {
		if ctx.Err() != nil && rctx.Err() != nil {
			// Cut short by the stop as it began: lost with its connection.
			return nil, 0, errAbandoned
		}
		return nil, 0, err
	}
	var cr claimResponse
	servo := json.Unmarshal(b, &cr) == nil && knownDisposition(cr.Disposition)
	switch {
	case res.StatusCode == http.StatusOK && servo:
		if !cr.Claimed {
			return nil, 0, nil
		}
		env, err := parseEnvelope(cr.Envelope)
		if err != nil {
			// Claimed, but unusable: the lease expires and Servo retries it.
			return nil, 0, fmt.Errorf("worker: claimed an envelope that is not valid: %w", err)
		}
		return &env, 0, nil
	case servo && cr.Disposition == api.Retry, !servo && retryableStatus(res.StatusCode):
		return nil, retryAfter(res.Header.Get("Retry-After")), fmt.Errorf("worker: claim answered %d %s", res.StatusCode, cr.Error)
	}
	return nil, 0, &api.Error{Status: res.StatusCode, Code: cr.Error, Field: cr.Field, Message: cr.Message, Disposition: cr.Disposition}
}

func retryableStatus(s int) bool {
	switch s {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

func ptr[T any](v T) *T { return &v }
