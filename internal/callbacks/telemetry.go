package callbacks

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/servo-dev/servo/internal/spanattr"
	"github.com/servo-dev/servo/internal/telemetry"
)

// instrument wraps the callbacks in an OpenTelemetry HTTP server span that
// continues the worker's trace (the SDK sends W3C traceparent), named after
// the route ("POST /v1/tasks/{taskId}/started"). The Firestore transaction
// is its child (store.Apply's span).
func instrument(h *handler) http.Handler {
	return otelhttp.NewHandler(h, "servo.callbacks", otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		if _, kind, ok := SplitPath(r.URL.Path); ok {
			return r.Method + " " + PathPrefix + "{taskId}/" + string(kind)
		}
		return r.Method
	}))
}

// observe puts the callback's Servo attributes on its span (ids, attempt,
// disposition; never the token or the body) and records its metrics.
func (h *handler) observe(ctx context.Context, x *exchange, latency time.Duration) {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(spanattr.TaskAttrs(x.taskID, x.attempt, x.tenantID, "")...)
	span.SetAttributes(spanattr.CallbackKey.String(string(x.kind)), spanattr.DispositionKey.String(string(x.resp.Disposition)))
	if x.resp.Error != "" {
		span.SetAttributes(attribute.String("error.type", x.resp.Error))
	}
	var rpcs int64
	if x.rpcs != nil {
		rpcs = x.rpcs.Load()
	}
	telemetry.RecordCallback(ctx, string(x.kind), x.status, string(x.resp.Disposition), latency, rpcs)
}
