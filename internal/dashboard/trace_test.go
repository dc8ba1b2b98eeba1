package dashboard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/servo-dev/servo/internal/spanattr"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/telemetry"
)

// spanSpec is one span a test records: its name, its parent (an earlier
// spec's index, -1 for none), its start and end in ms from t0, and
// whether it ends in error.
type spanSpec struct {
	name       string
	parent     int
	start, end int
	err        bool
}

// record records specs for task id with a tracer of its own and returns
// the recorder and the first span's trace context as a traceparent.
func record(t *testing.T, id string, t0 time.Time, specs []spanSpec) (*telemetry.Recorder, string) {
	t.Helper()
	rec := telemetry.NewRecorder(0)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	tr := tp.Tracer("test")
	ctxs := make([]context.Context, len(specs))
	var tp0 string
	for i, s := range specs {
		parent := context.Background()
		if s.parent >= 0 {
			parent = ctxs[s.parent]
		}
		ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
		ctx, span := tr.Start(parent, s.name, trace.WithTimestamp(ms(s.start)), trace.WithAttributes(spanattr.TaskIDKey.String(id)))
		ctxs[i] = ctx
		if i == 0 {
			tp0 = telemetry.TraceParent(ctx)
		}
		var err error
		if s.err {
			err = errors.New("boom")
		}
		spanattr.EndSpan(endAt{span, ms(s.end)}, err)
	}
	return rec, tp0
}

// endAt ends its span at a given time (spanattr.EndSpan ends it now).
type endAt struct {
	trace.Span
	at time.Time
}

func (e endAt) End(...trace.SpanEndOption) { e.Span.End(trace.WithTimestamp(e.at)) }

func TestTraceOf(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const id = "tsk_01JTEST0000000000000000000"
	rec, tp := record(t, id, t0, []spanSpec{
		{"POST /v1/tasks", -1, 0, 100, false},
		{"send example", 0, 20, 40, false},
		{"process example", 1, 50, 1000, false},
		{"step", 2, 60, 900, true},
		{"POST /v1/tasks/{taskId}/completed", 2, 950, 1000, false},
	})
	tk := &task.Task{ID: id, Trace: tp}

	v := traceOf(tk, rec, "")
	if v == nil || v.Total != 5 || len(v.Rows) != 5 || v.Errors != 1 || v.Link != "" || v.Note != "" || v.Span != "1.00s" {
		t.Fatalf("trace = %+v", v)
	}
	// Rows in tree order, indented by depth; bars placed on the time axis
	// (1 s over tracePlot units); the error marked.
	x := func(ms int) int { return int(math.Round(float64(ms) / 1000 * tracePlot)) }
	want := []struct {
		name     string
		depth    int
		x, w     int
		err      bool
		duration string
	}{
		{"POST /v1/tasks", 0, tracePlotX, x(100), false, "100ms"},
		{"send example", 1, tracePlotX + x(20), x(40) - x(20), false, "20.0ms"},
		{"process example", 2, tracePlotX + x(50), x(1000) - x(50), false, "950ms"},
		{"step", 3, tracePlotX + x(60), x(900) - x(60), true, "840ms"},
		{"POST /v1/tasks/{taskId}/completed", 3, tracePlotX + x(950), x(1000) - x(950), false, "50.0ms"},
	}
	for i, r := range v.Rows {
		w := want[i]
		if r.Name != w.name || r.Depth != w.depth || r.X != w.x || r.W != w.w || r.Error != w.err || r.Duration != w.duration {
			t.Errorf("row %d = %s depth %d x %d w %d err %v %s, want %+v", i, r.Name, r.Depth, r.X, r.W, r.Error, r.Duration, w)
		}
		if r.LabelX != traceName+w.depth*traceIndent || r.Y != i*traceRow+4 {
			t.Errorf("row %d at label x %d, y %d", i, r.LabelX, r.Y)
		}
	}
	if !strings.Contains(v.Rows[3].Title, "error: boom") {
		t.Errorf("the error span's title %q does not say its error", v.Rows[3].Title)
	}
	sc := telemetry.SpanContextOf(tp)
	if v.TraceID != sc.TraceID().String() {
		t.Errorf("trace id %q, want %q", v.TraceID, sc.TraceID())
	}

	// Production: no recorder, a project: a link to the trace.
	v = traceOf(tk, nil, "my-project")
	if v == nil || len(v.Rows) != 0 || v.Note != "" {
		t.Fatalf("production trace = %+v", v)
	}
	u, err := url.Parse(v.Link)
	if err != nil || u.Host != "console.cloud.google.com" || u.Query().Get("project") != "my-project" || u.Query().Get("tid") != sc.TraceID().String() {
		t.Errorf("link %q", v.Link)
	}
	// A recorder and a project: the timeline and the link.
	if v = traceOf(tk, rec, "my-project"); len(v.Rows) != 5 || v.Link == "" {
		t.Errorf("both: %d rows, link %q", len(v.Rows), v.Link)
	}
	// Neither: no trace section.
	if v = traceOf(tk, nil, ""); v != nil {
		t.Errorf("neither: %+v", v)
	}
	// A recorder without the task's spans: a note.
	if v = traceOf(&task.Task{ID: "tsk_01JOTHER000000000000000000"}, rec, ""); v == nil || len(v.Rows) != 0 || v.Note == "" {
		t.Errorf("no span: %+v", v)
	}
	// A project but no stored trace context: a note, no link.
	if v = traceOf(&task.Task{ID: id}, nil, "my-project"); v == nil || v.Link != "" || v.Note == "" {
		t.Errorf("no context: %+v", v)
	}
}

// TestTraceRowsBounded: a task with more spans than maxTraceRows draws
// maxTraceRows and counts the rest.
func TestTraceRowsBounded(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const id = "tsk_01JTEST0000000000000000000"
	specs := []spanSpec{{"process", -1, 0, 10000, false}}
	for i := range maxTraceRows + 20 {
		specs = append(specs, spanSpec{fmt.Sprint("heartbeat ", i), 0, i * 10, i*10 + 5, false})
	}
	rec, _ := record(t, id, t0, specs)
	v := traceOf(&task.Task{ID: id}, rec, "")
	if v.Total != maxTraceRows+21 || len(v.Rows) != maxTraceRows || v.Height != maxTraceRows*traceRow+4 {
		t.Fatalf("total %d, rows %d, height %d", v.Total, len(v.Rows), v.Height)
	}
}

func TestCut(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"a longer name", 5, "a lo…"},
		{"héllo wörld", 6, "héllo…"},
	} {
		if got := cut(c.s, c.n); got != c.want {
			t.Errorf("cut(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}

// TestTraceRendering: the task page's trace section as the template
// renders it: the timeline (a span name holding markup shows as text), the
// production link, the note, or nothing.
func TestTraceRendering(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const id = "tsk_01JTEST0000000000000000000"
	const hostile = `<img src=x onerror=alert(1)>`
	rec, tp := record(t, id, t0, []spanSpec{
		{"process example", -1, 0, 100, false},
		{hostile, 0, 10, 50, true},
	})
	tk := task.Task{ID: id, Trace: tp}
	render := func(tr *TraceView) string {
		t.Helper()
		var b strings.Builder
		if err := parsePages()["task"].ExecuteTemplate(&b, "live", layoutData{View: &TaskView{Task: tk, Trace: tr}}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	tid := telemetry.SpanContextOf(tp).TraceID().String()
	for _, c := range []struct {
		name      string
		trace     *TraceView
		want, not []string
	}{
		{"recorded", traceOf(&tk, rec, ""),
			[]string{`<svg class="trace" id="trace"`, `<g class="span" data-name="process example" data-depth="0">`,
				`<g class="span err" data-name="&lt;img src=x onerror=alert(1)&gt;" data-depth="1">`, `&lt;img src=x onerror=alert(1)&gt;</text>`,
				`2 spans over 100ms`, `1 with an error`},
			[]string{hostile, "trace-link", "style="}},
		{"production", traceOf(&tk, nil, "my-project"),
			[]string{`id="trace-link"`, `href="https://console.cloud.google.com/traces/list?project=my-project&amp;tid=` + tid + `"`},
			[]string{`<svg class="trace"`, "trace-note"}},
		{"no span recorded", traceOf(&task.Task{ID: "tsk_01JOTHER000000000000000000"}, rec, ""),
			[]string{`id="trace-note"`, "No span of this task is recorded"}, []string{`<svg class="trace"`}},
		{"neither", traceOf(&tk, nil, ""), nil, []string{"<h2>Trace</h2>", "trace-"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			html := render(c.trace)
			for _, w := range c.want {
				if !strings.Contains(html, w) {
					t.Errorf("no %q in\n%s", w, html)
				}
			}
			for _, n := range c.not {
				if strings.Contains(html, n) {
					t.Errorf("%q in the page", n)
				}
			}
		})
	}
}
