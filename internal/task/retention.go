package task

import "time"

// MinRetention is the shortest retention of ended tasks: the idempotency
// window (store.IdempotencyRetention), so that a key never maps to a task
// Firestore has deleted.
const MinRetention = 30 * 24 * time.Hour

// DefaultRetention is how long an ended task, its attempt records and its
// run are kept when nothing else is configured (SERVO_RETENTION).
const DefaultRetention = 30 * 24 * time.Hour

// setExpiry stamps the TTL of what the result writes (docs/cost.md,
// "Retention"): a task that has just ended expires Event.Retention after
// its end, and so does the attempt record it ends with; an attempt that
// ended while the task goes on (a retry) expires Event.Retention after the
// later of its end and the task's deadline, since the task ends by then.
// It costs no write of its own: the fields ride on the transition's
// commit. A zero Retention keeps everything.
func (m *machine) setExpiry() {
	d := m.ev.Retention
	if d <= 0 || !m.r.Write {
		return
	}
	t, a := m.t(), m.r.Attempt
	if t.State.Terminal() && t.ExpireAt == nil && t.EndedAt != nil {
		exp := t.EndedAt.Add(d)
		t.ExpireAt = &exp
	}
	if a == nil || !a.Ended() || a.ExpireAt != nil {
		return
	}
	if t.ExpireAt != nil {
		exp := *t.ExpireAt
		a.ExpireAt = &exp
		return
	}
	exp := laterOf(m.now, t.Deadline).Add(d)
	a.ExpireAt = &exp
}
