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
	MetricZombies          = "servo.zombies"
	MetricRetries          = "servo.retries.scheduled"
	MetricDeadLetters      = "servo.dead_letters"
	MetricOutboxBacklog    = "servo.outbox.backlog"
	MetricOutboxOldestAge  = "servo.outbox.oldest_age"
	MetricStartLatency     = "servo.task.start_latency"
)

// Attribute keys of the metrics.
const (
	fromKey   = attribute.Key("servo.from")
	toKey     = attribute.Key("servo.to")
	reasonKey = attribute.Key("servo.reason")
	statusKey = attribute.Key("http.response.status_code")
)

type instruments struct {
	transitions, callbacks, submits, handled, zombies, retries, deadLetters metric.Int64Counter
	callbackDur, sweeperLag, startLatency                                   metric.Float64Histogram
	callbackRPCs                                                            metric.Int64Histogram
	backlog                                                                 metric.Int64Gauge
	oldestAge                                                               metric.Float64Gauge
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
	i.deadLetters, _ = m.Int64Counter(MetricDeadLetters, metric.WithDescription("Tasks that ended FAILED with no retry left (dead letters), by worker."), metric.WithUnit("{task}"))
	i.backlog, _ = m.Int64Gauge(MetricOutboxBacklog, metric.WithDescription("Undelivered outbox events the last re-drive pass found past their grace period."), metric.WithUnit("{event}"))
	i.oldestAge, _ = m.Float64Gauge(MetricOutboxOldestAge, metric.WithDescription("Age of the oldest undelivered outbox event the last re-drive pass found."), metric.WithUnit("s"))
	i.startLatency, _ = m.Float64Histogram(MetricStartLatency, metric.WithDescription("Time from an attempt's enqueue (or its retry's schedule time) to its accepted `started`, by worker."), metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(spanattr.LatencyBuckets...))

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
			in.deadLetters.Add(ctx, 1, metric.WithAttributes(spanattr.WorkerKey.String(tr.Worker)))
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
