package quota

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/task"
)

// dutyStore is a DutyStore of fixed answers that counts its calls.
type dutyStore struct {
	enabled         bool
	repairs         []Repair
	waiting         []task.Task
	failed          int
	waitErr         error
	repairCalls     int
	waitingCalls    int
	lastLimit       int
	lastWaitingTime time.Time
	lastOldest      bool
}

func (s *dutyStore) QuotasEnabled() bool { return s.enabled }

func (s *dutyStore) RepairQuotaCounters(context.Context) ([]Repair, error) {
	s.repairCalls++
	return s.repairs, nil
}

func (s *dutyStore) WaitingForSlot(_ context.Context, now time.Time, limit int, oldest bool) ([]task.Task, int, error) {
	s.waitingCalls++
	s.lastLimit, s.lastWaitingTime, s.lastOldest = limit, now, oldest
	return s.waiting, s.failed, s.waitErr
}

// The quota duty is one duty: nothing without a limited scope; otherwise
// the repair when due (skipped shards not counted), then the waiting
// tasks offered in fair order, a tenant skipped once it had no slot; a
// failed group of queries is counted and reported without stopping the
// admission of the others.
func TestDuty(t *testing.T) {
	ctx := t.Context()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	at := func(s int) *time.Time { v := time.Unix(int64(s), 0); return &v }
	now := time.Unix(1000, 0)

	off := &dutyStore{}
	if res, err := NewDuty(off, 0, log).Run(ctx, now, 10, func() bool { return false }, func(*task.Task) bool { t.Fatal("offered"); return false }); err != nil || res != (DutyResult{}) || off.repairCalls+off.waitingCalls != 0 {
		t.Fatalf("without limits: %+v %v, %d repairs, %d reads", res, err, off.repairCalls, off.waitingCalls)
	}

	s := &dutyStore{
		enabled: true,
		repairs: []Repair{{Kind: KindTenant, Name: "a", Queued: 1}, {Kind: KindTenant, Name: "b", Skipped: true}},
		waiting: []task.Task{
			{ID: "a2", TenantID: "a", WaitingSince: at(2)}, {ID: "b1", TenantID: "b", WaitingSince: at(3)},
			{ID: "a1", TenantID: "a", WaitingSince: at(1)}, {ID: "b2", TenantID: "b", WaitingSince: at(4)},
		},
		failed: 1, waitErr: errors.New("shards [0]: unavailable"),
	}
	d := NewDuty(s, time.Hour, log)
	var offered []string
	res, err := d.Run(ctx, now, 7, func() bool { return false }, func(tk *task.Task) bool {
		offered = append(offered, tk.ID)
		return tk.TenantID != "a" // tenant a has no free slot
	})
	if err == nil || res != (DutyResult{Waiting: 4, QueryErrors: 1, Repairs: 1}) {
		t.Fatalf("first run: %+v, %v", res, err)
	}
	if want := []string{"a1", "b1", "b2"}; !slices.Equal(offered, want) {
		t.Fatalf("offered %v, want %v (fair order; a skipped once full)", offered, want)
	}
	if s.lastLimit != 7 || !s.lastWaitingTime.Equal(now) || s.lastOldest {
		t.Fatalf("waiting read with limit %d at %v, oldest %v; want no oldest before OldestEvery", s.lastLimit, s.lastWaitingTime, s.lastOldest)
	}
	// Within repairEvery the counters are not recounted again.
	s.waitErr, s.failed = nil, 0
	if res, err := d.Run(ctx, now, 7, func() bool { return true }, func(*task.Task) bool { t.Fatal("offered after stop"); return false }); err != nil || res.Repairs != 0 || s.repairCalls != 1 || s.lastOldest {
		t.Fatalf("second run: %+v %v, %d repairs, oldest %v", res, err, s.repairCalls, s.lastOldest)
	}
	// OldestEvery (here the longer repair period) after it started, a pass
	// reads the longest waiting too, once.
	d.lastOldest = time.Now().Add(-d.oldestEvery())
	for _, want := range []bool{true, false} {
		if _, err := d.Run(ctx, now, 7, func() bool { return true }, func(*task.Task) bool { return false }); err != nil || s.lastOldest != want {
			t.Fatalf("after OldestEvery: oldest %v (%v), want %v", s.lastOldest, err, want)
		}
	}
	if NewDuty(s, 0, log).repairEvery != DefaultRepairEvery {
		t.Fatal("no default repair cadence")
	}
}
