package dispatcher

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
)

// instrument wraps the API in an OpenTelemetry HTTP server span that
// continues the caller's W3C traceparent; the span is named after the
// route ("POST /v1/tasks", "GET /v1/tasks/{id}"), as the HTTP semantic
// conventions ask.
func instrument(h *handler) http.Handler {
	return otelhttp.NewHandler(h, "servo.api", otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		_, p := h.mux.Handler(r)
		switch {
		case p == "" || p == "/":
			return r.Method
		case !strings.Contains(p, " "):
			return r.Method + " " + p
		}
		return p
	}))
}
