package zombie_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/zombie"
)

// nextDueStore is a memStore with an outbox, schedules and quotas, as
// NextDue reads them.
type nextDueStore struct {
	*memStore
	outbox    []store.OutboxEntry
	schedules []store.Schedule
	quotas    bool
}

func (s *nextDueStore) OutboxGroups() [][]int { return [][]int{{0}} }

func (s *nextDueStore) Undelivered(_ context.Context, _ []int, dueBy time.Time, limit int) ([]store.OutboxEntry, error) {
	var out []store.OutboxEntry
	for _, e := range s.outbox {
		if !e.NextTryAt.After(dueBy) && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

func (s *nextDueStore) ScheduleGroups() [][]int { return [][]int{{0}} }

func (s *nextDueStore) DueSchedules(_ context.Context, _ []int, now time.Time, limit int, _ *store.DueCursor) ([]store.Schedule, error) {
	var out []store.Schedule
	for _, sc := range s.schedules {
		if sc.DueAt != nil && !sc.DueAt.After(now) && len(out) < limit {
			out = append(out, sc)
		}
	}
	return out, nil
}

func (s *nextDueStore) QuotasEnabled() bool { return s.quotas }

// graceRedriver is a Redriver with a grace period.
type graceRedriver struct{ recorder }

func (*graceRedriver) RedriveGrace() time.Duration { return 10 * time.Second }

// noSchedules is a Schedules the sweeper never calls in these tests.
type noSchedules struct{ zombie.Schedules }

// TestNextDue: the earliest due time at or before until, over every duty's
// query (the quota admission only with quotas), the due schedules and the
// outbox (its next try plus the re-drive's grace); none when nothing is
// due by until; the error of a failed query.
func TestNextDue(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	until := now.Add(time.Minute)
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	st := &nextDueStore{memStore: newMemStore()}
	sw, err := zombie.New(zombie.Config{Store: st, Enqueuer: &recorder{}, Redriver: &graceRedriver{}, Schedules: noSchedules{},
		Now: func() time.Time { return now }, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, want *time.Time) {
		t.Helper()
		got, found, err := sw.NextDue(ctx, until)
		switch {
		case err != nil:
			t.Fatalf("%s: %v", what, err)
		case want == nil && found:
			t.Errorf("%s: next due %s, want none by %s", what, got, until)
		case want != nil && (!found || !got.Equal(*want)):
			t.Errorf("%s: next due %s (found %v), want %s", what, got, found, *want)
		}
	}
	check("empty store", nil)

	st.put(task.Task{ID: "late", State: api.Running, Attempt: 1, LeaseExpiresAt: at(2 * time.Minute)})
	check("a lease past until", nil)
	st.put(task.Task{ID: "lease", State: api.Running, Attempt: 1, LeaseExpiresAt: at(40 * time.Second)})
	check("a lease", at(40*time.Second))
	st.put(task.Task{ID: "dispatch", State: api.Queued, Attempt: 1, DispatchCheckAt: at(30 * time.Second)})
	check("a dispatch check", at(30*time.Second))
	st.outbox = []store.OutboxEntry{{NextTryAt: now.Add(15 * time.Second)}}
	check("an outbox entry (next try + grace)", at(25*time.Second))
	st.schedules = []store.Schedule{{DueAt: at(20 * time.Second)}}
	check("a schedule", at(20*time.Second))
	st.put(task.Task{ID: "cancel", State: api.Cancelling, Attempt: 1, LeaseExpiresAt: at(time.Hour), CancelDeadline: at(10 * time.Second)})
	check("a cancel grace", at(10*time.Second))
	st.put(task.Task{ID: "deadline", State: api.Pending, Attempt: 1, Deadline: at(5 * time.Second)})
	check("a deadline", at(5*time.Second))

	waiting := task.Task{ID: "waiting", State: api.Queued, Attempt: 1, WaitingSince: at(-time.Second)}
	st.put(waiting)
	check("a task waiting for a slot, quotas off", at(5*time.Second))
	st.quotas = true
	check("a task waiting for a slot", at(-time.Second))

	st.queryErr = map[store.Due]error{store.DueLease: errBoom}
	if _, _, err := sw.NextDue(ctx, until); !errors.Is(err, errBoom) {
		t.Errorf("a failed query: %v, want %v", err, errBoom)
	}
}
