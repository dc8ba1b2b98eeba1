package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sync"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/servo-dev/servo/internal/task"
)

// RunsCollection holds one small document per run, written by the commit
// that stores the run's tasks, so that runs can be listed without reading
// their tasks; a run that is a single task's own (task.Task.OwnRun) has
// none: ListRuns reads that task instead.
const RunsCollection = "runs"

// Run is a run's document, one per tenant of the run:
// runs/{hhhh}_{runId}.{tenantKey} (runDocID), written by a submit commit that stores
// tasks of the run, at most once per RunDocumentEvery per Store (one
// process), so that a run's many submits do not all write the one
// document they share (Firestore sustains about one write a second per
// document).
type Run struct {
	RunID    string `firestore:"runId"`
	TenantID string `firestore:"tenantId"`
	// LastSubmitAt is the time of the latest commit that wrote the run's
	// document (within RunDocumentEvery of its latest submit).
	LastSubmitAt time.Time `firestore:"lastSubmitAt"`
	// ExpireAt is when Firestore may delete the document (a TTL policy):
	// the tenant's retention after LastSubmitAt.
	// Nil in a document written before retention (schema step 3 sets it).
	ExpireAt *time.Time `firestore:"expireAt"`
	// DueShard is the run id's shard (DueShardOf, as a task's): ListRuns
	// reads a group of shards a query, newest first, and merges them, so
	// that runs created in sequence (one a task at 10 000 tasks/s) write
	// DueShards() separate ranges of the listing's indexes, not one.
	DueShard int `firestore:"dueShard"`
}

// runDocID is the id of tenant's document of run: run ids are scoped per
// tenant, so that a submit into another tenant's runId writes a document
// of its own and never re-owns the other's (whose tasks the caller cannot
// reach either: every run query filters on the caller's tenants). The id
// begins with 4 hex digits of the SHA-256 of the rest, as a task's
// (TaskDocID), so that runs created in sequence are written all over the
// key range. Schema 3 and earlier named it legacyRunDocID, and before
// that runs/{runId}; schema 4's migration step moves both (moveRun).
// recentRuns remembers run ids, not tenants: a second tenant submitting
// into a run id this process wrote within RunDocumentEvery gets its
// document with a later submit.
func runDocID(tenant, run string) string {
	id := legacyRunDocID(tenant, run)
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:2]) + "_" + id
}

// legacyRunDocID is the name schema 3 and earlier gave tenant's document
// of run: runs/{runId}.{tenantKey}, sequential.
func legacyRunDocID(tenant, run string) string {
	h := sha256.Sum256([]byte(tenant))
	return run + "." + hex.EncodeToString(h[:8])
}

// tenantRunName is the document name of tenant's run id.
func (s *Store) tenantRunName(tenant, id string) string {
	return s.docs + "/" + RunsCollection + "/" + runDocID(tenant, id)
}

// runClaim is what a submit does with its run's document.
type runClaim int

const (
	runNone    runClaim = iota // nothing: written lately, or no document
	runRefresh                 // rewrite it in the submit's commit
	runCreate                  // create it unless it exists, after the commit (createRun)
)

// claimRun says what the commit that stores t at now does with its run's
// document, and claims it: nothing for a task that is its run's only one
// (task.Task.OwnRun: ListRuns reads the task), nor when this store wrote
// the run's document, or has a commit in flight that writes it, within
// its run document interval (WithRunDocumentEvery). The first time this
// store sees the run, it creates the document unless it exists
// (createRun, after the tasks' commit): every process that takes a
// submit into a run sees it a first time, and a run submitted at 30 000
// tasks/s reaches hundreds of processes within milliseconds, which would
// all write the one document at once; a create that finds it exists
// writes nothing. Later, each process rewrites it once an interval
// (lastSubmitAt, its expiry). Claimed before the commit, so that the
// submits into one run that a process has in flight at once write the
// document once, not each; a commit that fails gives its claims back
// (recentRuns.forget).
func (s *Store) claimRun(t *task.Task, now time.Time) runClaim {
	if t.OwnRun {
		return runNone
	}
	return s.recentRuns.claim(t.RunID, now, s.runEvery)
}

// createRun creates the document of t's run unless it exists, in a commit
// of its own after the one that stored t: one write per run, however many
// processes try. A failure other than "exists" gives the claim back, so
// that the next submit into the run tries again; the run is listed from
// its tasks' own queries meanwhile only if it is a task's own.
func (s *Store) createRun(ctx context.Context, t *task.Task) {
	w := s.runWrite(t)
	w.CurrentDocument = &pb.Precondition{ConditionType: &pb.Precondition_Exists{Exists: false}}
	_, err := s.client.Commit(forTask(ctx, t.ID), &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{w}})
	if c := status.Code(err); err != nil && c != codes.AlreadyExists && c != codes.FailedPrecondition {
		s.recentRuns.forget([]string{t.RunID})
	}
}

// runWrite is the write of a run's document by a submit commit.
func (s *Store) runWrite(t *task.Task) *pb.Write {
	return setWrite(s.tenantRunName(t.TenantID, t.RunID), s.newRun(t.TenantID, t.RunID, t.CreatedAt), false)
}

// newRun is the document of tenant's run id last submitted at at.
func (s *Store) newRun(tenant, run string, at time.Time) Run {
	exp := at.Add(s.retentionFor(tenant))
	return Run{RunID: run, TenantID: tenant, LastSubmitAt: at, ExpireAt: &exp, DueShard: DueShardOf(run, s.shards)}
}

// RunFilter selects runs for ListRuns.
type RunFilter struct {
	// TenantID, when set, lists only runs whose tasks are this tenant's.
	TenantID string
	// TenantIDs, when set, lists only runs of these tenants ("in" filter).
	TenantIDs []string
	// PageSize defaults to 20 and is capped at 100.
	PageSize int
	// After continues a listing after this run id ("" from the newest).
	After string
}

// ListRuns returns runs newest first (run ids are ULIDs, so runId order is
// creation order) and the id to pass as After for the next page ("" on the
// last page). It queries each group of due shards (runGroups: 13 for 384
// shards, more with several tenants) for a page, newest first by the
// composite index (dueShard, [tenantId,] runId desc), and the same of the
// tasks that are their runs' own (no run document: task.Task.OwnRun), and
// merges them: it reads at most a page and one per query, and of tasks
// only those. Runs written by
// schema 3 and earlier (no dueShard) are listed once `servo migrate` moved
// them (moveRun).
func (s *Store) ListRuns(ctx context.Context, f RunFilter) ([]Run, string, error) {
	size := f.PageSize
	if size <= 0 {
		size = 20
	}
	size = min(size, 100)
	if f.After != "" && !task.ValidID(f.After, task.RunIDPrefix) {
		return nil, "", ErrInvalidPageToken
	}
	groups := s.runGroups(f)
	// parts[2i] are group i's run documents, parts[2i+1] its tasks that
	// are their runs' only ones (task.Task.OwnRun: no run document).
	parts := make([][]Run, 2*len(groups))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(shardParallelism)
	for i, shards := range groups {
		g.Go(func() error {
			return s.runQuery(gctx, s.docs, f.query(shards, size+1), func(d *pb.Document) error {
				var r Run
				if err := decodeFields(d.GetFields(), &r); err != nil {
					return err
				}
				parts[2*i] = append(parts[2*i], r)
				return nil
			})
		})
		g.Go(func() error {
			return s.runQuery(gctx, s.docs, f.ownRunQuery(shards, size+1), func(d *pb.Document) error {
				var t task.Task
				if err := decodeFields(d.GetFields(), &t); err != nil {
					return err
				}
				parts[2*i+1] = append(parts[2*i+1], Run{RunID: t.RunID, TenantID: t.TenantID, LastSubmitAt: t.CreatedAt, ExpireAt: t.ExpireAt,
					DueShard: DueShardOf(t.RunID, s.shards)})
				return nil
			})
		})
	}
	if err := g.Wait(); err != nil {
		return nil, "", wrap("list runs", err)
	}
	// Every group's first size+1 runs hold the page's: merged newest
	// first (a run of several tenants in one tenant order). A run listed
	// both ways (more tasks submitted into a task's own run later) is
	// listed once, from its document, which the later submit wrote.
	all := slices.Concat(parts...)
	slices.SortStableFunc(all, func(a, b Run) int { return cmp.Or(cmp.Compare(b.RunID, a.RunID), cmp.Compare(a.TenantID, b.TenantID)) })
	var out []Run
	for i, r := range all {
		if i > 0 && all[i-1].RunID == r.RunID && all[i-1].TenantID == r.TenantID {
			continue // a run moved while listed: both names at once
		}
		out = append(out, r)
	}
	next := ""
	if len(out) > size {
		out = out[:size]
		next = out[size-1].RunID
	}
	return out, next, nil
}

// runGroups splits the due shards into the groups ListRuns queries: as
// many shards a query as Firestore's 30 disjunctions allow beside f's
// tenants.
func (s *Store) runGroups(f RunFilter) [][]int {
	ins := 1
	if f.TenantID == "" {
		ins = max(len(f.TenantIDs), 1)
	}
	return shardGroups(s.shards, maxDisjunctions/ins, 1)
}

// query is the runs query of f over a group of due shards, limited to
// limit documents, newest first.
func (f RunFilter) query(shards []int, limit int) *pb.StructuredQuery {
	return f.newestFirst(RunsCollection, f.filters(shards), limit)
}

// newestFirst is a query of coll with filters, newest run id first from
// f.After, limited to limit documents.
func (f RunFilter) newestFirst(coll string, filters []*pb.StructuredQuery_Filter, limit int) *pb.StructuredQuery {
	q := &pb.StructuredQuery{
		From:    []*pb.StructuredQuery_CollectionSelector{{CollectionId: coll}},
		Where:   and(filters...),
		OrderBy: []*pb.StructuredQuery_Order{{Field: fieldRef("runId"), Direction: pb.StructuredQuery_DESCENDING}},
		Limit:   wrapInt(limit),
	}
	if f.After != "" {
		q.StartAt = &pb.Cursor{Values: []*pb.Value{strVal(f.After)}, Before: false}
	}
	return q
}

// filters are the runs query's filters over a group of due shards.
func (f RunFilter) filters(shards []int) []*pb.StructuredQuery_Filter {
	filters := []*pb.StructuredQuery_Filter{shardFilter(shards)}
	if f.TenantID != "" {
		filters = append(filters, fieldFilter("tenantId", pb.StructuredQuery_FieldFilter_EQUAL, strVal(f.TenantID)))
	} else if len(f.TenantIDs) > 0 {
		filters = append(filters, fieldFilter("tenantId", pb.StructuredQuery_FieldFilter_IN, stringsVal(f.TenantIDs)))
	}
	return filters
}

// ownRunQuery is query's counterpart over the tasks that are their runs'
// only ones (task.Task.OwnRun), reading the fields a Run takes.
func (f RunFilter) ownRunQuery(shards []int, limit int) *pb.StructuredQuery {
	own := fieldFilter("ownRun", pb.StructuredQuery_FieldFilter_EQUAL, &pb.Value{ValueType: &pb.Value_BooleanValue{BooleanValue: true}})
	q := f.newestFirst(TasksCollection, slices.Insert(f.filters(shards), 1, own), limit)
	q.Select = &pb.StructuredQuery_Projection{Fields: []*pb.StructuredQuery_FieldReference{
		fieldRef("runId"), fieldRef("tenantId"), fieldRef("createdAt"), fieldRef("expireAt")}}
	return q
}

// runDocBytes bounds the encoded size of a run document's write (a run id,
// a tenant id of at most 128 bytes, a timestamp), for CreateMany's commit
// size accounting.
const runDocBytes = 512

// RunDocumentEvery is how often one Store rewrites a run's document while
// the run's tasks keep being submitted, by default (WithRunDocumentEvery).
const RunDocumentEvery = time.Minute

// RunDocumentEveryFor is the run document interval for a deployment whose
// api may run instances processes (SERVO_RUN_DOCUMENT_EVERY, which
// Terraform sets from functions.api.max_instances): every process that
// takes a run's submits writes its document once an interval, so the
// interval grows with the processes to keep one run's document near one
// write every 2 s however many there are (Firestore sustains about one a
// second), and is at least RunDocumentEvery. 610 processes (the api sized
// for 50 000 tasks/s): 20m20s.
func RunDocumentEveryFor(instances int) time.Duration {
	return max(RunDocumentEvery, time.Duration(instances)*2*time.Second)
}

// WithRunDocumentEvery sets how often the store rewrites a run's document
// while the run's tasks keep being submitted (default RunDocumentEvery;
// RunDocumentEveryFor gives it for a number of processes). The document's
// lastSubmitAt is then up to that old, and its expiry that much earlier.
func WithRunDocumentEvery(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.runEvery = d
		}
	}
}

// recentRuns remembers the runs whose document this store wrote (or is
// writing) lately.
type recentRuns struct {
	mu sync.Mutex
	at map[string]time.Time
}

// claim says whether run's document is written with a commit at now:
// created the first time (runCreate), rewritten when not written within
// every before (runRefresh); either way it records it as written at now,
// so that the commits in flight at once do not all write it.
func (r *recentRuns) claim(run string, now time.Time, every time.Duration) runClaim {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.at[run]
	if ok && now.Sub(at) < every && !now.Before(at) {
		return runNone
	}
	if r.at == nil || len(r.at) > 10000 {
		r.at = map[string]time.Time{} // bounded: forgetting only costs a create attempt
	}
	r.at[run] = now
	if !ok {
		return runCreate
	}
	return runRefresh
}

// forget gives back the claims of runs whose commit failed: the next
// submit into each writes its document.
func (r *recentRuns) forget(runs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range runs {
		delete(r.at, id)
	}
}
