package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/client"
)

func newWatchCmd() *cobra.Command {
	var cf clientFlags
	var run string
	var every time.Duration
	cmd := &cobra.Command{
		Use:   "watch ID | --run RUN",
		Short: "Follow a task's or a run's progress until it ends",
		Long: `Follow a task, or every task of a run, until all have ended.

On a terminal the table is redrawn in place: one row per task with its state,
attempt, progress bar, last message and elapsed time, a summary line, and
the final outcome. Elsewhere (a pipe, a file) one line is printed per change;
with --json one JSON object per change (NDJSON).

Exits 0 when every task SUCCEEDED, 5 when one ended otherwise, 3 when the
task does not exist.`,
		Example: `  servo watch task_01HGW5N7XHJM4GX29KZRXQP6N9
  servo watch --run run_01HGW5N7XHJM4GX29KZRXQP6N9
  servo watch task_01HGW5N7XHJM4GX29KZRXQP6N9 --json | jq -c '{state, progressPct}'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 1) == (run != "") || len(args) > 1 {
				return usageErr("watch wants a task ID or --run RUN, not both\n%s", shortUsage(cmd))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if every <= 0 {
				return usageErr("--every must be positive")
			}
			c, err := cf.client(ctx)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			w := newWatcher(out, false, cf.json).withTerm(termOf(out))
			fetch := func() ([]api.Task, error) {
				if run != "" {
					return w.runTasks(ctx, c, run)
				}
				t, _, err := c.Get(ctx, args[0])
				return []api.Task{t}, err
			}
			final, err := Watch(ctx, fetch, w, every)
			if err != nil {
				return apiErr(err)
			}
			for _, t := range final {
				if t.State != api.Succeeded {
					return &exitError{exitNotOK, fmt.Errorf("%s ended %s (%s)", t.TaskID, t.State, dash(t.Reason))}
				}
			}
			return nil
		},
	}
	cf.register(cmd.Flags())
	cmd.Flags().StringVar(&run, "run", "", "watch every task of this run")
	cmd.Flags().DurationVar(&every, "every", 500*time.Millisecond, "poll interval")
	return cmd
}

// runTasks lists a run's tasks and reads each one whose state changed
// since the last poll (the list has no attempts), so a finished task is
// read once more, for its final progress and message, and then no more.
func (w *watcher) runTasks(ctx context.Context, c *client.Client, run string) ([]api.Task, error) {
	tasks, err := c.ListAll(ctx, url.Values{"runId": {run}})
	if err != nil {
		return nil, err
	}
	for i := range tasks {
		prev, seen := w.full[tasks[i].TaskID]
		if seen && prev.State == tasks[i].State && prev.State.Terminal() {
			tasks[i] = prev
			continue
		}
		if full, _, err := c.Get(ctx, tasks[i].TaskID); err == nil {
			tasks[i] = full
		}
		w.full[tasks[i].TaskID] = tasks[i]
	}
	return tasks, nil
}

// Watch polls fetch every interval and renders the tasks with w until
// every task is terminal or ctx ends; it returns the last tasks seen.
func Watch(ctx context.Context, fetch func() ([]api.Task, error), w *watcher, every time.Duration) ([]api.Task, error) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		tasks, err := fetch()
		if err != nil {
			return nil, err
		}
		done := len(tasks) > 0
		for _, t := range tasks {
			done = done && t.State.Terminal()
		}
		w.render(tasks)
		if done {
			w.finish(tasks)
			return tasks, nil
		}
		select {
		case <-ctx.Done():
			return tasks, ctx.Err()
		case <-tick.C:
		}
	}
}

// watcher renders task progress: a table redrawn in place on a terminal,
// one line per change otherwise, or one JSON object per change.
type watcher struct {
	out   io.Writer
	ti    termInfo
	json  bool
	lines int               // lines drawn by the last redraw
	last  map[string]string // per task, what was last printed (line and JSON modes)
	full  map[string]api.Task
	now   func() time.Time
}

// newWatcher returns a watcher writing to out: redrawing in place when tty
// (at defaultWidth, without colours; see withTerm), JSON lines with asJSON.
func newWatcher(out io.Writer, tty, asJSON bool) *watcher {
	w := &watcher{out: out, json: asJSON, last: map[string]string{}, full: map[string]api.Task{}, now: time.Now}
	if tty {
		w.ti = termInfo{tty: true, width: defaultWidth}
	}
	return w.withTerm(w.ti)
}

// withTerm sets the terminal the watcher draws on (not with JSON).
func (w *watcher) withTerm(ti termInfo) *watcher {
	if !w.json {
		w.ti = ti
	}
	return w
}

// progressOf returns the progress and message the task's current attempt
// last reported. A CANCELLING or ended task keeps what its attempt
// reported; a task with no report yet has known = false. A SUCCEEDED task
// is at 100 %.
func progressOf(t *api.Task) (p int, known bool, msg string) {
	for i := len(t.Attempts) - 1; i >= 0; i-- {
		a := t.Attempts[i]
		if a.Attempt != t.Attempt {
			continue
		}
		if a.ProgressPct != nil {
			p, known = *a.ProgressPct, true
		}
		msg = a.Message
		if a.Error != nil && msg == "" {
			msg = string(a.Error.Category) + ": " + a.Error.Message
		}
		msg = oneLineOf(msg)
		break
	}
	if t.State == api.Succeeded {
		p, known = 100, true
	}
	if t.State == api.Queued && t.Delivery != nil && msg == "" {
		msg = deliveryText(t.Delivery)
	}
	return p, known, msg
}

// deliveryText says why a QUEUED task is not moving: "delivery failing
// (4 tries): UNAVAILABLE: connection refused; next try 12:00:03".
func deliveryText(d *api.Delivery) string {
	s := fmt.Sprintf("delivery failing (%d tries)", d.Attempts)
	if d.LastStatus == "" {
		s = fmt.Sprintf("delivery in progress (%d tries)", d.Attempts)
	}
	if d.LastStatus != "" {
		s += ": " + d.LastStatus
	}
	if d.LastError != "" {
		s += ": " + d.LastError
	}
	if d.NextTryAt != nil {
		s += "; next try " + d.NextTryAt.Local().Format("15:04:05")
	}
	return oneLineOf(s)
}

// elapsed is how long the task has existed: until it ended, or until now.
func (w *watcher) elapsed(t *api.Task) time.Duration {
	end := w.now()
	if t.EndedAt != nil {
		end = *t.EndedAt
	}
	if t.CreatedAt.IsZero() || end.Before(t.CreatedAt) {
		return 0
	}
	return end.Sub(t.CreatedAt)
}

func bar(p, width int) string {
	p = min(max(p, 0), 100)
	full := p * width / 100
	return strings.Repeat("█", full) + strings.Repeat("░", width-full)
}

func pctText(p int, known bool) string {
	if !known {
		return "   -"
	}
	return fmt.Sprintf("%3d%%", p)
}

func shortDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Truncate(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Truncate(time.Second).String()
	}
	return d.Truncate(time.Minute).String()
}

// render shows tasks.
func (w *watcher) render(tasks []api.Task) {
	switch {
	case w.json:
		w.renderJSON(tasks)
	case w.ti.tty:
		w.redraw(tasks, false)
	default:
		w.renderLines(tasks)
	}
}

// finish shows the final outcome of tasks, which have all ended: the last
// table with the outcome line on a terminal, the outcome line otherwise,
// nothing more in JSON.
func (w *watcher) finish(tasks []api.Task) {
	switch {
	case w.json:
	case w.ti.tty:
		w.redraw(tasks, true)
	default:
		fmt.Fprintln(w.out, outcome(tasks))
	}
}

// watchEvent is one --json line.
type watchEvent struct {
	TaskID      string    `json:"taskId"`
	RunID       string    `json:"runId"`
	TaskKey     string    `json:"taskKey"`
	State       api.State `json:"state"`
	Attempt     int       `json:"attempt"`
	ProgressPct *int      `json:"progressPct"`
	Message     string    `json:"message,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	ElapsedMs   int64     `json:"elapsedMs"`
}

func (w *watcher) renderJSON(tasks []api.Task) {
	for i := range tasks {
		t := &tasks[i]
		p, known, msg := progressOf(t)
		ev := watchEvent{TaskID: t.TaskID, RunID: t.RunID, TaskKey: t.TaskKey, State: t.State, Attempt: t.Attempt, Message: msg, Reason: t.Reason}
		if known {
			ev.ProgressPct = &p
		}
		b, _ := json.Marshal(ev)
		if w.last[t.TaskID] == string(b) {
			continue
		}
		w.last[t.TaskID] = string(b)
		ev.ElapsedMs = w.elapsed(t).Milliseconds()
		b, _ = json.Marshal(ev)
		fmt.Fprintln(w.out, string(b))
	}
}

func (w *watcher) renderLines(tasks []api.Task) {
	for i := range tasks {
		t := &tasks[i]
		p, known, msg := progressOf(t)
		line := fmt.Sprintf("%s %-10s a%d %s %s", t.TaskID, t.State, t.Attempt, pctText(p, known), oneLineOf(msg))
		if t.Reason != "" && (t.State.Terminal() || t.State == api.Cancelling) {
			line += " (" + oneLineOf(t.Reason) + ")"
		}
		if w.last[t.TaskID] == line {
			continue
		}
		w.last[t.TaskID] = line
		fmt.Fprintf(w.out, "%s %s\n", w.now().Format("15:04:05"), strings.TrimRight(line, " "))
	}
}

// redraw draws the table over the previous one.
func (w *watcher) redraw(tasks []api.Task, done bool) {
	tb := newTable("TASK", "KEY", "STATE", "ATT", "PROGRESS", "MESSAGE", "ELAPSED").shrink(5, 1, 0).colorState(2)
	barWidth := 20
	if w.ti.width < 120 {
		barWidth = 10
	}
	for i := range tasks {
		t := &tasks[i]
		p, known, msg := progressOf(t)
		if t.Reason != "" && (t.State.Terminal() || t.State == api.Cancelling) {
			msg = strings.TrimSpace(msg + " (" + t.Reason + ")")
		}
		tb.add(t.TaskID, t.TaskKey, string(t.State), fmt.Sprint(t.Attempt), bar(p, barWidth)+" "+pctText(p, known), dash(msg), shortDuration(w.elapsed(t)))
	}
	lines := append(tb.lines(w.ti), fit(summary(tasks), w.ti.width-1))
	if done {
		lines = append(lines, fit(outcome(tasks), w.ti.width-1))
	}
	var b strings.Builder
	if w.lines > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", w.lines)
	}
	for _, l := range lines {
		b.WriteString("\r\x1b[2K" + l + "\n")
	}
	b.WriteString("\x1b[J")
	io.WriteString(w.out, b.String())
	w.lines = len(lines)
}

// summary counts tasks per state: "3 tasks: 1 RUNNING, 2 SUCCEEDED".
func summary(tasks []api.Task) string {
	counts := map[api.State]int{}
	for _, t := range tasks {
		counts[t.State]++
	}
	var parts []string
	for _, st := range api.States {
		if n := counts[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	noun := "tasks"
	if len(tasks) == 1 {
		noun = "task"
	}
	return fmt.Sprintf("%d %s: %s", len(tasks), noun, strings.Join(parts, ", "))
}

// outcome is the final line: all succeeded, or which did not.
func outcome(tasks []api.Task) string {
	var bad []string
	for _, t := range tasks {
		if t.State != api.Succeeded {
			bad = append(bad, fmt.Sprintf("%s %s (%s)", t.TaskID, t.State, dash(t.Reason)))
		}
	}
	if len(bad) == 0 {
		if len(tasks) == 1 {
			return "Done: the task SUCCEEDED."
		}
		return fmt.Sprintf("Done: all %d tasks SUCCEEDED.", len(tasks))
	}
	return fmt.Sprintf("Done: %d of %d did not succeed: %s", len(bad), len(tasks), strings.Join(bad, "; "))
}
