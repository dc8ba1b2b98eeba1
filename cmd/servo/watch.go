package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/task"
)

func cmdWatch(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	run := fs.String("run", "", "watch every task of a run")
	every := fs.Duration("every", 500*time.Millisecond, "poll interval")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if (len(pos) == 1) == (*run != "") || len(pos) > 1 {
		return usageErr("usage: servo watch ID | --run RUN")
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	w := newWatcher(os.Stdout, isTerminal(os.Stdout), cf.json)
	fetch := func() ([]client.Task, error) {
		if *run != "" {
			return runTasks(ctx, c, *run)
		}
		t, _, err := c.Get(ctx, pos[0])
		return []client.Task{t}, err
	}
	final, err := Watch(ctx, fetch, w, *every)
	if err != nil {
		return apiErr(err)
	}
	for _, t := range final {
		if t.State != task.Succeeded {
			return &exitError{exitNotOK, fmt.Errorf("%s ended %s (%s)", t.TaskID, t.State, dash(t.Reason))}
		}
	}
	return nil
}

// runTasks lists a run's tasks; the list has no attempts, so each
// unfinished task is read for its progress.
func runTasks(ctx context.Context, c *client.Client, run string) ([]client.Task, error) {
	tasks, err := c.ListAll(ctx, url.Values{"runId": {run}})
	if err != nil {
		return nil, err
	}
	for i := range tasks {
		if !tasks[i].State.Terminal() {
			if full, _, err := c.Get(ctx, tasks[i].TaskID); err == nil {
				tasks[i] = full
			}
		}
	}
	return tasks, nil
}

// Watch polls fetch every interval and renders the tasks with w until
// every task is terminal or ctx ends; it returns the last tasks seen.
func Watch(ctx context.Context, fetch func() ([]client.Task, error), w *watcher, every time.Duration) ([]client.Task, error) {
	for {
		tasks, err := fetch()
		if err != nil {
			return nil, err
		}
		w.render(tasks)
		done := len(tasks) > 0
		for _, t := range tasks {
			done = done && t.State.Terminal()
		}
		if done {
			return tasks, nil
		}
		select {
		case <-ctx.Done():
			return tasks, ctx.Err()
		case <-time.After(every):
		}
	}
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb"
}

// watcher renders task progress: redrawn bars on a terminal, one line per
// change otherwise, or JSON lines.
type watcher struct {
	out   io.Writer
	tty   bool
	json  bool
	lines int
	last  map[string]string
}

func newWatcher(out io.Writer, tty, asJSON bool) *watcher {
	return &watcher{out: out, tty: tty && !asJSON, json: asJSON, last: map[string]string{}}
}

func progressOf(t *client.Task) (int, string) {
	p, msg := 0, ""
	if n := len(t.Attempts); n > 0 {
		a := t.Attempts[n-1]
		if a.ProgressPct != nil {
			p = *a.ProgressPct
		}
		msg = a.Message
	}
	if t.State == task.Succeeded {
		p = 100
	}
	return p, msg
}

func bar(p, width int) string {
	p = min(max(p, 0), 100)
	full := p * width / 100
	return "[" + strings.Repeat("█", full) + strings.Repeat("░", width-full) + "]"
}

func (w *watcher) render(tasks []client.Task) {
	if w.tty && w.lines > 0 {
		fmt.Fprintf(w.out, "\x1b[%dA", w.lines)
	}
	w.lines = 0
	for i := range tasks {
		t := &tasks[i]
		p, msg := progressOf(t)
		line := fmt.Sprintf("%-32s %-10s a%d %s %3d%% %s", t.TaskID, t.State, t.Attempt, bar(p, 24), p, oneLine(msg))
		if t.Reason != "" && t.State.Terminal() {
			line += " (" + t.Reason + ")"
		}
		switch {
		case w.tty:
			fmt.Fprintf(w.out, "\x1b[2K%s\n", line)
			w.lines++
		case w.last[t.TaskID] != line:
			if w.json {
				b, _ := json.Marshal(map[string]any{"taskId": t.TaskID, "state": t.State, "attempt": t.Attempt, "progressPct": p, "message": msg, "reason": t.Reason})
				fmt.Fprintln(w.out, string(b))
			} else {
				fmt.Fprintf(w.out, "%s %s\n", time.Now().Format("15:04:05"), line)
			}
		}
		w.last[t.TaskID] = line
	}
}
