package task

import (
	"time"
	"unicode/utf8"

	"github.com/servo-dev/servo/api"
)

// History bounds: a task document keeps its most recent HistoryLimit
// transitions, fewer when their stored size would pass HistoryBytes (errors
// carry messages and stack traces), or the room its large fields leave in
// the document (historyRoom). Older transitions are dropped from the
// document; the events endpoints then answer the kept ones.
const (
	HistoryLimit = 200
	HistoryBytes = 64 << 10
)

// maxDocBytes is Firestore's document size limit; docReserve bounds a task
// document's fields other than its large ones and its history.
const (
	maxDocBytes = 1 << 20
	docReserve  = 16 << 10
)

// historyRoom is how many bytes t's history may take: HistoryBytes, less
// when the payload, resources, checkpoint to resume from and the running
// attempt's checkpoint (counted at its largest) leave less in the document.
func (t *Task) historyRoom() int {
	used := len(t.Payload) + len(t.Resources) + len(t.ResumeFrom) + api.MaxCheckpointBytes + docReserve
	return max(0, min(HistoryBytes, maxDocBytes-used))
}

// Step is a transition as the task document's history keeps it (Task.History):
// without the identity fields and event id, which the task holds or which
// derive from it (Task.Events puts them back).
type Step struct {
	Attempt     int
	From        api.State
	To          api.State
	Reason      string
	Outcome     api.Outcome
	Error       *api.ErrorInfo
	NextAttempt int
	Seq         int64
	OccurredAt  time.Time
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
// steps within historyRoom. The last step is always kept; when it alone
// passes the room, its error's stack trace, then message, are cut to fit.
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
	room := t.historyRoom()
	h[len(h)-1] = h[len(h)-1].fit(room)
	size, keep := 0, len(h)
	for keep > 0 && (keep == len(h) || size+h[keep-1].size() <= room) {
		size += h[keep-1].size()
		keep--
	}
	t.History = h[keep:]
}

// fit returns s with its error's stack trace, then message, cut so that s
// takes at most room bytes (as far as its error allows).
func (s Step) fit(room int) Step {
	over := s.size() - room
	if over <= 0 || s.Error == nil {
		return s
	}
	e := *s.Error
	cut := min(over, len(e.StackTrace))
	e.StackTrace = cutUTF8(e.StackTrace, len(e.StackTrace)-cut)
	over -= cut
	e.Message = cutUTF8(e.Message, max(0, len(e.Message)-over))
	s.Error = &e
	return s
}

// cutUTF8 returns the longest prefix of s of at most n bytes that does not
// split a character.
func cutUTF8(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Events returns the transitions t's history keeps, in seq order, as the
// transition events they were (without the trace context, which the
// history does not keep).
func (t Task) Events() []Transition {
	out := make([]Transition, 0, len(t.History))
	for _, s := range t.History {
		out = append(out, Transition{
			EventID: EventID(t.ID, s.Seq), TaskID: t.ID, RunID: t.RunID, TenantID: t.TenantID,
			WorkspaceID: t.WorkspaceID, Worker: t.Worker, Attempt: s.Attempt, Priority: t.Priority, From: s.From, To: s.To,
			Reason: s.Reason, Outcome: s.Outcome, Error: s.Error, NextAttempt: s.NextAttempt, Seq: s.Seq,
			OccurredAt: s.OccurredAt, DeadLetter: s.To == api.Failed,
			ScheduleID: t.ScheduleID, ScheduledFireAt: t.ScheduledFireAt,
		})
	}
	return out
}
