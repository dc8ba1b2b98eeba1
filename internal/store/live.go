package store

import (
	"context"
	"reflect"
	"slices"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/protobuf/proto"

	"github.com/servo-dev/servo/internal/task"
)

// A heartbeat is the hottest write in Servo: every running task sends one
// every interval. It reads the task document through a field mask that
// leaves out everything large (payload, resources, resumeFrom, the live
// checkpoint) and writes only the fields it changed, through an update
// mask, in that one document: the current attempt's heartbeat state lives
// on the task (task.Task.Live) and is folded into the attempt record at the
// attempt's next transition that changes something Live does not hold (a
// `started` writes only the task document: mirrored). Its cost does not
// grow with the payload or with a checkpoint stored earlier.

// liveField is the task document's field that holds task.Task.Live;
// endedField, task.Task.Ended.
const (
	liveField  = "live"
	endedField = "endedAttempt"
)

// heartbeatSkips are the task fields a heartbeat never reads: large, and
// changed only by transitions.
var heartbeatSkips = []string{"payload", "resources", "resumeFrom", "history", liveField, endedField}

// heartbeatMask lists the task fields a heartbeat reads: every top-level
// field but heartbeatSkips, and the live attempt but its checkpoint.
var heartbeatMask = func() []string {
	var paths []string
	rt := reflect.TypeOf(taskDoc{})
	for i := range rt.NumField() {
		if name, ok := fieldName(rt.Field(i)); ok && !slices.Contains(heartbeatSkips, name) {
			paths = append(paths, name)
		}
	}
	lt := reflect.TypeOf(liveAttemptDoc{})
	for i := range lt.NumField() {
		if name, ok := fieldName(lt.Field(i)); ok && name != "checkpoint" {
			paths = append(paths, liveField+"."+name)
		}
	}
	return paths
}()

// HeartbeatReadMask returns the task document's field paths a heartbeat
// reads (the benchmarks replay its read against the emulator).
func HeartbeatReadMask() []string { return slices.Clone(heartbeatMask) }

// liveOf is the heartbeat state of a running attempt's record.
func liveOf(a *task.Attempt) *task.LiveAttempt {
	var created *time.Time
	if !a.CreatedAt.IsZero() {
		c := a.CreatedAt
		created = &c
	}
	return &task.LiveAttempt{Attempt: a.Attempt, CreatedAt: created, ScheduledAt: a.ScheduledAt, WorkerID: a.WorkerID, StartedAt: a.StartedAt, LastHeartbeatAt: a.LastHeartbeatAt,
		Heartbeats: a.Heartbeats, HeartbeatTicks: a.HeartbeatTicks, ProgressPct: a.ProgressPct, Message: a.Message, Checkpoint: a.Checkpoint, Execution: a.Execution}
}

// overlay lays the task's live heartbeat state over its attempt record.
func overlay(a *task.Attempt, l *task.LiveAttempt) {
	if a == nil || l == nil || l.Attempt != a.Attempt {
		return
	}
	if l.CreatedAt != nil {
		a.CreatedAt = *l.CreatedAt
	}
	if l.ScheduledAt != nil {
		a.ScheduledAt = l.ScheduledAt
	}
	if l.WorkerID != "" {
		a.WorkerID = l.WorkerID
	}
	if l.StartedAt != nil {
		a.StartedAt = l.StartedAt
	}
	if l.LastHeartbeatAt != nil {
		a.LastHeartbeatAt = l.LastHeartbeatAt
	}
	if l.Heartbeats > a.Heartbeats {
		a.Heartbeats, a.HeartbeatTicks = l.Heartbeats, l.HeartbeatTicks
	}
	if l.ProgressPct != nil {
		a.ProgressPct = l.ProgressPct
	}
	if l.Message != "" {
		a.Message = l.Message
	}
	if len(l.Checkpoint) > 0 {
		a.Checkpoint = l.Checkpoint
	}
	if l.Execution != "" {
		a.Execution = l.Execution
	}
}

// firstAttempt is the record of t's current attempt while it has none:
// Create does not write the first attempt's, since all it would hold (the
// attempt number and the task's creation time) is on the task document, and
// a retry does not write the next attempt's, whose creation and scheduled
// times it puts in the task's live state (setLive). The first transition
// that changes something the live state does not mirror writes it
// (fullOnce, mirrored). Nil when t does not say (a later attempt whose
// record an earlier version wrote at the retry).
func firstAttempt(t *task.Task) *task.Attempt {
	switch l := t.Live; {
	case l != nil && l.Attempt == t.Attempt && l.CreatedAt != nil:
		return &task.Attempt{Attempt: t.Attempt, CreatedAt: *l.CreatedAt, ScheduledAt: l.ScheduledAt}
	case t.Attempt == 1:
		// Attempt 1's schedule is the task's delayed start, if any.
		return &task.Attempt{Attempt: 1, CreatedAt: t.CreatedAt, ScheduledAt: t.NotBefore}
	}
	return nil
}

// mirrored reports whether the task document's live state l (nil: none)
// already carries every change of the attempt a over its stored record rec
// (nothing changed counts): a read
// of rec overlaid with l (Get, Attempts, the next transition's read) sees
// a, so the record need not be written. An ended attempt is never mirrored
// (its live state is cleared), nor a change of a field Live does not hold
// (an outcome, an expiry).
func mirrored(rec *task.Attempt, l *task.LiveAttempt, a *task.Attempt) bool {
	if rec == nil || a == nil || a.Ended() || rec.Attempt != a.Attempt {
		return false
	}
	seen := *rec
	overlay(&seen, l)
	want, got := encodeFields(a), encodeFields(&seen)
	if len(want) != len(got) {
		return false
	}
	for k, v := range want {
		if !proto.Equal(v, got[k]) {
			return false
		}
	}
	return true
}

// setLive makes the task's live state follow the result: a retry's next
// attempt from its creation, the current attempt's heartbeat state while
// it runs (and a later attempt's creation until then), nothing once it has
// ended.
func setLive(r *task.Result) {
	switch a := r.Attempt; {
	case r.Next != nil && r.Next.Attempt == r.Task.Attempt:
		r.Task.Live = liveOf(r.Next)
	case a != nil && a.Attempt == r.Task.Attempt:
		r.Task.Live = nil
		if !a.Ended() && (a.WorkerID != "" || a.Attempt > 1 || a.Execution != "") {
			r.Task.Live = liveOf(a)
		}
	case r.Task.Live != nil && r.Task.Live.Attempt != r.Task.Attempt:
		r.Task.Live = nil
	}
}

// heartbeatOnce is applyOnce for a heartbeat: a masked read of the task
// document, and when the heartbeat changes no state (the usual case) an
// update of the changed fields only, on the condition that the document is
// still the version read. A heartbeat that makes a transition (a first
// heartbeat that starts the attempt, one that finds the lease expired)
// reads the full task and attempt again and takes the ordinary path: one
// more read, on a rare path.
func (s *Store) heartbeatOnce(ctx context.Context, id string, ev task.Event) (task.Result, error) {
	name := s.taskName(id)
	td := s.taskCache.get(name) // doccache.go: whole, where the read is masked
	cached := td
	if td == nil {
		docs, _, err := s.batchGetMasked(ctx, []string{name}, heartbeatMask, nil)
		if err != nil {
			return task.Result{}, err
		}
		td = docs[name]
	}
	if td == nil {
		return task.Result{}, ErrNotFound
	}
	var before task.Task
	if err := decodeFields(td.GetFields(), &before); err != nil {
		return task.Result{}, err
	}
	var cur *task.Attempt
	if l := before.Live; l != nil && l.Attempt == ev.Attempt && l.WorkerID != "" {
		// The attempt as far as the masked read shows it (no checkpoint).
		cur = &task.Attempt{Attempt: l.Attempt}
		overlay(cur, l)
	}
	r := task.Apply(before, cur, ev)
	if !r.Write {
		if cached != nil {
			// An answer that commits nothing has no precondition to check
			// the cached version: it is given from a read.
			s.taskCache.drop(name)
			return s.heartbeatOnce(ctx, id, ev)
		}
		return r, nil
	}
	if len(r.Transitions) > 0 || r.Next != nil || cur == nil {
		return s.fullOnce(ctx, id, ev, nil)
	}
	setLive(&r)
	w, ok := updateWrite(name, &before, &r.Task)
	if !ok {
		return s.fullOnce(ctx, id, ev, nil)
	}
	w.CurrentDocument = version(td)
	res, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{w}})
	if err != nil {
		s.taskCache.drop(name)
		return task.Result{}, err
	}
	s.keepUpdated(cached, w, res) // from a masked read: nothing to keep
	return r, nil
}

// updateWrite is the write of the fields of after that differ from before,
// with its update mask; ok is false when a field the heartbeat did not read
// changed (the caller then writes the whole document).
func updateWrite(name string, before, after *task.Task) (*pb.Write, bool) {
	b, a := encodeFields(before), encodeFields(after)
	fields := map[string]*pb.Value{}
	var paths []string
	for k, av := range a {
		if k == liveField {
			continue
		}
		if proto.Equal(av, b[k]) {
			continue
		}
		if slices.Contains(heartbeatSkips, k) {
			return nil, false
		}
		fields[k] = av
		paths = append(paths, k)
	}
	bl, al := b[liveField].GetMapValue().GetFields(), a[liveField].GetMapValue().GetFields()
	if a[liveField].GetMapValue() == nil {
		// The live state went away: that is a transition's business.
		return nil, false
	}
	live := map[string]*pb.Value{}
	for k, av := range al {
		if proto.Equal(av, bl[k]) {
			continue
		}
		live[k] = av
		paths = append(paths, liveField+"."+k)
	}
	if len(live) > 0 {
		fields[liveField] = &pb.Value{ValueType: &pb.Value_MapValue{MapValue: &pb.MapValue{Fields: live}}}
	}
	slices.Sort(paths)
	return &pb.Write{
		Operation:  &pb.Write_Update{Update: &pb.Document{Name: name, Fields: fields}},
		UpdateMask: &pb.DocumentMask{FieldPaths: paths},
	}, true
}

// An attempt that ends a task (no retry after it) is kept on the task
// document (task.Task.Ended) rather than in a record document of its own,
// when it has none and fits in the room the running attempt's checkpoint
// had (historyRoom reserves it; the live state is cleared at the end): the
// commit that ends the task writes one document, and a task that ran one
// attempt has no attempt document at all. task.Task.Recorded says whether
// the current attempt has a record document, so that a transition reads
// one only when there is one.

// endedInline bounds the stored size of an ended attempt kept on the task.
const endedInline = 64 << 10

// fitsInline reports whether a's stored size is within endedInline.
func fitsInline(a *task.Attempt) bool {
	n := 0
	for k, v := range encodeFields(a) {
		n += len(k) + 1 + proto.Size(v)
	}
	return n <= endedInline
}

// needsRecordRead reports whether a transition of attempt want of t must
// look its record document up: not when t says the current attempt has
// none, nor for an attempt t has not reached (a forged or confused
// number), and not when t keeps the ended attempt itself.
func needsRecordRead(t *task.Task, want int) bool {
	switch {
	case want > t.Attempt:
		return false
	case want < t.Attempt:
		return true
	case t.Ended != nil && t.Ended.Attempt == want:
		return false
	}
	return t.Recorded == nil || *t.Recorded
}
