package task

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
)

func TestRecordHeartbeat(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		beats      int
		wantTicks  int
		wantStride int
	}{
		{0, 0, 1},
		{1, 1, 1},
		{3, 3, 1},
		{64, 64, 1},
		{65, 33, 2},
		{128, 64, 2},
		{129, 33, 4},
		{1000, 63, 16},
		{10000, 40, 256},
	} {
		var a Attempt
		for i := range tc.beats {
			a.recordHeartbeat(t0.Add(time.Duration(i) * 1500 * time.Millisecond))
		}
		got := a.HeartbeatTimes()
		if a.Heartbeats != tc.beats || len(got) != tc.wantTicks {
			t.Errorf("%d beats: Heartbeats %d, %d ticks; want %d, %d", tc.beats, a.Heartbeats, len(got), tc.beats, tc.wantTicks)
			continue
		}
		if len(got) > MaxHeartbeatTicks {
			t.Errorf("%d beats: %d ticks, more than %d", tc.beats, len(got), MaxHeartbeatTicks)
		}
		// Every kept tick is heartbeat number k*stride, in order.
		for k, ts := range got {
			want := t0.Add(time.Duration(k*tc.wantStride) * 1500 * time.Millisecond)
			if !ts.Equal(want) {
				t.Errorf("%d beats: tick %d at %v, want %v (stride %d)", tc.beats, k, ts, want, tc.wantStride)
				break
			}
		}
		if n := len(a.HeartbeatTicks); tc.beats > 0 && n > 8+3*MaxHeartbeatTicks {
			t.Errorf("%d beats: %d bytes of ticks", tc.beats, n)
		}
	}
}

func TestHeartbeatTicksMalformed(t *testing.T) {
	a := Attempt{HeartbeatTicks: []byte{0xff}}
	if got := a.HeartbeatTimes(); len(got) != 0 {
		t.Errorf("malformed ticks decoded to %v", got)
	}
}

// TestHeartbeatWritesOnlyWhenHalfLeft: an accepted heartbeat that changes
// nothing but the lease is written only when less than half of the lease
// (or less than one and a half intervals) is left; a heartbeat that starts
// the attempt, a checkpoint, a new progress or message, and CANCELLING
// always write.
func TestHeartbeatWritesOnlyWhenHalfLeft(t *testing.T) {
	p50, p60 := 50, 60
	for _, tc := range []struct {
		name      string
		state     api.State
		beatAt    time.Duration // after the written heartbeat at t0+1s
		hb        api.HeartbeatRequest
		wantWrite bool
	}{
		{"more than half left", api.Running, 30 * time.Second, api.HeartbeatRequest{ProgressPct: &p50}, false},
		{"just over half left", api.Running, 44 * time.Second, api.HeartbeatRequest{}, false},
		{"half left", api.Running, 45 * time.Second, api.HeartbeatRequest{}, true},
		{"less than half left", api.Running, 60 * time.Second, api.HeartbeatRequest{}, true},
		{"new progress", api.Running, time.Second, api.HeartbeatRequest{ProgressPct: &p60}, true},
		{"new message", api.Running, time.Second, api.HeartbeatRequest{Message: "phase 2"}, true},
		{"checkpoint", api.Running, time.Second, api.HeartbeatRequest{Checkpoint: json.RawMessage(`{"i":1}`)}, true},
		{"cancelling", api.Cancelling, time.Second, api.HeartbeatRequest{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk, a := taskIn(tc.state)
			first := Apply(tk, a, eventFor(EventHeartbeat, t0.Add(time.Second)))
			if !first.Write || first.Rejection != nil {
				t.Fatalf("first heartbeat: write %v, rejection %v", first.Write, first.Rejection)
			}
			hb := tc.hb
			hb.Attempt, hb.WorkerID = 1, "w1"
			now := t0.Add(time.Second + tc.beatAt)
			r := Apply(first.Task, first.Attempt, Event{Kind: EventHeartbeat, Attempt: 1, WorkerID: "w1", Now: now, Heartbeat: &hb})
			if r.Rejection != nil {
				t.Fatalf("refused: %v", r.Rejection)
			}
			if r.Write != tc.wantWrite {
				t.Fatalf("write %v, want %v", r.Write, tc.wantWrite)
			}
			if !r.Write && !reflect.DeepEqual(r.Task, first.Task) {
				t.Errorf("a heartbeat without a write changed the task")
			}
			if r.Write && !r.Task.LeaseExpiresAt.Equal(now.Add(r.Task.Timing.HeartbeatTimeout())) {
				t.Errorf("lease %v, want %v", r.Task.LeaseExpiresAt, now.Add(r.Task.Timing.HeartbeatTimeout()))
			}
			if tc.state == api.Cancelling && !r.ShouldCancel {
				t.Errorf("shouldCancel not set while CANCELLING")
			}
		})
	}
}

// TestHeartbeatAtIntervalKeepsLease: a worker heartbeating at its interval,
// a tenth early then up to 40 % of an interval late, never finds its lease over, over many
// intervals and timings; the writes drop where the timeout allows.
func TestHeartbeatAtIntervalKeepsLease(t *testing.T) {
	for _, tc := range []struct {
		intervalMs, timeoutMs int64
		maxWrites             int // of 40 heartbeats, the first included
	}{
		{1000, 2000, 40},
		{1000, 3000, 40},
		{30000, 90000, 21},
		{10000, 90000, 10},
		{5000, 60000, 8},
	} {
		for _, late := range []float64{0, 0.2, 0.4} {
			t.Run(fmt.Sprintf("%d/%d late %.1f", tc.intervalMs, tc.timeoutMs, late), func(t *testing.T) {
				tk, a := newTestTask()
				tk.Timing = api.Timing{HeartbeatIntervalMs: tc.intervalMs, HeartbeatTimeoutMs: tc.timeoutMs}.WithDefaults()
				interval := tk.Timing.HeartbeatInterval()
				cur := &a
				now := t0
				r := Apply(tk, cur, Event{Kind: EventStarted, Attempt: 1, WorkerID: "w1", Now: now})
				tk, cur = r.Task, r.Attempt
				writes := 0
				for i := range 40 {
					// Alternately a tenth of an interval early and late
					// by the fraction.
					step := interval - interval/10
					if i%2 == 1 {
						step = interval + time.Duration(late*float64(interval))
					}
					now = now.Add(step)
					r := Apply(tk, cur, heartbeat(1, "w1", now))
					if r.Rejection != nil {
						t.Fatalf("heartbeat %d at +%v: %v (lease %v)", i, now.Sub(t0), r.Rejection.Code, tk.LeaseExpiresAt.Sub(t0))
					}
					if r.Write {
						writes++
						tk, cur = r.Task, r.Attempt
					}
				}
				if writes > tc.maxWrites || writes == 0 {
					t.Errorf("%d writes for 40 heartbeats, want 1..%d", writes, tc.maxWrites)
				}
				t.Logf("%d writes for 40 heartbeats", writes)
			})
		}
	}
}

// TestFirstHeartbeatAfterStartedWritesOnlyWhenHalfLeft: started set the
// lease, so an attempt's first plain heartbeat follows the same rule as
// the others; one that starts the attempt (no started before it) is
// always written.
func TestFirstHeartbeatAfterStartedWritesOnlyWhenHalfLeft(t *testing.T) {
	for _, tc := range []struct {
		name      string
		started   bool
		after     time.Duration // since started (30 s interval, 90 s timeout)
		wantWrite bool
	}{
		{"one interval after started", true, 30 * time.Second, false},
		{"more than half the lease gone", true, 50 * time.Second, true},
		{"no started before it", false, 30 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk, a := newTestTask()
			tk.Timing = api.Timing{HeartbeatIntervalMs: 30000, HeartbeatTimeoutMs: 90000}.WithDefaults()
			cur := &a
			if tc.started {
				r := Apply(tk, cur, Event{Kind: EventStarted, Attempt: 1, WorkerID: "w1", Now: t0})
				if r.Rejection != nil || !r.Write {
					t.Fatalf("started: write %v, rejection %v", r.Write, r.Rejection)
				}
				tk, cur = r.Task, r.Attempt
			}
			r := Apply(tk, cur, heartbeat(1, "w1", t0.Add(tc.after)))
			if r.Rejection != nil {
				t.Fatalf("refused: %v", r.Rejection)
			}
			if r.Write != tc.wantWrite {
				t.Fatalf("write %v, want %v", r.Write, tc.wantWrite)
			}
		})
	}
}
