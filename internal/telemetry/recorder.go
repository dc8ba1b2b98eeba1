package telemetry

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/servo-dev/servo/internal/spanattr"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// SweepPassSpan is the name of the sweeper's span per pass.
const SweepPassSpan = "servo.sweeper.pass"

// DefaultRecorderSpans is how many ended spans a Recorder keeps.
const DefaultRecorderSpans = 20000

// Recorder is an in-memory span processor that keeps the most recent ended
// spans (a ring), for `servo dev`'s `GET /v1/tasks/{id}/trace` and tests.
// It is not meant for production: it keeps spans in memory.
type Recorder struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
	next  int
	full  bool
}

// NewRecorder returns a Recorder keeping the last n spans (n ≤ 0:
// DefaultRecorderSpans).
func NewRecorder(n int) *Recorder {
	if n <= 0 {
		n = DefaultRecorderSpans
	}
	return &Recorder{spans: make([]sdktrace.ReadOnlySpan, n)}
}

// OnStart implements sdktrace.SpanProcessor.
func (r *Recorder) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd keeps s.
func (r *Recorder) OnEnd(s sdktrace.ReadOnlySpan) {
	r.mu.Lock()
	r.spans[r.next] = s
	r.next++
	if r.next == len(r.spans) {
		r.next, r.full = 0, true
	}
	r.mu.Unlock()
}

// Shutdown implements sdktrace.SpanProcessor.
func (r *Recorder) Shutdown(context.Context) error { return nil }

// ForceFlush implements sdktrace.SpanProcessor.
func (r *Recorder) ForceFlush(context.Context) error { return nil }

// Spans returns the kept spans, oldest first.
func (r *Recorder) Spans() []sdktrace.ReadOnlySpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sdktrace.ReadOnlySpan
	if r.full {
		out = append(out, r.spans[r.next:]...)
	}
	return append(out, r.spans[:r.next]...)
}

// TaskSpans returns the spans of a task, ordered by start: every span of
// the traces in which a span names the task (servo.task_id) outside a
// sweeper pass, plus the spans naming it elsewhere (a sweeper's, linked to
// the task's trace) and their descendants.
func (r *Recorder) TaskSpans(taskID string) []sdktrace.ReadOnlySpan {
	all := r.Spans()
	// A sweeper pass's trace holds every task it handled: only the task's
	// own spans of it are kept.
	sweeps := map[trace.TraceID]bool{}
	for _, s := range all {
		if s.Name() == SweepPassSpan {
			sweeps[s.SpanContext().TraceID()] = true
		}
	}
	traces := map[trace.TraceID]bool{}
	keep := map[trace.SpanID]bool{}
	for _, s := range all {
		if !hasTask(s, taskID) {
			continue
		}
		keep[s.SpanContext().SpanID()] = true
		if id := s.SpanContext().TraceID(); !sweeps[id] && !hasAttr(s, spanattr.DutyKey) {
			traces[id] = true
		}
	}
	// Descendants of kept spans in other traces (a sweeper's transaction
	// and enqueue under its per-task span).
	for grew := true; grew; {
		grew = false
		for _, s := range all {
			id := s.SpanContext().SpanID()
			if !keep[id] && keep[s.Parent().SpanID()] && s.Parent().IsValid() {
				keep[id], grew = true, true
			}
		}
	}
	var out []sdktrace.ReadOnlySpan
	for _, s := range all {
		if traces[s.SpanContext().TraceID()] || keep[s.SpanContext().SpanID()] {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	return out
}

func hasTask(s sdktrace.ReadOnlySpan, taskID string) bool {
	for _, a := range s.Attributes() {
		if a.Key == spanattr.TaskIDKey && a.Value.AsString() == taskID {
			return true
		}
	}
	return false
}

func hasAttr(s sdktrace.ReadOnlySpan, k attribute.Key) bool {
	for _, a := range s.Attributes() {
		if a.Key == k {
			return true
		}
	}
	return false
}

// SpanView is one span of a task's trace as `GET /v1/tasks/{id}/trace`
// returns it.
type SpanView struct {
	TraceID      string    `json:"traceId"`
	SpanID       string    `json:"spanId"`
	ParentSpanID string    `json:"parentSpanId,omitempty"`
	Name         string    `json:"name"`
	Kind         string    `json:"kind"`
	Service      string    `json:"service,omitempty"`
	Start        time.Time `json:"start"`
	// OffsetMs is the start relative to the first span of the answer.
	OffsetMs   float64           `json:"offsetMs"`
	DurationMs float64           `json:"durationMs"`
	Status     string            `json:"status"`
	Attributes map[string]string `json:"attributes,omitempty"`
	Links      []string          `json:"links,omitempty"`
}

// TaskTrace is the answer of `GET /v1/tasks/{id}/trace`.
type TaskTrace struct {
	TaskID string     `json:"taskId"`
	Spans  []SpanView `json:"spans"`
}

// View renders spans for the API.
func View(taskID string, spans []sdktrace.ReadOnlySpan) TaskTrace {
	out := TaskTrace{TaskID: taskID, Spans: []SpanView{}}
	var t0 time.Time
	for i, s := range spans {
		if i == 0 {
			t0 = s.StartTime()
		}
		v := SpanView{
			TraceID: s.SpanContext().TraceID().String(), SpanID: s.SpanContext().SpanID().String(),
			Name: s.Name(), Kind: s.SpanKind().String(), Start: s.StartTime().UTC(),
			OffsetMs:   float64(s.StartTime().Sub(t0).Microseconds()) / 1000,
			DurationMs: float64(s.EndTime().Sub(s.StartTime()).Microseconds()) / 1000,
			Status:     s.Status().Code.String(),
			Attributes: map[string]string{},
		}
		if s.Parent().IsValid() {
			v.ParentSpanID = s.Parent().SpanID().String()
		}
		if svc, ok := s.Resource().Set().Value("service.name"); ok {
			v.Service = svc.AsString()
		}
		for _, a := range s.Attributes() {
			v.Attributes[string(a.Key)] = a.Value.Emit()
		}
		for _, l := range s.Links() {
			v.Links = append(v.Links, l.SpanContext.TraceID().String()+"/"+l.SpanContext.SpanID().String())
		}
		out.Spans = append(out.Spans, v)
	}
	return out
}

// Handler serves `GET /v1/tasks/{id}/trace` (the path's {id} wildcard):
// the task's recorded spans as a TaskTrace, 404 task_trace_not_found when
// none is recorded.
func (r *Recorder) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		id := req.PathValue("id")
		spans := r.TaskSpans(id)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		if len(spans) == 0 {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "task_trace_not_found",
				"message": "no span of this task is recorded in this process (servo dev keeps the most recent spans only)"})
			return
		}
		_ = json.NewEncoder(w).Encode(View(id, spans))
	})
}
