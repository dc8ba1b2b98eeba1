package task

import (
	"testing"
	"time"
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
