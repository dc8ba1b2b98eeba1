package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/task"
)

// Per-tenant and per-worker quotas (docs/tenants.md) are package quota's:
// its counter shards, quotas/{scope}-{k}, are read and written only inside
// the store's own transactions and commits, at four points. CreateMany
// admits each task of a limited scope in a transaction of its own
// (createAdmitted: quota.Admission); Apply finds a run slot before the
// machine runs an admit event (quota.Counters.FreeSlots) and commits the
// counter updates of every transition with it (quota.Counters.Writes);
// QuotaUsage and RepairQuotaCounters run outside transactions (quotaDB).

// WithQuotas enforces p's per-tenant and per-worker limits (nil or empty:
// none, and no counter is kept).
func WithQuotas(p *quota.Policy) Option { return func(c *config) { c.quotas = p } }

// Quotas returns the policy in force (never nil).
func (s *Store) Quotas() *quota.Policy { return s.counters.Policy() }

// QuotasEnabled reports whether any scope is limited.
func (s *Store) QuotasEnabled() bool { return s.counters.Enabled() }

// QuotaUsage sums the counter shards of a scope (one query; zero when the
// scope has never been limited).
func (s *Store) QuotaUsage(ctx context.Context, kind quota.Kind, name string) (quota.Usage, error) {
	u, err := s.counters.Usage(ctx, quotaDB{s}, kind, name)
	return u, wrap("quota usage", err)
}

// RepairQuotaCounters recounts every counter shard and rewrites the ones
// that drifted (quota.Counters.Repair): the sweeper's quota repair.
func (s *Store) RepairQuotaCounters(ctx context.Context) ([]quota.Repair, error) {
	reps, err := s.counters.Repair(ctx, quotaDB{s})
	return reps, wrap("quota repair", err)
}

// WaitingForSlot returns the tasks QUEUED waiting for a run slot at now
// (the due query DueAdmit), the limit of every group of due shards that
// rank lowest (task.WaitRank), and the number of groups whose query failed
// (their errors joined): what the sweeper's quota duty admits
// (quota.Duty). A rank is up to task.MaxWaitRankLead past the time its
// task waits from, so the query reads ranks up to now plus that lead and
// drops the tasks that do not wait yet (a delayed start). With oldest, it
// adds the limit of every group that have waited longest (DueAdmitOldest),
// which finds the tasks that a build before ranks left waiting without
// one (the duty ranks every task it reads from its waitingSince and
// priority).
func (s *Store) WaitingForSlot(ctx context.Context, now time.Time, limit int, oldest bool) ([]task.Task, int, error) {
	var (
		out    []task.Task
		errs   []error
		failed int
		seen   = map[string]bool{}
	)
	read := func(d Due, until time.Time) {
		for _, shards := range s.DueGroups(d) {
			page, err := s.DueTasks(ctx, d, shards, until, limit, nil)
			if err != nil {
				failed++
				errs = append(errs, fmt.Errorf("%s, shards %v: %w", d, shards, err))
				continue
			}
			for _, t := range page {
				if t.WaitingSince != nil && !t.WaitingSince.After(now) && !seen[t.ID] {
					seen[t.ID] = true
					out = append(out, t)
				}
			}
		}
	}
	if oldest {
		read(DueAdmitOldest, now)
	}
	read(DueAdmit, now.Add(task.MaxWaitRankLead))
	return out, failed, errors.Join(errs...)
}

// inTx is the transaction tx as quota reads it (quota.Tx).
type inTx struct {
	s  *Store
	tx []byte
}

func (t inTx) Get(ctx context.Context, names []string) (map[string]*pb.Document, error) {
	docs, _, err := t.s.batchGet(ctx, names, &pb.BatchGetDocumentsRequest_Transaction{Transaction: t.tx})
	return docs, err
}

// quotaDB is the database as quota uses it outside transactions (quota.DB).
type quotaDB struct{ s *Store }

func (d quotaDB) Query(ctx context.Context, q *pb.StructuredQuery, each func(*pb.Document) error) error {
	return d.s.runQuery(ctx, d.s.docs, q, each)
}

func (d quotaDB) CountTasks(ctx context.Context, where *pb.StructuredQuery_Filter) (int64, error) {
	return d.s.count(ctx, &pb.StructuredQuery{From: []*pb.StructuredQuery_CollectionSelector{{CollectionId: TasksCollection}}, Where: where})
}

func (d quotaDB) Sum(ctx context.Context, q *pb.StructuredQuery, fields []string) (int64, []int64, error) {
	return d.s.sum(ctx, q, fields)
}

func (d quotaDB) Commit(ctx context.Context, writes []*pb.Write) error {
	_, err := d.s.client.Commit(ctx, &pb.CommitRequest{Database: d.s.db, Writes: writes})
	return err
}

// createQueued is CreateMany for tasks stored QUEUED while quotas are
// enabled: the tasks of limited tenants or workers are admitted one
// transaction each (createAdmitted, at most 16 at a time), the others are
// batched as without quotas.
func (s *Store) createQueued(ctx context.Context, ts []task.Task, now time.Time) []CreateResult {
	adms := make([]*quota.Admission, len(ts))
	var rest []int
	for i := range ts {
		if adms[i] = s.counters.Admission(&ts[i]); adms[i] == nil {
			rest = append(rest, i)
		}
	}
	if len(rest) == len(ts) {
		return s.createBatched(ctx, ts, now, true)
	}
	out := make([]CreateResult, len(ts))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, a := range adms {
		if a == nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i] = s.createAdmitted(ctx, a, ts[i], now)
		})
	}
	wg.Wait()
	if len(rest) > 0 {
		o := make([]task.Task, len(rest))
		for j, i := range rest {
			o[j] = ts[i]
		}
		for j, r := range s.createBatched(ctx, o, now, true) {
			out[rest[j]] = r
		}
	}
	return out
}

// createAdmitted stores one task of a limited scope, QUEUED, in a
// transaction that admits it (a): refused with a *quota.ExceededError when
// a scope is at maxQueued; holding a run slot (to be enqueued) when every
// scope has one free, waiting for one otherwise. Within one process, the
// submits of one scope run one at a time (a.Keys).
func (s *Store) createAdmitted(ctx context.Context, a *quota.Admission, t task.Task, now time.Time) CreateResult {
	unlock, err := s.perScope.lockAll(ctx, a.Keys())
	if err != nil {
		return CreateResult{Err: wrap("create", err)}
	}
	defer unlock()
	var retryTx []byte
	for try := 0; ; try++ {
		r, tx, err := s.createAdmittedOnce(ctx, a, t, now, retryTx)
		if err == nil {
			return r
		}
		if status.Code(err) != codes.Aborted || try >= s.maxRetries {
			if c := status.Code(err); c == codes.AlreadyExists || c == codes.FailedPrecondition {
				return s.existing(ctx, t, err)
			}
			if errors.Is(err, quota.ErrExceeded) {
				// The 429's message: store: tenant "acme" has 10 tasks
				// queued (maxQueued).
				return CreateResult{Err: fmt.Errorf("store: %w", err)}
			}
			return CreateResult{Err: wrap("create", err)}
		}
		retryTx = tx
		backoff := min(time.Duration(5<<min(try, 6))*time.Millisecond, 300*time.Millisecond)
		select {
		case <-ctx.Done():
			return CreateResult{Err: wrap("create", ctx.Err())}
		case <-time.After(time.Duration(rand.Int64N(int64(backoff)) + int64(time.Millisecond))):
		}
	}
}

// createAdmittedOnce is one try of createAdmitted's transaction. Its first
// read takes the shards a reads first and the task's
// idempotency record together; a decides the task's hold (reading more
// shards only when one is full); the commit writes the task, its counter
// updates and its run's document.
func (s *Store) createAdmittedOnce(ctx context.Context, a *quota.Admission, t task.Task, now time.Time, retryTx []byte) (CreateResult, []byte, error) {
	names := a.Reads()
	idem := ""
	if t.IdempotencyKey != "" {
		idem = s.idemName(t.TenantID, t.IdempotencyKey)
		names = append(names, idem)
	}
	// Begun explicitly, so that its id is known before a read takes a
	// lock: a transaction that does not commit is always rolled back
	// (rollback), even when the answer to its first read is lost.
	rw := &pb.TransactionOptions_ReadWrite{RetryTransaction: retryTx}
	begun, err := s.client.BeginTransaction(ctx, &pb.BeginTransactionRequest{Database: s.db,
		Options: &pb.TransactionOptions{Mode: &pb.TransactionOptions_ReadWrite_{ReadWrite: rw}}})
	if err != nil {
		return CreateResult{}, nil, err
	}
	tx := begun.GetTransaction()
	docs, _, err := s.batchGet(ctx, names, &pb.BatchGetDocumentsRequest_Transaction{Transaction: tx})
	if err != nil {
		s.rollback(tx)
		return CreateResult{}, tx, err
	}
	if idem != "" && docs[idem] != nil {
		s.rollback(tx)
		return s.existing(ctx, t, status.Error(codes.AlreadyExists, "idempotency key")), tx, nil
	}
	hold, slot, err := a.Hold(ctx, docs, inTx{s, tx})
	if err != nil {
		s.rollback(tx)
		return CreateResult{}, tx, err
	}
	nt, writes, trs := s.creationWritesWith(t, now, true, hold, slot)
	writes = append(writes, s.counters.Writes(&task.Task{}, &nt)...)
	run := s.claimRun(&nt, now)
	if run == runRefresh {
		writes = append(writes, s.runWrite(&nt))
	}
	res, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes, Transaction: tx})
	if err != nil {
		s.rollback(tx)
		if run != runNone {
			s.recentRuns.forget([]string{nt.RunID})
		}
		return CreateResult{}, tx, err
	}
	s.keepWritten(writes, res)
	if run == runCreate {
		s.createRun(ctx, &nt)
	}
	s.committed(ctx, trs)
	return CreateResult{Task: nt}, tx, nil
}
