package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// TestHeartbeatCostIndependentOfPayload: a heartbeat is one small read and
// one small write. What it sends to and receives from Firestore does not
// grow with the task's payload, nor with a checkpoint stored earlier; a
// checkpoint the heartbeat carries costs its own bytes and nothing more.
func TestHeartbeatCostIndependentOfPayload(t *testing.T) {
	s, rc := newStore(t)
	ctx := context.Background()
	const beats = 5
	checkpoint := func(i int) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"i":%d,"pad":%q}`, i, strings.Repeat("c", 32<<10)))
	}
	type cost struct{ rpcs, written, sent, received int }
	measure := func(payloadBytes int, withCheckpoint bool) cost {
		now := time.Now().UTC()
		tk := submitted(now, "")
		tk.Payload = json.RawMessage(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("p", payloadBytes)))
		tk = mustCreate(t, s, tk, now)
		mustApply(t, s, tk.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1, Now: now})
		mustApply(t, s, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: now})
		var c cost
		for i := range beats {
			p := i * 10
			hb := &api.HeartbeatRequest{Attempt: 1, WorkerID: "w1", ProgressPct: &p, Message: "working"}
			if withCheckpoint {
				hb.Checkpoint = checkpoint(i)
			}
			rc.Reset()
			r := mustApply(t, s, tk.ID, task.Event{Kind: task.EventHeartbeat, Attempt: 1, WorkerID: "w1", Heartbeat: hb, Now: now.Add(time.Duration(i+1) * 100 * time.Millisecond)})
			if r.Rejection != nil {
				t.Fatalf("heartbeat %d: %+v", i, r.Rejection)
			}
			u := rc.Usage()
			c.rpcs += u.RPCs
			c.written += u.DocsWritten
			c.sent += u.BytesSent
			c.received += u.BytesReceived
			if withCheckpoint {
				c.sent -= len(hb.Checkpoint)
			}
		}
		got, err := s.Get(ctx, tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		a := got.Attempts[0]
		if a.LastHeartbeatAt == nil || a.ProgressPct == nil || *a.ProgressPct != (beats-1)*10 || a.Message != "working" || len(got.Payload) < payloadBytes {
			t.Fatalf("after the heartbeats: attempt %+v, payload %d bytes", a, len(got.Payload))
		}
		if withCheckpoint && string(a.Checkpoint) != string(checkpoint(beats-1)) {
			t.Fatalf("checkpoint not kept: %d bytes", len(a.Checkpoint))
		}
		return c
	}
	for _, withCheckpoint := range []bool{false, true} {
		small, large := measure(1<<10, withCheckpoint), measure(512<<10, withCheckpoint)
		t.Logf("checkpoint=%v: per heartbeat, 1 KiB payload: %d RPCs, %d docs written, %d B sent, %d B received; 512 KiB payload: %d B sent, %d B received",
			withCheckpoint, small.rpcs/beats, small.written/beats, small.sent/beats, small.received/beats, large.sent/beats, large.received/beats)
		if small.rpcs != 2*beats || large.rpcs != 2*beats {
			t.Errorf("checkpoint=%v: %d and %d RPCs for %d heartbeats, want 2 each", withCheckpoint, small.rpcs, large.rpcs, beats)
		}
		if small.written != beats || large.written != beats {
			t.Errorf("checkpoint=%v: %d and %d documents written for %d heartbeats, want 1 each", withCheckpoint, small.written, large.written, beats)
		}
		for _, d := range []struct {
			what         string
			small, large int
		}{{"sent", small.sent, large.sent}, {"received", small.received, large.received}} {
			if float64(d.large) > 1.1*float64(d.small) {
				t.Errorf("checkpoint=%v: bytes %s per heartbeat grow with the payload: %d (1 KiB) vs %d (512 KiB)", withCheckpoint, d.what, d.small/beats, d.large/beats)
			}
		}
	}
}
