package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	firestoreapi "cloud.google.com/go/firestore/apiv1"
	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/spanattr"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/telemetry"
)

// Sentinel errors.
var (
	// ErrNotFound: no such task.
	ErrNotFound = errors.New("store: task not found")
	// ErrUnavailable: Firestore failed or contention outlasted the retries;
	// the caller may retry the same request.
	ErrUnavailable = errors.New("store: firestore unavailable")
	// ErrRejected: Firestore refused the write as invalid (for example a
	// document over its size limit); retrying the same request cannot help.
	ErrRejected = errors.New("store: firestore rejected the write")
	// ErrInvalidPageToken: a list page token that this store did not issue.
	ErrInvalidPageToken = errors.New("store: invalid page token")
)

// EmulatorHostEnv is the variable the Firestore emulator's address is read from.
const EmulatorHostEnv = "FIRESTORE_EMULATOR_HOST"

// IdempotencyRetention is how long an idempotency key maps to its task
// before Firestore's TTL policy may delete the mapping.
const IdempotencyRetention = 30 * 24 * time.Hour

// Store is Servo's Firestore state. It is safe for concurrent use.
type Store struct {
	client     *firestoreapi.Client
	db         string // projects/P/databases/D
	docs       string // db + "/documents"
	maxRetries int
	shards     int
	perTask    keyedMutex
	recentRuns recentRuns
	counters   *quota.Counters
	perScope   keyedMutex
	onCommit   atomic.Pointer[func(context.Context, []task.Transition)]
	outages    *outageLog
	// legacyNames: the database may hold task documents under their
	// schema 1 names (tasks/{taskId}); lookups read both names. Set until
	// CheckSchema or Migrate finds schema 2 or later.
	legacyNames   atomic.Bool
	legacyCursors legacyCursors
	retention     time.Duration // WithRetention
}

// OnCommit registers fn to run after every commit that wrote transitions
// (Create and Apply), with those transitions in order: the events publisher
// delivers them at once; what it misses stays in the outbox for re-drive.
// fn must not block for long; it runs on the caller's goroutine.
func (s *Store) OnCommit(fn func(context.Context, []task.Transition)) { s.onCommit.Store(&fn) }

func (s *Store) committed(ctx context.Context, trs []task.Transition) {
	telemetry.RecordTransitions(ctx, trs)
	if fn := s.onCommit.Load(); fn != nil && *fn != nil && len(trs) > 0 {
		(*fn)(ctx, trs)
	}
}

type config struct {
	shards     int
	database   string
	counter    *RPCCounter
	clientOpts []option.ClientOption
	maxRetries int
	quotas     *quota.Policy
	retention  time.Duration
}

// Option configures New.
type Option func(*config)

// WithDatabase selects a database other than "(default)".
func WithDatabase(id string) Option { return func(c *config) { c.database = id } }

// WithRPCCounter counts every Firestore RPC the store makes.
func WithRPCCounter(rc *RPCCounter) Option { return func(c *config) { c.counter = rc } }

// WithClientOptions passes options to the Firestore client.
func WithClientOptions(opts ...option.ClientOption) Option {
	return func(c *config) { c.clientOpts = append(c.clientOpts, opts...) }
}

// DefaultDueShards is the number of due-index shards (WithDueShards).
const DefaultDueShards = 128

// WithDueShards sets how many shards the due indexes are split into
// (default DefaultDueShards): each task is given a shard at creation, and
// the sweeper and the outbox re-drive query every shard, a group of
// shards a query (DueGroups, OutboxGroups). The number may
// grow between deployments, never shrink: a task's shard is fixed, and a
// shard no longer queried would never be swept.
func WithDueShards(n int) Option { return func(c *config) { c.shards = n } }

// WithMaxRetries bounds transaction retries on contention (default 25).
func WithMaxRetries(n int) Option { return func(c *config) { c.maxRetries = n } }

// New connects to Firestore for project; it honours FIRESTORE_EMULATOR_HOST.
func New(ctx context.Context, project string, opts ...Option) (*Store, error) {
	if project == "" {
		return nil, errors.New("store: project id is required")
	}
	cfg := config{database: "(default)", maxRetries: 25, shards: DefaultDueShards}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.shards < 1 {
		return nil, fmt.Errorf("store: %d due shards: want at least 1", cfg.shards)
	}
	var copts []option.ClientOption
	if host := os.Getenv(EmulatorHostEnv); host != "" {
		copts = append(copts, option.WithEndpoint(host), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
			option.WithGRPCDialOption(grpc.WithPerRPCCredentials(emulatorCreds{})))
	}
	if cfg.counter != nil {
		copts = append(copts,
			option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(cfg.counter.unary)),
			option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(cfg.counter.stream)))
	}
	// Per-request RPC tallies (telemetry.CountRPCs): a counter in the
	// context, no call of its own.
	copts = append(copts, option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(telemetry.UnaryRPCTally)),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(telemetry.StreamRPCTally)))
	copts = append(copts, cfg.clientOpts...)
	client, err := firestoreapi.NewClient(ctx, copts...)
	if err != nil {
		return nil, fmt.Errorf("store: connect to firestore: %w", err)
	}
	db := "projects/" + project + "/databases/" + cfg.database
	counters, err := quota.NewCounters(cfg.quotas, db+"/documents")
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	s := &Store{client: client, db: db, docs: db + "/documents", maxRetries: cfg.maxRetries, shards: cfg.shards, counters: counters,
		outages: &outageLog{}, retention: cfg.retention}
	s.legacyNames.Store(true)
	s.outages.persist = func(o task.Outage) {
		// Best effort: this process counts the outage already; a failed
		// write only keeps it from the others.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.RecordOutage(ctx, o)
	}
	return s, nil
}

// DueShards is the number of due-index shards; DueTasks and Undelivered
// take a shard in [0, DueShards()).
func (s *Store) DueShards() int { return s.shards }

// DueShardsInUse returns one more than the highest due shard of any task
// or outbox entry in the database (0 when there is none): the least
// WithDueShards that sweeps and re-drives every one of them. A store may
// start with fewer shards on an empty database (servo dev), never with
// fewer than this. Two queries of at most one document each, ordered by
// dueShard alone (its automatic single-field index).
func (s *Store) DueShardsInUse(ctx context.Context) (int, error) {
	n := 0
	for _, coll := range []string{TasksCollection, OutboxCollection} {
		err := s.runQuery(ctx, s.docs, highestShardQuery(coll), func(d *pb.Document) error {
			n = max(n, int(d.GetFields()["dueShard"].GetIntegerValue())+1)
			return nil
		})
		if err != nil {
			return 0, wrap("due shards in use", err)
		}
	}
	return n, nil
}

// highestShardQuery reads the document of coll with the highest dueShard,
// projected to it.
func highestShardQuery(coll string) *pb.StructuredQuery {
	return &pb.StructuredQuery{
		Select:  &pb.StructuredQuery_Projection{Fields: []*pb.StructuredQuery_FieldReference{fieldRef("dueShard")}},
		From:    []*pb.StructuredQuery_CollectionSelector{{CollectionId: coll}},
		OrderBy: []*pb.StructuredQuery_Order{{Field: fieldRef("dueShard"), Direction: pb.StructuredQuery_DESCENDING}},
		Limit:   wrapInt(1),
	}
}

// DueShardOf is the due-index shard of a task id among n shards: a hash,
// so that tasks created together spread over every shard.
func DueShardOf(taskID string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(taskID))
	return int(h.Sum32() % uint32(n))
}

// Close releases the connection.
func (s *Store) Close() error { return s.client.Close() }

// emulatorCreds authenticates to the emulator as its owner, as the official
// client does.
type emulatorCreds struct{}

func (emulatorCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer owner"}, nil
}
func (emulatorCreds) RequireTransportSecurity() bool { return false }

// TaskDocID is the id of task id's document: the id behind a prefix
// derived from it (4 hex digits of its SHA-256), so that tasks created in
// sequence are written all over the collection's key range instead of at
// its end (doc.go, "Names"), while a lookup by id still reads one
// document.
func TaskDocID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:2]) + "_" + id
}

func (s *Store) taskName(id string) string {
	return s.docs + "/" + TasksCollection + "/" + TaskDocID(id)
}

// legacyTaskName is the name schema 1 and earlier gave a task:
// tasks/{taskId}. Migrate moves such documents to taskName.
func (s *Store) legacyTaskName(id string) string { return s.docs + "/" + TasksCollection + "/" + id }

// taskNames are the names a task's document may have: its own and, while
// the database may still hold documents of schema < 2 (legacyNames), its
// legacy name. Both are read in the same BatchGetDocuments: a lookup
// stays one RPC.
func (s *Store) taskNames(id string) []string {
	if s.legacyNames.Load() {
		return []string{s.taskName(id), s.legacyTaskName(id)}
	}
	return []string{s.taskName(id)}
}

// foundTask picks the task's document among docs read with taskNames: its
// name and the document, or taskName and nil when there is none.
func (s *Store) foundTask(id string, docs map[string]*pb.Document) (string, *pb.Document) {
	for _, n := range s.taskNames(id) {
		if d := docs[n]; d != nil {
			return n, d
		}
	}
	return s.taskName(id), nil
}

// attemptName is the name of attempt n of the task whose document is base.
func attemptName(base string, n int) string { return base + "/attempts/" + strconv.Itoa(n) }
func (s *Store) outboxName(eventID string) string {
	return s.docs + "/" + OutboxCollection + "/" + eventID
}
func (s *Store) idemName(tenant, key string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + key))
	return s.docs + "/" + IdempotencyCollection + "/" + hex.EncodeToString(sum[:])
}

// wrap maps a Firestore error to the store's sentinels.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnavailable) {
		return err
	}
	switch status.Code(err) {
	case codes.NotFound:
		return fmt.Errorf("store: %s: %w", op, ErrNotFound)
	case codes.Canceled:
		return fmt.Errorf("store: %s: %w", op, err)
	case codes.InvalidArgument:
		return fmt.Errorf("store: %s: %w: %w", op, ErrRejected, err)
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("store: %s: %w", op, err)
	}
	return fmt.Errorf("store: %s: %w: %w", op, ErrUnavailable, err)
}

// outboxDoc is an outbox entry as stored.
type outboxDoc struct {
	task.Transition
	// DueShard leads the re-drive's index, as on tasks.
	DueShard    int        `firestore:"dueShard"`
	Delivered   bool       `firestore:"delivered"`
	CreatedAt   time.Time  `firestore:"createdAt"`
	DeliveredAt *time.Time `firestore:"deliveredAt"`
	ExpireAt    *time.Time `firestore:"expireAt"`
	// NextTryAt is when the re-drive may take the entry: its creation
	// time, then, after each failed delivery, a time set by MarkFailed.
	NextTryAt time.Time `firestore:"nextTryAt"`
	// Tries counts the re-drive's failed deliveries.
	Tries int `firestore:"tries"`
	// EventPublished: the event of the document's own transition (the
	// last) was acked; only its dead letter is still to deliver.
	EventPublished bool `firestore:"eventPublished"`
	// Earlier holds the transitions the same commit made before the
	// document's own, in seq order (unindexed; absent when there are
	// none, and in the entries of older versions).
	Earlier []task.Transition `firestore:"earlier"`
}

// outboxEarlier is the field of outboxDoc.Earlier.
const outboxEarlier = "earlier"

// outboxWrites is the outbox's part of a commit of trs: one document per
// task, named by the event id of its last transition in trs
// (OutboxDocIDs), holding that transition and, in earlier, the ones
// before it. One write however many transitions the commit makes.
func (s *Store) outboxWrites(trs []task.Transition) []*pb.Write {
	var writes []*pb.Write
	for _, g := range outboxGroups(trs) {
		writes = append(writes, s.outboxWrite(g))
	}
	return writes
}

// outboxWrite is the write of the outbox document of one commit's
// transitions of one task (g, in seq order).
func (s *Store) outboxWrite(g []task.Transition) *pb.Write {
	tr := g[len(g)-1]
	doc := outboxDoc{Transition: tr, DueShard: DueShardOf(tr.TaskID, s.shards), CreatedAt: tr.OccurredAt, NextTryAt: tr.OccurredAt}
	if len(g) > 1 {
		doc.Earlier = g[:len(g)-1]
	}
	fields := flatten(encodeFields(doc), "Transition")
	if doc.Earlier == nil {
		delete(fields, outboxEarlier)
	}
	return &pb.Write{Operation: &pb.Write_Update{Update: &pb.Document{Name: s.outboxName(tr.EventID), Fields: fields}}}
}

// outboxGroups splits one commit's transitions by task, in the order the
// tasks first appear, each group sorted by seq.
func outboxGroups(trs []task.Transition) [][]task.Transition {
	var groups [][]task.Transition
	at := map[string]int{}
	for _, tr := range trs {
		i, ok := at[tr.TaskID]
		if !ok {
			i = len(groups)
			at[tr.TaskID] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], tr)
	}
	for _, g := range groups {
		slices.SortStableFunc(g, func(a, b task.Transition) int { return cmp.Compare(a.Seq, b.Seq) })
	}
	return groups
}

// OutboxDocIDs returns, for each of one commit's transitions trs (as
// OnCommit passes them), the event id naming the outbox document the
// commit stored it in: that of the task's last transition in trs. The
// publisher deletes a document once every transition in it is delivered.
func OutboxDocIDs(trs []task.Transition) []string {
	doc := map[string]string{} // task → its document, as outboxWrites names it
	for _, g := range outboxGroups(trs) {
		doc[g[0].TaskID] = g[len(g)-1].EventID
	}
	out := make([]string, len(trs))
	for i, tr := range trs {
		out[i] = doc[tr.TaskID]
	}
	return out
}

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
	runs := map[string]bool{} // the runs of chunk, whose documents flush writes
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
		for _, p := range chunk {
			if runs[p.t.RunID] {
				writes = append(writes, s.runWrite(&p.t))
				delete(runs, p.t.RunID)
				written = append(written, p.t.RunID)
			}
		}
		_, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes})
		switch c := status.Code(err); {
		case err == nil:
			s.recentRuns.mark(written, now)
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
		// unless this store wrote it within RunDocumentEvery.
		want := runs[nt.RunID] || s.runDue(&nt, now)
		extra := 0
		if want && !runs[nt.RunID] {
			extra = 1
		}
		if len(chunk) > 0 && (nWrites+len(writes)+extra > MaxCommitWrites || nBytes+size > MaxCommitBytes-runDocBytes*(len(runs)+extra)) {
			flush()
			want, extra = s.runDue(&nt, now), 0
			if want {
				extra = 1
			}
		}
		chunk = append(chunk, prepared{i: i, t: nt, trs: trs, writes: writes})
		if want {
			runs[nt.RunID] = true
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
	run := s.runDue(&t, t.CreatedAt)
	if run {
		writes = append(writes[:len(writes):len(writes)], s.runWrite(&t))
	}
	_, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes})
	if err == nil {
		if run {
			s.recentRuns.mark([]string{t.RunID}, t.CreatedAt)
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

// getDoc reads one document outside a transaction.
func (s *Store) getDoc(ctx context.Context, name string, out any) (bool, error) {
	docs, _, err := s.batchGet(ctx, []string{name}, nil)
	if err != nil {
		return false, err
	}
	if docs[name] == nil {
		return false, nil
	}
	return true, decodeFields(docs[name].GetFields(), out)
}

// batchGet reads documents in one RPC. With sel it runs inside (or begins)
// a transaction and returns the transaction id.
func (s *Store) batchGet(ctx context.Context, names []string, sel any) (map[string]*pb.Document, []byte, error) {
	return s.batchGetMasked(ctx, names, nil, sel)
}

// batchGetMasked is batchGet returning only the fields mask names (all
// when mask is nil).
func (s *Store) batchGetMasked(ctx context.Context, names, mask []string, sel any) (map[string]*pb.Document, []byte, error) {
	req := &pb.BatchGetDocumentsRequest{Database: s.db, Documents: names}
	if mask != nil {
		req.Mask = &pb.DocumentMask{FieldPaths: mask}
	}
	switch v := sel.(type) {
	case *pb.BatchGetDocumentsRequest_NewTransaction:
		req.ConsistencySelector = v
	case *pb.BatchGetDocumentsRequest_Transaction:
		req.ConsistencySelector = v
	}
	stream, err := s.client.BatchGetDocuments(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	out := make(map[string]*pb.Document, len(names))
	var tx []byte
	for {
		res, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, tx, err
		}
		if len(res.GetTransaction()) > 0 {
			tx = res.GetTransaction()
		}
		if d := res.GetFound(); d != nil {
			out[d.GetName()] = d
		}
	}
	return out, tx, nil
}

// GetTask reads a task document without its attempts (1 RPC).
func (s *Store) GetTask(ctx context.Context, id string) (task.Task, error) {
	docs, _, err := s.batchGet(ctx, s.taskNames(id), nil)
	if err != nil {
		return task.Task{}, wrap("get task", err)
	}
	_, d := s.foundTask(id, docs)
	if d == nil {
		return task.Task{}, ErrNotFound
	}
	var t task.Task
	if err := decodeFields(d.GetFields(), &t); err != nil {
		return task.Task{}, fmt.Errorf("store: get task %s: %w", id, err)
	}
	return t, nil
}

// Get reads a task with its attempts, oldest first (2 RPCs; 1 for a task
// whose only attempt has no record document: AttemptsOf).
func (s *Store) Get(ctx context.Context, id string) (task.Task, error) {
	t, err := s.GetTask(ctx, id)
	if err != nil {
		return t, err
	}
	t.Attempts, err = s.AttemptsOf(ctx, &t)
	return t, err
}

// AttemptsOf reads the attempts of task t (as read, or as a transition
// left it), oldest first, as Get shows them: the records with t's live
// state laid over them, the ended last attempt t keeps (task.Task.Ended),
// and the first attempt from t while it has no record (firstAttempt). A
// task that says it has no record document (its first attempt, none
// written) costs no read.
func (s *Store) AttemptsOf(ctx context.Context, t *task.Task) ([]task.Attempt, error) {
	var out []task.Attempt
	if t.Attempt > 1 || t.Recorded == nil || *t.Recorded {
		var err error
		if out, err = s.records(ctx, t.ID); err != nil {
			return nil, err
		}
	}
	if e := t.Ended; e != nil && (len(out) == 0 || out[len(out)-1].Attempt < e.Attempt) {
		out = append(out, *e)
	}
	if len(out) == 0 || out[len(out)-1].Attempt < t.Attempt {
		if a := firstAttempt(t); a != nil {
			out = append(out, *a)
		}
	}
	for i := range out {
		overlay(&out[i], t.Live)
	}
	return out, nil
}

// Attempts reads a task's attempts, oldest first: its document, then
// AttemptsOf it. An ended task's are complete (the dead letters read them).
func (s *Store) Attempts(ctx context.Context, id string) ([]task.Attempt, error) {
	t, err := s.GetTask(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.AttemptsOf(ctx, &t)
}

// records reads a task's attempt record documents, oldest first.
func (s *Store) records(ctx context.Context, id string) ([]task.Attempt, error) {
	out, err := s.attempts(ctx, s.taskName(id))
	if err == nil && len(out) == 0 && s.legacyNames.Load() {
		out, err = s.attempts(ctx, s.legacyTaskName(id))
	}
	return out, err
}

// attempts reads the attempt records under the task document base.
func (s *Store) attempts(ctx context.Context, base string) ([]task.Attempt, error) {
	q := attemptsQuery()
	var out []task.Attempt
	err := s.runQuery(ctx, base, q, func(d *pb.Document) error {
		var a task.Attempt
		if err := decodeFields(d.GetFields(), &a); err != nil {
			return err
		}
		out = append(out, a)
		return nil
	})
	return out, wrap("attempts", err)
}

// attemptsQuery reads a task's attempt records in order.
func attemptsQuery() *pb.StructuredQuery {
	return &pb.StructuredQuery{
		From:    []*pb.StructuredQuery_CollectionSelector{{CollectionId: AttemptsCollection}},
		OrderBy: []*pb.StructuredQuery_Order{{Field: fieldRef("attempt"), Direction: pb.StructuredQuery_ASCENDING}},
	}
}

func (s *Store) runQuery(ctx context.Context, parent string, q *pb.StructuredQuery, each func(*pb.Document) error) error {
	stream, err := s.client.RunQuery(ctx, &pb.RunQueryRequest{Parent: parent, QueryType: &pb.RunQueryRequest_StructuredQuery{StructuredQuery: q}})
	if err != nil {
		return err
	}
	for {
		res, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if d := res.GetDocument(); d != nil {
			if err := each(d); err != nil {
				return err
			}
		}
	}
}

// queryTasks runs a query over the tasks collection.
func (s *Store) queryTasks(ctx context.Context, q *pb.StructuredQuery) ([]task.Task, error) {
	var out []task.Task
	err := s.runQuery(ctx, s.docs, q, func(d *pb.Document) error {
		var t task.Task
		if err := decodeFields(d.GetFields(), &t); err != nil {
			return err
		}
		out = append(out, t)
		return nil
	})
	return out, err
}

// queryOutbox runs a query over the outbox collection.
func (s *Store) queryOutbox(ctx context.Context, q *pb.StructuredQuery) ([]OutboxEntry, error) {
	var out []OutboxEntry
	err := s.runQuery(ctx, s.docs, q, func(doc *pb.Document) error {
		es, err := decodeOutbox(doc)
		out = append(out, es...)
		return err
	})
	return out, err
}

// decodeOutbox decodes an outbox document as stored: one entry per
// transition it holds, in seq order, each with the document's delivery
// state (EventPublished only on the document's own transition).
func decodeOutbox(doc *pb.Document) ([]OutboxEntry, error) {
	var o outboxDoc
	if err := decodeFields(doc.GetFields(), &o.Transition); err != nil {
		return nil, err
	}
	if err := decodeFields(doc.GetFields(), &o); err != nil {
		return nil, err
	}
	id := doc.GetName()[strings.LastIndexByte(doc.GetName(), '/')+1:]
	entry := func(tr task.Transition, published bool) OutboxEntry {
		return OutboxEntry{Transition: tr, Doc: id, Delivered: o.Delivered, CreatedAt: o.CreatedAt,
			NextTryAt: o.NextTryAt, Tries: o.Tries, EventPublished: published}
	}
	out := make([]OutboxEntry, 0, len(o.Earlier)+1)
	for _, tr := range o.Earlier {
		out = append(out, entry(tr, false))
	}
	return append(out, entry(o.Transition, o.EventPublished)), nil
}

func fieldRef(path string) *pb.StructuredQuery_FieldReference {
	return &pb.StructuredQuery_FieldReference{FieldPath: path}
}

func fieldFilter(path string, op pb.StructuredQuery_FieldFilter_Operator, v *pb.Value) *pb.StructuredQuery_Filter {
	return &pb.StructuredQuery_Filter{FilterType: &pb.StructuredQuery_Filter_FieldFilter{FieldFilter: &pb.StructuredQuery_FieldFilter{Field: fieldRef(path), Op: op, Value: v}}}
}

func and(filters ...*pb.StructuredQuery_Filter) *pb.StructuredQuery_Filter {
	if len(filters) == 1 {
		return filters[0]
	}
	return &pb.StructuredQuery_Filter{FilterType: &pb.StructuredQuery_Filter_CompositeFilter{CompositeFilter: &pb.StructuredQuery_CompositeFilter{Op: pb.StructuredQuery_CompositeFilter_AND, Filters: filters}}}
}

func strVal(s string) *pb.Value { return &pb.Value{ValueType: &pb.Value_StringValue{StringValue: s}} }

func intVal(n int) *pb.Value {
	return &pb.Value{ValueType: &pb.Value_IntegerValue{IntegerValue: int64(n)}}
}

func statesVal(states []api.State) *pb.Value {
	vals := make([]*pb.Value, len(states))
	for i, st := range states {
		vals[i] = strVal(string(st))
	}
	return &pb.Value{ValueType: &pb.Value_ArrayValue{ArrayValue: &pb.ArrayValue{Values: vals}}}
}

func refVal(name string) *pb.Value {
	return &pb.Value{ValueType: &pb.Value_ReferenceValue{ReferenceValue: name}}
}

// ListFilter selects tasks for List; empty fields match everything.
type ListFilter struct {
	TenantID string
	RunID    string
	State    api.State
	// Worker is the task's worker name.
	Worker string
	// NewestFirst lists in reverse creation order.
	NewestFirst bool
	// PageSize defaults to 50 and is capped at 500.
	PageSize int
	// PageToken continues a previous listing.
	PageToken string
	// TenantIDs, when set, lists only tasks of these tenants (an "in"
	// filter of at most 30 values, in the query).
	TenantIDs []string
}

// filters are f's equality filters.
func (f ListFilter) filters() []*pb.StructuredQuery_Filter {
	var filters []*pb.StructuredQuery_Filter
	for _, c := range []struct{ field, v string }{{"tenantId", f.TenantID}, {"runId", f.RunID}, {"state", string(f.State)}, {"worker", f.Worker}} {
		if c.v != "" {
			filters = append(filters, fieldFilter(c.field, pb.StructuredQuery_FieldFilter_EQUAL, strVal(c.v)))
		}
	}
	if len(f.TenantIDs) > 0 {
		filters = append(filters, fieldFilter("tenantId", pb.StructuredQuery_FieldFilter_IN, stringsVal(f.TenantIDs)))
	}
	return filters
}

// shardQuery is List's query of one list shard (the due shard, fixed per
// task): f's equality filters and the shard, in task id order (creation
// order), after the task id after ("" from the start). It is served by the
// composite indexes (dueShard, [field,] taskId) of Indexes, merged by
// Firestore when f has several filters: each index range takes the new
// tasks of one shard, never all of them.
func (f ListFilter) shardQuery(shard, limit int, after string) *pb.StructuredQuery {
	return f.groupQuery([]int{shard}, limit, after)
}

// MaxListQueries is the most queries a List page starts with: with more
// due shards than this, each query takes a group of shards (an "in"
// filter, which Firestore serves from the same indexes and merges in
// order), so that more shards spread the indexes' writes further without
// making a listing dearer.
const MaxListQueries = 16

// maxDisjunctions is the most disjunctions Firestore takes in one query
// (the product of the sizes of its "in" filters).
const maxDisjunctions = 30

// listGroups splits the due shards [0, n) into at most MaxListQueries
// groups (shard i in group i mod the number of groups), or more when
// another "in" filter of ins values (ListFilter.TenantIDs) leaves room for
// fewer shards per query.
func listGroups(n, ins int) [][]int {
	return shardGroups(n, maxDisjunctions/max(ins, 1), min(n, MaxListQueries))
}

// shardGroups splits the due shards [0, n) into the fewest groups of at
// most per shards each, and at least least groups: shard i goes to group
// i mod the number of groups, so that the groups differ by one shard at
// most.
func shardGroups(n, per, least int) [][]int {
	per = max(per, 1)
	groups := make([][]int, max(least, (n+per-1)/per, 1))
	for i := range n {
		groups[i%len(groups)] = append(groups[i%len(groups)], i)
	}
	return groups
}

// DueGroups splits the due shards into the groups DueTasks takes for duty
// d: as many shards a query as Firestore's 30 disjunctions allow beside
// the duty's states (15 for a duty of two states), so that a pass over
// 128 shards costs a few queries a duty, not 128.
func (s *Store) DueGroups(d Due) [][]int {
	return shardGroups(s.shards, maxDisjunctions/max(len(DueStates[d]), 1), 1)
}

// OutboxGroups splits the due shards into the groups Undelivered takes:
// 30 shards a query.
func (s *Store) OutboxGroups() [][]int { return shardGroups(s.shards, maxDisjunctions, 1) }

// shardFilter selects the tasks (or outbox entries) of a group of due
// shards: an equality for one shard, else an "in" filter, which Firestore
// serves from the same indexes as one disjunction per shard, merged in
// the query's order.
func shardFilter(shards []int) *pb.StructuredQuery_Filter {
	if len(shards) == 1 {
		return fieldFilter("dueShard", pb.StructuredQuery_FieldFilter_EQUAL, intVal(shards[0]))
	}
	vals := make([]*pb.Value, len(shards))
	for i, sh := range shards {
		vals[i] = intVal(sh)
	}
	return fieldFilter("dueShard", pb.StructuredQuery_FieldFilter_IN, &pb.Value{ValueType: &pb.Value_ArrayValue{ArrayValue: &pb.ArrayValue{Values: vals}}})
}

// groupQuery is shardQuery over a group of shards.
func (f ListFilter) groupQuery(shards []int, limit int, after string) *pb.StructuredQuery {
	shard := shardFilter(shards)
	dir := pb.StructuredQuery_ASCENDING
	if f.NewestFirst {
		dir = pb.StructuredQuery_DESCENDING
	}
	q := &pb.StructuredQuery{
		From:    []*pb.StructuredQuery_CollectionSelector{{CollectionId: TasksCollection}},
		Where:   and(append([]*pb.StructuredQuery_Filter{shard}, f.filters()...)...),
		OrderBy: []*pb.StructuredQuery_Order{{Field: fieldRef("taskId"), Direction: dir}},
		Limit:   wrapInt(limit),
	}
	if after != "" {
		q.StartAt = &pb.Cursor{Values: []*pb.Value{strVal(after)}, Before: false}
	}
	return q
}

// listShard is one shard's part of a List page.
type listShard struct {
	tasks []task.Task
	done  bool // the shard has no task after the last of tasks
}

// List returns tasks matching f in id order (creation order; newest first
// with f.NewestFirst), and the token of the next page ("" on the last
// page). Pages are stable: a task created during an oldest-first listing
// appears after the ones already returned. The page token is the last
// task id returned, opaque to callers.
//
// Each due shard is queried on its own and the answers are merged: a first
// round asks every shard for a little more than its share of the page
// (listFirst); while the page is not yet certain (a shard stopped before
// the page's end could still hold earlier tasks), the shard that stopped
// first is asked for more. A page of n tasks costs G = min(DueShards(),
// MaxListQueries) queries plus a few (listGroups), and reads at most
// n + 1 + 3×G documents.
func (s *Store) List(ctx context.Context, f ListFilter) ([]task.Task, string, error) {
	size := f.PageSize
	if size <= 0 {
		size = 50
	}
	size = min(size, 500)
	after := ""
	if f.PageToken != "" {
		raw, err := base64.RawURLEncoding.DecodeString(f.PageToken)
		if err != nil || !task.ValidID(string(raw), task.TaskIDPrefix) {
			return nil, "", ErrInvalidPageToken
		}
		after = string(raw)
	}
	// before reports whether task id a comes before b in the listing.
	before := func(a, b string) bool {
		if f.NewestFirst {
			return a > b
		}
		return a < b
	}
	groups := listGroups(s.shards, len(f.TenantIDs))
	shards := make([]listShard, len(groups))
	fetch := func(which []int, limit int) error {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(shardParallelism)
		for _, i := range which {
			from := after
			if n := len(shards[i].tasks); n > 0 {
				from = shards[i].tasks[n-1].ID
			}
			g.Go(func() error {
				got, err := s.queryTasks(gctx, f.groupQuery(groups[i], limit, from))
				shards[i].tasks = append(shards[i].tasks, got...)
				shards[i].done = len(got) < limit
				return err
			})
		}
		return g.Wait()
	}
	all := make([]int, len(groups))
	for i := range all {
		all[i] = i
	}
	if err := fetch(all, listFirst(size, len(groups))); err != nil {
		return nil, "", wrap("list", err)
	}
	var page []task.Task
	for {
		// frontier: the shard whose last task comes first among the
		// shards not done; every task up to that one is certain.
		frontier := -1
		for i, sh := range shards {
			if !sh.done && (frontier < 0 || before(sh.tasks[len(sh.tasks)-1].ID, shards[frontier].tasks[len(shards[frontier].tasks)-1].ID)) {
				frontier = i
			}
		}
		page = page[:0]
		for _, sh := range shards {
			for _, t := range sh.tasks {
				if frontier < 0 || !before(shards[frontier].tasks[len(shards[frontier].tasks)-1].ID, t.ID) {
					page = append(page, t)
				}
			}
		}
		if frontier < 0 || len(page) > size {
			break
		}
		if err := fetch([]int{frontier}, size+1-len(page)+2); err != nil {
			return nil, "", wrap("list", err)
		}
	}
	slices.SortFunc(page, func(a, b task.Task) int {
		if before(a.ID, b.ID) {
			return -1
		}
		return 1
	})
	next := ""
	if len(page) > size {
		page = page[:size]
		next = base64.RawURLEncoding.EncodeToString([]byte(page[size-1].ID))
	}
	return page, next, nil
}

// listFirst is how many tasks List's first round asks of each of n shards
// for a page of size: the shard's share of size+1, and 2 more, so that
// the page is usually certain after one round.
func listFirst(size, n int) int { return (size+1+n-1)/n + 2 }

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
	docs, _, err := s.batchGet(ctx, s.taskNames(id), sel)
	if err != nil {
		return task.Result{}, err
	}
	// base is where the task is: its own name, or its legacy one until
	// Migrate moves it (a move makes this commit's preconditions fail,
	// and the retry reads the moved document).
	base, td := s.foundTask(id, docs)
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
	if _, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes, Transaction: tx}); err != nil {
		return task.Result{}, err
	}
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

func sortBySeq(es []OutboxEntry) {
	slices.SortFunc(es, func(a, b OutboxEntry) int { return cmp.Compare(a.Seq, b.Seq) })
}

// Due names a sweeper duty's query.
type Due string

// The sweeper's duties, each one indexed query (see Indexes).
const (
	DueLease    Due = "leaseExpiresAt"  // RUNNING, CANCELLING past the lease
	DueCancel   Due = "cancelDeadline"  // CANCELLING past the grace period
	DueDispatch Due = "dispatchCheckAt" // PENDING, QUEUED past the start timeout
	DueDeadline Due = "deadline"        // any active state past the task deadline
	DueAdmit    Due = "waitingSince"    // QUEUED waiting for a run slot (quotas)
)

// DueStates are the states each duty's query selects.
var DueStates = map[Due][]api.State{
	DueLease:    {api.Running, api.Cancelling},
	DueCancel:   {api.Cancelling},
	DueDispatch: {api.Pending, api.Queued},
	DueDeadline: task.ActiveStates,
	DueAdmit:    {api.Queued},
}

// DueCursor continues a due query after the last task of a page.
type DueCursor struct {
	At time.Time
	ID string
}

// dueFields are the task fields a due query returns: what the sweeper
// needs to apply the duty's event (id, attempt), log it (tenant, state)
// and continue the query (the due time), and, for a stuck dispatch, where
// its Cloud Task is (worker, redrives). The sweeper acts on the task that
// its transaction reads; a due task has no payload, timing or other field.
var dueFields = []string{"taskId", "tenantId", "state", "attempt", "dueShard", "trace", "worker", "redrives"}

// DueTasks returns up to limit tasks of a group of due shards (one of
// DueGroups(d)) whose duty d is due at now, ordered by the due time and
// then the document name across the group, after cursor (nil for the
// first page). The query reads only
// due tasks: its cost grows with their number, not with the running ones.
// It projects the tasks to their id, tenant, state, attempt and d's due
// time: a page's size does not depend on the tasks' payloads.
func (s *Store) DueTasks(ctx context.Context, d Due, shards []int, now time.Time, limit int, after *DueCursor) ([]task.Task, error) {
	q, err := s.dueQuery(d, shards, now, limit, after)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	var out []task.Task
	last := ""
	err = s.runQuery(ctx, s.docs, q, func(doc *pb.Document) error {
		var t task.Task
		if err := decodeFields(doc.GetFields(), &t); err != nil {
			return err
		}
		out, last = append(out, t), doc.GetName()
		return nil
	})
	s.outages.observe(began, err)
	if err == nil && len(out) > 0 && last != s.taskName(out[len(out)-1].ID) {
		s.legacyCursors.put(out[len(out)-1].ID, last)
	}
	return out, wrap("due "+string(d), err)
}

// legacyCursors remembers the document name of a page's last task when it
// is a schema 1 name, so that the next page's cursor (a DueCursor names
// the task by id) continues after that document and not after the name
// the task will have once moved: among tasks due at the same instant, a
// wrong name would return a page again.
type legacyCursors struct {
	mu    sync.Mutex
	names map[string]string
}

func (l *legacyCursors) put(id, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.names == nil || len(l.names) > 10000 {
		l.names = map[string]string{} // bounded: forgetting costs a page again
	}
	l.names[id] = name
}

func (l *legacyCursors) get(id string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	name, ok := l.names[id]
	return name, ok
}

// dueQuery is DueTasks' query: a group of shards, the duty's states, due
// by now, in due order; served by the index (dueShard, state, due field),
// one range per shard and state, which Firestore merges in order (at most
// maxDisjunctions of them).
func (s *Store) dueQuery(d Due, shards []int, now time.Time, limit int, after *DueCursor) (*pb.StructuredQuery, error) {
	states, ok := DueStates[d]
	if !ok {
		return nil, fmt.Errorf("store: unknown duty %q", d)
	}
	if len(shards) == 0 || len(shards)*len(states) > maxDisjunctions {
		return nil, fmt.Errorf("store: %s query over %d due shards: want 1 to %d", d, len(shards), maxDisjunctions/len(states))
	}
	op := pb.StructuredQuery_FieldFilter_EQUAL
	var sv *pb.Value = strVal(string(states[0]))
	if len(states) > 1 {
		op, sv = pb.StructuredQuery_FieldFilter_IN, statesVal(states)
	}
	sel := &pb.StructuredQuery_Projection{}
	for _, f := range append(slices.Clone(dueFields), string(d)) {
		sel.Fields = append(sel.Fields, fieldRef(f))
	}
	q := &pb.StructuredQuery{
		Select: sel,
		From:   []*pb.StructuredQuery_CollectionSelector{{CollectionId: TasksCollection}},
		Where: and(shardFilter(shards), fieldFilter("state", op, sv),
			fieldFilter(string(d), pb.StructuredQuery_FieldFilter_LESS_THAN_OR_EQUAL, encodeValue(reflect.ValueOf(now.UTC())))),
		OrderBy: []*pb.StructuredQuery_Order{
			{Field: fieldRef(string(d)), Direction: pb.StructuredQuery_ASCENDING},
			{Field: fieldRef("__name__"), Direction: pb.StructuredQuery_ASCENDING},
		},
		Limit: wrapInt(limit),
	}
	if after != nil {
		name := s.taskName(after.ID)
		if legacy, ok := s.legacyCursors.get(after.ID); ok {
			name = legacy
		}
		q.StartAt = &pb.Cursor{Values: []*pb.Value{encodeValue(reflect.ValueOf(after.At)), refVal(name)}, Before: false}
	}
	return q, nil
}

// DueTime is the time the duty d looks at on t (nil if unset).
func DueTime(d Due, t *task.Task) *time.Time {
	switch d {
	case DueLease:
		return t.LeaseExpiresAt
	case DueCancel:
		return t.CancelDeadline
	case DueDispatch:
		return t.DispatchCheckAt
	case DueDeadline:
		return t.Deadline
	case DueAdmit:
		return t.WaitingSince
	}
	return nil
}

// OutboxEntry is a transition event waiting for, or past, delivery.
type OutboxEntry struct {
	task.Transition
	// Doc is the event id naming the outbox document the entry is stored
	// in: that of the last transition of the same commit (its own for the
	// last, and for every entry an older version wrote). The delivery
	// state below is the document's. Empty for a transition whose
	// document is gone (OutboxEntries).
	Doc       string
	Delivered bool
	CreatedAt time.Time
	// NextTryAt is when the re-drive may take the entry (CreatedAt until a
	// delivery failed; see MarkFailed).
	NextTryAt time.Time
	// Tries counts the failed deliveries MarkFailed recorded.
	Tries int
	// EventPublished: the event was acked, only its dead letter was not.
	EventPublished bool
}

// Undelivered returns the entries of up to limit outbox documents of a
// group of due shards (one of OutboxGroups()) not yet delivered whose
// next try is due at or before dueBy (a document is due from its
// creation, and after a failed delivery from the time MarkFailed set),
// earliest first, a document's entries together in seq order. Entries
// that keep failing are skipped until their next try, so they never hide
// the others.
func (s *Store) Undelivered(ctx context.Context, shards []int, dueBy time.Time, limit int) ([]OutboxEntry, error) {
	if len(shards) == 0 || len(shards) > maxDisjunctions {
		return nil, fmt.Errorf("store: undelivered over %d due shards: want 1 to %d", len(shards), maxDisjunctions)
	}
	out, err := s.queryOutbox(ctx, s.undeliveredQuery(shards, dueBy, limit))
	return out, wrap("undelivered", err)
}

// undeliveredQuery is Undelivered's query, served by the index (dueShard,
// delivered, nextTryAt), one range per shard merged in order.
func (s *Store) undeliveredQuery(shards []int, dueBy time.Time, limit int) *pb.StructuredQuery {
	return &pb.StructuredQuery{
		From: []*pb.StructuredQuery_CollectionSelector{{CollectionId: OutboxCollection}},
		Where: and(shardFilter(shards),
			fieldFilter("delivered", pb.StructuredQuery_FieldFilter_EQUAL, &pb.Value{ValueType: &pb.Value_BooleanValue{BooleanValue: false}}),
			fieldFilter("nextTryAt", pb.StructuredQuery_FieldFilter_LESS_THAN_OR_EQUAL, encodeValue(reflect.ValueOf(dueBy.UTC())))),
		OrderBy: []*pb.StructuredQuery_Order{
			{Field: fieldRef("nextTryAt"), Direction: pb.StructuredQuery_ASCENDING},
			{Field: fieldRef("__name__"), Direction: pb.StructuredQuery_ASCENDING},
		},
		Limit: wrapInt(limit),
	}
}

// OutboxFailure records a failed delivery of one outbox document (some
// of its events or dead letters not acked).
type OutboxFailure struct {
	// EventID names the document (OutboxEntry.Doc).
	EventID string
	// Tries is the number of failed deliveries, this one included.
	Tries int
	// NextTryAt is when Undelivered may return the document again.
	NextTryAt time.Time
	// EventPublished: the event of the document's own (last) transition
	// was acked, only its dead letter failed; the next try publishes only
	// the dead letter. The earlier transitions' events are published
	// again (duplicates are allowed, contract §8.5).
	EventPublished bool
}

// MarkFailed records failed deliveries, in one commit (at most 500): each
// document stays undelivered, with all its entries, and is skipped by
// Undelivered until its NextTryAt. A document deleted meanwhile
// (delivered by another instance) is left alone.
func (s *Store) MarkFailed(ctx context.Context, failures []OutboxFailure) error {
	if len(failures) == 0 {
		return nil
	}
	writes := make([]*pb.Write, 0, len(failures))
	for _, f := range failures {
		fields := encodeFields(struct {
			NextTryAt      time.Time `firestore:"nextTryAt"`
			Tries          int       `firestore:"tries"`
			EventPublished bool      `firestore:"eventPublished"`
		}{f.NextTryAt.UTC(), f.Tries, f.EventPublished})
		writes = append(writes, &pb.Write{
			Operation:       &pb.Write_Update{Update: &pb.Document{Name: s.outboxName(f.EventID), Fields: fields}},
			UpdateMask:      &pb.DocumentMask{FieldPaths: []string{"nextTryAt", "tries", "eventPublished"}},
			CurrentDocument: &pb.Precondition{ConditionType: &pb.Precondition_Exists{Exists: true}},
		})
	}
	_, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes})
	if status.Code(err) == codes.NotFound {
		// An entry was delivered (deleted) by another instance meanwhile:
		// record the others one by one; the deleted ones need nothing.
		err = nil
		for _, w := range writes {
			_, e := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{w}})
			if status.Code(e) != codes.NotFound {
				err = cmp.Or(err, e)
			}
		}
	}
	return wrap("mark failed", err)
}

// OutboxEntries returns every transition of a task, delivered or not, in
// seq order, with its outbox entry's delivery state: an entry still stored
// as it is (undelivered, or delivered by an older version and kept until
// its TTL), a transition whose entry is gone (deleted on delivery) from the
// task's history, Delivered. It reads the task, then the entries by name
// (task.EventID of each seq: no index on the outbox's taskId is needed, a
// task id is a ULID and that index would take every new entry at one end).
// The events endpoints read TaskEvents instead, which reads no entry for a
// task whose history is complete. No task, no entries.
func (s *Store) OutboxEntries(ctx context.Context, taskID string) ([]OutboxEntry, error) {
	t, err := s.GetTask(ctx, taskID)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	stored, err := s.entriesOf(ctx, []task.Task{t}, func(task.Task) int64 { return t.Seq })
	if err != nil {
		return nil, fmt.Errorf("store: outbox entries: %w", err)
	}
	bySeq := make(map[int64]OutboxEntry, len(stored))
	for _, e := range stored {
		bySeq[e.Seq] = e
	}
	for _, tr := range t.Events() {
		if _, ok := bySeq[tr.Seq]; !ok {
			bySeq[tr.Seq] = OutboxEntry{Transition: tr, Delivered: true, CreatedAt: tr.OccurredAt, NextTryAt: tr.OccurredAt}
		}
	}
	out := make([]OutboxEntry, 0, len(bySeq))
	for _, e := range bySeq {
		out = append(out, e)
	}
	sortBySeq(out)
	return out, nil
}

// TaskEvents returns the transition events of t (as read) in seq order:
// those its history keeps (task.Task.History, on the document already
// read) and, for the seqs before the history's first (a task written
// before histories existed, or one past their bound), the outbox entries
// still kept, read by name. A task whose history starts at seq 1 costs no
// read.
func (s *Store) TaskEvents(ctx context.Context, t task.Task) ([]task.Transition, error) {
	entries, err := s.entriesOf(ctx, []task.Task{t}, historyStart)
	if err != nil {
		return nil, fmt.Errorf("store: task events: %w", err)
	}
	out := make([]task.Transition, 0, len(entries)+len(t.History))
	for _, e := range entries {
		out = append(out, e.Transition)
	}
	return append(out, t.Events()...), nil
}

// historyStart is the last seq of t its history lacks: t.Seq for a task
// without one.
func historyStart(t task.Task) int64 {
	if len(t.History) == 0 {
		return t.Seq
	}
	return t.History[0].Seq - 1
}

// entriesOf reads by name the outbox entries of tasks' seqs 1 to upTo(t),
// outboxReadChunk names a BatchGetDocuments, and returns those still
// stored in task, then seq order. A document is named by its commit's
// last seq, so when upTo(t) is short of t.Seq the names of the next
// commitSlack seqs are read too, for an entry of seq upTo(t) or before
// stored with a later one.
func (s *Store) entriesOf(ctx context.Context, tasks []task.Task, upTo func(task.Task) int64) ([]OutboxEntry, error) {
	type ref struct {
		name string
		upTo int64
	}
	var refs []ref
	for _, t := range tasks {
		up := upTo(t)
		last := up
		if up > 0 {
			last = min(t.Seq, up+commitSlack)
		}
		for seq := int64(1); seq <= last; seq++ {
			refs = append(refs, ref{s.outboxName(task.EventID(t.ID, seq)), up})
		}
	}
	var out []OutboxEntry
	for chunk := range slices.Chunk(refs, outboxReadChunk) {
		names := make([]string, len(chunk))
		for i, r := range chunk {
			names[i] = r.name
		}
		docs, _, err := s.batchGet(ctx, names, nil)
		if err != nil {
			return nil, wrap("read outbox entries", err)
		}
		for _, r := range chunk {
			d := docs[r.name]
			if d == nil {
				continue
			}
			es, err := decodeOutbox(d)
			if err != nil {
				return nil, err
			}
			for _, e := range es {
				if e.Seq <= r.upTo {
					out = append(out, e)
				}
			}
		}
	}
	return out, nil
}

// commitSlack is more than the transitions one commit makes of a task
// after the first (a submit's two today); an outbox document holds them
// all.
const commitSlack = 4

// outboxReadChunk is the most outbox entries read per RPC.
const outboxReadChunk = 300

// DeleteDelivered deletes the outbox documents (named by event id,
// OutboxEntry.Doc) whose events are all published, in one commit (at most
// 500): a delivered event leaves nothing in the outbox, its transition
// stays in the task's history. Deleting a document already gone
// (delivered by another instance, or an older version's delivered entry
// expired) is no error.
func (s *Store) DeleteDelivered(ctx context.Context, eventIDs []string) error {
	if len(eventIDs) == 0 {
		return nil
	}
	writes := make([]*pb.Write, 0, len(eventIDs))
	for _, id := range eventIDs {
		writes = append(writes, &pb.Write{Operation: &pb.Write_Delete{Delete: s.outboxName(id)}})
	}
	_, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes})
	return wrap("delete delivered", err)
}

// Project returns the project id of the store's database.
func (s *Store) Project() string {
	p := strings.TrimPrefix(s.db, "projects/")
	p, _, _ = strings.Cut(p, "/")
	return p
}
