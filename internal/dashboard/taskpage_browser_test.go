package dashboard_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/spanattr"
)

// callbackSpan reports whether s is Servo's server span of the callback
// kind (started, heartbeat, completed).
func callbackSpan(s sdktrace.ReadOnlySpan, kind string) bool {
	if s.SpanKind() != trace.SpanKindServer {
		return false
	}
	for _, a := range s.Attributes() {
		if a.Key == spanattr.CallbackKey && a.Value.AsString() == kind {
			return true
		}
	}
	return false
}

// TestTaskPageTrace: the task page of a task that ran in the stack shows
// its trace timeline: a row for every span the recorder holds for the
// task (the submit, the enqueue, the worker's attempt, the started,
// heartbeat and completed callbacks on both sides with their
// transactions, the worker's own spans), each worker span indented under
// its parent, the span that ended in error marked; and no task token.
func TestTaskPageTrace(t *testing.T) {
	f := stack(t)
	id := f.submit(t, map[string]any{"worker": "traced", "taskKey": "traced"})
	f.waitState(t, id, api.Succeeded)

	// The recorder's spans of the task once the attempt's are all ended:
	// the worker's attempt span ends after its completed callback.
	var spans []sdktrace.ReadOnlySpan
	deadline := time.Now().Add(30 * time.Second)
	for {
		spans = f.traces.TaskSpans(id)
		var started, completed, process bool
		for _, s := range spans {
			started = started || callbackSpan(s, "started")
			completed = completed || callbackSpan(s, "completed")
			process = process || (s.Name() == "process traced" && s.SpanKind() == trace.SpanKindServer)
		}
		if started && completed && process {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the recorder holds %d spans of the task, without the started and completed callbacks and the attempt", len(spans))
		}
		time.Sleep(50 * time.Millisecond)
	}
	names := map[string]bool{}
	errored := 0
	for _, s := range spans {
		names[s.Name()] = true
		if s.Status().Code == codes.Error {
			errored++
		}
	}
	if !names[stepSpan] || !names[failedSpan] || errored == 0 {
		t.Fatalf("the recorder lacks the worker's own spans: %v", names)
	}
	t.Logf("%d spans recorded, %d names, %d with an error", len(spans), len(names), errored)

	ctx := tab(t)
	if err := chromedp.Run(ctx, chromedp.Navigate(f.stack.URL+"/ui/tasks/"+id)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, fmt.Sprintf(`document.querySelectorAll("#trace g.span").length >= %d`, len(spans)), "a row per recorded span")
	waitJS(t, ctx, `document.getElementById("status").textContent === "live"`, "the stream")
	var page struct {
		Names  []string
		Depths map[string]int
		Errors []string
		HTML   string
	}
	if err := chromedp.Run(ctx, chromedp.Evaluate(`(() => {
		const rows = Array.from(document.querySelectorAll("#trace g.span"));
		const depths = {};
		rows.forEach((g) => { depths[g.dataset.name] = Number(g.dataset.depth); });
		return {
			Names: rows.map((g) => g.dataset.name),
			Depths: depths,
			Errors: rows.filter((g) => g.classList.contains("err")).map((g) => g.dataset.name),
			HTML: document.documentElement.outerHTML,
		};
	})()`, &page)); err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	for _, n := range page.Names {
		shown[n] = true
	}
	for n := range names {
		if !shown[n] {
			t.Errorf("span %q is recorded but not on the trace timeline", n)
		}
	}
	// The submit is the task's first span.
	if !shown[spans[0].Name()] {
		t.Errorf("the submit span %q is not shown", spans[0].Name())
	}
	if d, p := page.Depths[failedSpan], page.Depths[stepSpan]; d != p+1 || p < 1 {
		t.Errorf("%s at depth %d, its parent %s at %d: want it nested under its parent, itself under the attempt", failedSpan, d, stepSpan, p)
	}
	if len(page.Errors) < errored || !strings.Contains(strings.Join(page.Errors, ","), failedSpan) {
		t.Errorf("error spans marked: %v, want the %d recorded (%s among them)", page.Errors, errored, failedSpan)
	}
	legend := text(t, ctx, "#trace-legend")
	if !strings.Contains(legend, "with an error") {
		t.Errorf("legend %q does not count the errors", legend)
	}
	f.mu.Lock()
	for _, tok := range f.tokens {
		if tok != "" && strings.Contains(page.HTML, tok) {
			t.Error("a task token is on the task page")
		}
	}
	f.mu.Unlock()
	shot(t, ctx, "trace")
}

// TestAttemptHeartbeatTicks: a task whose worker sent K heartbeats shows
// K ticks on its attempt's bar and says "K heartbeats" in the attempt's
// details.
func TestAttemptHeartbeatTicks(t *testing.T) {
	const k = 3
	f := stack(t)
	id := f.submit(t, map[string]any{"worker": "beats", "taskKey": "beats", "payload": map[string]any{"beats": k}})
	f.waitState(t, id, api.Succeeded)
	ctx := tab(t)
	if err := chromedp.Run(ctx, chromedp.Navigate(f.stack.URL+"/ui/tasks/"+id)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.querySelector('#timeline g.bar[data-attempt="1"]') !== null`, "attempt 1's bar")
	var ticks int
	var xs []string
	if err := chromedp.Run(ctx,
		chromedp.Evaluate(`document.querySelectorAll('#timeline g.bar[data-attempt="1"] line.hb').length`, &ticks),
		chromedp.Evaluate(`Array.from(document.querySelectorAll('#timeline g.bar[data-attempt="1"] line.hb'), (l) => l.getAttribute("x1"))`, &xs)); err != nil {
		t.Fatal(err)
	}
	if ticks != k {
		t.Errorf("%d ticks on attempt 1's bar (x %v), want %d", ticks, xs, k)
	}
	if got := text(t, ctx, "#attempt-1 .hbcount"); got != fmt.Sprintf("%d heartbeats", k) {
		t.Errorf("attempt 1 says %q, want %q", got, fmt.Sprintf("%d heartbeats", k))
	}
	shot(t, ctx, "ticks")
}

// A task whose worker is not running says why it is not moving: its page
// shows the failing delivery Cloud Tasks reported (tries, status, error,
// next try) while it is QUEUED.
func TestTaskPageDelivery(t *testing.T) {
	f := stack(t)
	id := f.submit(t, map[string]any{"worker": "down", "taskKey": "down"})
	f.cancelLater(t, id)
	ctx := tab(t)
	if err := chromedp.Run(ctx, chromedp.Navigate(f.stack.URL+"/ui/tasks/"+id)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.querySelector('#task-delivery') !== null`, "the delivery line (the first probe is 5 s after the enqueue)")
	got := text(t, ctx, "#task-delivery")
	for _, want := range []string{"Delivery", "failing", "tries", "UNAVAILABLE", "connection refused", "checked"} {
		if !strings.Contains(got, want) {
			t.Errorf("delivery line %q lacks %q", got, want)
		}
	}
	if s := text(t, ctx, "#task-state"); s != "QUEUED" {
		t.Errorf("state %q, want QUEUED", s)
	}
	shot(t, ctx, "delivery")
}
