package faults_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/store"
	"github.com/servo-dev/servo/task"
)

// A Firestore outage that outlasts the callers' deadlines must leave no
// transaction behind: the reads that began transactions during the outage
// reach Firestore when it comes back, and unless Servo rolls them back
// their locks block every later write to the task (found by TestFaults:
// after a 5 s freeze every callback timed out for good).
func TestFirestoreFreezeLeavesNoLocks(t *testing.T) {
	fs := emulatortest.Emulator(t, emulator.Firestore)
	ctx := context.Background()
	s, err := store.New(ctx, emulatortest.ProjectID(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UTC()
	tk := task.Task{ID: task.NewTaskID(now), RunID: task.NewRunID(now), TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "w",
		Timing: task.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 600000}}
	if _, _, err := s.Create(ctx, tk, now); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []task.Event{{Kind: task.EventEnqueued, Attempt: 1}, {Kind: task.EventStarted, Attempt: 1, WorkerID: "w1"}} {
		if _, err := s.Apply(ctx, tk.ID, ev); err != nil {
			t.Fatal(err)
		}
	}
	heartbeat := task.Event{Kind: task.EventHeartbeat, Attempt: 1, WorkerID: "w1", Heartbeat: &task.HeartbeatRequest{}}

	if err := fs.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer fs.Thaw()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			if _, err := s.Apply(cctx, tk.ID, heartbeat); err == nil {
				t.Error("a heartbeat succeeded while Firestore was frozen")
			}
		})
	}
	wg.Wait()
	time.Sleep(time.Second) // the reads are in the emulator's socket buffers
	if err := fs.Thaw(); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	t0 := time.Now()
	if _, err := s.Apply(cctx, tk.ID, heartbeat); err != nil {
		t.Fatalf("a heartbeat after the outage healed: %v", err)
	}
	t.Logf("heartbeat after the outage: %v", time.Since(t0))
}
