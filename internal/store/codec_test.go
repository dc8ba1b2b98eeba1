package store

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

func TestCodecRoundTrip(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	p, yes := 42, true
	in := task.Task{
		ID: "task_1", RunID: "run_1", TenantID: "acme", Payload: json.RawMessage(`{"a":[1,2,{"b":null}]}`),
		State: api.Running, Attempt: 3, Seq: 9, Deadline: &now, CreatedAt: now, LeaseExpiresAt: &now,
		Timing: api.Timing{HeartbeatIntervalMs: 100, HeartbeatTimeoutMs: 200}, Retry: api.RetryPolicy{BackoffCoefficient: 1.5},
	}
	var out task.Task
	if err := decodeFields(encodeFields(in), &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("task round trip:\n in %+v\nout %+v", in, out)
	}
	a := task.Attempt{Attempt: 2, ProgressPct: &p, Error: &api.ErrorInfo{Category: api.CategoryUserCode, Retryable: &yes},
		Metrics: &api.Metrics{CPUTimeMs: 5}, StartedAt: &now, Checkpoint: json.RawMessage(`{"k":1}`)}
	var b task.Attempt
	if err := decodeFields(encodeFields(a), &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("attempt round trip:\n in %+v\nout %+v", a, b)
	}
	// A type mismatch is an error, not a silent zero.
	f := encodeFields(in)
	f["attempt"] = f["state"]
	if err := decodeFields(f, &out); err == nil {
		t.Fatal("decoding a string into an int must fail")
	}
}
