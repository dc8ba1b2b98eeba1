package task

import (
	"time"

	"github.com/servo-dev/servo/api"
)

// Paced heartbeats (docs/contract.md §5.7): every 200 answer to `started`
// and `heartbeat` tells the worker how long it may wait before its next
// plain heartbeat (nextHeartbeatInMs), so that a worker sends no heartbeat
// that the store would not write and that no cancel notice or token
// refresh needs. The hint is never shorter than the heartbeat interval (a
// worker following it never heartbeats more often than today) and never
// longer than three bounds allow:
//
//   - the lease: the hinted heartbeat is sent with at least LeaseMargin
//     (max(1.5 × interval, timeout / 4)) of the lease left, so that it is
//     written (the skip rule writes a plain heartbeat with at most half
//     the timeout, or under 1.5 intervals, left) and, lost or slow, its
//     retry or the next heartbeat an interval later, even half an
//     interval late, still lands inside the lease;
//   - the cancel notice: at most half the cancel grace period, so that a
//     cancel requested right after the answer is seen within max(interval,
//     grace / 2) plus one request's round trip, leaving the worker at
//     least half the grace period (less that round trip) to wind down
//     whenever the grace period is at least two intervals (otherwise, as
//     without pacing, within one interval);
//   - the token: the hinted heartbeat reaches Servo with at least half of
//     the refresh window (RefreshBefore: max(lifetime / 4, 2 × interval))
//     left on the worker's newest token, inside that window, so its answer
//     carries a fresh token with at least max(lifetime / 8, interval) to
//     spare.
//
// While the task is CANCELLING (the worker is winding down) and when the
// task holds no lease, the hint is the interval.

// LeaseMargin is how much of the lease a paced heartbeat leaves when it is
// sent: one and a half heartbeat intervals, or a quarter of the heartbeat
// timeout when that is more.
func LeaseMargin(timing api.Timing) time.Duration {
	return max(timing.HeartbeatInterval()*3/2, timing.HeartbeatTimeout()/4)
}

// CancelNoticeBound is the longest a paced worker may go without a
// heartbeat because of the cancel notice: half the cancel grace period.
func CancelNoticeBound(timing api.Timing) time.Duration {
	return timing.CancelGracePeriod() / 2
}

// NextHeartbeatIn is the nextHeartbeatInMs of an accepted `started` or
// `heartbeat` answered at now, for the task as the callback left it (its
// state, its lease and its timers), when the newest token the worker holds
// after the answer (a refreshed one, or the one it used) expires at
// tokenExpires after a lifetime of tokenLifetime. See the package's
// "Paced heartbeats" rule above; the result is whole milliseconds, rounded
// down, and at least the heartbeat interval.
func NextHeartbeatIn(t *Task, now, tokenExpires time.Time, tokenLifetime time.Duration) time.Duration {
	timing := t.Timing
	interval := timing.HeartbeatInterval()
	if t.State != api.Running || t.LeaseExpiresAt == nil || interval <= 0 {
		return interval
	}
	hint := t.LeaseExpiresAt.Sub(now) - LeaseMargin(timing)
	if c := CancelNoticeBound(timing); c > 0 {
		hint = min(hint, c)
	}
	if !tokenExpires.IsZero() {
		hint = min(hint, tokenExpires.Sub(now)-RefreshBefore(tokenLifetime, interval)/2)
	}
	return max(interval, hint.Truncate(time.Millisecond))
}
