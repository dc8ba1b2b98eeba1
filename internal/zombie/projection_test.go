package zombie_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/zombie"
)

// payloadSeen records the payload bytes of the tasks the due queries return.
type payloadSeen struct {
	*store.Store
	mu    sync.Mutex
	bytes int
	tasks int
}

func (p *payloadSeen) DueTasks(ctx context.Context, d store.Due, shard []int, now time.Time, limit int, after *store.DueCursor) ([]task.Task, error) {
	ts, err := p.Store.DueTasks(ctx, d, shard, now, limit, after)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range ts {
		p.tasks++
		p.bytes += len(t.Payload)
	}
	return ts, err
}

// TestDueQueriesReadNoPayload: with tasks whose payload is 256 KiB due in
// every duty, a pass's due queries receive a few hundred bytes per task, not
// the payloads (the query projects the fields the sweeper uses), and every
// duty is still applied; the re-drive's enqueue gets the whole task (with
// its payload) from the transaction.
func TestDueQueriesReadNoPayload(t *testing.T) {
	const payloadSize = 256 << 10
	e := newEnv(t)
	big := json.RawMessage(`{"blob":"` + strings.Repeat("x", payloadSize) + `"}`)
	mk := func(deadline time.Duration) task.Task {
		now := time.Now().UTC()
		tk := task.Task{
			ID: task.NewTaskID(now), RunID: "run_p", TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "w",
			Payload: big, Timing: shortTiming, Retry: api.RetryPolicy{MaxAttempts: 1},
		}
		if deadline > 0 {
			d := now.Add(deadline)
			tk.Deadline = &d
		}
		created, _, err := e.st.Create(e.ctx, tk, now)
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	// One task due in each duty.
	dispatch := mk(0) // PENDING: dispatchCheckAt after the start timeout
	deadline := mk(200 * time.Millisecond)
	lease := mk(0)
	e.apply(lease.ID, task.Event{Kind: task.EventEnqueued})
	e.apply(lease.ID, task.Event{Kind: task.EventStarted, WorkerID: "w1"})
	cancel := mk(0)
	e.apply(cancel.ID, task.Event{Kind: task.EventEnqueued})
	e.apply(cancel.ID, task.Event{Kind: task.EventStarted, WorkerID: "w1"})
	e.apply(cancel.ID, task.Event{Kind: task.EventCancel, Reason: "user_requested"})
	for _, id := range []string{dispatch.ID, deadline.ID, lease.ID, cancel.ID} {
		got := e.get(id)
		for _, at := range []*time.Time{got.DispatchCheckAt, got.Deadline, got.LeaseExpiresAt, got.CancelDeadline} {
			if at != nil {
				waitPast(t, at)
			}
		}
	}

	seen := &payloadSeen{Store: e.st}
	sw := e.sweeper(func(c *zombie.Config) { c.Store = seen })
	e.rpc.Reset()
	st := e.sweep(sw)
	if tot := st.Total(); tot.Due != 4 || tot.Applied != 4 || tot.Errors != 0 {
		t.Fatalf("stats %+v", st)
	}
	if st.Deadline.Applied != 1 || st.Cancel.Applied != 1 || st.Lease.Applied != 1 || st.Dispatch.Applied != 1 {
		t.Fatalf("per duty %+v", st)
	}
	received := e.rpc.ReceivedBytes()["RunQuery"]
	t.Logf("due queries: %d tasks, %d payload bytes decoded, %d bytes received", seen.tasks, seen.bytes, received)
	if seen.tasks != 4 || seen.bytes != 0 {
		t.Fatalf("due queries returned %d tasks with %d payload bytes, want 4 tasks without payload", seen.tasks, seen.bytes)
	}
	// Four tasks, four queries: a few KiB at most, whatever the payloads.
	if received <= 0 || received > 8<<10 {
		t.Fatalf("due queries received %d bytes, want (0, 8 KiB] with %d KiB payloads", received, payloadSize>>10)
	}
	// The re-drive's enqueue builds its envelope from the transaction's
	// task, which has the payload.
	calls := e.rec.calls()[dispatch.ID]
	if len(calls) != 1 || !calls[0].Enqueue {
		t.Fatalf("dispatch follow-ups %+v", calls)
	}
	if p := calls[0].Task.Payload; len(p) != len(big) || !json.Valid(p) {
		t.Fatalf("re-drive enqueued with a %d-byte payload, want %d", len(p), len(big))
	}
	for _, id := range []string{deadline.ID, lease.ID, cancel.ID} {
		if got := e.get(id); got.State != api.Failed || len(got.Payload) != len(big) {
			t.Fatalf("%s: %s with %d payload bytes", id, got.State, len(got.Payload))
		}
	}
}
