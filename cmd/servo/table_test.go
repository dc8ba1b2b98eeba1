package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
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
