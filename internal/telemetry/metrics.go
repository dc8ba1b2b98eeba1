package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/spanattr"
	"github.com/servo-dev/servo/internal/task"
)

// Instrument names. Every attribute set is bounded: states, reasons,
// outcomes, categories, dispositions, callback kinds, HTTP statuses, duty
// and configured worker names; never a task id.
const (
	MetricTransitions      = "servo.task.transitions"
	MetricCallbacks        = "servo.callbacks"
	MetricCallbackDuration = "servo.callback.duration"
	MetricCallbackRPCs     = "servo.callback.firestore.rpcs"
	MetricSubmits          = "servo.submits"
	MetricSweeperLag       = "servo.sweeper.lag"
	MetricSweeperHandled   = "servo.sweeper.handled"
	MetricSweeperPasses    = "servo.sweeper.passes"
	MetricSweeperDue       = "servo.sweeper.due"
	MetricSweeperMaxLag    = "servo.sweeper.max_lag"
	MetricSweeperLastPass  = "servo.sweeper.last_pass_time"
	MetricAPIRequests      = "servo.api.requests"
	MetricAPIDuration      = "servo.api.duration"
	MetricZombies          = "servo.zombies"
	MetricRetries          = "servo.retries.scheduled"
	MetricDeadLetters      = "servo.dead_letters"
	MetricOutboxBacklog    = "servo.outbox.backlog"
	MetricOutboxOldestAge  = "servo.outbox.oldest_age"
	MetricStartLatency     = "servo.task.start_latency"
	MetricQueuedOldestAge  = "servo.queued.oldest_age"
	MetricPublishFailures  = "servo.events.publish_failures"
)

// Attribute keys of the metrics.
const (
	fromKey   = attribute.Key("servo.from")
	toKey     = attribute.Key("servo.to")
	reasonKey = attribute.Key("servo.reason")
	statusKey = attribute.Key("http.response.status_code")
	methodKey = attribute.Key("http.request.method")
	routeKey  = attribute.Key("http.route")
	opKey     = attribute.Key("servo.op")
	causeKey  = attribute.Key("servo.cause")
)

type instruments struct {
	transitions, callbacks, submits, handled, zombies, retries, deadLetters metric.Int64Counter
	passes, due, apiRequests, publishFailures                               metric.Int64Counter
	callbackDur, sweeperLag, startLatency, apiDuration                      metric.Float64Histogram
	callbackRPCs                                                            metric.Int64Histogram
	backlog                                                                 metric.Int64Gauge
	oldestAge, maxLag, lastPass, queuedAge                                  metric.Float64Gauge
}

func newInstruments(m metric.Meter) *instruments {
	var i instruments
	// Instrument creation fails only on invalid names (none here); the
	// returned instrument is then a no-op, which is what we would want.
	i.transitions, _ = m.Int64Counter(MetricTransitions, metric.WithDescription("Task state transitions committed, by from, to, reason and worker."), metric.WithUnit("{transition}"))
	i.callbacks, _ = m.Int64Counter(MetricCallbacks, metric.WithDescription("Worker callbacks answered, by kind, HTTP status and disposition."), metric.WithUnit("{callback}"))
	i.callbackDur, _ = m.Float64Histogram(MetricCallbackDuration, metric.WithDescription("Time to answer a worker callback."), metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(spanattr.LatencyBuckets...))
	i.callbackRPCs, _ = m.Int64Histogram(MetricCallbackRPCs, metric.WithDescription("Firestore RPCs one callback made (its transaction, retries included)."), metric.WithUnit("{rpc}"), metric.WithExplicitBucketBoundaries(0, 1, 2, 3, 4, 6, 8, 12, 16))
	i.submits, _ = m.Int64Counter(MetricSubmits, metric.WithDescription("Tasks submitted to the control API, by result (created, existing, rejected)."), metric.WithUnit("{task}"))
	i.sweeperLag, _ = m.Float64Histogram(MetricSweeperLag, metric.WithDescription("Time from a task's due time to the sweeper handling it, by duty."), metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(spanattr.LatencyBuckets...))
	i.handled, _ = m.Int64Counter(MetricSweeperHandled, metric.WithDescription("Due tasks the sweeper handled, by duty and result (applied, noop, error)."), metric.WithUnit("{task}"))
	i.zombies, _ = m.Int64Counter(MetricZombies, metric.WithDescription("Attempts ended as zombies (lease expired), by worker."), metric.WithUnit("{attempt}"))
	i.retries, _ = m.Int64Counter(MetricRetries, metric.WithDescription("Retries scheduled (a new attempt), by worker and reason."), metric.WithUnit("{attempt}"))
	i.deadLetters, _ = m.Int64Counter(MetricDeadLetters, metric.WithDescription("Tasks that ended FAILED with no retry left (dead letters), by worker and final reason."), metric.WithUnit("{task}"))
	i.backlog, _ = m.Int64Gauge(MetricOutboxBacklog, metric.WithDescription("Undelivered outbox events past their grace period the last re-drive pass found, due or backed off after a failed delivery (at most a re-drive batch per shard)."), metric.WithUnit("{event}"))
	i.oldestAge, _ = m.Float64Gauge(MetricOutboxOldestAge, metric.WithDescription("Age of the oldest undelivered outbox event the last re-drive pass found (0 when none)."), metric.WithUnit("s"))
	i.startLatency, _ = m.Float64Histogram(MetricStartLatency, metric.WithDescription("Time from an attempt's enqueue (or its retry's schedule time) to its accepted `started`, by worker."), metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(spanattr.LatencyBuckets...))

	i.passes, _ = m.Int64Counter(MetricSweeperPasses, metric.WithDescription("Sweeper passes run, by result (ok, error): a pass is recorded at its end, whatever it found."), metric.WithUnit("{pass}"))
	i.due, _ = m.Int64Counter(MetricSweeperDue, metric.WithDescription("Due tasks the sweeper's passes found, by duty (0 added for a duty with none, so that every duty has a series from the first pass)."), metric.WithUnit("{task}"))
	i.maxLag, _ = m.Float64Gauge(MetricSweeperMaxLag, metric.WithDescription("The largest lag behind a due time among the tasks the last pass handled, by duty (0 when none was due)."), metric.WithUnit("s"))
	i.lastPass, _ = m.Float64Gauge(MetricSweeperLastPass, metric.WithDescription("When the last sweeper pass ended, in seconds since the Unix epoch."), metric.WithUnit("s"))
	i.apiRequests, _ = m.Int64Counter(MetricAPIRequests, metric.WithDescription("Control API requests answered, by method, route and HTTP status."), metric.WithUnit("{request}"))
	i.queuedAge, _ = m.Float64Gauge(MetricQueuedOldestAge, metric.WithDescription("The longest a PENDING or QUEUED attempt the sweeper looked at (a delivery probe, a start timeout) had waited to start, by worker, held 2 minutes (0 for a worker with none): alert on its max over a window at least as long as the longest start timeout."), metric.WithUnit("s"))
	i.publishFailures, _ = m.Int64Counter(MetricPublishFailures, metric.WithDescription("Transition events not delivered to Pub/Sub (left in the outbox), by operation (publish after a commit, redrive) and cause (a gRPC status code name, message, attempts)."), metric.WithUnit("{event}"))
	i.apiDuration, _ = m.Float64Histogram(MetricAPIDuration, metric.WithDescription("Time to answer a control API request, by method and route."), metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(spanattr.LatencyBuckets...))
	return &i
}

// RecordTransitions counts committed transitions, and among them zombies,
// scheduled retries and dead letters. The store calls it after each
// commit.
func RecordTransitions(ctx context.Context, trs []task.Transition) {
	in := inst()
	for _, tr := range trs {
		in.transitions.Add(ctx, 1, metric.WithAttributes(fromKey.String(string(tr.From)), toKey.String(string(tr.To)),
			reasonKey.String(tr.Reason), spanattr.WorkerKey.String(tr.Worker)))
		if tr.Outcome == api.OutcomeZombie {
			in.zombies.Add(ctx, 1, metric.WithAttributes(spanattr.WorkerKey.String(tr.Worker)))
		}
		if tr.NextAttempt > 0 {
			in.retries.Add(ctx, 1, metric.WithAttributes(spanattr.WorkerKey.String(tr.Worker), reasonKey.String(tr.Reason)))
		}
		if tr.DeadLetter {
			in.deadLetters.Add(ctx, 1, metric.WithAttributes(spanattr.WorkerKey.String(tr.Worker), reasonKey.String(tr.Reason)))
		}
	}
}

// RecordStarted records, for a committed result that started an attempt
// (QUEUED → RUNNING), its enqueue → started latency: from the attempt's
// schedule time (a retry's) or its creation, whichever is later, to its
// start.
func RecordStarted(ctx context.Context, r task.Result) {
	a := r.Attempt
	if a == nil || a.StartedAt == nil {
		return
	}
	started := false
	for _, tr := range r.Transitions {
		started = started || (tr.From == api.Queued && tr.To == api.Running)
	}
	if !started {
		return
	}
	from := a.CreatedAt
	if a.ScheduledAt != nil && a.ScheduledAt.After(from) {
		from = *a.ScheduledAt
	}
	if from.IsZero() {
		return
	}
	inst().startLatency.Record(ctx, max(0, a.StartedAt.Sub(from).Seconds()), metric.WithAttributes(spanattr.WorkerKey.String(r.Task.Worker)))
}

// RecordCallback records one answered callback.
func RecordCallback(ctx context.Context, kind string, status int, disposition string, d time.Duration, rpcs int64) {
	in := inst()
	in.callbacks.Add(ctx, 1, metric.WithAttributes(spanattr.CallbackKey.String(kind), statusKey.Int(status), spanattr.DispositionKey.String(disposition)))
	in.callbackDur.Record(ctx, d.Seconds(), metric.WithAttributes(spanattr.CallbackKey.String(kind), spanattr.DispositionKey.String(disposition)))
	in.callbackRPCs.Record(ctx, rpcs, metric.WithAttributes(spanattr.CallbackKey.String(kind)))
}

// Submit results.
const (
	SubmitCreated  = "created"
	SubmitExisting = "existing"
	SubmitRejected = "rejected"
)

// RecordSubmit counts n submitted tasks with result (SubmitCreated, ...).
func RecordSubmit(ctx context.Context, result string, n int) {
	if n > 0 {
		inst().submits.Add(ctx, int64(n), metric.WithAttributes(spanattr.ResultKey.String(result)))
	}
}

// Sweeper results.
const (
	SweepApplied = "applied"
	SweepNoOp    = "noop"
	SweepError   = "error"
)

// RecordSweep records one due task the sweeper handled for duty: its lag
// since due (when known) and the result (SweepApplied, ...).
func RecordSweep(ctx context.Context, duty, result string, due *time.Time, now time.Time) {
	in := inst()
	in.handled.Add(ctx, 1, metric.WithAttributes(spanattr.DutyKey.String(duty), spanattr.ResultKey.String(result)))
	if due != nil {
		in.sweeperLag.Record(ctx, max(0, now.Sub(*due).Seconds()), metric.WithAttributes(spanattr.DutyKey.String(duty)))
	}
}

// RecordOutbox records what an outbox re-drive pass found undelivered:
// how many events, and the age of the oldest (0 when none).
func RecordOutbox(ctx context.Context, backlog int, oldest time.Duration) {
	in := inst()
	in.backlog.Record(ctx, int64(backlog))
	in.oldestAge.Record(ctx, max(0, oldest.Seconds()))
}

// RecordQueued records, for each worker of oldest, the age of the oldest
// attempt waiting to start (PENDING or QUEUED) that the sweeper looked at
// lately, 0 for a worker with none. The sweeper sees every such attempt
// at its delivery probes and start timeouts (docs/contract.md §5.4), not
// at every pass, so the gauge is a sawtooth: read its max over a window at
// least as long as the longest start timeout.
func RecordQueued(ctx context.Context, oldest map[string]time.Duration) {
	in := inst()
	for w, age := range oldest {
		in.queuedAge.Record(ctx, max(0, age.Seconds()), metric.WithAttributes(spanattr.WorkerKey.String(w)))
	}
}

// Event publish operations (RecordPublishFailure).
const (
	PublishAfterCommit = "publish"
	PublishRedrive     = "redrive"
)

// RecordPublishFailure counts n transition events that op (PublishAfterCommit,
// PublishRedrive) could not deliver to Pub/Sub, with a bounded cause (a
// gRPC status code name such as NotFound or Unavailable, or a word).
func RecordPublishFailure(ctx context.Context, op, cause string, n int) {
	if n > 0 {
		inst().publishFailures.Add(ctx, int64(n), metric.WithAttributes(opKey.String(op), causeKey.String(cause)))
	}
}

// Sweeper pass results.
const (
	PassOK    = "ok"
	PassError = "error"
)

// PassDuty is one duty's figures of a sweeper pass.
type PassDuty struct {
	// Name is the duty (deadline, cancel, lease, dispatch).
	Name string
	// Due is how many due tasks the pass found for it.
	Due int
	// MaxLag is the largest lag behind a due time among them.
	MaxLag time.Duration
}

// RecordPass records one sweeper pass that ended at end, with result
// PassOK or PassError: the pass counter, the time of the last pass, and
// per duty the due tasks found and the largest lag. Every duty gets its
// series, zero when nothing was due, so that an operator (and /metrics)
// sees a live sweeper from its first pass.
func RecordPass(ctx context.Context, result string, end time.Time, duties []PassDuty) {
	in := inst()
	in.passes.Add(ctx, 1, metric.WithAttributes(spanattr.ResultKey.String(result)))
	in.lastPass.Record(ctx, float64(end.UnixMilli())/1000)
	for _, d := range duties {
		attrs := metric.WithAttributes(spanattr.DutyKey.String(d.Name))
		in.due.Add(ctx, int64(d.Due), attrs)
		in.maxLag.Record(ctx, max(0, d.MaxLag.Seconds()), attrs)
	}
}

// RecordAPI records one answered control API request: its method, its
// route (APIRoute of the path) and status, and how long it took.
func RecordAPI(ctx context.Context, method, route string, status int, d time.Duration) {
	in := inst()
	in.apiRequests.Add(ctx, 1, metric.WithAttributes(methodKey.String(method), routeKey.String(route), statusKey.Int(status)))
	in.apiDuration.Record(ctx, d.Seconds(), metric.WithAttributes(methodKey.String(method), routeKey.String(route)))
}
