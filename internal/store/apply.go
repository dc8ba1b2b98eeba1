package store

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/spanattr"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/telemetry"
)

// Apply runs ev against task id and returns the machine's result. When
// the result has a Rejection, the caller answers with it; anything the
// machine wrote alongside (an expired lease) is committed.
//
// Apply takes no lock in Firestore (doc.go, "Concurrency"): it reads the
// task, applies the machine, and commits with a precondition on the
// version it read; when another writer got there first, it reads again.
// Within one process, Apply runs one event per task at a time.
func (s *Store) Apply(ctx context.Context, id string, ev task.Event) (_ task.Result, err error) {
	ctx, span := telemetry.Tracer().Start(ctx, "firestore.transaction "+string(ev.Kind), oteltrace.WithSpanKind(oteltrace.SpanKindClient),
		oteltrace.WithAttributes(append(spanattr.TaskAttrs(id, ev.Attempt, "", ""), attribute.String("db.system.name", "gcp.firestore"),
			attribute.String("db.operation.name", "transaction"))...))
	defer func() { spanattr.EndSpan(span, err) }()
	unlock, err := s.perTask.lock(ctx, id)
	if err != nil {
		return task.Result{}, wrap("apply "+string(ev.Kind), err)
	}
	defer unlock()
	for try := 0; ; try++ {
		began := time.Now()
		r, err := s.applyOnce(ctx, id, ev)
		s.outages.observe(began, err)
		if err == nil {
			if r.Write {
				s.committed(ctx, r.Transitions)
				telemetry.RecordStarted(ctx, r)
			}
			span.SetAttributes(spanattr.TenantIDKey.String(r.Task.TenantID), spanattr.WorkerKey.String(r.Task.Worker))
			return r, nil
		}
		if !lostRace(err) || try >= s.maxRetries {
			if lostRace(err) {
				return task.Result{}, fmt.Errorf("store: apply %s: contention outlasted %d retries: %w", ev.Kind, try, ErrUnavailable)
			}
			return task.Result{}, wrap("apply "+string(ev.Kind), err)
		}
		backoff := min(time.Duration(5<<min(try, 6))*time.Millisecond, 300*time.Millisecond)
		select {
		case <-ctx.Done():
			return task.Result{}, wrap("apply", ctx.Err())
		case <-time.After(time.Duration(rand.Int64N(int64(backoff)) + int64(time.Millisecond))):
		}
	}
}

// lostRace reports whether a commit lost to another writer: a version
// precondition failed (FAILED_PRECONDITION, or ALREADY_EXISTS for a record
// that must be new), or a transaction was aborted. The event is applied
// again to what the winner wrote.
func lostRace(err error) bool {
	switch status.Code(err) {
	case codes.Aborted, codes.FailedPrecondition, codes.AlreadyExists:
		return true
	}
	return false
}

// applyOnce is one try of Apply: a heartbeat takes its own small path
// (heartbeatOnce); an admit of a quota-limited task runs in a transaction
// (its run slot is read from the counter shards); every other event reads
// the whole task and attempt record and commits them lock-free.
func (s *Store) applyOnce(ctx context.Context, id string, ev task.Event) (task.Result, error) {
	if ev.Kind == task.EventHeartbeat && ev.Attempt > 0 {
		return s.heartbeatOnce(ctx, id, ev)
	}
	if ev.Kind == task.EventAdmit && s.counters.Enabled() {
		return s.admitOnce(ctx, id, ev)
	}
	return s.fullOnce(ctx, id, ev, nil)
}

// admitOnce runs fullOnce in a transaction begun explicitly: its id is
// known before any read takes a lock, so the transaction is always rolled
// back when it does not commit (rollback).
func (s *Store) admitOnce(ctx context.Context, id string, ev task.Event) (task.Result, error) {
	begun, err := s.client.BeginTransaction(ctx, &pb.BeginTransactionRequest{Database: s.db})
	if err != nil {
		return task.Result{}, err
	}
	tx := begun.GetTransaction()
	r, err := s.fullOnce(ctx, id, ev, tx)
	if err != nil || !r.Write {
		s.rollback(tx)
	}
	return r, err
}

// version is the precondition that a document read at d is unchanged: its
// update time, or that it still does not exist when d is nil.
func version(d *pb.Document) *pb.Precondition {
	if d == nil {
		return &pb.Precondition{ConditionType: &pb.Precondition_Exists{Exists: false}}
	}
	return &pb.Precondition{ConditionType: &pb.Precondition_UpdateTime{UpdateTime: d.GetUpdateTime()}}
}

// fullOnce reads the task and the event's attempt record whole, applies
// the event, and writes both whole. Without tx, the reads take no lock and
// the commit carries a precondition on each written record's version; with
// tx (an admit), both run in that transaction.
func (s *Store) fullOnce(ctx context.Context, id string, ev task.Event, tx []byte) (task.Result, error) {
	var sel any
	if tx != nil {
		sel = &pb.BatchGetDocumentsRequest_Transaction{Transaction: tx}
	}
	base := s.taskName(id)
	var td *pb.Document
	if tx == nil {
		td = s.taskCache.get(base) // doccache.go: the commit's precondition checks it
	}
	cached := td != nil
	if !cached {
		docs, _, err := s.batchGet(ctx, []string{base}, sel)
		if err != nil {
			return task.Result{}, err
		}
		td = docs[base]
	}
	if td == nil {
		return task.Result{}, ErrNotFound
	}
	var t task.Task
	if err := decodeFields(td.GetFields(), &t); err != nil {
		return task.Result{}, fmt.Errorf("decode task %s: %w", id, err)
	}
	// The event's attempt (an event without one concerns the current
	// attempt): its record is read only when there is one to read
	// (needsRecordRead); the task document's version guards the rest, since
	// every write of a record writes the task too.
	want := cmp.Or(ev.Attempt, t.Attempt)
	var ad *pb.Document
	if needsRecordRead(&t, want) {
		more, _, err := s.batchGet(ctx, []string{attemptName(base, want)}, sel)
		if err != nil {
			return task.Result{}, err
		}
		ad = more[attemptName(base, want)]
	}
	var cur, rec *task.Attempt // rec: the record as stored (or firstAttempt, or t.Ended), cur: overlaid
	switch {
	case ad != nil:
		rec = new(task.Attempt)
		if err := decodeFields(ad.GetFields(), rec); err != nil {
			return task.Result{}, fmt.Errorf("decode attempt %d of %s: %w", want, id, err)
		}
	case t.Ended != nil && t.Ended.Attempt == want:
		e := *t.Ended
		rec = &e
	case want == t.Attempt:
		rec = firstAttempt(&t)
	}
	if rec != nil {
		c := *rec
		cur = &c
		overlay(cur, t.Live)
	}
	if ev.Kind == task.EventAdmit && t.WaitingSince != nil && tx != nil {
		// The quota step of an admit: a run slot, found in this transaction.
		unlock, err := s.perScope.lockAll(ctx, quota.LockKeys(&t))
		if err != nil {
			return task.Result{}, err
		}
		defer unlock()
		hold, free, err := s.counters.FreeSlots(ctx, &t, inTx{s, tx})
		if err != nil {
			return task.Result{}, err
		}
		ev.Hold, ev.SlotFree = hold, free
	}
	ev.Retention = s.retentionFor(t.TenantID)
	r := s.machine(ctx, t, cur, ev)
	if !r.Write {
		if cached {
			// An answer that commits nothing has no precondition to check
			// the cached version: it is given from a read.
			s.taskCache.drop(base)
			return s.fullOnce(ctx, id, ev, tx)
		}
		return r, nil
	}
	setLive(&r)
	precond := func(d *pb.Document) *pb.Precondition {
		if tx != nil {
			return nil
		}
		return version(d)
	}
	// Attempt want has a record document exactly when ad is one: read,
	// or, when not read, known not to exist (needsRecordRead).
	var writes []*pb.Write
	wrote := 0 // the attempt whose record this commit writes, if any
	if a := r.Attempt; a != nil && !(a.Attempt == want && mirrored(rec, r.Task.Live, a)) {
		switch {
		case a.Attempt == want && ad == nil && a.Ended() && a.Attempt == r.Task.Attempt && r.Next == nil && fitsInline(a):
			// The task's last attempt ended: kept on the task.
			e := *a
			r.Task.Ended = &e
		default:
			aw := setWrite(attemptName(base, a.Attempt), a, false)
			if a.Attempt == want {
				aw.CurrentDocument = precond(ad)
			}
			writes = append(writes, aw)
			wrote = a.Attempt
			if r.Task.Ended != nil && r.Task.Ended.Attempt == a.Attempt {
				r.Task.Ended = nil // its document now holds it
			}
		}
	}
	// Whether the current attempt has a record document now; unchanged
	// when it is not the one read.
	switch {
	case wrote == r.Task.Attempt:
		r.Task.Recorded = new(true)
	case r.Task.Attempt == want:
		r.Task.Recorded = new(ad != nil)
	case r.Task.Attempt != t.Attempt:
		r.Task.Recorded = new(false) // a retry's next attempt: on the task (setLive)
	}
	tw := setWrite(base, r.Task, false)
	tw.CurrentDocument = precond(td)
	writes = append([]*pb.Write{tw}, writes...)
	writes = append(writes, s.counters.Writes(&t, &r.Task)...)
	// r.Next, a retry's next attempt, is on the task (setLive, firstAttempt).
	tp := cmp.Or(telemetry.TraceParent(ctx), r.Task.Trace)
	for i := range r.Transitions {
		r.Transitions[i].Trace = tp
	}
	writes = append(writes, s.outboxWrites(r.Transitions)...)
	res, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes, Transaction: tx})
	if err != nil {
		s.taskCache.drop(base) // whatever it held is in doubt
		return task.Result{}, err
	}
	s.keepWritten(writes, res)
	return r, nil
}

// machine applies ev to t. When that would end the attempt because its
// lease or cancel grace ran out, it looks up Servo's recent outages
// (outages.go) and applies ev again with them, so that time during which
// callbacks could not be recorded does not count against the worker.
func (s *Store) machine(ctx context.Context, t task.Task, cur *task.Attempt, ev task.Event) task.Result {
	r := task.Apply(t, cur, ev)
	if !r.Expired() || ev.Outages != nil {
		return r
	}
	outs := s.outages.recent(ctx, s)
	if len(outs) == 0 {
		return r
	}
	ev.Outages = outs
	return task.Apply(t, cur, ev)
}

// rollback releases a transaction's locks. It runs in the background,
// whatever the caller's context, so that no answer waits for it, and
// retries while Firestore is unavailable: a lock must not outlive the
// outage that left it.
func (s *Store) rollback(tx []byte) {
	if len(tx) == 0 {
		return
	}
	go func() {
		for try := 0; try < 8; try++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := s.client.Rollback(ctx, &pb.RollbackRequest{Database: s.db, Transaction: tx})
			cancel()
			if c := status.Code(err); err == nil || c == codes.InvalidArgument || c == codes.NotFound || c == codes.FailedPrecondition {
				return // rolled back, or nothing left to roll back
			}
			time.Sleep(time.Duration(1<<try) * 250 * time.Millisecond)
		}
	}()
}

func wrapInt(n int) *wrapperspb.Int32Value { return wrapperspb.Int32(int32(n)) }
