package task

import (
	"time"

	"github.com/servo-dev/servo/api"
)

// History bounds: a task document keeps its most recent HistoryLimit
// transitions, fewer when their stored size would pass HistoryBytes (errors
// carry messages and stack traces). Older transitions are dropped from the
// document; the events endpoints then answer the kept ones.
const (
	HistoryLimit = 200
	HistoryBytes = 64 << 10
)

// Step is a transition as the task document's history keeps it (Task.History):
// without the identity fields and event id, which the task holds or which
// derive from it (Task.Events puts them back).
type Step struct {
	Attempt     int            `firestore:"attempt"`
	From        api.State      `firestore:"from"`
	To          api.State      `firestore:"to"`
	Reason      string         `firestore:"reason"`
	Outcome     api.Outcome    `firestore:"outcome"`
	Error       *api.ErrorInfo `firestore:"error"`
	NextAttempt int            `firestore:"nextAttempt"`
	Seq         int64          `firestore:"seq"`
	OccurredAt  time.Time      `firestore:"occurredAt"`
}

// size approximates the stored size of a step: field names and fixed-size
// values, plus its strings.
func (s Step) size() int {
	n := 120 + len(s.From) + len(s.To) + len(s.Reason) + len(s.Outcome)
	if e := s.Error; e != nil {
		n += 40 + len(e.Category) + len(e.Message) + len(e.StackTrace)
	}
	return n
}

// record appends trs to t's history, keeping the most recent HistoryLimit
// steps within HistoryBytes (the last step is always kept).
func (t *Task) record(trs []Transition) {
	if len(trs) == 0 {
		return
	}
	h := make([]Step, 0, len(t.History)+len(trs))
	h = append(h, t.History...)
	for _, tr := range trs {
		h = append(h, Step{
			Attempt: tr.Attempt, From: tr.From, To: tr.To, Reason: tr.Reason, Outcome: tr.Outcome,
			Error: tr.Error, NextAttempt: tr.NextAttempt, Seq: tr.Seq, OccurredAt: tr.OccurredAt.UTC(),
		})
	}
	h = h[max(0, len(h)-HistoryLimit):]
	size, keep := 0, len(h)
	for keep > 0 && (keep == len(h) || size+h[keep-1].size() <= HistoryBytes) {
		size += h[keep-1].size()
		keep--
	}
	t.History = h[keep:]
}

// Events returns the transitions t's history keeps, in seq order, as the
// transition events they were (without the trace context, which the
// history does not keep).
func (t Task) Events() []Transition {
	out := make([]Transition, 0, len(t.History))
	for _, s := range t.History {
		out = append(out, Transition{
			EventID: EventID(t.ID, s.Seq), TaskID: t.ID, RunID: t.RunID, TenantID: t.TenantID,
			WorkspaceID: t.WorkspaceID, Worker: t.Worker, Attempt: s.Attempt, From: s.From, To: s.To,
			Reason: s.Reason, Outcome: s.Outcome, Error: s.Error, NextAttempt: s.NextAttempt, Seq: s.Seq,
			OccurredAt: s.OccurredAt, DeadLetter: s.To == api.Failed,
		})
	}
	return out
}
