package store

import (
	"context"
	"fmt"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/servo-dev/servo/internal/task"
)

// flatten inlines the fields of the embedded struct encoded under key (the
// outbox's Transition, an outage's Outage) into the document.
func flatten(f map[string]*pb.Value, key string) map[string]*pb.Value {
	if tr, ok := f[key]; ok {
		delete(f, key)
		for k, v := range tr.GetMapValue().GetFields() {
			f[k] = v
		}
	}
	return f
}

func setWrite(name string, v any, mustNotExist bool) *pb.Write {
	w := &pb.Write{Operation: &pb.Write_Update{Update: &pb.Document{Name: name, Fields: encodeFields(v)}}}
	if mustNotExist {
		w.CurrentDocument = &pb.Precondition{ConditionType: &pb.Precondition_Exists{Exists: false}}
	}
	return w
}

// Limits of one Firestore commit that CreateMany keeps within.
const (
	// MaxCommitWrites is the most writes CreateMany puts in one commit.
	MaxCommitWrites = 500
	// MaxCommitBytes is the most encoded bytes CreateMany puts in one commit,
	// below Firestore's 10 MiB request limit.
	MaxCommitBytes = 9 << 20
)

// Create stores a submitted task (ID set, fields validated) as PENDING with
// its creation event, in one commit (its first attempt's record is written
// later, when it holds something the task does not: firstAttempt). When the task
// has an idempotency key and a task already exists for (tenant, key), that
// task is returned with existed = true and nothing is written.
func (s *Store) Create(ctx context.Context, t task.Task, now time.Time) (created task.Task, existed bool, err error) {
	r := s.CreateMany(ctx, []task.Task{t}, now, false)[0]
	return r.Task, r.Existed, r.Err
}

// CreateResult is one task's outcome in CreateMany, in input order.
type CreateResult struct {
	// Task is the stored task: the new one, or the one an idempotency key
	// already named (Existed).
	Task    task.Task
	Existed bool
	Err     error
}

// CreateMany stores submitted tasks (IDs set, fields validated) with their
// idempotency records and events, and the document
// of each run they belong to (runs/{runId}, once per run per commit), in as few commits
// as Firestore's limits allow (MaxCommitWrites, MaxCommitBytes): a single
// task is one Commit RPC. With queued, each task is stored already QUEUED
// (the creation and ENQUEUED transitions both recorded): the caller creates
// its Cloud Task right after, and a Cloud Task that is never created is
// re-driven by the sweeper (the dispatch check), or sooner when the caller
// reports the failure (task.EventDispatchFailed).
//
// A task whose idempotency key already names a task is not written; that
// task is returned with Existed. When a commit of several tasks fails
// because of such a key, its tasks are committed one by one.
//
// With queued and quotas (WithQuotas), a task of a limited tenant or
// worker is admitted by package quota in a transaction of its own
// (createQueued): refused with a *quota.ExceededError past maxQueued, or
// stored waiting for a run slot (task.ReasonQuotaWait).
func (s *Store) CreateMany(ctx context.Context, ts []task.Task, now time.Time, queued bool) []CreateResult {
	if queued && s.QuotasEnabled() {
		return s.createQueued(ctx, ts, now)
	}
	return s.createBatched(ctx, ts, now, queued)
}

// createBatched is CreateMany for tasks no quota applies to: as few
// commits as Firestore's limits allow.
func (s *Store) createBatched(ctx context.Context, ts []task.Task, now time.Time, queued bool) []CreateResult {
	out := make([]CreateResult, len(ts))
	type prepared struct {
		i      int
		t      task.Task
		trs    []task.Transition
		writes []*pb.Write
	}
	var chunk []prepared
	nWrites, nBytes := 0, 0
	runs := map[string]runClaim{} // the runs of chunk, whose documents flush writes
	flush := func() {
		if len(chunk) == 0 {
			return
		}
		var writes []*pb.Write
		var trs []task.Transition
		for _, p := range chunk {
			writes = append(writes, p.writes...)
			trs = append(trs, p.trs...)
		}
		var written []string
		var create []*task.Task
		for _, p := range chunk {
			switch runs[p.t.RunID] {
			case runRefresh:
				writes = append(writes, s.runWrite(&p.t))
			case runCreate:
				create = append(create, &p.t)
			default:
				continue
			}
			delete(runs, p.t.RunID)
			written = append(written, p.t.RunID)
		}
		res, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes})
		if err != nil {
			s.recentRuns.forget(written) // the one-by-one commits below claim afresh
		}
		switch c := status.Code(err); {
		case err == nil:
			s.keepWritten(writes, res)
			for _, t := range create {
				s.createRun(ctx, t)
			}
			s.committed(ctx, trs)
			for _, p := range chunk {
				out[p.i] = CreateResult{Task: p.t}
			}
		case (c == codes.AlreadyExists || c == codes.FailedPrecondition) && len(chunk) > 1:
			// One of the tasks repeats an idempotency key (or, never in
			// practice, an id): commit them one by one.
			for _, p := range chunk {
				out[p.i] = s.createOne(ctx, p.t, p.writes, p.trs)
			}
		case c == codes.AlreadyExists || c == codes.FailedPrecondition:
			out[chunk[0].i] = s.existing(ctx, chunk[0].t, err)
		default:
			for _, p := range chunk {
				out[p.i] = CreateResult{Err: wrap("create", err)}
			}
		}
		chunk, nWrites, nBytes = nil, 0, 0
	}
	for i, t := range ts {
		nt, writes, trs := s.creationWrites(t, now, queued)
		size := 0
		for _, w := range writes {
			size += proto.Size(w)
		}
		// A commit also writes the document of each run it stores tasks of,
		// unless this store wrote it within its interval (claimRun).
		mine := runNone // claimed for this task
		if runs[nt.RunID] == runNone {
			mine = s.claimRun(&nt, now)
		}
		extra := 0
		if mine == runRefresh {
			extra = 1
		}
		if len(chunk) > 0 && (nWrites+len(writes)+extra > MaxCommitWrites || nBytes+size > MaxCommitBytes-runDocBytes*(len(runs)+extra)) {
			// The chunk's own run writes go with it; this task's claim,
			// if it made one, with the next chunk.
			flush()
		}
		chunk = append(chunk, prepared{i: i, t: nt, trs: trs, writes: writes})
		if mine != runNone {
			runs[nt.RunID] = mine
		}
		nWrites += len(writes) + extra
		nBytes += size
	}
	flush()
	return out
}

// creationWrites builds the stored form of a submitted task and the writes
// that create it.
func (s *Store) creationWrites(t task.Task, now time.Time, queued bool) (task.Task, []*pb.Write, []task.Transition) {
	return s.creationWritesWith(t, now, queued, nil, false)
}

// creationWritesWith is creationWrites for a task given the quota hold
// hold (nil: none) and, with it, a run slot or not.
func (s *Store) creationWritesWith(t task.Task, now time.Time, queued bool, hold *task.QuotaHold, slotFree bool) (task.Task, []*pb.Write, []task.Transition) {
	t.DueShard = DueShardOf(t.ID, s.shards)
	nt, a, tr := task.NewTask(t, now)
	trs := []task.Transition{tr}
	if queued {
		r := task.Apply(nt, &a, task.Event{Kind: task.EventEnqueued, Attempt: nt.Attempt, Now: now, Hold: hold, SlotFree: slotFree})
		nt = r.Task
		trs = append(trs, r.Transitions...)
	}
	for i := range trs {
		trs[i].Trace = nt.Trace
	}
	// The first attempt's record is not written yet: until something the
	// task document does not hold must be stored, it is the task's
	// (firstAttempt).
	nt.Recorded = new(false)
	writes := []*pb.Write{setWrite(s.taskName(nt.ID), nt, true)}
	writes = append(writes, s.outboxWrites(trs)...)
	if nt.IdempotencyKey != "" {
		exp := nt.CreatedAt.Add(IdempotencyRetention)
		writes = append(writes, setWrite(s.idemName(nt.TenantID, nt.IdempotencyKey), idemDoc{
			TenantID: nt.TenantID, Key: nt.IdempotencyKey, TaskID: nt.ID, CreatedAt: nt.CreatedAt, ExpireAt: exp,
		}, true))
	}
	return nt, writes, trs
}

// createOne commits one task's writes and its run's document.
func (s *Store) createOne(ctx context.Context, t task.Task, writes []*pb.Write, trs []task.Transition) CreateResult {
	run := s.claimRun(&t, t.CreatedAt)
	if run == runRefresh {
		writes = append(writes[:len(writes):len(writes)], s.runWrite(&t))
	}
	res, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes})
	if err != nil && run != runNone {
		s.recentRuns.forget([]string{t.RunID})
	}
	if err == nil {
		s.keepWritten(writes, res)
		if run == runCreate {
			s.createRun(ctx, &t)
		}
		s.committed(ctx, trs)
		return CreateResult{Task: t}
	}
	if c := status.Code(err); c == codes.AlreadyExists || c == codes.FailedPrecondition {
		return s.existing(ctx, t, err)
	}
	return CreateResult{Err: wrap("create", err)}
}

// existing answers a create refused because a document already existed: the
// task t's idempotency key names.
func (s *Store) existing(ctx context.Context, t task.Task, err error) CreateResult {
	if c := status.Code(err); t.IdempotencyKey == "" && t.ScheduleID != "" && (c == codes.AlreadyExists || c == codes.FailedPrecondition) {
		// A schedule's fire has an id derived from its schedule and fire
		// time: the task exists because the fire was made before.
		got, gerr := s.GetTask(ctx, t.ID)
		if gerr != nil {
			return CreateResult{Err: gerr}
		}
		if got.TenantID != t.TenantID || got.ScheduleID != t.ScheduleID {
			return CreateResult{Err: wrap("create", err)}
		}
		return CreateResult{Task: got, Existed: true}
	}
	if t.IdempotencyKey == "" {
		return CreateResult{Err: wrap("create", err)}
	}
	var d idemDoc
	found, gerr := s.getDoc(ctx, s.idemName(t.TenantID, t.IdempotencyKey), &d)
	if gerr != nil {
		return CreateResult{Err: wrap("create: read idempotency record", gerr)}
	}
	if !found {
		return CreateResult{Err: fmt.Errorf("store: create: idempotency record vanished: %w", ErrUnavailable)}
	}
	got, gerr := s.GetTask(ctx, d.TaskID)
	if gerr != nil {
		return CreateResult{Err: gerr}
	}
	return CreateResult{Task: got, Existed: true}
}

type idemDoc struct {
	TenantID  string    `firestore:"tenantId"`
	Key       string    `firestore:"key"`
	TaskID    string    `firestore:"taskId"`
	CreatedAt time.Time `firestore:"createdAt"`
	ExpireAt  time.Time `firestore:"expireAt"`
}
