package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// duePage is the suite's page size for due queries: small, so that a
// group's due tasks span pages.
const duePage = 2

// dueRead is one pass of the sweeper's duty d over every group of due
// shards at now, page by page as the sweeper reads (a page shorter than
// the limit is the group's last): the tasks it returns, and the most pages
// a group took.
func dueRead(t *testing.T, s Store, d store.Due, now time.Time, limit int) (got []task.Task, mostPages int) {
	t.Helper()
	for _, group := range s.DueGroups(d) {
		var cursor *store.DueCursor
		var prev *time.Time
		pages := 0
		for {
			page, err := s.DueTasks(t.Context(), d, group, now, limit, cursor)
			if err != nil {
				t.Fatalf("due %s %v: %v", d, group, err)
			}
			pages++
			if len(page) > limit {
				t.Fatalf("due %s %v: a page of %d, limit %d", d, group, len(page), limit)
			}
			for i := range page {
				tk := &page[i]
				at := store.DueTime(d, tk)
				switch {
				case !slices.Contains(group, tk.DueShard):
					t.Fatalf("due %s %v returned %s of shard %d", d, group, tk.ID, tk.DueShard)
				case at == nil || at.After(now):
					t.Fatalf("due %s at %v returned %s due at %v", d, now, tk.ID, at)
				case prev != nil && at.Before(*prev):
					t.Fatalf("due %s %v: %s due at %v after one due at %v", d, group, tk.ID, at, prev)
				}
				prev = at
				got = append(got, *tk)
			}
			if len(page) < limit {
				break
			}
			last := page[len(page)-1]
			cursor = &store.DueCursor{At: *store.DueTime(d, &last), ID: last.ID}
		}
		mostPages = max(mostPages, pages)
	}
	return got, mostPages
}

func idsOf(ts []task.Task) []string {
	out := make([]string, len(ts))
	for i, tk := range ts {
		out[i] = tk.ID
	}
	return out
}

// checkOnce fails unless got holds each of want exactly once, and nothing
// else.
func checkOnce(t *testing.T, what string, got, want []string) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	var missing, extra, twice []string
	for _, id := range want {
		if seen[id] == 0 {
			missing = append(missing, id)
		}
	}
	for id, n := range seen {
		if !slices.Contains(want, id) {
			extra = append(extra, id)
		}
		if n > 1 {
			twice = append(twice, fmt.Sprintf("%s ×%d", id, n))
		}
	}
	if len(missing)+len(extra)+len(twice) > 0 {
		t.Fatalf("%s: %d returned, want %d; missing %v, not due %v, repeated %v", what, len(got), len(want), missing, extra, twice)
	}
}

// The lease duty's query, over every group of due shards, paged by
// DueCursor with a small page, returns each task whose lease ran out
// exactly once (RUNNING and CANCELLING alike, leases ending at the same
// instant included), and no task whose lease has not, or that has none.
func testDue(t *testing.T, o Opener) {
	s := o.New(t, Config{})
	ctx := t.Context()
	groups := s.DueGroups(store.DueLease)
	var shards []int
	for _, g := range groups {
		if len(g) == 0 {
			t.Fatalf("an empty group of due shards in %v", groups)
		}
		shards = append(shards, g...)
	}
	if n := len(shards); n == 0 || len(slices.Compact(slices.Sorted(slices.Values(shards)))) != n {
		t.Fatalf("groups of due shards %v: a shard in two groups, or none", groups)
	}

	now := time.Now().UTC()
	past := now.Add(-time.Hour).Truncate(time.Millisecond)
	// More tasks due than the groups' first pages hold: some group spans
	// pages, whatever the shards.
	nDue := duePage*len(groups) + 1
	subs := make([]task.Task, nDue+6)
	for i := range subs {
		subs[i] = submitted(past, "acme", "")
	}
	var ids []string
	for _, r := range s.CreateMany(ctx, subs, past, true) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids = append(ids, r.Task.ID)
	}
	// Due: started an hour ago, leases ending together; one of them is
	// cancelling (its lease still counts).
	due := slices.Clone(ids[:nDue])
	for _, id := range due {
		mustAccept(t, s, id, started(1, "w1", past))
	}
	if r := mustAccept(t, s, due[0], cancel(past.Add(time.Second))); r.Task.State != api.Cancelling {
		t.Fatalf("cancel of a running task: %s", r.Task.State)
	}
	// Not due: three started now (leases end in minutes), two never
	// started, one ended an hour ago.
	rest := ids[nDue:]
	fresh := rest[:3]
	for _, id := range fresh {
		mustAccept(t, s, id, started(1, "w1", now))
	}
	mustAccept(t, s, rest[5], started(1, "w1", past))
	mustAccept(t, s, rest[5], completed(1, "w1", api.OutcomeSucceeded, "", past.Add(time.Second)))

	got, pages := dueRead(t, s, store.DueLease, now, duePage)
	checkOnce(t, fmt.Sprintf("lease due at now, pages of %d", duePage), idsOf(got), due)
	if pages < 2 {
		t.Fatalf("no group took more than one page of %d for %d due tasks over %d groups", duePage, nDue, len(groups))
	}
	for _, tk := range got {
		if tk.Attempt != 1 || (tk.State != api.Running && tk.State != api.Cancelling) {
			t.Fatalf("due task %s: %s attempt %d", tk.ID, tk.State, tk.Attempt)
		}
	}
	// One page as large as them all: the same tasks.
	all, _ := dueRead(t, s, store.DueLease, now, len(ids)+1)
	checkOnce(t, "lease due at now, one page", idsOf(all), due)
	// Before the leases ran out, nothing was due.
	if early, _ := dueRead(t, s, store.DueLease, past.Add(time.Minute), duePage); len(early) != 0 {
		t.Fatalf("%d tasks due a minute after they started, leases of %v: %v", len(early), heartbeatTimeout, idsOf(early))
	}
	// Past the fresh leases, they are due too.
	later, _ := dueRead(t, s, store.DueLease, now.Add(heartbeatTimeout+time.Minute), duePage)
	checkOnce(t, "lease due after the fresh leases", idsOf(later), append(slices.Clone(due), fresh...))

	// The sweeper's lease expiry takes a task out of the duty.
	r := mustAccept(t, s, due[1], task.Event{Kind: task.EventLeaseExpired, Attempt: 1, Now: now})
	if r.Task.State != api.Queued || r.Task.Attempt != 2 || r.Task.LeaseExpiresAt != nil {
		t.Fatalf("lease expired: %s attempt %d lease %v, want a retry QUEUED without a lease", r.Task.State, r.Task.Attempt, r.Task.LeaseExpiresAt)
	}
	got, _ = dueRead(t, s, store.DueLease, now, duePage)
	checkOnce(t, "lease due after one expiry", idsOf(got), slices.Delete(slices.Clone(due), 1, 2))
}
