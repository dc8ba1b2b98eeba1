package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/creack/pty"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/examples/worker/partitions"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/servotest/stacktest"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/worker"
)

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore, emulator.PubSub) }

// stack is the real local stack (devstack, in process) with the example
// worker and a worker "held" that reports progress 40 and then holds its
// attempt, cancelled or not, until the test releases it.
type stack struct {
	t       *testing.T
	s       *devstack.Stack
	c       *client.Client
	release chan struct{}
}

func startStack(t *testing.T) *stack {
	t.Helper()
	st := &stack{t: t, release: make(chan struct{})}
	held := httptest.NewServer(worker.Handler(func(ctx context.Context, wt *worker.Task) (any, error) {
		wt.Progress(40, "holding at 40")
		<-st.release
		return nil, ctx.Err()
	}, worker.WithLogger(slog.New(slog.DiscardHandler))))
	// Not held.Close: it would wait for a held attempt whose callbacks
	// retry against the stopped stack until its token expires.
	t.Cleanup(held.CloseClientConnections)
	st.s = stacktest.Start(t, devstack.Options{
		WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process},
		SweepEvery:  100 * time.Millisecond, Workers: map[string]string{"held": held.URL},
	})
	t.Cleanup(st.unhold)
	var err error
	if st.c, err = client.New(st.s.URL); err != nil {
		t.Fatal(err)
	}
	return st
}

// unhold lets held attempts end.
func (st *stack) unhold() {
	select {
	case <-st.release:
	default:
		close(st.release)
	}
}

// submit submits a task with fast timers; extra overrides fields.
func (st *stack) submit(workerName, payload string, extra map[string]any) api.SubmitResponse {
	st.t.Helper()
	body := map[string]any{
		"tenantId": "acme", "workspaceId": "ws", "taskKey": "k", "worker": workerName, "payload": json.RawMessage(payload),
		"heartbeatIntervalMs": 200, "heartbeatTimeoutMs": 3000, "cancelGracePeriodMs": 60000,
		"retry": map[string]any{"maxAttempts": 3, "initialBackoffMs": 100, "maxBackoffMs": 200},
	}
	for k, v := range extra {
		body[k] = v
	}
	b, _ := json.Marshal(body)
	res, _, err := st.c.Submit(context.Background(), b)
	if err != nil {
		st.t.Fatalf("submit: %v", err)
	}
	return res
}

// wait polls the task, through the client, until ok says so.
func (st *stack) wait(id string, what string, ok func(api.Task) bool) api.Task {
	st.t.Helper()
	get := func() api.Task {
		v, _, err := st.c.Get(context.Background(), id)
		if err != nil {
			st.t.Fatal(err)
		}
		return v
	}
	return servotest.WaitFor(st.t, "task "+id+" to reach "+what, get, ok, stacktest.DescribeTask)
}

func (st *stack) waitState(id string, s api.State) api.Task {
	st.t.Helper()
	return st.wait(id, string(s), func(v api.Task) bool { return v.State == s })
}

// cli runs servo in process against the stack.
func (st *stack) cli(args ...string) (string, string, int) {
	st.t.Helper()
	return runCLI(st.t, append(args, "--api", st.s.URL)...)
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

// watch on a terminal (a pseudo-terminal 100 columns wide): the table is
// redrawn in place (cursor up, line clears), with bars, a summary and the
// final outcome, no line wider than the terminal, colours unless NO_COLOR.
func TestWatchTerminal(t *testing.T) {
	st := startStack(t)
	bin := servoBinary(t)
	run := task.NewRunID(time.Now())
	var ids []string
	for _, k := range []string{"a-task-with-a-rather-long-key-that-will-not-fit-in-eighty-columns", "short"} {
		ids = append(ids, st.submit(devstack.ExampleWorker, `{"partitions": 6, "partitionMs": 150}`, map[string]any{"runId": run, "taskKey": k}).TaskID)
	}
	for _, noColor := range []bool{false, true} {
		t.Run(fmt.Sprintf("NO_COLOR=%v", noColor), func(t *testing.T) {
			cmd := exec.Command(bin, "watch", "--run", run, "--api", st.s.URL, "--every", "100ms")
			cmd.Env = append(os.Environ(), "TERM=xterm", "COLUMNS=")
			if noColor {
				cmd.Env = append(cmd.Env, "NO_COLOR=1")
			}
			f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 100})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var out bytes.Buffer
			io.Copy(&out, f) // until the process exits (EIO)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("watch: %v\n%s", err, out.String())
			}
			raw := out.String()
			if !strings.Contains(raw, "\x1b[2K") {
				t.Errorf("no line clears: not redrawn in place:\n%q", raw)
			}
			if noColor == strings.Contains(raw, ansiGreen) {
				t.Errorf("NO_COLOR=%v but colour codes present=%v:\n%q", noColor, !noColor, raw)
			}
			plain := strings.ReplaceAll(ansi.ReplaceAllString(raw, ""), "\r", "")
			for _, want := range []string{"TASK", "PROGRESS", "ELAPSED", "2 tasks: 2 SUCCEEDED", "Done: all 2 tasks SUCCEEDED.", "██████████ 100%", "…"} {
				if !strings.Contains(plain, want) {
					t.Errorf("output lacks %q:\n%s", want, plain)
				}
			}
			for _, l := range strings.Split(plain, "\n") {
				if n := len([]rune(l)); n >= 100 {
					t.Errorf("line of %d columns on a 100-column terminal: %q", n, l)
				}
			}
			// The final frame shows both tasks, ids whole, the long key cut.
			final := plain[strings.LastIndex(plain, "TASK"):]
			for _, id := range ids {
				if !strings.Contains(final, id) {
					t.Errorf("last frame lacks %s:\n%s", id, final)
				}
			}
			if !regexp.MustCompile(`a-task-with-[a-z-]*… `).MatchString(final) || strings.Count(final, "SUCCEEDED") != 4 {
				t.Errorf("last frame:\n%s", final)
			}
			if ups := strings.Count(raw, "\x1b["+fmt.Sprint(len(ids)+2)+"A"); ups == 0 {
				t.Errorf("no cursor-up over the %d lines of the table:\n%q", len(ids)+2, raw)
			}
		})
	}
}

// watch elsewhere: one line per change, then the outcome; --json: one
// object per change; exit 5 when a task did not succeed.
func TestWatchLinesAndJSON(t *testing.T) {
	st := startStack(t)
	ok := st.submit(devstack.ExampleWorker, `{"partitions": 5, "partitionMs": 100}`, nil).TaskID

	out, errOut, code := st.cli("watch", ok, "--every", "50ms")
	if code != 0 {
		t.Fatalf("watch: exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("escape codes on a non-terminal:\n%q", out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 3 || lines[len(lines)-1] != "Done: the task SUCCEEDED." || !strings.Contains(lines[len(lines)-2], "SUCCEEDED") || !strings.Contains(lines[len(lines)-2], "100%") {
		t.Fatalf("watch output:\n%s", out)
	}
	for i := 1; i < len(lines)-1; i++ {
		if lines[i][9:] == lines[i-1][9:] { // after the clock
			t.Errorf("line %d repeats an unchanged state: %q", i, lines[i])
		}
	}

	out, _, code = st.cli("watch", ok, "--json")
	var ev watchEvent
	if code != 0 || strings.Count(out, "\n") != 1 || json.Unmarshal([]byte(out), &ev) != nil || ev.State != api.Succeeded || ev.ProgressPct == nil || *ev.ProgressPct != 100 {
		t.Fatalf("watch --json of a finished task: exit %d, %q", code, out)
	}

	bad := st.submit(devstack.ExampleWorker, `{"partitions": 2, "partitionMs": 50, "failAttempts": 5}`, map[string]any{"retry": map[string]any{"maxAttempts": 2, "initialBackoffMs": 100}}).TaskID
	out, errOut, code = st.cli("watch", bad, "--json", "--every", "50ms")
	if code != exitNotOK || !strings.Contains(errOut, "FAILED") {
		t.Fatalf("watch of a failing task: exit %d, stderr %q", code, errOut)
	}
	var states []api.State
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var e watchEvent
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("not NDJSON: %q", l)
		}
		states = append(states, e.State)
	}
	if states[len(states)-1] != api.Failed {
		t.Errorf("states %v, want FAILED last", states)
	}
	if _, _, code := st.cli("watch", "task_01HGW5N7XHJM4GX29KZRXQP6N9"); code != exitNotFound {
		t.Errorf("watch of an unknown task: exit %d, want %d", code, exitNotFound)
	}
}

// A CANCELLING task, and then the CANCELLED one, show the progress its
// attempt reported, not 0 %, watched alone or as part of its run.
func TestWatchCancellingKeepsProgress(t *testing.T) {
	st := startStack(t)
	sub := st.submit("held", `{}`, nil)
	id := sub.TaskID
	st.wait(id, "progress 40", func(v api.Task) bool {
		p, known, _ := progressOf(&v)
		return known && p == 40
	})
	if _, _, code := st.cli("cancel", id); code != 0 {
		t.Fatalf("cancel: exit %d", code)
	}
	st.waitState(id, api.Cancelling)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	execute(ctx, []string{"watch", id, "--json", "--api", st.s.URL}, nil, &out, &errOut)
	var e watchEvent
	line, _, _ := strings.Cut(out.String(), "\n")
	if err := json.Unmarshal([]byte(line), &e); err != nil || e.State != api.Cancelling || e.ProgressPct == nil || *e.ProgressPct != 40 {
		t.Fatalf("watch of a CANCELLING task: %q", out.String())
	}
	out.Reset()
	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	execute(ctx, []string{"watch", id, "--api", st.s.URL}, nil, &out, &errOut)
	if !strings.Contains(out.String(), "CANCELLING a1  40% holding at 40") {
		t.Fatalf("line mode: %q", out.String())
	}
	st.unhold()
	st.waitState(id, api.Cancelled)
	for _, args := range [][]string{{"watch", id, "--json"}, {"watch", "--run", sub.RunID, "--json"}} {
		out2, _, code := st.cli(args...)
		if code != exitNotOK || !strings.Contains(out2, `"progressPct":40`) || !strings.Contains(out2, `"CANCELLED"`) {
			t.Fatalf("servo %v of the cancelled task: exit %d %q", args, code, out2)
		}
	}
	out3, _, _ := st.cli("watch", "--run", sub.RunID)
	if !strings.Contains(out3, "CANCELLED  a1  40% holding at 40 (user_requested)") {
		t.Fatalf("watch --run of the cancelled task: %q", out3)
	}
}

// tailEvents decodes the NDJSON events printed so far.
func tailEvents(t *testing.T, s string) []api.Event {
	var out []api.Event
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l == "" {
			continue
		}
		e, err := events.DecodeEvent([]byte(l))
		if err != nil {
			t.Fatalf("not an event: %q", l)
		}
		out = append(out, e)
	}
	return out
}

// events tail --all on a run whose task finished after a retry prints every
// recorded transition once, each task's in seq order, then the live ones:
// a re-published (duplicate) event is not printed again, and a task
// submitted afterwards shows up live, in order, each transition once.
func TestEventsTailAll(t *testing.T) {
	st := startStack(t)
	run := task.NewRunID(time.Now())
	first := st.submit(devstack.ExampleWorker, `{"partitions": 4, "partitionMs": 50, "failAttempts": 1}`, map[string]any{"runId": run}).TaskID
	done := st.waitState(first, api.Succeeded)
	if done.Attempt != 2 {
		t.Fatalf("the task ended on attempt %d, want a retry", done.Attempt)
	}
	recorded, err := st.c.TaskEvents(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	// →PENDING, →QUEUED, →RUNNING, →QUEUED (retry), →RUNNING, →SUCCEEDED.
	if len(recorded) < 6 {
		t.Fatalf("only %d recorded transitions: %+v", len(recorded), recorded)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out servotest.Buffer
	var errOut bytes.Buffer
	exited := make(chan error, 1)
	go func() {
		exited <- execute(ctx, []string{"events", "tail", "--run", run, "--all", "--json", "--api", st.s.URL, "--project", st.s.Project}, nil, &out, &errOut)
	}()
	waitFor := func(what string, n int) []api.Event {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := tailEvents(t, out.String())
			if len(got) >= n {
				return got
			}
			select {
			case err := <-exited:
				t.Fatalf("tail exited: %v %s", err, errOut.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d events printed, want %d:\n%s", what, len(got), n, out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	got := waitFor("replay", len(recorded))
	for i, e := range recorded {
		if got[i].EventID != e.EventID || got[i].Seq != int64(i+1) {
			t.Fatalf("replayed event %d is %s seq %d, want %s seq %d", i, got[i].EventID, got[i].Seq, e.EventID, i+1)
		}
	}

	// The events topic is at-least-once: a re-published event must not be
	// printed twice. Re-publish the last recorded one, then run a second
	// task of the run live.
	ps, err := pubsub.NewClient(ctx, st.s.Project)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	dup := recorded[len(recorded)-1]
	data, _ := json.Marshal(dup)
	pub := ps.Publisher(events.DefaultEventsTopic)
	if _, err := pub.Publish(ctx, &pubsub.Message{Data: data, Attributes: map[string]string{
		events.AttrType: events.TypeTransition, events.AttrTaskID: dup.TaskID, events.AttrRunID: dup.RunID, events.AttrEventID: dup.EventID,
	}}).Get(ctx); err != nil {
		t.Fatal(err)
	}
	pub.Stop()
	second := st.submit(devstack.ExampleWorker, `{"partitions": 2, "partitionMs": 50}`, map[string]any{"runId": run, "taskKey": "second"}).TaskID
	st.waitState(second, api.Succeeded)
	live, err := st.c.TaskEvents(context.Background(), second)
	if err != nil {
		t.Fatal(err)
	}
	got = waitFor("live", len(recorded)+len(live))
	time.Sleep(500 * time.Millisecond) // let a duplicate, if any, arrive
	got = tailEvents(t, out.String())
	cancel()
	if err := <-exited; err != nil {
		t.Fatalf("tail: %v", err)
	}
	seen := map[string]int{}
	for _, e := range got {
		seen[e.EventID]++
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("event %s printed %d times", id, n)
		}
	}
	if len(got) != len(recorded)+len(live) {
		t.Fatalf("%d events printed, want %d recorded + %d live:\n%s", len(got), len(recorded), len(live), out.String())
	}
	var seq int64
	for _, e := range got[len(recorded):] {
		if e.TaskID != second || e.Seq != seq+1 {
			t.Fatalf("live events out of order or foreign: %+v after seq %d", e, seq)
		}
		seq = e.Seq
	}
}

// rerun submits a finished task's request again as a new task that records
// rerunOf; a task that has not finished is refused with exit 4 (409).
func TestRerun(t *testing.T) {
	st := startStack(t)
	orig := st.submit(devstack.ExampleWorker, `{"partitions": 2, "partitionMs": 50}`, map[string]any{"idempotencyKey": "first-run", "assetId": "asset-9",
		"retry": map[string]any{"maxAttempts": 3, "initialBackoffMs": 100, "maxBackoffMs": 200, "maxTotalAttempts": 6, "byCategory": map[string]any{"CONFLICT": map[string]any{"maxAttempts": 6}}}})
	running := st.submit("held", `{}`, nil).TaskID
	st.wait(running, "RUNNING", func(v api.Task) bool { return v.State == api.Running })

	_, errOut, code := st.cli("rerun", running)
	if code != exitConflict || !strings.Contains(errOut, "only a finished task can be rerun") {
		t.Fatalf("rerun of a running task: exit %d, %s", code, errOut)
	}
	// The API refuses it too, whoever asks.
	b := rerunBody(&api.Task{TaskID: running, TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "held",
		HeartbeatIntervalMs: 200, HeartbeatTimeoutMs: 3000, CancelGracePeriodMs: 1000,
		Retry: api.RetryPolicy{MaxAttempts: 1, InitialBackoffMs: 100, BackoffCoefficient: 2, MaxBackoffMs: 100}}, time.Now())
	_, _, err := st.c.Submit(context.Background(), b)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != "task_not_terminal" || ae.Field != "rerunOf" {
		t.Fatalf("submit with rerunOf of a running task: %v", err)
	}
	if _, _, code := st.cli("rerun", "task_01HGW5N7XHJM4GX29KZRXQP6N9"); code != exitNotFound {
		t.Fatalf("rerun of an unknown task: exit %d", code)
	}

	first := st.waitState(orig.TaskID, api.Succeeded)
	out, errOut, code := st.cli("rerun", orig.TaskID, "--json")
	var res api.SubmitResponse
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.TaskID == "" || res.TaskID == orig.TaskID {
		t.Fatalf("rerun: exit %d, %s %s", code, out, errOut)
	}
	again := st.waitState(res.TaskID, api.Succeeded)
	if again.RerunOf != orig.TaskID || again.IdempotencyKey == "" || again.IdempotencyKey == first.IdempotencyKey ||
		again.RunID != first.RunID || again.TaskKey != first.TaskKey || again.AssetID != "asset-9" || string(again.Payload) != string(first.Payload) ||
		again.HeartbeatIntervalMs != first.HeartbeatIntervalMs || !reflect.DeepEqual(again.Retry, first.Retry) {
		t.Fatalf("rerun task %+v\nof %+v", again, first)
	}
	out, _, code = st.cli("get", res.TaskID)
	if code != 0 || !strings.Contains(out, "Rerun of:         "+orig.TaskID) {
		t.Fatalf("get of the rerun: exit %d\n%s", code, out)
	}
	// A second rerun is another new task.
	out, _, code = st.cli("rerun", orig.TaskID, "--json")
	var res2 api.SubmitResponse
	if code != 0 || json.Unmarshal([]byte(out), &res2) != nil || res2.TaskID == res.TaskID {
		t.Fatalf("second rerun: exit %d %s", code, out)
	}
}

// runs lists runs newest first with per-state counts; list filters by
// worker and pages by --limit.
func TestRunsAndList(t *testing.T) {
	st := startStack(t)
	older := task.NewRunID(time.Now())
	time.Sleep(2 * time.Millisecond)
	newer := task.NewRunID(time.Now())
	for i := range 3 {
		st.submit(devstack.ExampleWorker, `{"partitions": 1, "partitionMs": 10}`, map[string]any{"runId": older, "taskKey": fmt.Sprint("o", i)})
	}
	held := st.submit("held", `{}`, map[string]any{"runId": newer, "priority": 2}).TaskID
	st.wait(held, "RUNNING", func(v api.Task) bool { return v.State == api.Running })
	for _, id := range mustList(t, st, older) {
		st.waitState(id, api.Succeeded)
	}

	out, errOut, code := st.cli("runs", "--json")
	var rr struct {
		Runs []client.RunCounts `json:"runs"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rr) != nil {
		t.Fatalf("runs: exit %d %s %s", code, out, errOut)
	}
	if len(rr.Runs) != 2 || rr.Runs[0].RunID != newer || rr.Runs[1].RunID != older ||
		rr.Runs[0].Total != 1 || rr.Runs[0].Counts[api.Running] != 1 || rr.Runs[1].Total != 3 || rr.Runs[1].Counts[api.Succeeded] != 3 {
		t.Fatalf("runs: %+v", rr.Runs)
	}
	for tenant, want := range map[string]int{"acme": 2, "nobody": 0} {
		out, _, code = st.cli("runs", "--tenant", tenant, "--json")
		rr.Runs = nil
		if code != 0 || json.Unmarshal([]byte(out), &rr) != nil || len(rr.Runs) != want {
			t.Fatalf("runs --tenant %s: exit %d %s", tenant, code, out)
		}
	}
	out, _, code = st.cli("runs")
	if code != 0 || !strings.Contains(out, "RUN") || !strings.Contains(out, "SUCCEEDED") || strings.Index(out, newer) > strings.Index(out, older) {
		t.Fatalf("runs table: exit %d\n%s", code, out)
	}

	out, _, code = st.cli("list", "--worker", "held")
	if code != 0 || strings.Count(strings.TrimSpace(out), "\n") != 1 || !strings.Contains(out, held) {
		t.Fatalf("list --worker held: exit %d\n%s", code, out)
	}
	// The PRI column: the held task's priority 2.
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[0], " PRI ") ||
		strings.Fields(lines[1])[slices.Index(strings.Fields(lines[0]), "PRI")] != "2" {
		t.Fatalf("list --worker held: no priority 2 in the PRI column\n%s", out)
	}
	if out, _, code := st.cli("get", held); code != 0 || !strings.Contains(out, "Priority:         2 (1 highest, 5 lowest)") {
		t.Fatalf("get: exit %d, no priority\n%s", code, out)
	}
	out, errOut, code = st.cli("list", "--run", older, "--limit", "2")
	if code != 0 || strings.Count(strings.TrimSpace(out), "\n") != 2 || !strings.Contains(errOut, "more match") {
		t.Fatalf("list --limit 2: exit %d\n%s\n%s", code, out, errOut)
	}
	out, _, code = st.cli("list", "--run", older)
	if code != 0 || strings.Count(strings.TrimSpace(out), "\n") != 3 {
		t.Fatalf("list of the run: exit %d\n%s", code, out)
	}

	// On a terminal, the next page is read when asked for.
	cmd := exec.Command(servoBinary(t), "list", "--run", older, "--limit", "2", "--api", st.s.URL)
	cmd.Env = append(os.Environ(), "TERM=xterm", "NO_COLOR=1")
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var screen servotest.Buffer
	copied := make(chan struct{})
	go func() { io.Copy(&screen, f); close(copied) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(screen.String(), "Enter for 2 more") {
		if time.Now().After(deadline) {
			t.Fatalf("no prompt after the first page:\n%s", screen.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(screen.String(), older); n != 2 {
		t.Fatalf("%d tasks before the prompt, want 2:\n%s", n, screen.String())
	}
	f.Write([]byte("\n"))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("list: %v\n%s", err, screen.String())
	}
	<-copied
	if n := strings.Count(screen.String(), older); n != 3 {
		t.Fatalf("%d tasks after Enter, want 3:\n%s", n, screen.String())
	}
}

func mustList(t *testing.T, st *stack, run string) []string {
	t.Helper()
	out, _, code := st.cli("list", "--run", run, "--json")
	var lr api.ListResponse
	if code != 0 || json.Unmarshal([]byte(out), &lr) != nil {
		t.Fatalf("list --json: exit %d %s", code, out)
	}
	var ids []string
	for _, tk := range lr.Tasks {
		ids = append(ids, tk.TaskID)
	}
	return ids
}
