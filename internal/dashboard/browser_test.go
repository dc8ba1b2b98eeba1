package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/examples/worker/partitions"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/spanattr"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/telemetry"
	"github.com/servo-dev/servo/worker"
)

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore, emulator.PubSub) }

// docsScreenshots, when set, makes TestScreenshots write the pictures of
// docs/screenshots there: go test ./internal/dashboard -run TestScreenshots
// -dashboard.screenshots=$PWD/docs/screenshots
var docsScreenshots = flag.String("dashboard.screenshots", "", "write the documentation's screenshots of each page into this directory")

// xss is the hostile progress message of the escaping tests.
const xss = `<img src=x onerror=alert(1)>`

// fixture is the stack every test of the binary shares (tests use their
// own runs): the real local stack, with servo dev's span recorder, the
// example worker, a "held" worker whose tasks run until the test lets them
// go, a "traced" worker that records spans of its own (one ends in error),
// and a "beats" worker that sends exactly the heartbeats its payload asks.
type fixture struct {
	stack *devstack.Stack
	// traces records every span of the test binary, as in servo dev.
	traces *telemetry.Recorder
	mu     sync.Mutex
	gates  map[string]chan struct{}
	// tokens are the task tokens the held, traced and beats workers
	// received.
	tokens []string
}

// Span names of the traced worker's own spans.
const (
	stepSpan   = "test.step"
	failedSpan = "test.step.fails"
)

var (
	fixOnce sync.Once
	fix     *fixture
	fixErr  error
)

// heldInput is the held worker's payload.
type heldInput struct {
	// Message is the progress message it reports.
	Message string `json:"message"`
	// Gate names the gate it waits on after a cancel before it ends.
	Gate string `json:"gate"`
}

func stack(t *testing.T) *fixture {
	t.Helper()
	fixOnce.Do(func() {
		f := &fixture{gates: map[string]chan struct{}{}}
		held := worker.Handler(func(ctx context.Context, wt *worker.Task) (any, error) {
			// Runs until Servo cancels the attempt; then waits for its gate.
			var in heldInput
			if err := wt.Decode(&in); err != nil {
				return nil, err
			}
			f.mu.Lock()
			f.tokens = append(f.tokens, wt.Envelope().TaskToken)
			gate := f.gates[in.Gate]
			f.mu.Unlock()
			wt.Progress(40, in.Message)
			<-ctx.Done()
			if gate != nil {
				select {
				case <-gate:
				case <-time.After(2 * time.Minute):
				}
			}
			return nil, context.Cause(ctx)
		}, worker.WithLogger(slog.New(slog.NewJSONHandler(io.Discard, nil))))
		srv := httptest.NewServer(held)
		traced := worker.Handler(func(ctx context.Context, wt *worker.Task) (any, error) {
			f.mu.Lock()
			f.tokens = append(f.tokens, wt.Envelope().TaskToken)
			f.mu.Unlock()
			ctx, step := telemetry.Tracer().Start(ctx, stepSpan)
			_, failed := telemetry.Tracer().Start(ctx, failedSpan)
			time.Sleep(50 * time.Millisecond)
			spanattr.EndSpan(failed, errors.New("a failure the step recovers from"))
			wt.Progress(50, "half way")
			time.Sleep(300 * time.Millisecond)
			step.End()
			return map[string]any{"ok": true}, nil
		}, worker.WithLogger(slog.New(slog.NewJSONHandler(io.Discard, nil))))
		tracedSrv := httptest.NewServer(traced)
		beatsSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var env api.Envelope
			if err := json.NewDecoder(r.Body).Decode(&env); err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusOK)
			go f.beat(env)
		}))
		// A worker that is not running: connections are refused.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fixErr = err
			return
		}
		downURL := "http://" + l.Addr().String()
		l.Close()
		// Servo dev's telemetry: every span reaches the recorder.
		f.traces = telemetry.NewRecorder(0)
		if _, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "servo-dashboard-test", Recorder: f.traces}); err != nil {
			fixErr = err
			return
		}
		f.stack, fixErr = devstack.Start(context.Background(), devstack.Options{
			Addr: "127.0.0.1:0", Project: "dashboard-test", ReuseEmulators: true, Traces: f.traces,
			WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process},
			SweepEvery:  200 * time.Millisecond, Workers: map[string]string{"held": srv.URL, "traced": tracedSrv.URL, "beats": beatsSrv.URL, "down": downURL},
			// The first delivery probe 5 s after an enqueue (TestTaskPageDelivery).
			StartTimeout: 20 * time.Second,
			// Only tenant "limited" has limits (TestTenantUsage).
			Quotas: &quota.Policy{Tenants: map[string]quota.Limits{"limited": {MaxRunning: 3, MaxQueued: 20}}},
		})
		fix = f
	})
	if fixErr != nil {
		t.Fatal(fixErr)
	}
	return fix
}

// beat is the beats worker's attempt: started, then exactly the
// payload's "beats" heartbeats 100 ms apart, then completed SUCCEEDED,
// through the callbacks' HTTP API (no SDK: its heartbeats are timed, not
// counted).
func (f *fixture) beat(env api.Envelope) {
	f.mu.Lock()
	f.tokens = append(f.tokens, env.TaskToken)
	f.mu.Unlock()
	var p struct{ Beats int }
	_ = json.Unmarshal(env.Payload, &p)
	wid := "beats-" + env.TaskID
	post := func(kind string, body any) bool {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", env.CallbackBaseURL+"/v1/tasks/"+env.TaskID+"/"+kind, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+env.TaskToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}
	if !post("started", api.StartedRequest{Attempt: env.Attempt, WorkerID: wid}) {
		return
	}
	for i := range p.Beats {
		time.Sleep(100 * time.Millisecond)
		pct := (i + 1) * 100 / (p.Beats + 1)
		if !post("heartbeat", api.HeartbeatRequest{Attempt: env.Attempt, WorkerID: wid, ProgressPct: &pct, Message: fmt.Sprint("beat ", i+1)}) {
			return
		}
	}
	time.Sleep(100 * time.Millisecond)
	post("completed", api.CompletedRequest{Attempt: env.Attempt, WorkerID: wid, Outcome: api.OutcomeSucceeded, Output: json.RawMessage(`{"ok":true}`)})
}

// cancelLater cancels a held task when the test ends, so that it does not
// keep working for the next tests.
func (f *fixture) cancelLater(t *testing.T, id string) {
	t.Cleanup(func() {
		res, err := http.Post(f.stack.URL+"/v1/tasks/"+id+"/cancel", "application/json", nil)
		if err == nil {
			res.Body.Close()
		}
	})
}

// gate returns a new gate for held tasks and the function that opens it.
func (f *fixture) gate(name string) func() {
	ch := make(chan struct{})
	f.mu.Lock()
	f.gates[name] = ch
	f.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// submit posts a task and returns its id.
func (f *fixture) submit(t *testing.T, body map[string]any) string {
	t.Helper()
	base := map[string]any{"tenantId": "acme", "workspaceId": "ws", "taskKey": "k", "heartbeatIntervalMs": 200, "heartbeatTimeoutMs": 30000,
		"retry": map[string]any{"maxAttempts": 3, "initialBackoffMs": 200, "maxBackoffMs": 400}}
	for k, v := range body {
		base[k] = v
	}
	b, _ := json.Marshal(base)
	res, err := http.Post(f.stack.URL+"/v1/tasks", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusCreated && res.StatusCode != http.StatusOK {
		t.Fatalf("submit: %d %s", res.StatusCode, out)
	}
	var r api.SubmitResponse
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	return r.TaskID
}

// get reads a task through the API.
func (f *fixture) get(t *testing.T, id string) api.Task {
	t.Helper()
	res, err := http.Get(f.stack.URL + "/v1/tasks/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v api.Task
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// waitState polls the API until the task is in state.
func (f *fixture) waitState(t *testing.T, id string, state api.State) api.Task {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		v := f.get(t, id)
		if v.State == state {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s is %s, want %s", id, v.State, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var (
	browserOnce sync.Once
	browserCtx  context.Context
	browserErr  error
	shotsOnce   sync.Once
	shotsDir    string
)

// chromium finds the browser: never skip when it is missing, fail.
func chromium() (string, error) {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no Chromium on the PATH: the dashboard's browser tests need it (apt-get install chromium)")
}

// tab opens a new tab of the binary's one headless Chromium.
func tab(t *testing.T) context.Context {
	t.Helper()
	browserOnce.Do(func() {
		path, err := chromium()
		if err != nil {
			browserErr = err
			return
		}
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1280, 900),
			chromedp.Flag("disable-extensions", true), chromedp.Flag("renderer-process-limit", "2"))
		if os.Geteuid() == 0 {
			opts = append(opts, chromedp.NoSandbox)
		}
		alloc, _ := chromedp.NewExecAllocator(context.Background(), opts...)
		browserCtx, _ = chromedp.NewContext(alloc)
		browserErr = chromedp.Run(browserCtx)
	})
	if browserErr != nil {
		t.Fatalf("headless Chromium: %v", browserErr)
	}
	ctx, cancel := chromedp.NewContext(browserCtx)
	t.Cleanup(cancel)
	ctx, cancelT := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancelT)
	return ctx
}

// shot saves a full-page screenshot as a test artifact.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	shotsOnce.Do(func() {
		var err error
		if shotsDir, err = os.MkdirTemp("", "servo-dashboard-screenshots-"); err != nil {
			t.Fatal(err)
		}
	})
	var buf []byte
	// A page that is replacing itself (a live update, the page after a
	// post) can measure 0 wide for an instant: Chromium refuses that
	// screenshot, so try again briefly.
	for try := 0; ; try++ {
		err := chromedp.Run(ctx, chromedp.FullScreenshot(&buf, 100))
		if err == nil {
			break
		}
		if try >= 20 || !strings.Contains(err.Error(), "0 width") {
			t.Fatalf("screenshot: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	p := filepath.Join(shotsDir, t.Name()+"-"+name+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// waitJS polls a JavaScript expression in the page until it is true.
func waitJS(t *testing.T, ctx context.Context, expr, what string) {
	t.Helper()
	var ok bool
	deadline := time.Now().Add(90 * time.Second)
	var err error
	for {
		// A form post navigates: a poll started before the new page loads
		// ends with the old one ("Inspected target navigated or closed",
		// "Cannot find context with specified id"); poll again on the new
		// page.
		err = chromedp.Run(ctx, chromedp.Poll(expr, &ok, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(time.Until(deadline))))
		if err == nil || !strings.Contains(err.Error(), "(-32000)") || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		var html string
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = chromedp.Run(dctx, chromedp.OuterHTML("html", &html, chromedp.ByQuery))
		t.Fatalf("%s: %v\npage:\n%s", what, err, html)
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	// One evaluation: live updates replace the nodes at any time.
	var s string
	if err := chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(`(document.querySelector(%q) || {textContent: "(no %s)"}).textContent`, sel, sel), &s)); err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// tasksTableColumns are the tasks table's columns, in order (the tasks
// page and the run page).
var tasksTableColumns = []string{"Task", "Run", "Tenant", "Key", "Worker", "Priority", "State", "Attempt", "Reason", "Progress", "Age"}

// columns returns the tasks table's header.
func columns(t *testing.T, ctx context.Context) []string {
	t.Helper()
	var head []string
	if err := chromedp.Run(ctx, chromedp.Evaluate(`Array.from(document.querySelectorAll("table.tasks thead th"), (th) => th.textContent)`, &head)); err != nil {
		t.Fatalf("the tasks table's header: %v", err)
	}
	return head
}

// cell returns the text of task id's row's cell under the column named
// column, read in one evaluation (live updates replace the rows); it
// fails when the row has not one cell per column.
func cell(t *testing.T, ctx context.Context, id, column string) string {
	t.Helper()
	var got struct {
		Head  []string
		Cells []string
	}
	if err := chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(`(() => {
		const row = document.getElementById(%q);
		return {
			Head: Array.from(document.querySelectorAll("table.tasks thead th"), (th) => th.textContent),
			Cells: row ? Array.from(row.cells, (td) => td.textContent.trim()) : [],
		};
	})()`, "row-"+id), &got)); err != nil {
		t.Fatalf("row %s: %v", id, err)
	}
	i := slices.Index(got.Head, column)
	if i < 0 || len(got.Cells) != len(got.Head) {
		t.Fatalf("row %s: cells %q under columns %q: want one cell per column, %q among them", id, got.Cells, got.Head, column)
	}
	return got.Cells[i]
}

// TestTasksPageLive: a task submitted while the tasks page is open appears
// and reaches SUCCEEDED without a reload; its row (from the live stream)
// shows the priority it was submitted with.
func TestTasksPageLive(t *testing.T) {
	f := stack(t)
	ctx := tab(t)
	run := task.NewRunID(time.Now())
	if err := chromedp.Run(ctx, chromedp.Navigate(f.stack.URL+"/ui/?run="+run), chromedp.Evaluate(`window.notReloaded = true`, nil)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.querySelector("td.empty") !== null`, "the empty table")
	waitJS(t, ctx, `document.getElementById("status").textContent === "live"`, "the stream connected")
	id := f.submit(t, map[string]any{"runId": run, "worker": devstack.ExampleWorker, "taskKey": "live", "priority": 1,
		"payload": map[string]any{"partitions": 6, "partitionMs": 250}})
	waitJS(t, ctx, fmt.Sprintf(`document.getElementById("row-%s") !== null`, id), "the new task's row")
	if got := cell(t, ctx, id, "Priority"); got != "1" {
		t.Errorf("the live row shows priority %q, want 1", got)
	}
	shot(t, ctx, "appeared")
	waitJS(t, ctx, fmt.Sprintf(`document.querySelector('#row-%s[data-state="SUCCEEDED"]') !== null`, id), "the task reaching SUCCEEDED")
	var notReloaded bool
	if err := chromedp.Run(ctx, chromedp.Evaluate(`window.notReloaded === true`, &notReloaded)); err != nil || !notReloaded {
		t.Fatalf("the page was reloaded (%v)", err)
	}
	if got := text(t, ctx, ".count.state.succeeded b"); got != "1" {
		t.Errorf("SUCCEEDED count = %q, want 1", got)
	}
	shot(t, ctx, "succeeded")
}

// TestTaskPageRetriedAttempts: the task page shows a retried task's two
// attempts, their outcomes, and the timeline with one bar each; and the
// default priority (3) of a task submitted without one.
func TestTaskPageRetriedAttempts(t *testing.T) {
	f := stack(t)
	id := f.submit(t, map[string]any{"worker": devstack.ExampleWorker, "taskKey": "flaky",
		"payload": map[string]any{"partitions": 6, "partitionMs": 100, "failAttempts": 1}})
	f.waitState(t, id, api.Succeeded)
	ctx := tab(t)
	if err := chromedp.Run(ctx, chromedp.Navigate(f.stack.URL+"/ui/tasks/"+id)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.querySelectorAll("section.attempt").length === 2`, "two attempts")
	for _, c := range []struct{ sel, want string }{
		{`#attempt-1`, "FAILED"}, {`#attempt-2`, "SUCCEEDED"},
		{`#timeline g.bar[data-attempt="1"]`, "bar failed"}, {`#timeline g.bar[data-attempt="2"]`, "bar succeeded"},
		{`#task-state`, "SUCCEEDED"},
	} {
		var got string
		attr := "data-outcome"
		if strings.HasPrefix(c.sel, "#timeline") {
			attr = "class"
		}
		if c.sel == "#task-state" {
			got = text(t, ctx, c.sel)
		} else if err := chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(`document.querySelector(%q).getAttribute(%q)`, c.sel, attr), &got)); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.sel, got, c.want)
		}
	}
	if msg := text(t, ctx, "#attempt-1 .errmsg"); !strings.Contains(msg, "injected failure") {
		t.Errorf("attempt 1's error = %q", msg)
	}
	// Submitted without a priority: the default.
	if got := text(t, ctx, "#task-priority"); got != "3" {
		t.Errorf("priority %q, want 3 (the default)", got)
	}
	var events int
	if err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll("#events tbody tr").length`, &events)); err != nil {
		t.Fatal(err)
	}
	// PENDING→QUEUED→RUNNING→QUEUED (retry)→RUNNING→SUCCEEDED, plus the creation.
	if events < 5 {
		t.Errorf("%d transitions shown, want at least 5", events)
	}
	shot(t, ctx, "task")
}

// TestCancelRunningTask: Cancel on the page of a running task makes it
// CANCELLING, then CANCELLED when the worker stops, shown live.
func TestCancelRunningTask(t *testing.T) {
	f := stack(t)
	release := f.gate(t.Name())
	defer release()
	id := f.submit(t, map[string]any{"worker": "held", "taskKey": "to-cancel", "cancelGracePeriodMs": 60000,
		"payload": map[string]any{"message": "working", "gate": t.Name()}})
	f.waitState(t, id, api.Running)
	ctx := tab(t)
	if err := chromedp.Run(ctx, chromedp.Navigate(f.stack.URL+"/ui/tasks/"+id)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.getElementById("task-state").textContent === "RUNNING"`, "RUNNING")
	if err := chromedp.Run(ctx,
		chromedp.SendKeys(`#cancel-task input[name=reason]`, "from the dashboard", chromedp.ByQuery),
		chromedp.Click(`#cancel-task button`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.getElementById("flash") !== null`, "the page after the post")
	waitJS(t, ctx, `document.getElementById("task-state").textContent === "CANCELLING"`, "CANCELLING")
	if flash := text(t, ctx, "#flash"); !strings.Contains(flash, "CANCELLING") {
		t.Errorf("flash = %q", flash)
	}
	shot(t, ctx, "cancelling")
	if v := f.get(t, id); v.State != api.Cancelling || v.CancelReason != "from the dashboard" {
		t.Fatalf("after Cancel the API shows %s (cancel reason %q)", v.State, v.CancelReason)
	}
	release()
	waitJS(t, ctx, `document.getElementById("task-state").textContent === "CANCELLED"`, "CANCELLED without a reload")
	shot(t, ctx, "cancelled")
}

// TestHostileTextRendersInert: a progress message holding markup shows as
// text on the tasks page and the task page: no img element, no dialog;
// and the task's token reaches no page.
func TestHostileTextRendersInert(t *testing.T) {
	f := stack(t)
	release := f.gate(t.Name())
	defer release()
	run := task.NewRunID(time.Now())
	id := f.submit(t, map[string]any{"runId": run, "worker": "held", "taskKey": xss, "tenantId": "acme",
		"payload": map[string]any{"message": xss, "gate": t.Name(), "note": xss}})
	f.cancelLater(t, id)
	deadline := time.Now().Add(90 * time.Second)
	for f.get(t, id).State != api.Running || f.progressMessage(t, id) != xss {
		if time.Now().After(deadline) {
			t.Fatal("the held task did not report its progress")
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctx := tab(t)
	var dialogs atomic.Int32
	chromedp.ListenTarget(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialogs.Add(1)
			go chromedp.Run(ctx, page.HandleJavaScriptDialog(false))
		}
	})
	for _, c := range []struct{ path, sel string }{
		{"/ui/tasks/" + id, "#task-message"},
		{"/ui/?run=" + run, "#row-" + id + " .msg"},
		{"/ui/runs/" + run, "#row-" + id + " .msg"},
	} {
		var html string
		if err := chromedp.Run(ctx, chromedp.Navigate(f.stack.URL+c.path)); err != nil {
			t.Fatal(err)
		}
		// Wait for a live update too: the fragment goes through innerHTML.
		waitJS(t, ctx, `document.getElementById("status").textContent === "live"`, "the stream")
		if got := text(t, ctx, c.sel); got != xss {
			t.Errorf("%s: message shown as %q, want the literal text", c.path, got)
		}
		var imgs int
		if err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll("img").length`, &imgs), chromedp.Evaluate(`document.documentElement.outerHTML`, &html)); err != nil {
			t.Fatal(err)
		}
		if imgs != 0 {
			t.Errorf("%s: %d img elements", c.path, imgs)
		}
		f.mu.Lock()
		for _, tok := range f.tokens {
			if tok != "" && strings.Contains(html, tok) {
				t.Errorf("%s: a task token is on the page", c.path)
			}
		}
		f.mu.Unlock()
		shot(t, ctx, strings.ReplaceAll(strings.Trim(c.path, "/"), "/", "_"))
	}
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened", n)
	}
	f.mu.Lock()
	if len(f.tokens) == 0 {
		t.Error("the held worker saw no token")
	}
	f.mu.Unlock()
}

// progressMessage is the current attempt's progress message.
func (f *fixture) progressMessage(t *testing.T, id string) string {
	v := f.get(t, id)
	for _, a := range v.Attempts {
		if a.Attempt == v.Attempt {
			return a.Message
		}
	}
	return ""
}

// TestCrossSitePostRefused: a form on another site that posts Cancel to
// the dashboard is refused with 403 and changes nothing; so are posts
// without the anti-forgery token or with a cross-site origin.
func TestCrossSitePostRefused(t *testing.T) {
	f := stack(t)
	release := f.gate(t.Name())
	defer release()
	id := f.submit(t, map[string]any{"worker": "held", "taskKey": "target", "payload": map[string]any{"message": "x", "gate": t.Name()}})
	f.waitState(t, id, api.Running)
	target := f.stack.URL + "/ui/tasks/" + id + "/cancel"

	// A real cross-site form post, from a page on another site.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<html><body><form method="post" action=%q><input name="csrf" value="guessed"><input name="reason" value="evil"></form>
<script>document.forms[0].submit()</script></body></html>`, target)
	}))
	defer evil.Close()
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)
	ctx := tab(t)
	if err := chromedp.Run(ctx, chromedp.Navigate(f.stack.URL+"/ui/tasks/"+id)); err != nil { // the victim has the cookie
		t.Fatal(err)
	}
	if err := chromedp.Run(ctx, chromedp.Navigate(evilURL)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.getElementById("error") !== null`, "the dashboard's refusal")
	if got := text(t, ctx, "h1"); !strings.HasPrefix(got, "403") {
		t.Errorf("the cross-site post got %q, want 403", got)
	}
	shot(t, ctx, "refused")

	// The same request without a browser, each check alone.
	page, err := http.Get(f.stack.URL + "/ui/tasks/" + id)
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	var cookie *http.Cookie
	for _, c := range page.Cookies() {
		if c.Name == "servo_csrf" {
			cookie = c
		}
	}
	if cookie == nil {
		t.Fatal("the page set no anti-forgery cookie")
	}
	for _, c := range []struct {
		name           string
		token, site    string
		origin         string
		withCookie     bool
		want           int
		wantStillAlive bool
	}{
		{"cross-site with the right token", cookie.Value, "cross-site", "http://evil.example", true, http.StatusForbidden, true},
		{"same-site other origin", cookie.Value, "same-site", "http://127.0.0.1:1", true, http.StatusForbidden, true},
		{"same-origin without a token", "", "same-origin", f.stack.URL, true, http.StatusForbidden, true},
		{"same-origin with a wrong token", strings.Repeat("x", 43), "same-origin", f.stack.URL, true, http.StatusForbidden, true},
		{"same-origin token without its cookie", cookie.Value, "same-origin", f.stack.URL, false, http.StatusForbidden, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", target, strings.NewReader("reason=evil&csrf="+c.token))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Sec-Fetch-Site", c.site)
			req.Header.Set("Origin", c.origin)
			if c.withCookie {
				req.AddCookie(cookie)
			}
			res, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != c.want {
				t.Errorf("status %d, want %d", res.StatusCode, c.want)
			}
		})
	}
	if v := f.get(t, id); v.State != api.Running {
		t.Fatalf("after refused posts the task is %s, want RUNNING", v.State)
	}
	// And the legitimate post is accepted.
	req, _ := http.NewRequest("POST", target, strings.NewReader("reason=ok&csrf="+cookie.Value))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.AddCookie(cookie)
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("same-origin post with the token: %d, want 303", res.StatusCode)
	}
	if v := f.get(t, id); v.State != api.Cancelling {
		t.Fatalf("after the accepted post the task is %s, want CANCELLING", v.State)
	}
}

// TestPagesOnDemoData: on the demo run of `servo dev` (plus a task that
// fails for good; the retried task submitted with priority 1), the tasks
// page and the run page show the table's columns and each task's priority
// (1, else the default 3), the task page the urgent task's priority, the
// run page summarises the run, the health page shows
// the sweeper's last pass, each duty, the transitions chart and the dead
// letter with its attempts; each page is photographed (into
// -dashboard.screenshots for the docs, else into the test artifacts).
func TestPagesOnDemoData(t *testing.T) {
	f := stack(t)
	run := task.NewRunID(time.Now())
	var ids []string
	// The retried task is urgent (priority 1); the others have none
	// (the default, 3).
	priorities := []string{"3", "3", "1", "3"}
	for _, c := range []struct {
		key     string
		payload map[string]any
	}{
		{"partitions-small", map[string]any{"partitions": 8, "partitionMs": 100}},
		{"partitions-large", map[string]any{"partitions": 20, "partitionMs": 60}},
		{"flaky-then-resumes", map[string]any{"partitions": 12, "partitionMs": 80, "failAttempts": 1}},
		{"bad-input", map[string]any{"partitions": 3, "invalid": true}},
	} {
		body := map[string]any{"runId": run, "tenantId": "demo", "workspaceId": "local", "worker": devstack.ExampleWorker,
			"taskKey": c.key, "payload": c.payload}
		if c.key == "flaky-then-resumes" {
			body["priority"] = 1
		}
		ids = append(ids, f.submit(t, body))
	}
	for i, id := range ids {
		want := api.Succeeded
		if i == 3 {
			want = api.Failed
		}
		f.waitState(t, id, want)
	}
	ctx := tab(t)
	// checkRows: the page's tasks table has the columns of
	// tasksTableColumns, and each task's row its priority.
	checkRows := func(page string) {
		t.Helper()
		if got := columns(t, ctx); !slices.Equal(got, tasksTableColumns) {
			t.Errorf("%s page: columns %q, want %q", page, got, tasksTableColumns)
		}
		for i, id := range ids {
			if got := cell(t, ctx, id, "Priority"); got != priorities[i] {
				t.Errorf("%s page: task %s shows priority %q, want %s", page, id, got, priorities[i])
			}
		}
	}
	photo := func(name string) {
		t.Helper()
		shot(t, ctx, name)
		if *docsScreenshots == "" {
			return
		}
		var buf []byte
		if err := chromedp.Run(ctx, chromedp.FullScreenshot(&buf, 100)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(*docsScreenshots, name+".png"), buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Tasks, filtered to the demo tenant's run.
	if err := chromedp.Run(ctx, chromedp.Navigate(f.stack.URL+"/ui/?tenant=demo&run="+run)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.querySelectorAll("table.tasks tbody tr[data-state]").length === 4`, "the run's four tasks")
	checkRows("tasks")
	photo("tasks")

	// Run.
	if err := chromedp.Run(ctx, chromedp.Navigate(f.stack.URL+"/ui/runs/"+run)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.getElementById("status").textContent === "live"`, "the stream")
	if got := text(t, ctx, ".count.state.succeeded b") + "/" + text(t, ctx, ".count.state.failed b") + "/" + text(t, ctx, ".summary"); got != "3/1/0 of 4 tasks still active." {
		t.Errorf("run summary = %q", got)
	}
	checkRows("run")
	photo("run")

	// Task: the retried one.
	if err := chromedp.Run(ctx, chromedp.Navigate(f.stack.URL+"/ui/tasks/"+ids[2])); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.querySelectorAll("#timeline g.bar").length === 2`, "two bars")
	// Open attempt 1's checkpoint: it stays open across live updates.
	if err := chromedp.Run(ctx, chromedp.Evaluate(`document.getElementById("a1-checkpoint").open = true`, nil)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.getElementById("status").textContent === "live"`, "the stream")
	if got := text(t, ctx, "#task-priority"); got != "1" {
		t.Errorf("the urgent task's page shows priority %q, want 1", got)
	}
	photo("task")

	// Health.
	if err := chromedp.Run(ctx, chromedp.Navigate(f.stack.URL+"/ui/health")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.querySelector("#sweeper.good") !== null`, "a recent sweeper pass")
	var duties, rects int
	if err := chromedp.Run(ctx,
		chromedp.Evaluate(`document.querySelectorAll("#duties tbody tr").length`, &duties),
		chromedp.Evaluate(`document.querySelectorAll("#chart rect").length`, &rects)); err != nil {
		t.Fatal(err)
	}
	if duties != 4 || rects == 0 {
		t.Errorf("%d duties (want 4), %d chart bars (want some)", duties, rects)
	}
	if html := text(t, ctx, "main"); !strings.Contains(html, ids[3]) || !strings.Contains(html, "DATA_QUALITY") {
		t.Errorf("the dead letter %s with its DATA_QUALITY attempt is not on the health page", ids[3])
	}
	photo("health")
}

// TestCancelRun: Cancel run on the run page cancels its running tasks.
func TestCancelRun(t *testing.T) {
	f := stack(t)
	release := f.gate(t.Name())
	defer release()
	run := task.NewRunID(time.Now())
	var ids []string
	for i := range 2 {
		ids = append(ids, f.submit(t, map[string]any{"runId": run, "worker": "held", "taskKey": fmt.Sprint("held-", i),
			"cancelGracePeriodMs": 60000, "payload": map[string]any{"message": "holding", "gate": t.Name()}}))
	}
	for _, id := range ids {
		f.waitState(t, id, api.Running)
	}
	ctx := tab(t)
	if err := chromedp.Run(ctx, chromedp.Navigate(f.stack.URL+"/ui/runs/"+run),
		chromedp.Click(`#cancel-run button`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.getElementById("flash") !== null`, "the outcome")
	if got := text(t, ctx, "#flash"); got != "Cancel run: 0 of 2 tasks cancelled, 2 cancelling." {
		t.Errorf("flash = %q", got)
	}
	for _, id := range ids {
		if v := f.get(t, id); v.State != api.Cancelling {
			t.Errorf("task %s is %s, want CANCELLING", id, v.State)
		}
	}
	release()
	waitJS(t, ctx, `document.querySelectorAll('tr[data-state="CANCELLED"]').length === 2`, "both CANCELLED, live")
}
