package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// TestBacklogs: the dashboard's health reads count what is due, what the
// outbox still holds, and the transitions of a period.
func TestBacklogs(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	var ids []string
	for i := range 5 {
		tk := mustCreate(t, s, submitted(now, ""), now)
		ids = append(ids, tk.ID)
		// Started i seconds ago with a 3 s heartbeat timeout: leases end at now-i+3.
		mustApply(t, s, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w", Now: now.Add(-time.Duration(i) * time.Second)})
	}
	pending := mustCreate(t, s, submitted(now, ""), now) // PENDING, its dispatch check far ahead
	ids = append(ids, pending.ID)

	for _, c := range []struct {
		at   time.Time
		want map[store.Due]int64
	}{
		{now, map[store.Due]int64{store.DueLease: 2, store.DueCancel: 0, store.DueDispatch: 0, store.DueDeadline: 0}},
		{now.Add(time.Hour), map[store.Due]int64{store.DueLease: 5, store.DueCancel: 0, store.DueDispatch: 1, store.DueDeadline: 0}},
	} {
		got, err := s.DueBacklog(ctx, c.at)
		if err != nil {
			t.Fatal(err)
		}
		for d, n := range c.want {
			if got[d] != n {
				t.Errorf("at now+%v: %s backlog %d, want %d", c.at.Sub(now), d, got[d], n)
			}
		}
	}

	// 5 × (created, started) + 1 created: 11 undelivered entries.
	n, oldest, err := s.OutboxBacklog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 11 || oldest == nil || !oldest.Equal(now.Add(-4*time.Second)) {
		t.Fatalf("outbox backlog %d, oldest %v; want 11, %v", n, oldest, now.Add(-4*time.Second))
	}
	es, err := s.OutboxEntries(ctx, ids[4])
	if err != nil {
		t.Fatal(err)
	}
	var delivered []string
	for _, e := range es {
		delivered = append(delivered, e.EventID)
	}
	if err := s.DeleteDelivered(ctx, delivered); err != nil {
		t.Fatal(err)
	}
	if n, oldest, err = s.OutboxBacklog(ctx); err != nil || n != 9 || !oldest.Equal(now.Add(-3*time.Second)) {
		t.Fatalf("after delivering 2: backlog %d, oldest %v (%v); want 9, %v", n, oldest, err, now.Add(-3*time.Second))
	}

	for _, c := range []struct {
		name          string
		since         time.Time
		limit         int
		want          int
		wantTruncated bool
	}{
		{"all, delivered or not", now.Add(-time.Minute), 1000, 11, false},
		{"the started events are older", now.Add(-500 * time.Millisecond), 1000, 7, false},
		{"none yet", now.Add(time.Second), 1000, 0, false},
		{"bounded", now.Add(-time.Minute), 2, -1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, truncated, err := s.RecentTransitions(ctx, c.since, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			if (c.want >= 0 && len(got) != c.want) || truncated != c.wantTruncated {
				t.Fatalf("%d transitions, truncated %v; want %d, %v", len(got), truncated, c.want, c.wantTruncated)
			}
			for _, st := range got {
				if st.OccurredAt.Before(c.since) || (st.To != api.Pending && st.To != api.Running) {
					t.Errorf("unexpected %+v", st)
				}
			}
		})
	}
}

// TestListNewestFirstWithoutFilter: the unfiltered listing pages newest
// first (Firestore refuses a descending scan of document names).
func TestListNewestFirstWithoutFilter(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	now := time.Now().UTC()
	var want []string
	for i := range 5 {
		want = append(want, mustCreate(t, s, submitted(now.Add(time.Duration(i)*time.Millisecond), ""), now).ID)
	}
	slices.Reverse(want)
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		page, next, err := s.List(ctx, store.ListFilter{NewestFirst: true, PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range page {
			got = append(got, tk.ID)
		}
		if next == "" || pages > 5 {
			break
		}
		token = next
	}
	if !slices.Equal(got, want) {
		t.Fatalf("newest first: %v, want %v", got, want)
	}
}
