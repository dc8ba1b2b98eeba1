// Package logs configures log/slog for Cloud Logging: JSON lines with
// "severity", "message" and "time", and the trace fields
// ("logging.googleapis.com/trace", ".../spanId", ".../trace_sampled") of
// the OpenTelemetry span in the line's context (package telemetry), or, when
// there is none, of the request headers a handler put in the context with
// WithTrace. Cloud Logging then shows the line under its trace.
package logs

import (
	"context"
	"io"
	stdlog "log"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	oteltrace "go.opentelemetry.io/otel/trace"
)

// project is the default project of the trace field (SetProject).
var project atomic.Pointer[string]

// SetProject sets the Google Cloud project named in the trace field of
// lines whose context carries an OpenTelemetry span but no project of its
// own (WithTrace's). telemetry.Setup calls it.
func SetProject(p string) { project.Store(&p) }

func defaultProject() string {
	if p := project.Load(); p != nil {
		return *p
	}
	return ""
}

// Field names Cloud Logging reads from a JSON log line.
const (
	TraceKey   = "logging.googleapis.com/trace"
	SpanKey    = "logging.googleapis.com/spanId"
	SampledKey = "logging.googleapis.com/trace_sampled"
	ProjectID  = "GOOGLE_CLOUD_PROJECT"
)

// New returns a JSON logger in Cloud Logging's shape writing to w.
func New(w io.Writer, level slog.Leveler) *slog.Logger {
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.MessageKey:
				a.Key = "message"
			case slog.LevelKey:
				a.Key = "severity"
				lvl, _ := a.Value.Any().(slog.Level)
				a.Value = slog.StringValue(severity(lvl))
			}
			return a
		},
	})
	return slog.New(traceHandler{h})
}

// Default is New(os.Stderr, slog.LevelInfo).
func Default() *slog.Logger { return New(os.Stderr, slog.LevelInfo) }

func severity(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "ERROR"
	case l >= slog.LevelWarn:
		return "WARNING"
	case l >= slog.LevelInfo:
		return "INFO"
	}
	return "DEBUG"
}

type traceKey struct{}

type trace struct{ trace, span, project string }

// WithTrace returns ctx carrying the trace of r's X-Cloud-Trace-Context (or
// W3C traceparent) header, for project.
func WithTrace(ctx context.Context, r *http.Request, project string) context.Context {
	var id, span string
	if tp := r.Header.Get("traceparent"); tp != "" {
		if parts := strings.Split(tp, "-"); len(parts) == 4 {
			id, span = parts[1], parts[2]
		}
	} else if h := r.Header.Get("X-Cloud-Trace-Context"); h != "" {
		id, span, _ = strings.Cut(h, "/")
		span, _, _ = strings.Cut(span, ";")
	}
	if id == "" {
		return context.WithValue(ctx, traceKey{}, trace{project: project})
	}
	if project != "" {
		id = "projects/" + project + "/traces/" + id
	}
	return context.WithValue(ctx, traceKey{}, trace{id, span, project})
}

// traceName is Cloud Logging's trace field for id in project.
func traceName(project, id string) string {
	if project == "" {
		return id
	}
	return "projects/" + project + "/traces/" + id
}

type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	t, ok := ctx.Value(traceKey{}).(trace)
	if sc := oteltrace.SpanContextFromContext(ctx); sc.IsValid() {
		p := t.project
		if p == "" {
			p = defaultProject()
		}
		r.AddAttrs(slog.String(TraceKey, traceName(p, sc.TraceID().String())),
			slog.String(SpanKey, sc.SpanID().String()), slog.Bool(SampledKey, sc.IsSampled()))
		return h.Handler.Handle(ctx, r)
	}
	if ok && t.trace != "" {
		r.AddAttrs(slog.String(TraceKey, t.trace))
		if t.span != "" {
			r.AddAttrs(slog.String(SpanKey, t.span))
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(as)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}

// CaptureStdLog sends what the standard library's log package prints (the
// Google clients' and exporters' own notices, such as a deprecation) to l
// at level, one JSON line per call, instead of as plain text on stderr,
// which Cloud Logging would file as an unstructured entry. Entry points
// call it once.
func CaptureStdLog(l *slog.Logger, level slog.Level) {
	stdlog.SetFlags(0)
	stdlog.SetPrefix("")
	stdlog.SetOutput(stdLogWriter{l: l, level: level})
}

// stdLogWriter is the log package's output, written as slog records.
type stdLogWriter struct {
	l     *slog.Logger
	level slog.Level
}

func (w stdLogWriter) Write(p []byte) (int, error) {
	w.l.Log(context.Background(), w.level, strings.TrimRight(string(p), "\n"), "logger", "log")
	return len(p), nil
}
