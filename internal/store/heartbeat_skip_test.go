package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// TestHeartbeatWithHalfLeaseLeftWritesNothing: a heartbeat that changes
// nothing but the lease, with more than half of the lease left, costs one
// read and no write; one with less left, or with a new progress, renews
// the lease (a read and a commit), and GET shows what was written.
func TestHeartbeatWithHalfLeaseLeftWritesNothing(t *testing.T) {
	s, rc := newStore(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond) // Firestore keeps microseconds
	tk := mustCreate(t, s, submitted(now, ""), now)    // interval 1 s, timeout 3 s
	mustApply(t, s, tk.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1, Now: now})
	mustApply(t, s, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: now})
	p10, p20 := 10, 20
	for _, b := range []struct {
		name       string
		at         time.Duration // since start
		progress   *int
		rpcs, docs int
		leaseFrom  time.Duration // the lease after it runs from start + leaseFrom
	}{
		{"first heartbeat", 100 * time.Millisecond, &p10, 2, 1, 100 * time.Millisecond},
		{"same progress, 2.5 s of 3 left", 600 * time.Millisecond, &p10, 1, 0, 100 * time.Millisecond},
		{"no progress, 1.6 s left", 1500 * time.Millisecond, nil, 1, 0, 100 * time.Millisecond},
		{"1.4 s left", 1700 * time.Millisecond, nil, 2, 1, 1700 * time.Millisecond},
		{"new progress, 2.9 s left", 1800 * time.Millisecond, &p20, 2, 1, 1800 * time.Millisecond},
	} {
		rc.Reset()
		at := now.Add(b.at)
		r := mustApply(t, s, tk.ID, task.Event{Kind: task.EventHeartbeat, Attempt: 1, WorkerID: "w1", Now: at,
			Heartbeat: &api.HeartbeatRequest{Attempt: 1, WorkerID: "w1", ProgressPct: b.progress}})
		if r.Rejection != nil {
			t.Fatalf("%s: %+v", b.name, r.Rejection)
		}
		u := rc.Usage()
		if u.RPCs != b.rpcs || u.DocsWritten != b.docs {
			t.Errorf("%s: %d RPCs, %d documents written; want %d, %d", b.name, u.RPCs, u.DocsWritten, b.rpcs, b.docs)
		}
		got, err := s.Get(ctx, tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := now.Add(b.leaseFrom + 3*time.Second)
		if got.LeaseExpiresAt == nil || !got.LeaseExpiresAt.Equal(want) {
			t.Errorf("%s: lease until %v, want %v", b.name, got.LeaseExpiresAt, want)
		}
		if a := got.Attempts[0]; a.LastHeartbeatAt == nil || !a.LastHeartbeatAt.Equal(now.Add(b.leaseFrom)) {
			t.Errorf("%s: last heartbeat %v, want %v", b.name, a.LastHeartbeatAt, now.Add(b.leaseFrom))
		}
	}
}
