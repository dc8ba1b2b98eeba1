// Package enqueue hands a task's current attempt to Cloud Tasks: it signs
// the attempt's token, builds the envelope (docs/contract.md §2), and
// creates an HTTP task with a name derived from (task id, attempt, re-drive
// number), so repeating an enqueue is safe (ALREADY_EXISTS counts as
// success). The dispatcher uses it on submit, the callbacks and the sweeper
// for retries and re-drives.
//
// A job worker ([Worker.Job]) is enqueued the same way, but its Cloud Task
// calls Servo's jobs dispatch endpoint ([Config.JobDispatchURL]) with the
// envelope, and that endpoint runs the Cloud Run Job (package
// internal/jobs): rate limits, retries, names and re-drives work as for
// push workers.
//
// The token is valid from the moment the delivery can start (the retry's
// NotBefore, when that is later than now) for [task.TokenTTL], so a retry
// scheduled further ahead than a token lives still starts. Each sweeper
// re-drive ([task.Task.Redrives]) is created under a fresh name
// ([task.RedriveName]) with a freshly signed token: Cloud Tasks refuses a
// name for about an hour after its task ran or was deleted, so re-driving
// under the old name would deliver nothing when the first delivery was
// lost (answered 2xx without a `started`). The previous re-drive's Cloud
// Task is deleted first, best effort, so a delivery still waiting in the
// queue is not doubled.
//
// A worker may have several queues (Worker.MaxDispatchesPerSecond above
// Cloud Tasks' 500 dispatches a second per queue): each attempt goes to
// one of them, the same for all its re-drives, and Held, Dequeue and a
// re-drive find it even after the queues were added to (queues.go).
//
// A pull pool (Worker.Pull) has no queue: its attempts are published to the
// pool's topic through Config.Pools (package internal/pull), and Dequeue
// has nothing to delete (the claim drops the message of an attempt no
// longer claimable).
package enqueue

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	ctpb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/failpoint"
	"github.com/servo-dev/servo/internal/service"
	"github.com/servo-dev/servo/internal/spanattr"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/telemetry"
)

// Limits of Cloud Tasks HTTP tasks.
const (
	// MaxTaskBytes is Cloud Tasks' task size limit; the envelope must fit.
	MaxTaskBytes = 1 << 20
	// MinDispatchDeadline and MaxDispatchDeadline bound dispatch_deadline.
	MinDispatchDeadline = 15 * time.Second
	MaxDispatchDeadline = 30 * time.Minute
)

// Errors.
var (
	// ErrEnvelopeTooLarge: the envelope would exceed MaxTaskBytes.
	ErrEnvelopeTooLarge = fmt.Errorf("envelope exceeds the Cloud Tasks task size limit of %d bytes", MaxTaskBytes)
	// ErrCloudTasks: Cloud Tasks refused or could not be reached; the task
	// stays as stored and the sweeper re-drives it.
	ErrCloudTasks = errors.New("cloud tasks enqueue failed")
)

// Config configures an Enqueuer.
type Config struct {
	Store           *store.Store
	Tasks           *cloudtasks.Client
	Keys            *auth.KeyRing
	Workers         Workers
	CallbackBaseURL string
	// JobDispatchURL is Servo's jobs dispatch endpoint, which the Cloud
	// Tasks of job workers (Worker.Job) call; required when a worker is one.
	JobDispatchURL string
	// Executions cancels the Cloud Run Job executions of job attempts that
	// a timer ended (FollowUp); nil cancels none.
	Executions ExecutionCanceller
	// Now defaults to time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Pools is the transport of the pull pools among Workers (package
	// pull); required only when there are any.
	Pools Pools
}

// ExecutionCanceller cancels a Cloud Run Job execution; jobs.Runner is one.
type ExecutionCanceller interface {
	Cancel(ctx context.Context, execution string) error
}

// Enqueuer enqueues attempts. It is safe for concurrent use.
type Enqueuer struct{ cfg Config }

// New returns an Enqueuer.
func New(cfg Config) (*Enqueuer, error) {
	switch {
	case cfg.Store == nil:
		return nil, service.Missing("enqueue", "Config.Store")
	case cfg.Tasks == nil:
		return nil, service.Missing("enqueue", "Config.Tasks")
	case cfg.Keys == nil:
		return nil, service.Missing("enqueue", "Config.Keys")
	case cfg.CallbackBaseURL == "":
		return nil, service.Missing("enqueue", "Config.CallbackBaseURL")
	}
	cfg.Now, cfg.Logger = service.Clock(cfg.Now), cmp.Or(cfg.Logger, slog.Default())
	for _, n := range cfg.Workers.Names() {
		if cfg.Workers[n].Job != "" && cfg.JobDispatchURL == "" {
			return nil, fmt.Errorf("enqueue: worker %q runs a Cloud Run Job: JobDispatchURL is required", n)
		}
	}
	return &Enqueuer{cfg: cfg}, nil
}

// Workers returns the configured workers.
func (e *Enqueuer) Workers() Workers { return e.cfg.Workers }

// Keys returns the token key ring.
func (e *Enqueuer) Keys() *auth.KeyRing { return e.cfg.Keys }

// Envelope signs a token for t's current attempt and returns the envelope
// and its JSON. The token is valid from when the delivery can start (now,
// or t.NotBefore when later) for task.TokenTTL from then.
func (e *Enqueuer) Envelope(t *task.Task, now time.Time) (api.Envelope, []byte, error) {
	scope := auth.Scope{TenantID: t.TenantID, WorkspaceID: t.WorkspaceID, RunID: t.RunID, TaskID: t.ID, Attempt: t.Attempt}
	from := now
	if t.NotBefore != nil && t.NotBefore.After(now) {
		from = *t.NotBefore
	}
	tok, exp, err := e.cfg.Keys.SignFrom(scope, task.TokenTTL(from, t.Deadline, t.Timing.HeartbeatInterval()), now, from)
	if err != nil {
		return api.Envelope{}, nil, fmt.Errorf("enqueue: sign token: %w", err)
	}
	env := t.Envelope(e.cfg.CallbackBaseURL, tok, exp, now)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // payloads pass through as sent, without growth
	if err := enc.Encode(env); err != nil {
		return api.Envelope{}, nil, fmt.Errorf("enqueue: encode envelope: %w", err)
	}
	body := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(body) > MaxTaskBytes {
		return env, nil, fmt.Errorf("%w (envelope is %d bytes)", ErrEnvelopeTooLarge, len(body))
	}
	return env, body, nil
}

// TaskName is the Cloud Tasks task name for t's current attempt and
// re-drive (task.RedriveName).
func TaskName(queue string, t *task.Task) string {
	return redriveName(queue, t, t.Redrives)
}

func redriveName(queue string, t *task.Task, redrive int) string {
	return queue + "/tasks/" + task.RedriveName(t.ID, t.Attempt, redrive)
}

// DispatchDeadline is how long Cloud Tasks waits for worker w: the time
// to the task deadline, else the maximum, at most the worker's request
// timeout (w.TimeoutSeconds, when known), clamped to Cloud Tasks' range.
func DispatchDeadline(t *task.Task, w Worker, now time.Time) time.Duration {
	d := MaxDispatchDeadline
	if t.Deadline != nil {
		d = t.Deadline.Sub(now)
	}
	if w.TimeoutSeconds > 0 {
		d = min(d, time.Duration(w.TimeoutSeconds)*time.Second)
	}
	return min(max(d, MinDispatchDeadline), MaxDispatchDeadline)
}

// Enqueue creates the Cloud Task for t's current attempt (a repeat is a
// no-op) and, when t is PENDING, records that it is QUEUED.
func (e *Enqueuer) Enqueue(ctx context.Context, t task.Task) error {
	_, err := e.enqueue(ctx, t, true)
	return err
}

// EnqueueSubmitted is Enqueue for the first attempt of a task a submit has
// just stored: it returns the name of the Cloud Task it created instead of
// writing the "attempt enqueued" line, so that the submit's own line
// carries it (one INFO line per submit, not two). A repeat (ALREADY_EXISTS)
// and a failure log as Enqueue does, and a pull pool's publish keeps its
// line (cloudTask is then empty).
func (e *Enqueuer) EnqueueSubmitted(ctx context.Context, t task.Task) (cloudTask string, err error) {
	return e.enqueue(ctx, t, false)
}

// enqueue is Enqueue; logCreated writes the line of a Cloud Task created.
// It returns the Cloud Task's name once it exists.
func (e *Enqueuer) enqueue(ctx context.Context, t task.Task, logCreated bool) (cloudTask string, err error) {
	ctx, span := telemetry.Tracer().Start(ctx, "send "+t.Worker, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(append(spanattr.TaskAttrs(t.ID, t.Attempt, t.TenantID, t.Worker),
			attribute.String("messaging.system", "gcp_cloud_tasks"), attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", t.Worker))...))
	defer func() { spanattr.EndSpan(span, err) }()
	w, err := e.cfg.Workers.Lookup(t.Worker)
	if err != nil {
		return "", fmt.Errorf("enqueue %s: %w", t.ID, err)
	}
	if w.Pull {
		// The envelope is built, with a fresh token, when a worker claims it.
		if err := e.enqueuePull(ctx, t.Worker, t); err != nil {
			return "", err
		}
		return "", e.recordQueued(ctx, t)
	}
	now := e.cfg.Now().UTC()
	_, body, err := e.Envelope(&t, now)
	if err != nil {
		return "", err
	}
	target := w.URL
	if w.Job != "" {
		target = e.cfg.JobDispatchURL
	}
	req := &ctpb.HttpRequest{
		Url: target, HttpMethod: ctpb.HttpMethod_POST, Body: body,
		Headers: map[string]string{"Content-Type": "application/json"},
	}
	// The delivery continues this trace: W3C traceparent in the Cloud
	// Task's HTTP headers.
	telemetry.Inject(ctx, propagation.MapCarrier(req.Headers))
	if w.ServiceAccount != "" {
		aud := w.Audience
		if aud == "" {
			aud = target
		}
		req.AuthorizationHeader = &ctpb.HttpRequest_OidcToken{OidcToken: &ctpb.OidcToken{ServiceAccountEmail: w.ServiceAccount, Audience: aud}}
	}
	queues := w.attemptQueues(&t) // the attempt's queue, then where it was under fewer queues
	ct := &ctpb.Task{
		Name:             TaskName(queues[0], &t),
		MessageType:      &ctpb.Task_HttpRequest{HttpRequest: req},
		DispatchDeadline: durationpb.New(DispatchDeadline(&t, w, now)),
	}
	if t.NotBefore != nil && t.NotBefore.After(now) {
		ct.ScheduleTime = timestamppb.New(*t.NotBefore)
	}
	log := e.cfg.Logger.With("taskId", t.ID, "attempt", t.Attempt, "tenantId", t.TenantID, "worker", t.Worker)
	if t.Redrives > 0 {
		// A re-drive: the previous name's delivery may still be waiting.
		for _, q := range queues {
			prev := redriveName(q, &t, t.Redrives-1)
			if err := e.deleteTask(ctx, prev); err != nil {
				log.WarnContext(ctx, "could not delete the re-driven attempt's previous Cloud Task", "cloudTask", prev, "error", err)
			}
		}
	}
	failpoint.Hit(failpoint.EnqueueBeforeCreateTask) // the fault harness's crashes around CreateTask
	_, err = e.cfg.Tasks.CreateTask(ctx, &ctpb.CreateTaskRequest{Parent: queues[0], Task: ct})
	failpoint.Hit(failpoint.EnqueueAfterCreateTask)
	switch status.Code(err) {
	case codes.OK:
		if logCreated {
			log.InfoContext(ctx, "attempt enqueued", "cloudTask", ct.Name)
		}
	case codes.AlreadyExists:
		log.InfoContext(ctx, "attempt already enqueued", "cloudTask", ct.Name)
	default:
		log.WarnContext(ctx, "enqueue failed; the sweeper will re-drive", "error", err)
		return "", fmt.Errorf("%w: %s attempt %d: %w", ErrCloudTasks, t.ID, t.Attempt, err)
	}
	return ct.Name, e.recordQueued(ctx, t)
}

// recordQueued records that a PENDING t is QUEUED once its attempt is
// handed to the transport.
func (e *Enqueuer) recordQueued(ctx context.Context, t task.Task) error {
	if t.State == api.Pending {
		if _, err := e.cfg.Store.Apply(ctx, t.ID, task.Event{Kind: task.EventEnqueued, Attempt: t.Attempt, Now: e.cfg.Now().UTC()}); err != nil {
			return fmt.Errorf("enqueue %s: record QUEUED: %w", t.ID, err)
		}
	}
	return nil
}

// Held reports whether Cloud Tasks still holds the current dispatch of t's
// attempt (Delivery without what it says of the deliveries).
func (e *Enqueuer) Held(ctx context.Context, t task.Task) (bool, error) {
	held, _, err := e.Delivery(ctx, t)
	return held, err
}

// Delivery reports whether Cloud Tasks still holds the current dispatch of
// t's attempt (one GetTask in the attempt's queue; a worker whose queues
// were added to also asks the queues the attempt had before): waiting in
// the queue, or being retried by Cloud Tasks. Such a dispatch will be
// delivered, so the sweeper does not re-drive it. When it is held, d is
// what Cloud Tasks says of its deliveries: how many were tried, the last
// one's response status and when, and when the next is due. A pull
// worker's attempt is never held here (no RPC).
func (e *Enqueuer) Delivery(ctx context.Context, t task.Task) (held bool, d *api.Delivery, err error) {
	w, err := e.cfg.Workers.Lookup(t.Worker)
	if err != nil || w.Pull {
		return false, nil, err
	}
	for _, q := range w.attemptQueues(&t) {
		ct, err := e.cfg.Tasks.GetTask(ctx, &ctpb.GetTaskRequest{Name: TaskName(q, &t)})
		switch status.Code(err) {
		case codes.OK:
			return true, deliveryOf(ct, e.cfg.Now().UTC()), nil
		case codes.NotFound:
			continue
		}
		return false, nil, fmt.Errorf("%w: get %s attempt %d: %w", ErrCloudTasks, t.ID, t.Attempt, err)
	}
	return false, nil, nil
}

// deliveryOf is the delivery state of a Cloud Task read at now.
func deliveryOf(ct *ctpb.Task, now time.Time) *api.Delivery {
	d := &api.Delivery{Attempts: int(ct.GetDispatchCount()), CheckedAt: now}
	if la := ct.GetLastAttempt(); la != nil {
		if ts := la.GetDispatchTime(); ts != nil {
			at := ts.AsTime().UTC()
			d.LastAttemptAt = &at
		}
		if st := la.GetResponseStatus(); st != nil {
			d.LastStatus = code.Code(st.GetCode()).String() // google.rpc.Code's name: UNAVAILABLE
			d.LastError = st.GetMessage()
		}
	}
	if ts := ct.GetScheduleTime(); ts != nil && d.Attempts > 0 {
		if at := ts.AsTime().UTC(); at.After(now) {
			d.NextTryAt = &at
		}
	}
	return d
}

// Dequeue deletes the Cloud Tasks of t's current attempt: the current
// re-drive's, then the earlier re-drives' (each re-drive deletes its
// predecessor, but only best effort), in the attempt's queue and in those
// it had when the worker had fewer queues; a task already gone is not an
// error. Every name is tried; the first failure is returned.
func (e *Enqueuer) Dequeue(ctx context.Context, t task.Task) error {
	w, err := e.cfg.Workers.Lookup(t.Worker)
	if err != nil {
		return err
	}
	if w.Pull {
		return nil // a claim drops the message of an attempt no longer claimable
	}
	var first error
	for _, q := range w.attemptQueues(&t) {
		for n := t.Redrives; n >= 0; n-- {
			if err := e.deleteTask(ctx, redriveName(q, &t, n)); err != nil && first == nil {
				first = fmt.Errorf("%w: delete %s attempt %d re-drive %d: %w", ErrCloudTasks, t.ID, t.Attempt, n, err)
			}
		}
	}
	return first
}

// deleteTask deletes the Cloud Task name; NOT_FOUND is success.
func (e *Enqueuer) deleteTask(ctx context.Context, name string) error {
	err := e.cfg.Tasks.DeleteTask(ctx, &ctpb.DeleteTaskRequest{Name: name})
	if err != nil && status.Code(err) != codes.NotFound {
		return err
	}
	return nil
}

// FollowUp performs what a committed result asks for: cancel the job
// execution of an attempt a timer ended (first, so that the stale execution
// stops before the retry starts; best effort, logged), then enqueue the
// next attempt (a retry or re-drive) or delete a cancelled attempt's Cloud
// Task. A failure to enqueue or dequeue is logged and returned; the
// sweeper recovers it.
func (e *Enqueuer) FollowUp(ctx context.Context, r task.Result) error {
	if r.CancelExecution != "" && e.cfg.Executions != nil {
		log := e.cfg.Logger.With("taskId", r.Task.ID, "tenantId", r.Task.TenantID, "execution", r.CancelExecution)
		if err := e.cfg.Executions.Cancel(ctx, r.CancelExecution); err != nil {
			log.WarnContext(ctx, "could not cancel the ended attempt's job execution; its callbacks are refused", "error", err)
		} else {
			log.InfoContext(ctx, "cancelled the ended attempt's job execution")
		}
	}
	switch {
	case r.Enqueue:
		return e.Enqueue(ctx, r.Task)
	case r.Dequeue:
		if err := e.Dequeue(ctx, r.Task); err != nil {
			e.cfg.Logger.WarnContext(ctx, "could not delete the cancelled attempt's Cloud Task", "taskId", r.Task.ID, "attempt", r.Task.Attempt, "tenantId", r.Task.TenantID, "error", err)
			return err
		}
	}
	return nil
}
