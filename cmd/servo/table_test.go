package main

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/servo-dev/servo/api"
)

// Tables fit the width: the flexible columns are cut with "…", in the
// order given, never wrapped; without a width nothing is cut.
func TestTableFitsWidth(t *testing.T) {
	tb := newTable("TASK", "STATE", "MESSAGE").shrink(2, 0)
	tb.add("task_01HGW5N7XHJM4GX29KZRXQP6N9", "RUNNING", "partition 17 of 20: copying a rather long table name\nsecond line")
	for _, c := range []struct {
		width     int
		wantCut   bool
		wholeTask bool
	}{
		{0, false, true},
		{200, false, true},
		{60, true, true},
		{40, true, false},
	} {
		lines := tb.lines(termInfo{tty: c.width > 0, width: c.width})
		all := strings.Join(lines, "\n")
		if len(lines) != 2 || strings.Contains(all, "second line") {
			t.Fatalf("width %d: %q", c.width, lines)
		}
		for _, l := range lines {
			if c.width > 0 && utf8.RuneCountInString(l) >= c.width {
				t.Errorf("width %d: line of %d: %q", c.width, utf8.RuneCountInString(l), l)
			}
		}
		if strings.Contains(all, "…") != c.wantCut || strings.Contains(all, "task_01HGW5N7XHJM4GX29KZRXQP6N9") != c.wholeTask {
			t.Errorf("width %d: %q", c.width, lines)
		}
	}
}

// Colours only on a terminal and never with NO_COLOR; a pipe or buffer is
// no terminal.
func TestColours(t *testing.T) {
	tb := newTable("TASK", "STATE").colorState(1)
	tb.add("t1", "FAILED")
	if l := tb.lines(termInfo{tty: true, width: 80, color: true}); !strings.Contains(l[1], ansiRed+"FAILED"+ansiReset) {
		t.Errorf("no colour on a colour terminal: %q", l)
	}
	if l := tb.lines(termInfo{tty: true, width: 80}); strings.Contains(l[1], "\x1b") {
		t.Errorf("colour without it: %q", l)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if ti := termOf(w); ti.tty || ti.color {
		t.Errorf("a pipe is taken for a terminal: %+v", ti)
	}
}

// The demo's hint names servo only when it is on the PATH.
func TestServoCommand(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	if got := servoCommand(); got != "go run ./cmd/servo" {
		t.Errorf("servo not on PATH: %q", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "servo"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := servoCommand(); got != "servo" {
		t.Errorf("servo on PATH: %q", got)
	}
}

// TestWorkerTextReachesTheTerminalInert: whatever a worker wrote into a
// message, an error or a reason (an ESC sequence that retitles or clears
// the terminal, a bare CR that overwrites the line, a bidi override), servo
// get and servo watch print it escaped: no control byte but the newlines
// they print themselves reaches the terminal.
func TestWorkerTextReachesTheTerminalInert(t *testing.T) {
	hostile := "\x1b]0;pwned\x07\x1b[2Jok\rforged\u202egnp.exe\x00\u009b"
	started := time.Now()
	tk := api.Task{TaskID: "task_x", RunID: "run_x", TenantID: "t\x1b[31m", TaskKey: "k", Worker: "w", State: api.Failed, Reason: "R\x1b[2J",
		Attempt: 1, Retry: api.RetryPolicy{MaxAttempts: 1},
		Attempts: []api.Attempt{{Attempt: 1, Outcome: api.OutcomeFailed, WorkerID: "w\x1b", StartedAt: &started, Message: hostile,
			Error: &api.ErrorInfo{Category: api.CategoryUserCode, Message: hostile}}}}
	var get bytes.Buffer
	if err := printTask(&get, &tk); err != nil {
		t.Fatal(err)
	}
	var watch bytes.Buffer
	w := newWatcher(&watch, false, false)
	w.renderLines([]api.Task{tk})
	for name, out := range map[string]string{"servo get": get.String(), "servo watch": watch.String()} {
		for i, r := range out {
			if r != '\n' && unsafeRune(r) {
				t.Fatalf("%s printed U+%04X at %d:\n%q", name, r, i, out)
			}
		}
		if !strings.Contains(out, `\x1b`) {
			t.Fatalf("%s does not show the escaped ESC:\n%s", name, out)
		}
	}
}

// TestWorkerTextInertProperty is the property behind
// TestWorkerTextReachesTheTerminalInert: random texts of what means
// something to a terminal (escape sequences, CR, NUL, C1 controls, bidi
// overrides) mixed with ordinary text, in every field a worker fills,
// never reach the terminal raw from servo get or servo watch, and the
// printable text around them is kept.
func TestWorkerTextInertProperty(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SERVO_TEST_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	pieces := []string{"\x1b[2J", "\x1b]0;pwned\x07", "\x00", "\r", "\x7f", "\u009b31m", "\x08", "\x0c", "\u202e", "\u2066",
		"\t", "\n", "ok", "é", "😀", "<b>", "%s", `\x1b`, "\xff"}
	draw := func() string {
		var b strings.Builder
		for range 1 + rng.IntN(5) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		return b.String()
	}
	for i := range 200 {
		started := time.Now()
		msg, errMsg, wid, reason := draw(), draw(), draw(), draw()
		tk := api.Task{TaskID: "task_x", RunID: "run_x", TenantID: "acme", TaskKey: draw(), Worker: "w", State: api.Failed, Reason: reason,
			Attempt: 1, Retry: api.RetryPolicy{MaxAttempts: 1},
			Attempts: []api.Attempt{{Attempt: 1, Outcome: api.OutcomeFailed, WorkerID: wid, StartedAt: &started, Message: msg,
				Error: &api.ErrorInfo{Category: api.CategoryUserCode, Message: errMsg}}}}
		var get bytes.Buffer
		if err := printTask(&get, &tk); err != nil {
			t.Fatal(err)
		}
		var watch bytes.Buffer
		newWatcher(&watch, false, false).renderLines([]api.Task{tk})
		for name, out := range map[string]string{"servo get": get.String(), "servo watch": watch.String()} {
			// Checked on its own terms, not with the printer's unsafeRune.
			for j, r := range out {
				if (unicode.IsControl(r) && r != '\n' && r != '\t') || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == utf8.RuneError {
					t.Fatalf("case %d: %s printed U+%04X at %d for message %q:\n%q", i, name, r, j, msg, out)
				}
			}
		}
		// The attempt's row shows its error (a failed attempt's message;
		// its first line).
		if strings.Contains(errMsg, "ok") && !strings.Contains(errMsg, "\n") && !strings.Contains(get.String(), "ok") {
			t.Fatalf("case %d: servo get lost the printable text of %q:\n%s", i, errMsg, get.String())
		}
	}
}

// A QUEUED task whose deliveries fail says so on servo get (a Delivery
// line) and servo watch (its message), with the status, the error, the
// tries and the next try; a task without one has no such line.
func TestDeliveryShown(t *testing.T) {
	last := time.Date(2026, 11, 28, 12, 0, 1, 0, time.Local)
	next := last.Add(4 * time.Second)
	tk := api.Task{TaskID: "task_x", RunID: "run_x", TenantID: "acme", TaskKey: "k", Worker: "etl", State: api.Queued, Attempt: 1,
		Retry: api.RetryPolicy{MaxAttempts: 3},
		Delivery: &api.Delivery{Attempts: 7, LastStatus: "UNAVAILABLE", LastError: `Post "http://127.0.0.1:8081": connect: connection refused`,
			LastAttemptAt: &last, NextTryAt: &next, CheckedAt: last.Add(time.Second)}}
	var get bytes.Buffer
	if err := printTask(&get, &tk); err != nil {
		t.Fatal(err)
	}
	want := `Delivery:         delivery failing (7 tries): UNAVAILABLE: Post "http://127.0.0.1:8081": connect: connection refused; next try 12:00:05 (checked 12:00:02)`
	if !strings.Contains(get.String(), want+"\n") {
		t.Errorf("servo get:\n%s\nwant the line\n%s", get.String(), want)
	}
	var watch bytes.Buffer
	newWatcher(&watch, false, false).renderLines([]api.Task{tk})
	if !strings.Contains(watch.String(), "QUEUED     a1    - delivery failing (7 tries): UNAVAILABLE: Post") {
		t.Errorf("servo watch: %q", watch.String())
	}
	tk.Delivery = nil
	get.Reset()
	printTask(&get, &tk)
	if strings.Contains(get.String(), "Delivery") {
		t.Errorf("a task without a failing delivery:\n%s", get.String())
	}
}
