package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/task"
)

// Schema versions. The database records the version its data was last
// migrated to (meta/schema); Migrate brings data written by any earlier
// layout of this repository to SchemaVersion. Every layout change from now
// on adds its steps here with a new version.
//
//	0  no meta/schema: any layout before versions were kept. Tasks may lack
//	   dueShard (before the sharded due indexes), outbox entries dueShard
//	   and nextTryAt (before the re-drive's stored next try), and runs their
//	   runs/{runId} document (before runs were listed from it).
//	1  every task and outbox entry has its due shard, every undelivered
//	   entry its next try, every run its document.
//	2  every task document is named tasks/{TaskDocID(id)} (a hash prefix,
//	   doc.go "Names"), its attempts under it; before, tasks/{taskId}.
//	   Until a store knows the schema is 2 (CheckSchema, Migrate), it
//	   reads both names, so the order of an upgrade is: deploy, then
//	   `servo migrate` (docs/operations.md).
//	3  every ended task and attempt record and every run document has
//	   its expireAt (migrate_retention.go).
//	4  every run document is named runs/{runDocID} (a hash prefix) and has
//	   its dueShard (ListRuns' sharded indexes); before,
//	   runs/{runId}.{tenantKey} or runs/{runId}. No lookup reads a run by
//	   name; until the step ran, ListRuns does not list those older runs
//	   (migrate_runs.go).
const SchemaVersion = 4

// SchemaDocID is the document in MetaCollection that records the schema.
const SchemaDocID = "schema"

// ErrSchemaTooNew is returned by CheckSchema when the database was
// migrated by a newer build than this one.
var ErrSchemaTooNew = errors.New("store: the database's schema is newer than this build knows")

// ErrNotServo: Migrate found a database that holds data but none of
// Servo's (no schema, no collection of Servo's): most likely the wrong
// project or database. Nothing was written.
var ErrNotServo = errors.New("store: the database holds no Servo data")

// servoCollections are the root collections Servo writes.
var servoCollections = []string{TasksCollection, RunsCollection, OutboxCollection, IdempotencyCollection, MetaCollection,
	OutagesCollection, quota.Collection, SchedulesCollection}

// checkServoData refuses (ErrNotServo) a database with root collections
// of which none is Servo's; an empty database is Servo's to take.
func (s *Store) checkServoData(ctx context.Context) error {
	it := s.client.ListCollectionIds(ctx, &pb.ListCollectionIdsRequest{Parent: s.docs})
	var others []string
	for {
		id, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return wrap("migrate: list collections", err)
		}
		if slices.Contains(servoCollections, id) {
			return nil
		}
		if len(others) < 5 {
			others = append(others, id)
		}
	}
	if len(others) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s has no schema document and collections %v but none of Servo's (%v); check the project and the database: nothing was written",
		ErrNotServo, strings.TrimPrefix(s.db, "projects/"), others, servoCollections)
}

// Schema is the document meta/schema.
type Schema struct {
	Version   int       `firestore:"version"`
	UpdatedAt time.Time `firestore:"updatedAt"`
	// Step and After record a migration in progress: the step and the last
	// document it finished, so that a rerun resumes there.
	Step  string `firestore:"step"`
	After string `firestore:"after"`
}

func (s *Store) schemaName() string { return s.docs + "/" + MetaCollection + "/" + SchemaDocID }

// ReadSchema reads meta/schema (version 0 when absent).
func (s *Store) ReadSchema(ctx context.Context) (Schema, error) {
	var sc Schema
	if _, err := s.getDoc(ctx, s.schemaName(), &sc); err != nil {
		return Schema{}, wrap("read schema", err)
	}
	return sc, nil
}

// ErrSchemaTooOld is returned by CheckSchema when the database holds data
// of an older layout than this build's: `servo migrate` brings it
// forward, and no lookup of this build reads an older layout's names.
var ErrSchemaTooOld = errors.New("store: the database's schema is older than this build's")

// CheckSchema refuses a database this build cannot read as it is: one
// migrated by a newer build (ErrSchemaTooNew) or holding an older
// layout's data (ErrSchemaTooOld, naming the command to run). A database
// without meta/schema and without data (a new deployment, a test's
// project) is recorded at SchemaVersion. 1 read; 4 more for a database
// without meta/schema.
func (s *Store) CheckSchema(ctx context.Context) (Schema, error) {
	var sc Schema
	found, err := s.getDoc(ctx, s.schemaName(), &sc)
	if err != nil {
		return sc, wrap("read schema", err)
	}
	if !found {
		empty, err := s.empty(ctx)
		if err != nil {
			return sc, err
		}
		if empty {
			return s.recordFresh(ctx)
		}
	}
	switch {
	case sc.Version > SchemaVersion:
		return sc, fmt.Errorf("%w: version %d, this build knows up to %d; deploy a build at least as new as the one that migrated it", ErrSchemaTooNew, sc.Version, SchemaVersion)
	case sc.Version < SchemaVersion || sc.Step != "":
		project, database := s.Project(), strings.TrimPrefix(s.db, "projects/"+s.Project()+"/databases/")
		return sc, fmt.Errorf("%w: version %d, this build needs %d; run `servo migrate --project %s --database %s` (docs/operations.md, \"Upgrades\")",
			ErrSchemaTooOld, sc.Version, SchemaVersion, project, database)
	}
	return sc, nil
}

// empty reports whether the database holds no task, outbox entry, run or
// idempotency key: nothing an older layout could have written.
func (s *Store) empty(ctx context.Context) (bool, error) {
	for _, coll := range []string{TasksCollection, OutboxCollection, RunsCollection, IdempotencyCollection} {
		q := &pb.StructuredQuery{
			Select: &pb.StructuredQuery_Projection{Fields: []*pb.StructuredQuery_FieldReference{fieldRef("__name__")}},
			From:   []*pb.StructuredQuery_CollectionSelector{{CollectionId: coll}},
			Limit:  wrapInt(1),
		}
		any := false
		if err := s.runQuery(ctx, s.docs, q, func(*pb.Document) error { any = true; return nil }); err != nil {
			return false, wrap("read schema: is the database empty", err)
		}
		if any {
			return false, nil
		}
	}
	return true, nil
}

// recordFresh records SchemaVersion in a new database's meta/schema
// (unless another instance did first: then its record is read).
func (s *Store) recordFresh(ctx context.Context) (Schema, error) {
	sc := Schema{Version: SchemaVersion, UpdatedAt: time.Now().UTC()}
	_, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{setWrite(s.schemaName(), sc, true)}})
	if status.Code(err) == codes.AlreadyExists {
		return s.ReadSchema(ctx)
	}
	if err != nil {
		return sc, wrap("record the schema", err)
	}
	return sc, nil
}

// MigrateOptions configure Migrate.
type MigrateOptions struct {
	// DryRun counts what would change and writes nothing.
	DryRun bool
	// Progress, when set, is called after every page of every step.
	Progress func(MigrateProgress)
	// PageSize is the documents read per query (default 300).
	PageSize int
}

// MigrateProgress is where a migration stands.
type MigrateProgress struct {
	Step             string
	Scanned, Updated int
	Done             bool
}

// MigrateReport is what Migrate did (or, with DryRun, would do).
type MigrateReport struct {
	From, To int
	Steps    []MigrateProgress
}

// migrateStep is one step: a scan of a collection that fixes each
// document it returns (fix returns the fields to set, nil for none).
type migrateStep struct {
	name string
	coll string
	// version is the schema the step brings data to: it runs when the
	// database's schema is older.
	version int
	// from is where the scan starts (a document id; "" for the first).
	from string
	fix  func(s *Store, d *pb.Document, runs map[string]Run) map[string]*pb.Value
	// each, when set, replaces fix: it handles one document itself and
	// returns how many it changed.
	each func(ctx context.Context, s *Store, d *pb.Document, dry bool) (int, error)
	// group scans the collection group (every task's attempts).
	group bool
	// after runs after each page (writes the documents of its runs).
	after func(ctx context.Context, s *Store, runs map[string]Run, done map[string]bool, dry bool) (int, error)
}

var migrateSteps = []migrateStep{
	{name: "tasks", coll: TasksCollection, version: 1, fix: fixTask, after: writeMissingRuns},
	{name: "outbox", coll: OutboxCollection, version: 1, fix: fixOutbox},
	// Legacy names (task_…) sort after every hash-prefixed one (hex
	// digits): the scan starts at them and reads nothing else.
	{name: "names", coll: TasksCollection, version: 2, from: task.TaskIDPrefix, each: moveTask},
	retentionSteps[0], retentionSteps[1], retentionSteps[2],
	runsStep,
}

// Migrate brings the database to SchemaVersion. It is idempotent (a
// document already in shape is left alone), resumable (meta/schema keeps
// the last document each step finished) and safe while Servo runs: it
// only adds missing fields, each update conditional on the version of the
// document it read (a document changed meanwhile is read again). It reads
// every task and outbox entry once.
func (s *Store) Migrate(ctx context.Context, o MigrateOptions) (MigrateReport, error) {
	ctx = WithCause(ctx, "migration")
	sc, err := s.ReadSchema(ctx)
	if err != nil {
		return MigrateReport{}, err
	}
	if sc.Version > SchemaVersion {
		return MigrateReport{}, fmt.Errorf("%w: version %d, this build knows up to %d; migrate with a build at least as new as the one that migrated it", ErrSchemaTooNew, sc.Version, SchemaVersion)
	}
	rep := MigrateReport{From: sc.Version, To: SchemaVersion}
	if sc.Version == SchemaVersion && sc.Step == "" {
		return rep, nil
	}
	if sc.Version == 0 && sc.Step == "" {
		// Never migrated nor started: is it Servo's at all?
		if err := s.checkServoData(ctx); err != nil {
			return MigrateReport{}, err
		}
	}
	if o.PageSize <= 0 {
		o.PageSize = 300
	}
	runs := map[string]Run{}
	resuming := sc.Step != ""
	for _, st := range migrateSteps {
		if st.version <= sc.Version && !resuming {
			continue // the database has it already
		}
		after := ""
		if resuming {
			if st.name != sc.Step {
				rep.Steps = append(rep.Steps, MigrateProgress{Step: st.name, Done: true})
				continue // finished before the interruption
			}
			after, resuming = sc.After, false
		}
		p, err := s.migrateScan(ctx, st, after, runs, o)
		rep.Steps = append(rep.Steps, p)
		if err != nil {
			return rep, fmt.Errorf("store: migrate %s: %w", st.name, err)
		}
	}
	if o.DryRun {
		return rep, nil
	}
	done := Schema{Version: SchemaVersion, UpdatedAt: time.Now().UTC()}
	if _, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{setWrite(s.schemaName(), done, false)}}); err != nil {
		return rep, wrap("migrate: record the schema", err)
	}
	return rep, nil
}

// migrateScan runs one step from after (a document name; "" from the
// start), page by page in name order.
func (s *Store) migrateScan(ctx context.Context, st migrateStep, after string, runs map[string]Run, o MigrateOptions) (MigrateProgress, error) {
	p := MigrateProgress{Step: st.name}
	done := map[string]bool{} // runs whose document was checked
	for {
		q := &pb.StructuredQuery{
			From:    []*pb.StructuredQuery_CollectionSelector{{CollectionId: st.coll, AllDescendants: st.group}},
			OrderBy: []*pb.StructuredQuery_Order{{Field: fieldRef("__name__"), Direction: pb.StructuredQuery_ASCENDING}},
			Limit:   wrapInt(o.PageSize),
		}
		if after != "" {
			q.StartAt = &pb.Cursor{Values: []*pb.Value{refVal(after)}, Before: false}
		} else if st.from != "" {
			q.StartAt = &pb.Cursor{Values: []*pb.Value{refVal(s.docs + "/" + st.coll + "/" + st.from)}, Before: true}
		}
		var page []*pb.Document
		if err := s.runQuery(ctx, s.docs, q, func(d *pb.Document) error { page = append(page, d); return nil }); err != nil {
			return p, err
		}
		for _, d := range page {
			p.Scanned++
			n, err := s.migrateDoc(ctx, st, d, runs, o.DryRun)
			if err != nil {
				return p, err
			}
			p.Updated += n
		}
		if st.after != nil {
			// Per page, so that a resumed step misses nothing.
			n, err := st.after(ctx, s, runs, done, o.DryRun)
			if err != nil {
				return p, err
			}
			p.Updated += n
			clear(runs)
		}
		if len(page) > 0 {
			after = page[len(page)-1].GetName()
			if !o.DryRun {
				mark := Schema{Version: 0, Step: st.name, After: after, UpdatedAt: time.Now().UTC()}
				if cur, err := s.ReadSchema(ctx); err == nil {
					mark.Version = cur.Version
				}
				if _, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{setWrite(s.schemaName(), mark, false)}}); err != nil {
					return p, wrap("migrate: record progress", err)
				}
			}
		}
		if len(page) < o.PageSize {
			break
		}
		if o.Progress != nil {
			o.Progress(p)
		}
	}
	p.Done = true
	if o.Progress != nil {
		o.Progress(p)
	}
	return p, nil
}

// migrateDoc fixes one document, conditional on the version read; when it
// changed meanwhile, it is read again (a few times).
func (s *Store) migrateDoc(ctx context.Context, st migrateStep, d *pb.Document, runs map[string]Run, dry bool) (int, error) {
	if st.each != nil {
		return st.each(ctx, s, d, dry)
	}
	for try := 0; ; try++ {
		set := st.fix(s, d, runs)
		if len(set) == 0 {
			return 0, nil
		}
		if dry {
			return 1, nil
		}
		w := &pb.Write{
			Operation:       &pb.Write_Update{Update: &pb.Document{Name: d.GetName(), Fields: set}},
			UpdateMask:      &pb.DocumentMask{},
			CurrentDocument: version(d),
		}
		for k := range set {
			w.UpdateMask.FieldPaths = append(w.UpdateMask.FieldPaths, k)
		}
		_, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{w}})
		if err == nil {
			return 1, nil
		}
		if status.Code(err) != codes.FailedPrecondition || try >= 5 {
			return 0, err
		}
		docs, _, err := s.batchGet(ctx, []string{d.GetName()}, nil)
		if err != nil {
			return 0, err
		}
		if d = docs[d.GetName()]; d == nil {
			return 0, nil // deleted meanwhile (an expired outbox entry)
		}
	}
}

func timeValue(t time.Time) *pb.Value { return encodeValue(reflect.ValueOf(t.UTC())) }

// fixTask gives a task its due shard, and notes its run.
func fixTask(s *Store, d *pb.Document, runs map[string]Run) map[string]*pb.Value {
	f := d.GetFields()
	id := f["taskId"].GetStringValue()
	if run := f["runId"].GetStringValue(); run != "" {
		tenant := f["tenantId"].GetStringValue()
		key := runDocID(tenant, run) // runs are per tenant
		r := runs[key]
		r.RunID, r.TenantID = run, tenant
		if at := f["createdAt"].GetTimestampValue(); at != nil && at.AsTime().After(r.LastSubmitAt) {
			r.LastSubmitAt = at.AsTime().UTC()
		}
		runs[key] = r
	}
	if _, ok := f["dueShard"]; ok || id == "" {
		return nil
	}
	return map[string]*pb.Value{"dueShard": intVal(DueShardOf(id, s.shards))}
}

// fixOutbox gives an outbox entry its due shard and, when undelivered,
// its next try (now: the re-drive takes it at its next pass).
func fixOutbox(s *Store, d *pb.Document, _ map[string]Run) map[string]*pb.Value {
	f := d.GetFields()
	set := map[string]*pb.Value{}
	if _, ok := f["dueShard"]; !ok {
		set["dueShard"] = intVal(DueShardOf(f["taskId"].GetStringValue(), s.shards))
	}
	if _, ok := f["nextTryAt"]; !ok && !f["delivered"].GetBooleanValue() {
		at := time.Now()
		if c := f["createdAt"].GetTimestampValue(); c != nil {
			at = c.AsTime()
		}
		set["nextTryAt"] = timeValue(at)
	}
	if _, ok := f["tries"]; !ok && !f["delivered"].GetBooleanValue() {
		set["tries"] = intVal(0)
	}
	return set
}

// writeMissingRuns writes the run document of every run and tenant seen
// without one (runs/{runId}.{tenantKey}; exists=false: a document written
// meanwhile by a submit is kept).
func writeMissingRuns(ctx context.Context, s *Store, runs map[string]Run, done map[string]bool, dry bool) (int, error) {
	names := make([]string, 0, len(runs))
	byName := map[string]Run{}
	for key, r := range runs {
		if !task.ValidID(r.RunID, task.RunIDPrefix) || done[key] {
			continue
		}
		done[key] = true
		name := s.tenantRunName(r.TenantID, r.RunID)
		names = append(names, name)
		r.DueShard = DueShardOf(r.RunID, s.shards)
		byName[name] = r
	}
	n := 0
	for len(names) > 0 {
		chunk := names[:min(len(names), 100)]
		names = names[len(chunk):]
		docs, _, err := s.batchGet(ctx, chunk, nil)
		if err != nil {
			return n, err
		}
		for _, name := range chunk {
			if docs[name] != nil {
				continue
			}
			n++
			if dry {
				continue
			}
			_, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{setWrite(name, byName[name], true)}})
			if err != nil && status.Code(err) != codes.AlreadyExists {
				return n, err
			}
		}
	}
	return n, nil
}

// moveTask moves a task stored under its legacy name (tasks/{taskId}),
// with its attempt records, to its name of schema 2, in one commit: each
// new document created (exists=false), each old one deleted on the
// condition that it is still the version read. A callback or the sweeper
// that wrote the task meanwhile makes the commit fail; the task is read
// again and moved as it is now. (This build's servers do not run on a
// schema 1 database: CheckSchema refuses it until the migration ends.)
func moveTask(ctx context.Context, s *Store, d *pb.Document, dry bool) (int, error) {
	id := d.GetFields()["taskId"].GetStringValue()
	if !task.ValidID(id, task.TaskIDPrefix) || d.GetName() != s.legacyTaskName(id) {
		return 0, nil // not a task of the legacy layout
	}
	if dry {
		return 1, nil
	}
	to := s.taskName(id)
	for try := 0; ; try++ {
		var atts []*pb.Document
		err := s.runQuery(ctx, d.GetName(), &pb.StructuredQuery{From: []*pb.StructuredQuery_CollectionSelector{{CollectionId: AttemptsCollection}}},
			func(a *pb.Document) error { atts = append(atts, a); return nil })
		if err != nil {
			return 0, err
		}
		if len(atts)*2+2 > MaxCommitWrites {
			return 0, fmt.Errorf("task %s has %d attempt records, too many to move in one commit", id, len(atts))
		}
		writes := []*pb.Write{moveWrite(to, d)}
		for _, a := range atts {
			writes = append(writes, moveWrite(to+strings.TrimPrefix(a.GetName(), d.GetName()), a))
		}
		writes = append(writes, deleteWrite(d))
		for _, a := range atts {
			writes = append(writes, deleteWrite(a))
		}
		_, err = s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes})
		if err == nil {
			return 1, nil
		}
		if !lostRace(err) || try >= 10 {
			return 0, err
		}
		docs, _, err := s.batchGet(ctx, []string{d.GetName(), to}, nil)
		if err != nil {
			return 0, err
		}
		if docs[d.GetName()] == nil {
			return 0, nil // moved meanwhile (another migrate)
		}
		if docs[to] != nil {
			return 0, fmt.Errorf("task %s exists under both %s and %s; keep the one to keep and delete the other", id, d.GetName(), to)
		}
		d = docs[d.GetName()]
	}
}

// moveWrite creates the copy of d named name.
func moveWrite(name string, d *pb.Document) *pb.Write {
	return &pb.Write{
		Operation:       &pb.Write_Update{Update: &pb.Document{Name: name, Fields: d.GetFields()}},
		CurrentDocument: &pb.Precondition{ConditionType: &pb.Precondition_Exists{Exists: false}},
	}
}

// deleteWrite deletes d on the condition that it is still the version read.
func deleteWrite(d *pb.Document) *pb.Write {
	return &pb.Write{Operation: &pb.Write_Delete{Delete: d.GetName()}, CurrentDocument: version(d)}
}
