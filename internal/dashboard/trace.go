package dashboard

import (
	"fmt"
	"math"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/servo-dev/servo/internal/spanattr"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/telemetry"
)

// Traces is where the task page finds a task's spans: the spans recorded
// in this process. *telemetry.Recorder satisfies it (servo dev).
type Traces interface {
	// TaskSpans returns the task's ended spans, ordered by start.
	TaskSpans(taskID string) []sdktrace.ReadOnlySpan
}

// Trace timeline geometry (SVG user units).
const (
	traceName    = 4    // the span names' column (indented by depth)
	traceService = 300  // the service · kind column
	traceDur     = 548  // the durations' right edge
	tracePlotX   = 558  // where the time axis starts
	tracePlot    = 432  // the bars' width at full span
	traceRow     = 18   // one span's row
	traceBar     = 10   // a bar's height
	traceIndent  = 12   // the indent per nesting level
	traceDepth   = 8    // the deepest indent drawn
	traceChars   = 46   // a name's characters at depth 0 (then it is cut)
	traceSvc     = 34   // the service · kind column's characters
	traceWidth   = 1000 // the chart's width
	// maxTraceRows bounds the rows drawn (a long task's heartbeats make
	// many spans); the rest are counted.
	maxTraceRows = 300
)

// CloudTraceURL is the Cloud Trace console page of a trace.
func CloudTraceURL(project, traceID string) string {
	return "https://console.cloud.google.com/traces/list?" + url.Values{"project": {project}, "tid": {traceID}}.Encode()
}

// TraceView is the task page's trace: the timeline of the spans recorded
// in this process (servo dev), else a link to the task's trace in Cloud
// Trace (production), else a note saying why there is neither.
type TraceView struct {
	// Width, Height and PlotX are the timeline's geometry; Span prints its
	// length.
	Width, Height, PlotX int
	// ServiceX and DurX are the service and duration columns' x (the
	// durations are right-aligned); BarH is a bar's height.
	ServiceX, DurX, BarH int
	Span                 string
	Rows                 []SpanRow
	// Total counts the task's spans; Rows holds at most maxTraceRows.
	Total int
	// Errors counts the spans whose status is an error.
	Errors int
	// TraceID is the task's trace (from its stored trace context); Link
	// opens it in the Cloud Trace console ("" without a project).
	TraceID string
	Link    string
	// Sampled: the stored context says the trace was sampled.
	Sampled bool
	// Note says why no timeline and no link is shown.
	Note string
}

// SpanRow is one span on the trace timeline.
type SpanRow struct {
	Name string
	// Label is Name cut to fit its indented column.
	Label   string
	Service string
	Kind    string
	// Component is "service · kind", cut to fit its column.
	Component string
	// Depth is the nesting under the spans shown (0: no parent shown).
	Depth    int
	Duration string
	Error    bool
	// Geometry: the row's top, the text baseline, the label's x, the bar.
	Y, TextY, LabelX, X, W int
	Title                  string
}

// traceOf builds the task page's trace from the recorded spans (when
// there is a recorder) and the task's stored trace context.
func traceOf(t *task.Task, traces Traces, project string) *TraceView {
	var spans []sdktrace.ReadOnlySpan
	if traces != nil {
		spans = traces.TaskSpans(t.ID)
	}
	if traces == nil && project == "" {
		return nil
	}
	v := &TraceView{}
	if sc := telemetry.SpanContextOf(t.Trace); sc.IsValid() {
		v.TraceID, v.Sampled = sc.TraceID().String(), sc.IsSampled()
		if project != "" {
			v.Link = CloudTraceURL(project, v.TraceID)
		}
	}
	if len(spans) > 0 {
		drawTrace(v, spans)
		return v
	}
	switch {
	case v.Link != "":
	case traces != nil:
		v.Note = "No span of this task is recorded in this process (servo dev keeps the most recent spans only)."
	default:
		v.Note = "This task has no stored trace context (it was submitted before tracing was on)."
	}
	return v
}

// drawTrace lays spans (ordered by start) out as rows: each span under
// its parent when the parent is among them, children by start.
func drawTrace(v *TraceView, spans []sdktrace.ReadOnlySpan) {
	byID := make(map[trace.SpanID]bool, len(spans))
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = true
	}
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	var roots []sdktrace.ReadOnlySpan
	start, end := spans[0].StartTime(), spans[0].EndTime()
	for _, s := range spans {
		if p := s.Parent(); p.IsValid() && byID[p.SpanID()] && p.SpanID() != s.SpanContext().SpanID() {
			children[p.SpanID()] = append(children[p.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
		if s.StartTime().Before(start) {
			start = s.StartTime()
		}
		if s.EndTime().After(end) {
			end = s.EndTime()
		}
		if s.Status().Code == codes.Error {
			v.Errors++
		}
	}
	span := end.Sub(start)
	v.Total, v.Span, v.Width, v.PlotX = len(spans), fmtDuration(span), traceWidth, tracePlotX
	v.ServiceX, v.DurX, v.BarH = traceService, traceDur, traceBar
	x := func(t time.Time) int {
		if span <= 0 {
			return tracePlotX
		}
		f := float64(t.Sub(start)) / float64(span)
		return tracePlotX + int(math.Round(min(1, max(0, f))*tracePlot))
	}
	seen := make(map[trace.SpanID]bool, len(spans))
	var walk func(s sdktrace.ReadOnlySpan, depth int)
	walk = func(s sdktrace.ReadOnlySpan, depth int) {
		id := s.SpanContext().SpanID()
		if seen[id] || len(v.Rows) == maxTraceRows {
			return
		}
		seen[id] = true
		v.Rows = append(v.Rows, spanRow(s, depth, len(v.Rows), start, x))
		for _, c := range children[id] {
			walk(c, depth+1)
		}
	}
	for _, s := range roots {
		walk(s, 0)
	}
	v.Height = max(1, len(v.Rows))*traceRow + 4
}

func spanRow(s sdktrace.ReadOnlySpan, depth, i int, start time.Time, x func(time.Time) int) SpanRow {
	indent := min(depth, traceDepth)
	r := SpanRow{Name: s.Name(), Kind: s.SpanKind().String(), Depth: depth, Error: s.Status().Code == codes.Error,
		Y: i*traceRow + 4, TextY: i*traceRow + 4 + traceBar, LabelX: traceName + indent*traceIndent}
	r.Label = cut(r.Name, traceChars-indent*2)
	if svc, ok := s.Resource().Set().Value("service.name"); ok {
		r.Service = svc.AsString()
	}
	r.Component = cut(r.Service+" · "+r.Kind, traceSvc)
	d := s.EndTime().Sub(s.StartTime())
	r.Duration = fmtDuration(d)
	r.X = x(s.StartTime())
	r.W = max(1, x(s.EndTime())-r.X)
	r.Title = fmt.Sprintf("%s (%s, %s): starts at +%s, lasts %s", r.Name, r.Service, r.Kind, fmtDuration(s.StartTime().Sub(start)), r.Duration)
	for _, a := range s.Attributes() {
		if a.Key == spanattr.AttemptKey {
			r.Title += fmt.Sprintf("; attempt %d", a.Value.AsInt64())
		}
	}
	if r.Error {
		r.Title += "; error: " + s.Status().Description
	}
	return r
}

// cut shortens s to n characters, ending it with "…" when it was longer.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n || n < 2 {
		return s
	}
	return string(r[:n-1]) + "…"
}

// fmtDuration prints a span's duration: 850µs, 12.3ms, 1.25s, then as fmtAge.
func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000)
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	return fmtAge(d)
}
