package task

import (
	"encoding/binary"
	"time"

	"github.com/servo-dev/servo/api"
)

// MaxHeartbeatTicks bounds the heartbeat instants an attempt keeps
// (Attempt.HeartbeatTimes): a multi-hour attempt heartbeating every few
// seconds keeps an evenly thinned sample, so the record's size, and what
// each heartbeat reads and writes, stays bounded.
const MaxHeartbeatTicks = 64

// HeartbeatTimes returns the instants of the attempt's heartbeats, oldest
// first: every one while there were at most MaxHeartbeatTicks, else every
// k-th one (k a power of two, the same stride throughout), starting with
// the first. Attempt.Heartbeats is how many there were.
func (a *Attempt) HeartbeatTimes() []time.Time {
	return decodeTicks(a.HeartbeatTicks)
}

// tickStride is the sampling stride after n heartbeats: the smallest power
// of two that keeps ceil(n/stride) within MaxHeartbeatTicks.
func tickStride(n int) int {
	s := 1
	for (n+s-1)/s > MaxHeartbeatTicks {
		s *= 2
	}
	return s
}

// recordHeartbeat counts a heartbeat received at now and keeps its instant
// when the sampling stride says so, thinning the kept instants (every other
// one) when the stride doubles.
func (a *Attempt) recordHeartbeat(now time.Time) {
	n := a.Heartbeats // this heartbeat's index, from 0
	a.Heartbeats++
	prev, next := tickStride(n), tickStride(n+1)
	if next == prev && n%next != 0 {
		return
	}
	ticks := decodeTicks(a.HeartbeatTicks)
	if next != prev {
		kept := ticks[:0]
		for i, t := range ticks {
			if i%(next/prev) == 0 {
				kept = append(kept, t)
			}
		}
		ticks = kept
	}
	if n%next == 0 {
		ticks = append(ticks, now)
	}
	a.HeartbeatTicks = encodeTicks(ticks)
}

// encodeTicks packs instants as varints: the first in Unix milliseconds,
// each next one as the milliseconds since the previous (never negative).
func encodeTicks(ts []time.Time) []byte {
	if len(ts) == 0 {
		return nil
	}
	b := make([]byte, 0, 8+3*len(ts))
	var last int64
	for i, t := range ts {
		ms := t.UnixMilli()
		if i == 0 {
			b = binary.AppendUvarint(b, uint64(max(ms, 0)))
		} else {
			b = binary.AppendUvarint(b, uint64(max(ms-last, 0)))
		}
		last = max(ms, last)
	}
	return b
}

// decodeTicks unpacks encodeTicks; a malformed tail is dropped.
func decodeTicks(b []byte) []time.Time {
	var ts []time.Time
	var ms int64
	for len(b) > 0 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			break
		}
		b = b[n:]
		if ts == nil {
			ms = int64(v)
		} else {
			ms += int64(v)
		}
		ts = append(ts, time.UnixMilli(ms).UTC())
	}
	return ts
}

// heartbeatWrites reports whether an accepted heartbeat on a RUNNING
// attempt must be written (docs/cost.md, "Heartbeats"). It need not when
// it changes nothing the worker or the API can see but the lease, and the
// stored lease has more than half of the heartbeat timeout left and at
// least one and a half heartbeat intervals: the next heartbeat, even half
// an interval late, lands inside it, and renews it then. That holds for
// an attempt's first heartbeat too (started set the lease). One that
// carries a checkpoint or changes the progress or the message, and any
// heartbeat while CANCELLING, are always written. A lease is therefore
// renewed at least every half timeout; lastHeartbeatAt, heartbeats and the
// sampled instants record the written heartbeats.
func (m *machine) heartbeatWrites(a *Attempt, hb *api.HeartbeatRequest) bool {
	t := m.t()
	if t.State != api.Running || t.LeaseExpiresAt == nil {
		return true
	}
	if hb != nil {
		if len(hb.Checkpoint) > 0 || (hb.Message != "" && hb.Message != a.Message) {
			return true
		}
		if p := hb.ProgressPct; p != nil && (a.ProgressPct == nil || *a.ProgressPct != *p) {
			return true
		}
	}
	left := t.LeaseExpiresAt.Sub(m.now)
	timeout, interval := t.Timing.HeartbeatTimeout(), t.Timing.HeartbeatInterval()
	return left <= timeout/2 || left < interval+interval/2
}
