package devstack_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/examples/worker/partitions"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/servotest/stacktest"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/worker"
)

// TestDueShards: a stack on an empty database sweeps DefaultDueShards
// shards; one started on data written with more shards raises its count to
// the shards in use, so that every task is still swept; DueShards asks for
// more.
func TestDueShards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	project := emulatortest.ProjectID(t)
	open := func(shards int) *devstack.Stack {
		return stacktest.Start(t, devstack.Options{Project: project, DueShards: shards, SweepEvery: time.Hour,
			WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process}})
	}
	s := open(0)
	if n := s.Store.DueShards(); n != devstack.DefaultDueShards {
		t.Fatalf("empty database: %d due shards, want %d", n, devstack.DefaultDueShards)
	}
	s.Close()

	// Tasks written with 16 shards, until one lands past shard 0.
	s = open(store.DefaultDueShards)
	if n := s.Store.DueShards(); n != store.DefaultDueShards {
		t.Fatalf("DueShards %d: %d due shards", store.DefaultDueShards, n)
	}
	highest := 0
	for i := 0; highest == 0; i++ {
		st, out := stacktest.NewAPI(t, s).Do("POST", "/v1/tasks", map[string]any{"tenantId": "acme", "workspaceId": "ws", "taskKey": fmt.Sprint("k", i), "worker": devstack.ExampleWorker,
			"payload": map[string]any{"partitions": 1}})
		if st != 201 {
			t.Fatalf("submit: %d %s", st, out)
		}
		in, err := s.Store.DueShardsInUse(ctx)
		if err != nil {
			t.Fatal(err)
		}
		highest = in - 1
	}
	s.Close()

	s = open(0)
	defer s.Close()
	if n := s.Store.DueShards(); n != highest+1 {
		t.Fatalf("on data in shards up to %d: %d due shards, want %d", highest, n, highest+1)
	}
}
