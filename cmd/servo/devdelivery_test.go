package main

import (
	"bytes"
	"strings"
	"testing"
)

// servo dev echoes the sweeper's failing-delivery record to its terminal
// as one line naming the worker, the task count, the status and error;
// every other record stays in the log file only.
func TestDeliveryEcho(t *testing.T) {
	var out bytes.Buffer
	e := &deliveryEcho{out: &out}
	records := []string{
		`{"time":"2026-11-28T16:43:37Z","severity":"INFO","message":"sweep pass","component":"sweeper"}`,
		`{"time":"2026-11-28T16:43:37Z","severity":"WARNING","message":"deliveries to worker down are failing; its QUEUED tasks wait for Cloud Tasks' next try","component":"sweeper","worker":"down","tasks":2,"taskId":"task_01X","deliveries":10,"lastStatus":"UNAVAILABLE","lastError":"Post \"http://127.0.0.1:46405\": dial tcp 127.0.0.1:46405: connect: connection refused","nextTryAt":"2026-11-28T16:43:39Z"}`,
		`{"message":"deliveries to worker broken json`,
	}
	for _, r := range records {
		if n, err := e.Write([]byte(r + "\n")); n != len(r)+1 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("terminal lines %q, want one", lines)
	}
	for _, want := range []string{"deliveries to worker down are failing", "2 QUEUED task(s)", "task_01X after 10 tries", "UNAVAILABLE", "connection refused", "next try "} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("line %q lacks %q", lines[0], want)
		}
	}
}
