package cloudtasks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	pb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/genproto/googleapis/rpc/code"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Headers Cloud Tasks sets on every HTTP task request.
const (
	// HeaderQueueName carries the queue id.
	HeaderQueueName = "X-CloudTasks-QueueName"
	// HeaderTaskName carries the task id (the last segment of its name).
	HeaderTaskName = "X-CloudTasks-TaskName"
	// HeaderRetryCount counts the task's previous attempts, 0 on the first.
	HeaderRetryCount = "X-CloudTasks-TaskRetryCount"
	// HeaderExecutionCount counts the previous attempts that got a response
	// other than 5xx.
	HeaderExecutionCount = "X-CloudTasks-TaskExecutionCount"
	// HeaderETA carries the schedule time in seconds since the epoch.
	HeaderETA = "X-CloudTasks-TaskETA"
	// headerPreviousResponse carries the previous attempt's HTTP status (0
	// when it got no response); retries only.
	headerPreviousResponse = "X-CloudTasks-TaskPreviousResponse"
	// headerRetryReason says why the previous attempt failed, as a
	// google.rpc.Code name; retries only.
	headerRetryReason = "X-CloudTasks-TaskRetryReason"
	// userAgent is the User-Agent of every HTTP task request.
	userAgent = "Google-Cloud-Tasks"
)

// maxResponseBody is how much of a response body is read (and discarded) so
// that connections can be reused.
const maxResponseBody = 1 << 20

// authSpec says which bearer token to mint for an attempt.
type authSpec struct {
	oidc     bool
	email    string
	audience string // OIDC audience; "" means the request URL
	scope    string // OAuth scope
}

// attempt is one dispatch of a task, prepared under the queue lock and run
// outside it.
type attempt struct {
	q        *queue
	t        *task
	rec      *pb.Attempt
	method   string
	url      string
	header   http.Header
	body     []byte
	auth     *authSpec
	deadline time.Duration
	prepErr  error // the request could not be built; the attempt fails
}

// outcome is how an attempt ended.
type outcome struct {
	status     int // HTTP status; 0 when no response was received
	timedOut   bool
	err        error
	retryAfter time.Duration // from Retry-After on 429/503; 0 if none
}

// startLocked dispatches t now: it records the attempt, builds the request
// and runs it in a goroutine. The caller has taken any token it needs.
func (q *queue) startLocked(t *task, now time.Time) {
	q.unreadyLocked(t)
	t.pb.DispatchCount++
	ts := timestamppb.New(now.Truncate(time.Microsecond))
	if t.pb.FirstAttempt == nil {
		t.pb.FirstAttempt = &pb.Attempt{DispatchTime: ts}
		t.firstDispatch = now
	}
	rec := &pb.Attempt{ScheduleTime: t.pb.ScheduleTime, DispatchTime: ts}
	t.pb.LastAttempt = rec
	a := q.prepareLocked(t, rec)
	q.inflight++
	t.running++
	if !q.s.goTracked(a.run) {
		q.inflight--
		t.running--
	}
}

// prepareLocked builds the HTTP request for t from the task and the queue's
// http_target overrides.
func (q *queue) prepareLocked(t *task, rec *pb.Attempt) *attempt {
	hr := t.pb.GetHttpRequest()
	a := &attempt{q: q, t: t, rec: rec, header: make(http.Header), deadline: defaultDispatchDeadline}
	if d := t.pb.DispatchDeadline; d != nil {
		a.deadline = d.AsDuration()
	}
	ht := q.cfg.HttpTarget

	a.url, a.prepErr = applyURIOverride(hr.GetUrl(), ht.GetUriOverride())
	method := hr.GetHttpMethod()
	if m := ht.GetHttpMethod(); m != pb.HttpMethod_HTTP_METHOD_UNSPECIFIED {
		method = m
	}
	if method == pb.HttpMethod_HTTP_METHOD_UNSPECIFIED {
		method = pb.HttpMethod_POST
	}
	a.method = method.String()
	if method == pb.HttpMethod_POST || method == pb.HttpMethod_PUT || method == pb.HttpMethod_PATCH {
		a.body = hr.GetBody()
	}

	for k, v := range hr.GetHeaders() {
		if !reservedHeader(k) {
			a.header.Set(k, v)
		}
	}
	for _, o := range ht.GetHeaderOverrides() {
		if h := o.GetHeader(); !reservedHeader(h.GetKey()) {
			a.header.Set(h.GetKey(), h.GetValue())
		}
	}

	switch {
	case ht.GetOidcToken() != nil:
		a.auth = &authSpec{oidc: true, email: ht.GetOidcToken().ServiceAccountEmail, audience: ht.GetOidcToken().Audience}
	case ht.GetOauthToken() != nil:
		a.auth = &authSpec{email: ht.GetOauthToken().ServiceAccountEmail, scope: ht.GetOauthToken().Scope}
	case hr.GetOidcToken() != nil:
		a.auth = &authSpec{oidc: true, email: hr.GetOidcToken().ServiceAccountEmail, audience: hr.GetOidcToken().Audience}
	case hr.GetOauthToken() != nil:
		a.auth = &authSpec{email: hr.GetOauthToken().ServiceAccountEmail, scope: hr.GetOauthToken().Scope}
	}
	if a.auth != nil {
		a.header.Del("Authorization")
	}

	a.header.Set("User-Agent", userAgent)
	a.header.Set(HeaderQueueName, q.name.queue)
	a.header.Set(HeaderTaskName, t.id)
	a.header.Set(HeaderRetryCount, strconv.Itoa(int(t.pb.DispatchCount-1)))
	a.header.Set(HeaderExecutionCount, strconv.Itoa(int(t.executions)))
	a.header.Set(HeaderETA, formatETA(t.pb.ScheduleTime.AsTime()))
	if t.pb.DispatchCount > 1 {
		a.header.Set(headerPreviousResponse, strconv.Itoa(t.prevStatus))
		a.header.Set(headerRetryReason, t.prevReason)
	}
	return a
}

// reservedHeader reports whether a task may not set header k: Cloud Tasks
// computes or replaces these.
func reservedHeader(k string) bool {
	k = strings.ToLower(k)
	switch k {
	case "host", "content-length", "user-agent", "transfer-encoding", "connection":
		return true
	}
	return strings.HasPrefix(k, "x-google-") || strings.HasPrefix(k, "x-appengine-") || strings.HasPrefix(k, "x-cloudtasks-")
}

// formatETA renders a schedule time as seconds since the epoch with
// microseconds, the form of X-CloudTasks-TaskETA.
func formatETA(t time.Time) string {
	us := t.UnixMicro()
	sec, frac := us/1e6, us%1e6
	if frac < 0 {
		sec, frac = sec-1, frac+1e6
	}
	return fmt.Sprintf("%d.%06d", sec, frac)
}

// run sends the request and reports the outcome to the queue.
func (a *attempt) run() {
	out := a.do()
	a.q.finish(a, out)
}

func (a *attempt) do() outcome {
	if a.prepErr != nil {
		return outcome{err: a.prepErr}
	}
	s := a.q.s
	ctx, cancel := context.WithCancel(a.q.ctx)
	defer cancel()
	var timedOut atomic.Bool
	timer := s.clock.AfterFunc(a.deadline, func() {
		timedOut.Store(true)
		cancel()
	})
	defer timer.Stop()

	req, err := http.NewRequestWithContext(ctx, a.method, a.url, bytes.NewReader(a.body))
	if err != nil {
		return outcome{err: fmt.Errorf("build request: %w", err)}
	}
	if len(a.body) == 0 {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	req.Header = a.header
	if a.auth != nil {
		tok, err := a.token(s)
		if err != nil {
			return outcome{err: err}
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return outcome{err: err, timedOut: timedOut.Load()}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody))
	_ = resp.Body.Close()
	out := outcome{status: resp.StatusCode}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		out.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), s.clock.Now())
	}
	return out
}

func (a *attempt) token(s *Server) (string, error) {
	now := s.clock.Now()
	if a.auth.oidc {
		aud := a.auth.audience
		if aud == "" {
			aud = a.url
		}
		return s.signer.oidcToken(a.auth.email, aud, now)
	}
	return s.signer.oauthToken(a.auth.email, a.auth.scope, a.url, now)
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP-date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// finish records an attempt's outcome and deletes, retries or drops the task.
func (q *queue) finish(a *attempt, out outcome) {
	q.mu.Lock()
	defer q.mu.Unlock()
	defer q.poke()
	q.inflight--
	t := a.t
	t.running--
	if q.deleted || q.ctx.Err() != nil || q.tasks[t.id] != t {
		return // the queue or the task is gone: the outcome no longer matters
	}
	now := q.s.clock.Now()
	st := attemptStatus(out)
	a.rec.ResponseTime = timestamppb.New(now.Truncate(time.Microsecond))
	a.rec.ResponseStatus = st
	log := q.s.log
	if out.status != 0 {
		t.pb.ResponseCount++
		if out.status < 500 {
			t.executions++
		}
	}
	if out.status >= 200 && out.status <= 299 {
		log.Debug("cloudtasks emulator: task succeeded", "task", t.pb.Name, "attempt", t.pb.DispatchCount, "status", out.status)
		q.removeLocked(t, now)
		return
	}
	t.prevStatus = out.status
	t.prevReason = code.Code(st.Code).String()

	rc, err := normalizeRetryConfig(t.pb.RetryConfig, q.cfg.RetryConfig)
	if err != nil {
		rc = q.cfg.RetryConfig
	}
	if t.running > 0 && t.index < 0 {
		// Another (forced) attempt is still running; its outcome decides.
		log.Debug("cloudtasks emulator: attempt failed while another runs", "task", t.pb.Name, "status", st.Message)
		return
	}
	if !retryAllowed(rc, t.pb.DispatchCount, now.Sub(t.firstDispatch)) ||
		now.Sub(t.pb.CreateTime.AsTime()) >= maxTaskRetention {
		log.Info("cloudtasks emulator: task dropped after its last attempt", "task", t.pb.Name, "attempts", t.pb.DispatchCount, "status", st.Message)
		q.removeLocked(t, now)
		return
	}
	delay := backoff(rc, t.pb.DispatchCount)
	if out.retryAfter > delay {
		delay = out.retryAfter
	}
	q.unreadyLocked(t)
	t.pb.ScheduleTime = timestamppb.New(now.Add(delay).Truncate(time.Microsecond))
	log.Debug("cloudtasks emulator: task will be retried", "task", t.pb.Name, "attempt", t.pb.DispatchCount, "status", st.Message, "delay", delay)
	q.addLocked(t)
}

// attemptStatus maps an outcome to the google.rpc.Status Cloud Tasks records
// in Attempt.response_status.
func attemptStatus(out outcome) *rpcstatus.Status {
	switch {
	case out.timedOut:
		return &rpcstatus.Status{Code: int32(codes.DeadlineExceeded), Message: "dispatch deadline exceeded"}
	case out.err != nil && errors.Is(out.err, errInvalidArgument):
		return &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: out.err.Error()}
	case out.err != nil:
		return &rpcstatus.Status{Code: int32(codes.Unavailable), Message: out.err.Error()}
	}
	return &rpcstatus.Status{
		Code:    int32(httpToCode(out.status)),
		Message: fmt.Sprintf("HTTP %d %s", out.status, http.StatusText(out.status)),
	}
}

// httpToCode is the usual HTTP-to-gRPC status mapping of Google APIs.
func httpToCode(s int) codes.Code {
	switch {
	case s >= 200 && s <= 299:
		return codes.OK
	case s == http.StatusBadRequest:
		return codes.InvalidArgument
	case s == http.StatusUnauthorized:
		return codes.Unauthenticated
	case s == http.StatusForbidden:
		return codes.PermissionDenied
	case s == http.StatusNotFound:
		return codes.NotFound
	case s == http.StatusConflict:
		return codes.Aborted
	case s == http.StatusRequestedRangeNotSatisfiable:
		return codes.OutOfRange
	case s == http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case s == 499:
		return codes.Canceled
	case s == http.StatusNotImplemented:
		return codes.Unimplemented
	case s == http.StatusServiceUnavailable:
		return codes.Unavailable
	case s == http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	case s >= 400 && s <= 499:
		return codes.FailedPrecondition
	case s >= 500:
		return codes.Internal
	}
	return codes.Unknown
}
