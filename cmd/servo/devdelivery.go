package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// deliveryEcho is a log writer that also tells servo dev's terminal (out)
// about the sweeper's line for a worker whose deliveries are failing
// (docs/contract.md §5.4), so that a developer whose worker is down sees
// why its tasks stay QUEUED without opening the log. Every write is a
// whole JSON log record (log/slog's JSON handler); it never fails.
type deliveryEcho struct {
	mu  sync.Mutex
	out io.Writer
}

// deliveryLine marks the sweeper's record (zombie.Sweeper.logFailing).
var deliveryLine = []byte(`"message":"deliveries to worker `)

func (e *deliveryEcho) Write(p []byte) (int, error) {
	if !bytes.Contains(p, deliveryLine) {
		return len(p), nil
	}
	var r struct {
		Worker     string `json:"worker"`
		Tasks      int    `json:"tasks"`
		TaskID     string `json:"taskId"`
		Deliveries int    `json:"deliveries"`
		LastStatus string `json:"lastStatus"`
		LastError  string `json:"lastError"`
		NextTryAt  string `json:"nextTryAt"`
	}
	if json.Unmarshal(p, &r) != nil || r.Worker == "" {
		return len(p), nil
	}
	line := fmt.Sprintf("servo dev: deliveries to worker %s are failing (%d QUEUED task(s), e.g. %s after %d tries): %s: %s",
		r.Worker, r.Tasks, r.TaskID, r.Deliveries, r.LastStatus, r.LastError)
	if t, err := time.Parse(time.RFC3339, r.NextTryAt); err == nil {
		line += "; next try " + t.Local().Format("15:04:05")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprintln(e.out, oneLineOf(line))
	return len(p), nil
}
