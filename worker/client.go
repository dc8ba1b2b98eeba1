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

	"github.com/servo-dev/servo/task"
)

// Callback operations (the last path segment).
const (
	opStarted   = "started"
	opHeartbeat = "heartbeat"
	opCompleted = "completed"
)

// maxResponseBytes bounds how much of a callback response is read.
const maxResponseBytes = 64 << 10

// reply is Servo's answer to a callback.
type reply struct {
	status int
	resp   task.CallbackResponse
	// disp is the disposition: the body's, or derived from the status when
	// the body has none (a proxy's error page).
	disp task.Disposition
	// retryAfter is the Retry-After of a 503, if any.
	retryAfter time.Duration
}

// retryableStatus reports whether a status means "Servo did not process the
// request; the same request may succeed later": 503 (Servo's `unavailable`)
// and the statuses Google's front ends and proxies use for transient
// failures. Every callback is idempotent, so repeating it is safe.
func retryableStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// disposition derives what the worker must do from a non-retryable answer.
func disposition(op string, status int, body task.CallbackResponse) task.Disposition {
	switch body.Disposition {
	case task.Continue, task.Committed, task.Cancel, task.Rejected:
		return body.Disposition
	}
	switch {
	case status >= 200 && status < 300:
		if op == opCompleted {
			return task.Committed
		}
		return task.Continue
	case status == http.StatusConflict || status == http.StatusGone:
		return task.Cancel
	}
	return task.Rejected
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
// timeouts and retryable statuses with backoff while the next try can start
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
		rep, err := r.once(ctx, u, b)
		if err == nil && !retryableStatus(rep.status) && rep.resp.Disposition != task.Retry {
			rep.disp = disposition(op, rep.status, rep.resp)
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

// once makes one POST with the current token and reads the answer.
func (r *run) once(ctx context.Context, u string, b []byte) (reply, error) {
	ctx, cancel := context.WithTimeout(ctx, r.h.cfg.requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+r.token())
	req.Header.Set("User-Agent", userAgent)
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
	rep := reply{status: res.StatusCode}
	_ = json.Unmarshal(data, &rep.resp) // a proxy's page is not JSON; the status decides
	if res.StatusCode == http.StatusServiceUnavailable || res.StatusCode == http.StatusTooManyRequests {
		rep.retryAfter = min(retryAfter(res.Header.Get("Retry-After")), r.h.cfg.backoffMax)
	}
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
