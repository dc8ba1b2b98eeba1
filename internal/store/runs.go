package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"

	"github.com/servo-dev/servo/internal/task"
)

// RunsCollection holds one small document per run, written by the commit
// that stores the run's tasks, so that runs can be listed without reading
// tasks.
const RunsCollection = "runs"

// Run is a run's document, one per tenant of the run:
// runs/{runId}.{tenantKey} (runDocID), written by a submit commit that stores
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
}

// runDocID is the id of tenant's document of run: run ids are scoped per
// tenant, so that a submit into another tenant's runId writes a document
// of its own and never re-owns the other's (whose tasks the caller cannot
// reach either: every run query filters on the caller's tenants). Before
// this, the document was runs/{runId}; those are still listed (ListRuns
// skips the second of two documents of one run and tenant in a page).
// recentRuns remembers run ids, not tenants: a second tenant submitting
// into a run id this process wrote within RunDocumentEvery gets its
// document with a later submit.
func runDocID(tenant, run string) string {
	h := sha256.Sum256([]byte(tenant))
	return run + "." + hex.EncodeToString(h[:8])
}

// tenantRunName is the document name of tenant's run id.
func (s *Store) tenantRunName(tenant, id string) string {
	return s.docs + "/" + RunsCollection + "/" + runDocID(tenant, id)
}

// runWrite is the write of a run's document by a submit commit.
func (s *Store) runWrite(t *task.Task) *pb.Write {
	exp := t.CreatedAt.Add(s.retentionFor(t.TenantID))
	return setWrite(s.tenantRunName(t.TenantID, t.RunID), Run{RunID: t.RunID, TenantID: t.TenantID, LastSubmitAt: t.CreatedAt, ExpireAt: &exp}, false)
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
// creation order; Firestore cannot scan document names backwards, so the
// query orders by the runId field) and the id to pass as After for the next page ("" on the
// last page). It reads one document per run returned (plus one), never a
// task.
func (s *Store) ListRuns(ctx context.Context, f RunFilter) ([]Run, string, error) {
	size := f.PageSize
	if size <= 0 {
		size = 20
	}
	size = min(size, 100)
	if f.After != "" && !task.ValidID(f.After, task.RunIDPrefix) {
		return nil, "", ErrInvalidPageToken
	}
	q := f.query(size + 1)
	var out []Run
	seen := map[[2]string]bool{}
	err := s.runQuery(ctx, s.docs, q, func(d *pb.Document) error {
		var r Run
		if err := decodeFields(d.GetFields(), &r); err != nil {
			return err
		}
		if k := [2]string{r.RunID, r.TenantID}; !seen[k] { // a legacy runs/{runId} and its new document
			seen[k] = true
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, "", wrap("list runs", err)
	}
	next := ""
	if len(out) > size {
		out = out[:size]
		next = out[size-1].RunID
	}
	return out, next, nil
}

// query is the runs query of f, limited to limit documents.
func (f RunFilter) query(limit int) *pb.StructuredQuery {
	q := &pb.StructuredQuery{
		From:    []*pb.StructuredQuery_CollectionSelector{{CollectionId: RunsCollection}},
		OrderBy: []*pb.StructuredQuery_Order{{Field: fieldRef("runId"), Direction: pb.StructuredQuery_DESCENDING}},
		Limit:   wrapInt(limit),
	}
	if f.TenantID != "" {
		q.Where = fieldFilter("tenantId", pb.StructuredQuery_FieldFilter_EQUAL, strVal(f.TenantID))
	} else if len(f.TenantIDs) > 0 {
		q.Where = fieldFilter("tenantId", pb.StructuredQuery_FieldFilter_IN, stringsVal(f.TenantIDs))
	}
	if f.After != "" {
		q.StartAt = &pb.Cursor{Values: []*pb.Value{strVal(f.After)}, Before: false}
	}
	return q
}

// runDocBytes bounds the encoded size of a run document's write (a run id,
// a tenant id of at most 128 bytes, a timestamp), for CreateMany's commit
// size accounting.
const runDocBytes = 512

// RunDocumentEvery is how often one Store rewrites a run's document while
// the run's tasks keep being submitted.
const RunDocumentEvery = time.Minute

// recentRuns remembers the runs whose document this store wrote lately.
type recentRuns struct {
	mu sync.Mutex
	at map[string]time.Time
}

// due reports whether run's document should be written with a commit at now.
func (r *recentRuns) due(run string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.at[run]
	return !ok || now.Sub(at) >= RunDocumentEvery || now.Before(at)
}

// mark records that runs' documents were written at now.
func (r *recentRuns) mark(runs []string, now time.Time) {
	if len(runs) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil || len(r.at) > 10000 {
		r.at = map[string]time.Time{} // bounded: forgetting only costs a write
	}
	for _, id := range runs {
		r.at[id] = now
	}
}
