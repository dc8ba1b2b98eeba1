package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// TestDueGroupsFindEveryShard: with 100 due shards (the default 384 make
// 26 and 55 groups, checked here too; the emulator takes seconds a
// grouped query over the 768 tasks they would need), two tasks
// due at the same instant in every shard are each found exactly once by
// the grouped due queries (dueShard IN [...]), page after page of 7 across
// the shards of a group (the cursor orders by due time, then name), and
// the whole read costs one query per group and page: 7 groups of at most
// 15 shards for a duty of two states, 15 of at most 7 for one of four,
// not 100 queries.
func TestDueGroupsFindEveryShard(t *testing.T) {
	const perShard, limit = 2, 7
	def, err := store.New(context.Background(), emulatortest.ProjectID(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { def.Close() })
	if def.DueShards() != 384 || len(def.DueGroups(store.DueDispatch)) != 26 || len(def.DueGroups(store.DueDeadline)) != 55 {
		t.Fatalf("default due shards %d in %d dispatch and %d deadline groups, want 384 in 26 and 55",
			def.DueShards(), len(def.DueGroups(store.DueDispatch)), len(def.DueGroups(store.DueDeadline)))
	}
	c := store.NewRPCCounter()
	s, err := store.New(context.Background(), emulatortest.ProjectID(t), store.WithRPCCounter(c), store.WithDueShards(100))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	// Created an hour ago: every task is PENDING with its dispatch check
	// long past, all at the same instant.
	created := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	count := make([]int, s.DueShards())
	var subs []task.Task
	for len(subs) < perShard*s.DueShards() {
		sub := submitted(created, "")
		sub.Deadline = new(created.Add(time.Minute))
		if sh := store.DueShardOf(sub.ID, s.DueShards()); count[sh] < perShard {
			count[sh]++
			subs = append(subs, sub)
		}
	}
	var want []string
	for _, r := range s.CreateMany(ctx, subs, created, false) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		want = append(want, r.Task.ID)
	}
	slices.Sort(want)
	tests := []struct {
		due    store.Due
		groups int
	}{
		{store.DueDispatch, 7},
		{store.DueDeadline, 15},
	}
	for _, tt := range tests {
		t.Run(string(tt.due), func(t *testing.T) {
			groups := s.DueGroups(tt.due)
			if len(groups) != tt.groups {
				t.Fatalf("%d groups, want %d", len(groups), tt.groups)
			}
			c.Reset()
			wantQueries := 0
			var got []string
			for _, group := range groups {
				wantQueries += perShard*len(group)/limit + 1
				var cursor *store.DueCursor
				for {
					page, err := s.DueTasks(ctx, tt.due, group, time.Now().UTC(), limit, cursor)
					if err != nil {
						t.Fatal(err)
					}
					for _, tk := range page {
						if !slices.Contains(group, tk.DueShard) {
							t.Fatalf("group %v returned %s of shard %d", group, tk.ID, tk.DueShard)
						}
						got = append(got, tk.ID)
					}
					if len(page) < limit {
						break
					}
					last := page[len(page)-1]
					cursor = &store.DueCursor{At: *store.DueTime(tt.due, &last), ID: last.ID}
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("found %d tasks (%d distinct), want the %d due", len(got), len(slices.Compact(slices.Clone(got))), len(want))
			}
			if n := c.Counts()["RunQuery"]; n != wantQueries {
				t.Fatalf("%d queries, want %d (one per group and page)", n, wantQueries)
			}
		})
	}
}

// TestDueGroupsFitDisjunctions: every duty's groups and the outbox's
// cover each shard once, with at most 30 disjunctions a query (shards ×
// the duty's states), whatever the number of shards.
func TestDueGroupsFitDisjunctions(t *testing.T) {
	for _, shards := range []int{1, 16, 31, 128, 1000} {
		s, err := store.New(context.Background(), "p", store.WithDueShards(shards))
		if err != nil {
			t.Fatal(err)
		}
		sets := map[string][][]int{"outbox": s.OutboxGroups()}
		per := map[string]int{"outbox": 1}
		for d, states := range store.DueStates {
			sets[string(d)], per[string(d)] = s.DueGroups(d), len(states)
		}
		for name, groups := range sets {
			var all []int
			for _, g := range groups {
				if len(g) == 0 || len(g)*per[name] > 30 {
					t.Fatalf("%d shards, %s: group %v of %d shards × %d states", shards, name, g, len(g), per[name])
				}
				all = append(all, g...)
			}
			slices.Sort(all)
			if len(all) != shards || all[0] != 0 || all[len(all)-1] != shards-1 || len(slices.Compact(all)) != shards {
				t.Fatalf("%d shards, %s: groups %v", shards, name, fmt.Sprint(groups))
			}
			if each := 30 / per[name]; len(groups) != (shards+each-1)/each {
				t.Fatalf("%d shards, %s: %d groups, want the fewest, %d", shards, name, len(groups), (shards+each-1)/each)
			}
		}
		s.Close()
	}
}
