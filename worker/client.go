package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/spanattr"
)

// Callback operations (the last path segment).
const (
	opStarted   = "started"
	opHeartbeat = "heartbeat"
	opCompleted = "completed"
)

// maxResponseBytes bounds how much of a callback response is read.
const maxResponseBytes = 64 << 10

// reply is what the SDK makes of one answer to a callback (see judge).
type reply struct {
	status int
	// resp is Servo's body; zero when the answer had none (a proxy's page).
	resp api.CallbackResponse
	// disp is what the worker must do: the body's disposition, or, for an
	// answer without a Servo body, one derived from the status. api.Retry
	// means: send the same request again after a backoff.
	disp api.Disposition
	// retryAfter is the answer's Retry-After when disp is api.Retry.
	retryAfter time.Duration
	// sentAt is when the request that got this answer was sent: Servo
	// processed it (and counted any lease from) no earlier.
	sentAt time.Time
}

// judge decides what one answer to callback op means, from its status, its
// body and its Retry-After header alone (docs/contract.md §4.7: the
// answers as the worker sees them).
//
// An answer whose body is Servo's (JSON with a known disposition) is obeyed
// whatever its status: RETRY is retried (Servo's 503 `unavailable`);
// CONTINUE, COMMITTED, CANCELLED and REJECTED are final, so a REJECTED 500
// or 429 is never sent again. An answer without a Servo body comes from
// the infrastructure in front of Servo (a load balancer's or Cloud Run's
// error page, an empty body): 408, 429, 500, 502, 503 and 504 mean the
// request may not have reached Servo and are retried (every callback is
// idempotent); 2xx is taken as accepted, 409 and 410 as CANCELLED, anything
// else as REJECTED.
func judge(op string, status int, body []byte, retryAfterHeader string) reply {
	rep := reply{status: status}
	var resp api.CallbackResponse
	if json.Unmarshal(body, &resp) == nil && knownDisposition(resp.Disposition) {
		rep.resp, rep.disp = resp, resp.Disposition
	} else {
		rep.disp = bareDisposition(op, status)
	}
	if rep.disp == api.Retry {
		rep.retryAfter = retryAfter(retryAfterHeader)
	}
	return rep
}

func knownDisposition(d api.Disposition) bool {
	switch d {
	case api.Continue, api.Committed, api.Cancel, api.Rejected, api.Retry:
		return true
	}
	return false
}

// bareDisposition is the disposition of an answer without a Servo body.
func bareDisposition(op string, status int) api.Disposition {
	switch {
	case status >= 200 && status < 300:
		if op == opCompleted {
			return api.Committed
		}
		return api.Continue
	case status == http.StatusConflict || status == http.StatusGone:
		return api.Cancel
	}
	switch status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return api.Retry
	}
	return api.Rejected
}

// backoff is the delay before retry number try (from 0): exponential from
// initial, capped at maxDelay, with "equal jitter" (uniform in [d/2, d)).
func backoff(try int, initial, maxDelay time.Duration) time.Duration {
	d := initial
	for i := 0; i < try && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

// retryAfter parses a Retry-After header in seconds (0 if absent or a date).
func retryAfter(h string) time.Duration {
	if s, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}

// errStopped: a heartbeat's retries were abandoned because the Func
// returned.
var errStopped = errors.New("stopped")

// post delivers one callback. It retries transport errors, per-request
// timeouts and answers judged api.Retry with backoff while the next try can start
// before until() (re-read each time: an adopted token extends it); the first
// try is always made. It returns the first non-retryable reply, or an error
// wrapping errUnreachable when the window closed, or errStopped when stop
// closed between tries. A request in flight is never cancelled by stop:
// abandoning a callback mid-transaction helps nobody, and its answer
// matters (a 410 means nothing may be reported).
func (r *run) post(ctx context.Context, op string, body func() ([]byte, error), until func() time.Time, stop <-chan struct{}) (reply, error) {
	u := r.env.CallbackBaseURL + "/v1/tasks/" + url.PathEscape(r.env.TaskID) + "/" + op
	cfg := &r.h.cfg
	for try := 0; ; try++ {
		b, err := body()
		if err != nil {
			return reply{}, fmt.Errorf("worker: encode %s: %w", op, err)
		}
		rep, err := r.once(ctx, op, u, b)
		if err == nil && rep.disp != api.Retry {
			return rep, nil
		}
		if ctx.Err() != nil {
			return reply{}, ctx.Err()
		}
		why := ""
		if err != nil {
			why = err.Error()
		} else {
			why = fmt.Sprintf("HTTP %d %s", rep.status, rep.resp.Error)
		}
		delay := max(backoff(try, cfg.backoffInitial, cfg.backoffMax), rep.retryAfter)
		if !cfg.now().Add(delay).Before(until()) {
			r.log.ErrorContext(ctx, "servo unreachable; giving up on callback", "op", op, "tries", try+1, "lastError", why)
			return reply{}, fmt.Errorf("%w: %s: %d tries, last: %s", errUnreachable, op, try+1, why)
		}
		r.log.WarnContext(ctx, "callback failed; retrying", "op", op, "try", try+1, "error", why, "retryIn", delay.String())
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return reply{}, ctx.Err()
		case <-stop:
			t.Stop()
			return reply{}, errStopped
		case <-t.C:
		}
	}
}

// once makes one POST with the current token and judges the answer.
func (r *run) once(ctx context.Context, op, u string, b []byte) (rep reply, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.h.cfg.requestTimeout)
	defer cancel()
	ctx, span := r.h.inst.tracer.Start(ctx, "POST /v1/tasks/{taskId}/"+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(spanattr.TaskAttrs(r.env.TaskID, r.env.Attempt, r.env.TenantID, r.env.Worker),
			spanattr.CallbackKey.String(op), attribute.String("http.request.method", http.MethodPost))...))
	defer func() {
		if err == nil {
			span.SetAttributes(attribute.Int("http.response.status_code", rep.status), spanattr.DispositionKey.String(string(rep.disp)))
		}
		spanattr.EndSpan(span, err)
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return reply{}, err
	}
	spanattr.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+r.token())
	req.Header.Set("User-Agent", userAgent)
	sentAt := time.Now()
	res, err := r.h.cfg.client.Do(req)
	if err != nil {
		return reply{}, redactURL(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxResponseBytes))
	if err != nil && res.StatusCode < 300 {
		// A 2xx whose body broke off may not have been processed as read;
		// repeating the idempotent callback settles it.
		return reply{}, fmt.Errorf("read response: %w", err)
	}
	rep = judge(op, res.StatusCode, data, res.Header.Get("Retry-After"))
	rep.retryAfter = min(rep.retryAfter, r.h.cfg.backoffMax)
	rep.sentAt = sentAt
	return rep, nil
}

// redactURL drops the URL from a client error (it names no secret, but the
// message is shorter and stable without it).
func redactURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}
