package events

import (
	"context"
	"errors"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/servo-dev/servo/internal/spanattr"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/telemetry"
)

// traceMessage puts the trace context of the hop that committed tr (stored
// with the transition, so the outbox re-drive has it too) into msg's
// attributes, under a messaging producer span ("send servo-task-events")
// that is the child of that hop's span. A transition committed without a
// trace context gets none.
func (p *Publisher) traceMessage(ctx context.Context, tr task.Transition, msg *pubsub.Message) {
	sc := telemetry.SpanContextOf(tr.Trace)
	if !sc.IsValid() {
		return
	}
	ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	_, span := telemetry.Tracer().Start(ctx, "send "+p.events.ID(), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(append(spanattr.TaskAttrs(tr.TaskID, tr.Attempt, tr.TenantID, tr.Worker),
			attribute.String("messaging.system", "gcp_pubsub"), attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", p.events.ID()), attribute.String("messaging.message.id", tr.EventID),
			attribute.String("servo.to", string(tr.To)))...))
	telemetry.Inject(trace.ContextWithSpan(ctx, span), propagation.MapCarrier(msg.Attributes))
	span.End()
}

// outboxBacklog is what one re-drive pass found undelivered past the
// grace period (due, or backed off after a failed delivery): how many
// entries, each once, and the oldest.
type outboxBacklog struct {
	n      int
	oldest time.Time
	seen   map[string]bool
}

func (b *outboxBacklog) add(es []store.OutboxEntry) {
	for _, e := range es {
		if b.seen[e.EventID] {
			continue
		}
		if b.seen == nil {
			b.seen = map[string]bool{}
		}
		b.seen[e.EventID] = true
		b.n++
		if b.oldest.IsZero() || e.OccurredAt.Before(b.oldest) {
			b.oldest = e.OccurredAt
		}
	}
}

func (b *outboxBacklog) record(ctx context.Context, now time.Time) {
	var age time.Duration
	if !b.oldest.IsZero() {
		age = now.Sub(b.oldest)
	}
	telemetry.RecordOutbox(ctx, b.n, age)
}

// Causes of servo.events.publish_failures besides gRPC status code names
// (publishCause): the message could not be built, or the dead letter's
// attempt history could not be read.
const (
	causeMessage  = "message"
	causeAttempts = "attempts"
)

// publishCause names a failed publish's cause, bounded: the gRPC status
// code's name (NotFound: the topic is gone; PermissionDenied;
// Unavailable; DeadlineExceeded: no answer within the publish timeout).
func publishCause(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded.String()
	case errors.Is(err, context.Canceled):
		return codes.Canceled.String()
	}
	if c := status.Code(err); c <= codes.Unauthenticated {
		return c.String()
	}
	return codes.Unknown.String()
}
