package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// TestReshard: data written at 64 due shards, opened at 8. Before Reshard
// the data uses shards a store of 8 would never query (DueShardsInUse
// says so: the functions refuse to start); a dry run counts and moves
// nothing; Reshard moves every task, outbox entry, run and schedule into
// the shard its key hashes to among 8, and a second run finds nothing.
// The 8-shard store then lists every task.
func TestReshard(t *testing.T) {
	ctx := context.Background()
	project := emulatortest.ProjectID(t)
	wide, err := store.New(ctx, project, store.WithDueShards(64))
	if err != nil {
		t.Fatal(err)
	}
	defer wide.Close()
	now := time.Now().UTC()
	ids := map[string]bool{}
	for i := 0; i < 30; i++ {
		tk := submitted(now, "")
		tk.RunID = task.NewRunID(now)
		ids[mustCreate(t, wide, tk, now).ID] = true
	}
	for _, id := range []string{"nightly", "hourly", "weekly", "daily"} {
		due := now.Add(time.Hour)
		if _, err := wide.CreateSchedule(ctx, store.Schedule{ScheduleID: id, TenantID: "acme", WorkspaceID: "ws", EveryMs: 3_600_000,
			Task: []byte(`{"worker":"w"}`), NextFireAt: &due, DueAt: &due}); err != nil {
			t.Fatal(err)
		}
	}
	narrow, err := store.New(ctx, project, store.WithDueShards(8))
	if err != nil {
		t.Fatal(err)
	}
	defer narrow.Close()
	inUse, err := narrow.DueShardsInUse(ctx)
	if err != nil || inUse <= 8 {
		t.Fatalf("due shards in use %d, %v: want above 8 (the test's data must need moving)", inUse, err)
	}
	dry, err := narrow.Reshard(ctx, store.MigrateOptions{DryRun: true, PageSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := narrow.DueShardsInUse(ctx); n != inUse {
		t.Fatalf("a dry run moved data: %d shards in use, was %d", n, inUse)
	}
	rep, err := narrow.Reshard(ctx, store.MigrateOptions{PageSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	moved := map[string]int{}
	for i, p := range rep.Steps {
		moved[p.Step] = p.Updated
		if !p.Done || p.Updated == 0 || p.Updated != dry.Steps[i].Updated {
			t.Errorf("step %+v (dry run %+v): want it done, having moved what the dry run counted", p, dry.Steps[i])
		}
	}
	if len(rep.Steps) != 4 {
		t.Fatalf("steps %+v, want tasks, outbox, schedules and runs", rep.Steps)
	}
	if n, err := narrow.DueShardsInUse(ctx); err != nil || n > 8 {
		t.Fatalf("after Reshard: %d shards in use, %v; want at most 8", n, err)
	}
	again, err := narrow.Reshard(ctx, store.MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range again.Steps {
		if p.Updated != 0 || p.Scanned != 0 {
			t.Errorf("a second run %+v: want nothing left", p)
		}
	}
	listed := map[string]bool{}
	for tok := ""; ; {
		page, next, err := narrow.List(ctx, store.ListFilter{TenantID: "acme", PageSize: 500, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range page {
			listed[tk.ID] = true
			if tk.DueShard != store.DueShardOf(tk.ID, 8) {
				t.Errorf("task %s in shard %d, want %d", tk.ID, tk.DueShard, store.DueShardOf(tk.ID, 8))
			}
		}
		if tok = next; tok == "" {
			break
		}
	}
	for id := range ids {
		if !listed[id] {
			t.Errorf("task %s not listed at 8 shards after Reshard", id)
		}
	}
	t.Logf("moved %v", moved)
}
