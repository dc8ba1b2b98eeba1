package store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/task"
)

// Per-tenant and per-worker quotas (docs/tenants.md). A limited scope (a
// tenant or a worker with a limit in the store's quota.Policy) keeps its
// counts in a few counter documents, quotas/{scope}-{k}, each holding
// queued and running counts for the tasks admitted on shard k and a share
// of each limit (quota.Share): a submit reads one shard per scope (all of
// them only when its own is full), so that concurrent submits and
// completions spread over the shards instead of queueing on one document,
// and no limit is ever exceeded. Every change of a task's counts is written
// by the commit of the transition that changes them (increment transforms:
// no read), and the sweeper recounts the shards and repairs any that
// drifted (RepairQuotaCounters).

// QuotasCollection holds the counter shards of the limited scopes.
const QuotasCollection = "quotas"

// ErrQuotaExceeded: a submit would take its tenant or worker past
// maxQueued; nothing was written. The error is a *QuotaError.
var ErrQuotaExceeded = errors.New("store: quota exceeded")

// QuotaError says which limit refused a submit.
type QuotaError struct {
	Kind  quota.Kind
	Name  string
	Limit int
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("store: %s %q has %d tasks queued (maxQueued)", e.Kind, e.Name, e.Limit)
}

// Unwrap makes errors.Is(err, ErrQuotaExceeded) hold.
func (e *QuotaError) Unwrap() error { return ErrQuotaExceeded }

// WithQuotas enforces p's per-tenant and per-worker limits (nil or empty:
// none, and no counter is kept).
func WithQuotas(p *quota.Policy) Option { return func(c *config) { c.quotas = p } }

// Quotas returns the policy in force (never nil).
func (s *Store) Quotas() *quota.Policy {
	if s.quotas == nil {
		return &quota.Policy{}
	}
	return s.quotas
}

// QuotasEnabled reports whether any scope is limited.
func (s *Store) QuotasEnabled() bool { return s.quotas.Enabled() }

// quotaDoc is a counter shard as stored.
type quotaDoc struct {
	Kind    string `firestore:"kind"`
	Name    string `firestore:"name"`
	Shard   int    `firestore:"shard"`
	Queued  int    `firestore:"queued"`
	Running int    `firestore:"running"`
}

// scope is a limited scope of a task.
type scope struct {
	kind quota.Kind
	name string
	lim  quota.Limits
	n    int
}

func (s *Store) scopeOf(kind quota.Kind, name string) *scope {
	l := s.Quotas().For(kind, name)
	if !l.Limited() {
		return nil
	}
	return &scope{kind: kind, name: name, lim: l, n: s.Quotas().ShardsFor(l)}
}

func (s *Store) quotaName(kind quota.Kind, name string, k int) string {
	return s.docs + "/" + QuotasCollection + "/" + string(kind[0]) + "_" + base64.RawURLEncoding.EncodeToString([]byte(name)) + "-" + strconv.Itoa(k)
}

// counterWrite adds dq queued and dr running to one shard, creating it if
// needed: a blind write (increment transforms), so it reads nothing.
func (s *Store) counterWrite(kind quota.Kind, name string, k, dq, dr int) *pb.Write {
	meta := encodeFields(struct {
		Kind  string `firestore:"kind"`
		Name  string `firestore:"name"`
		Shard int    `firestore:"shard"`
	}{string(kind), name, k})
	var tr []*pb.DocumentTransform_FieldTransform
	for _, f := range []struct {
		path string
		d    int
	}{{"queued", dq}, {"running", dr}} {
		if f.d != 0 {
			tr = append(tr, &pb.DocumentTransform_FieldTransform{FieldPath: f.path,
				TransformType: &pb.DocumentTransform_FieldTransform_Increment{Increment: intVal(f.d)}})
		}
	}
	return &pb.Write{
		Operation:        &pb.Write_Update{Update: &pb.Document{Name: s.quotaName(kind, name, k), Fields: meta}},
		UpdateMask:       &pb.DocumentMask{FieldPaths: []string{"kind", "name", "shard"}},
		UpdateTransforms: tr,
	}
}

// quotaWrites are the counter writes of a change of a task from before to
// after (none for a task without a quota hold, or whose counts did not
// change).
func (s *Store) quotaWrites(before, after *task.Task) []*pb.Write {
	h := after.Quota
	if h == nil {
		h = before.Quota
	}
	if h == nil {
		return nil
	}
	bq, br := before.QuotaCounts()
	aq, ar := after.QuotaCounts()
	dq, dr := aq-bq, ar-br
	if dq == 0 && dr == 0 {
		return nil
	}
	var out []*pb.Write
	add := func(kind quota.Kind, name string, qk, rk int) {
		if qk == rk || dq == 0 || dr == 0 {
			k := qk
			if dq == 0 {
				k = rk
			}
			out = append(out, s.counterWrite(kind, name, k, dq, dr))
			return
		}
		out = append(out, s.counterWrite(kind, name, qk, dq, 0), s.counterWrite(kind, name, rk, 0, dr))
	}
	if h.Tenant {
		add(quota.KindTenant, after.TenantID, h.TenantShard, h.TenantSlotShard)
	}
	if h.Worker {
		add(quota.KindWorker, after.Worker, h.WorkerShard, h.WorkerSlotShard)
	}
	return out
}

// counts decodes a shard read in a transaction (absent: zero).
func counts(docs map[string]*pb.Document, name string) (quotaDoc, error) {
	var q quotaDoc
	if d := docs[name]; d != nil {
		if err := decodeFields(d.GetFields(), &q); err != nil {
			return q, fmt.Errorf("decode %s: %w", name, err)
		}
	}
	return q, nil
}

// pickSlots reads, in transaction tx, every counter shard of t's limited
// scopes (one RPC) and returns the hold with, for each scope, the first
// shard with a run slot free (t's own shard first); ok is false when a
// scope has none.
func (s *Store) pickSlots(ctx context.Context, t *task.Task, tx []byte) (hold *task.QuotaHold, ok bool, err error) {
	if t.Quota == nil {
		return nil, false, nil
	}
	h := *t.Quota
	var scopes []*scope
	var own []int
	if h.Tenant {
		scopes, own = append(scopes, s.scopeFor(quota.KindTenant, t.TenantID)), append(own, h.TenantShard)
	}
	if h.Worker {
		scopes, own = append(scopes, s.scopeFor(quota.KindWorker, t.Worker)), append(own, h.WorkerShard)
	}
	var names []string
	for _, sc := range scopes {
		for k := range sc.n {
			names = append(names, s.quotaName(sc.kind, sc.name, k))
		}
	}
	docs, _, err := s.batchGet(ctx, names, &pb.BatchGetDocumentsRequest_Transaction{Transaction: tx})
	if err != nil {
		return nil, false, err
	}
	for i, sc := range scopes {
		k, err := s.freeSlot(sc, own[i]%sc.n, docs)
		if err != nil || k < 0 {
			return nil, false, err
		}
		if sc.kind == quota.KindTenant {
			h.TenantSlotShard = k
		} else {
			h.WorkerSlotShard = k
		}
	}
	return &h, true, nil
}

// scopeFor is scopeOf for a scope a task holds counts in: its limits now
// (unlimited, with one shard, when its limit was removed since).
func (s *Store) scopeFor(kind quota.Kind, name string) *scope {
	if sc := s.scopeOf(kind, name); sc != nil {
		return sc
	}
	return &scope{kind: kind, name: name, n: 1}
}

// freeSlot returns the first shard of sc, from k on, whose share of
// maxRunning has room in docs (which hold every shard of sc), or -1.
func (s *Store) freeSlot(sc *scope, k int, docs map[string]*pb.Document) (int, error) {
	for i := range sc.n {
		j := (k + i) % sc.n
		q, err := counts(docs, s.quotaName(sc.kind, sc.name, j))
		if err != nil {
			return -1, err
		}
		if quota.Fits(sc.lim.MaxRunning, sc.n, j, q.Running) {
			return j, nil
		}
	}
	return -1, nil
}

// limited reports whether t (not yet stored) belongs to a limited scope.
func (s *Store) limited(t *task.Task) bool {
	return s.scopeOf(quota.KindTenant, t.TenantID) != nil || s.scopeOf(quota.KindWorker, t.Worker) != nil
}

// lockScopes takes the in-process locks of t's limited scopes (tenant
// before worker) and returns the function that releases them.
func (s *Store) lockScopes(ctx context.Context, t *task.Task) (func(), error) {
	var unlocks []func()
	release := func() {
		for i := len(unlocks) - 1; i >= 0; i-- {
			unlocks[i]()
		}
	}
	for _, k := range []struct {
		on   bool
		kind quota.Kind
		name string
	}{{t.Quota.Tenant, quota.KindTenant, t.TenantID}, {t.Quota.Worker, quota.KindWorker, t.Worker}} {
		if !k.on {
			continue
		}
		u, err := s.perScope.lock(ctx, string(k.kind)+"\x00"+k.name)
		if err != nil {
			release()
			return nil, err
		}
		unlocks = append(unlocks, u)
	}
	return release, nil
}

// createLimitedMany stores tasks of limited scopes, each in its own
// transaction (createLimited), at most 16 at a time.
func (s *Store) createLimitedMany(ctx context.Context, ts []task.Task, now time.Time) []CreateResult {
	out := make([]CreateResult, len(ts))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range ts {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i] = s.createLimited(ctx, ts[i], now)
		})
	}
	wg.Wait()
	return out
}

// createLimited stores one task of a limited scope, QUEUED, in a
// transaction that reads its counter shards: refused with a *QuotaError
// when a scope is at maxQueued; holding a run slot (to be enqueued) when
// every scope has one free on the task's shard, waiting for one otherwise.
//
// Within one process, the submits of one scope run one at a time (the
// scope's lock, tenant before worker): they would only contend inside
// Firestore, whose emulator handles contention poorly; across processes,
// Firestore's transactions decide.
func (s *Store) createLimited(ctx context.Context, t task.Task, now time.Time) CreateResult {
	tmp := t
	tmp.Quota = &task.QuotaHold{Tenant: s.scopeOf(quota.KindTenant, t.TenantID) != nil, Worker: s.scopeOf(quota.KindWorker, t.Worker) != nil}
	unlock, err := s.lockScopes(ctx, &tmp)
	if err != nil {
		return CreateResult{Err: wrap("create", err)}
	}
	defer unlock()
	var retryTx []byte
	for try := 0; ; try++ {
		r, tx, err := s.createLimitedOnce(ctx, t, now, retryTx)
		if err == nil {
			return r
		}
		if status.Code(err) != codes.Aborted || try >= s.maxRetries {
			if c := status.Code(err); c == codes.AlreadyExists || c == codes.FailedPrecondition {
				return s.existing(ctx, t, err)
			}
			if errors.Is(err, ErrQuotaExceeded) {
				return CreateResult{Err: err}
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

func (s *Store) createLimitedOnce(ctx context.Context, t task.Task, now time.Time, retryTx []byte) (CreateResult, []byte, error) {
	h := fnv.New32a()
	h.Write([]byte(t.ID))
	start := int(h.Sum32() & 0x7fffffff)
	scopes := []*scope{s.scopeOf(quota.KindTenant, t.TenantID), s.scopeOf(quota.KindWorker, t.Worker)}
	var names []string
	for _, sc := range scopes {
		if sc != nil {
			names = append(names, s.quotaName(sc.kind, sc.name, start%sc.n))
		}
	}
	idem := ""
	if t.IdempotencyKey != "" {
		idem = s.idemName(t.TenantID, t.IdempotencyKey)
		names = append(names, idem)
	}
	rw := &pb.TransactionOptions_ReadWrite{RetryTransaction: retryTx}
	docs, tx, err := s.batchGet(ctx, names, &pb.BatchGetDocumentsRequest_NewTransaction{
		NewTransaction: &pb.TransactionOptions{Mode: &pb.TransactionOptions_ReadWrite_{ReadWrite: rw}}})
	if err != nil {
		s.rollback(tx)
		return CreateResult{}, tx, err
	}
	if idem != "" && docs[idem] != nil {
		s.rollback(tx)
		return s.existing(ctx, t, status.Error(codes.AlreadyExists, "idempotency key")), tx, nil
	}
	hold := task.QuotaHold{}
	slot := true
	for i, sc := range scopes {
		if sc == nil {
			continue
		}
		k, q, err := s.pickShard(ctx, sc, start%sc.n, docs, tx)
		if err != nil {
			s.rollback(tx)
			return CreateResult{}, tx, err
		}
		rk := k
		if slot && !quota.Fits(sc.lim.MaxRunning, sc.n, k, q.Running) {
			// No slot on the task's shard: look at the others (one more
			// read, only then).
			if rk, err = s.slotElsewhere(ctx, sc, k, tx); err != nil {
				s.rollback(tx)
				return CreateResult{}, tx, err
			}
			slot = rk >= 0
		}
		if i == 0 {
			hold.Tenant, hold.TenantShard, hold.TenantSlotShard = true, k, max(rk, 0)
		} else {
			hold.Worker, hold.WorkerShard, hold.WorkerSlotShard = true, k, max(rk, 0)
		}
	}
	nt, writes, trs := s.creationWritesWith(t, now, true, &hold, slot)
	writes = append(writes, s.quotaWrites(&task.Task{}, &nt)...)
	run := s.recentRuns.due(nt.RunID, now)
	if run {
		writes = append(writes, s.runWrite(&nt))
	}
	if _, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes, Transaction: tx}); err != nil {
		s.rollback(tx)
		return CreateResult{}, tx, err
	}
	if run {
		s.recentRuns.mark([]string{nt.RunID}, now)
	}
	s.committed(ctx, trs)
	return CreateResult{Task: nt}, tx, nil
}

// slotElsewhere reads every shard of sc in tx and returns one with a run
// slot free (-1: none).
func (s *Store) slotElsewhere(ctx context.Context, sc *scope, k int, tx []byte) (int, error) {
	if sc.n == 1 {
		return -1, nil
	}
	var names []string
	for j := range sc.n {
		names = append(names, s.quotaName(sc.kind, sc.name, j))
	}
	docs, _, err := s.batchGet(ctx, names, &pb.BatchGetDocumentsRequest_Transaction{Transaction: tx})
	if err != nil {
		return -1, err
	}
	return s.freeSlot(sc, k, docs)
}

// pickShard returns a shard of sc with room for one more queued task: k
// (already read into docs) when it has, else the first other one that has
// (all read, in one more RPC); a *QuotaError when none has.
func (s *Store) pickShard(ctx context.Context, sc *scope, k int, docs map[string]*pb.Document, tx []byte) (int, quotaDoc, error) {
	q, err := counts(docs, s.quotaName(sc.kind, sc.name, k))
	if err != nil || quota.Fits(sc.lim.MaxQueued, sc.n, k, q.Queued) {
		return k, q, err
	}
	var names []string
	for j := range sc.n {
		if j != k {
			names = append(names, s.quotaName(sc.kind, sc.name, j))
		}
	}
	more, _, err := s.batchGet(ctx, names, &pb.BatchGetDocumentsRequest_Transaction{Transaction: tx})
	if err != nil {
		return 0, q, err
	}
	for i := 1; i < sc.n; i++ {
		j := (k + i) % sc.n
		q, err := counts(more, s.quotaName(sc.kind, sc.name, j))
		if err != nil {
			return 0, q, err
		}
		if quota.Fits(sc.lim.MaxQueued, sc.n, j, q.Queued) {
			return j, q, nil
		}
	}
	return 0, q, &QuotaError{Kind: sc.kind, Name: sc.name, Limit: sc.lim.MaxQueued}
}

// QuotaUsage is a scope's counts: the sum of its counter shards.
type QuotaUsage struct {
	// Queued counts tasks PENDING or QUEUED.
	Queued int
	// Running counts run slots held: tasks RUNNING or CANCELLING, and
	// those enqueued to their worker and not yet started.
	Running int
	// Shards is the number of counter shards read.
	Shards int
}

// QuotaUsage sums the counter shards of a scope (one query; zero when the
// scope has never been limited).
func (s *Store) QuotaUsage(ctx context.Context, kind quota.Kind, name string) (QuotaUsage, error) {
	q := &pb.StructuredQuery{
		From: []*pb.StructuredQuery_CollectionSelector{{CollectionId: QuotasCollection}},
		Where: and(fieldFilter("kind", pb.StructuredQuery_FieldFilter_EQUAL, strVal(string(kind))),
			fieldFilter("name", pb.StructuredQuery_FieldFilter_EQUAL, strVal(name))),
	}
	var u QuotaUsage
	err := s.runQuery(ctx, s.docs, q, func(d *pb.Document) error {
		var c quotaDoc
		if err := decodeFields(d.GetFields(), &c); err != nil {
			return err
		}
		u.Queued += c.Queued
		u.Running += c.Running
		u.Shards++
		return nil
	})
	return u, wrap("quota usage", err)
}

// QuotaRepair reports one counter shard that RepairQuotaCounters found
// drifted and rewrote.
type QuotaRepair struct {
	Kind  quota.Kind
	Name  string
	Shard int
	// Queued and Running are the stored counts; WantQueued and WantRunning
	// the recounted ones.
	Queued, Running         int
	WantQueued, WantRunning int
	// Skipped: the shard changed between its read and the rewrite; the
	// next pass recounts it.
	Skipped bool
}

// RepairQuotaCounters recounts every counter shard from the tasks that
// hold counts on it (two count aggregations per shard: no task is read)
// and rewrites the ones that differ. The rewrite is conditional on the
// shard's update time as read before the count, so a transition that
// committed meanwhile (its counts are then in neither, or in both) makes
// it skip the shard until the next pass instead of writing a stale value.
func (s *Store) RepairQuotaCounters(ctx context.Context) ([]QuotaRepair, error) {
	type shard struct {
		doc quotaDoc
		at  *timestamppb.Timestamp
	}
	var shards []shard
	err := s.runQuery(ctx, s.docs, &pb.StructuredQuery{From: []*pb.StructuredQuery_CollectionSelector{{CollectionId: QuotasCollection}}},
		func(d *pb.Document) error {
			var c quotaDoc
			if err := decodeFields(d.GetFields(), &c); err != nil {
				return err
			}
			shards = append(shards, shard{c, d.GetUpdateTime()})
			return nil
		})
	if err != nil {
		return nil, wrap("quota repair: read counters", err)
	}
	var out []QuotaRepair
	var errs []error
	for _, sh := range shards {
		c := sh.doc
		field, hold := "tenantId", "quota.tenant"
		shardField, slotField := "quota.tenantShard", "quota.tenantSlotShard"
		if quota.Kind(c.Kind) == quota.KindWorker {
			field, hold, shardField, slotField = "worker", "quota.worker", "quota.workerShard", "quota.workerSlotShard"
		}
		base := func(f string) []*pb.StructuredQuery_Filter {
			return []*pb.StructuredQuery_Filter{
				fieldFilter(field, pb.StructuredQuery_FieldFilter_EQUAL, strVal(c.Name)),
				fieldFilter(hold, pb.StructuredQuery_FieldFilter_EQUAL, boolVal(true)),
				fieldFilter(f, pb.StructuredQuery_FieldFilter_EQUAL, intVal(c.Shard)),
			}
		}
		queuedQ := &pb.StructuredQuery{From: []*pb.StructuredQuery_CollectionSelector{{CollectionId: TasksCollection}},
			Where: and(append(base(shardField), fieldFilter("state", pb.StructuredQuery_FieldFilter_IN, statesVal([]api.State{api.Pending, api.Queued})))...)}
		runningQ := &pb.StructuredQuery{From: []*pb.StructuredQuery_CollectionSelector{{CollectionId: TasksCollection}},
			Where: and(append(base(slotField), fieldFilter("quota.slot", pb.StructuredQuery_FieldFilter_EQUAL, boolVal(true)),
				fieldFilter("state", pb.StructuredQuery_FieldFilter_IN, statesVal(task.ActiveStates)))...)}
		nq, err := s.count(ctx, queuedQ)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		nr, err := s.count(ctx, runningQ)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if int(nq) == c.Queued && int(nr) == c.Running {
			continue
		}
		rep := QuotaRepair{Kind: quota.Kind(c.Kind), Name: c.Name, Shard: c.Shard, Queued: c.Queued, Running: c.Running, WantQueued: int(nq), WantRunning: int(nr)}
		fields := encodeFields(struct {
			Queued  int `firestore:"queued"`
			Running int `firestore:"running"`
		}{int(nq), int(nr)})
		_, err = s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{{
			Operation:       &pb.Write_Update{Update: &pb.Document{Name: s.quotaName(quota.Kind(c.Kind), c.Name, c.Shard), Fields: fields}},
			UpdateMask:      &pb.DocumentMask{FieldPaths: []string{"queued", "running"}},
			CurrentDocument: &pb.Precondition{ConditionType: &pb.Precondition_UpdateTime{UpdateTime: sh.at}},
		}}})
		switch status.Code(err) {
		case codes.OK:
		case codes.FailedPrecondition:
			rep.Skipped = true
		default:
			errs = append(errs, err)
			continue
		}
		out = append(out, rep)
	}
	return out, wrap("quota repair", errors.Join(errs...))
}

func boolVal(b bool) *pb.Value { return &pb.Value{ValueType: &pb.Value_BooleanValue{BooleanValue: b}} }
