package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/servo-dev/servo/api"
)

// SchedulesCollection holds one document per schedule
// (docs/contract.md §16): schedules/{scheduleDocID}.
const SchedulesCollection = "schedules"

// Schedule errors.
var (
	// ErrScheduleExists: a schedule of that id already exists for the tenant.
	ErrScheduleExists = errors.New("store: schedule already exists")
	// ErrScheduleNotFound: no such schedule.
	ErrScheduleNotFound = errors.New("store: schedule not found")
	// ErrScheduleChanged: the schedule changed since it was read
	// (UpdateSchedule's precondition); read it again.
	ErrScheduleChanged = errors.New("store: schedule changed since it was read")
)

// Schedule is a schedule's document. Its fire state (NextFireAt, Pending,
// Active, Buffered, Recent) is written by the sweeper's schedule duty and
// by trigger and backfill, each write conditional on the version read
// (UpdateSchedule), so that two writers never both make a fire.
type Schedule struct {
	ScheduleID  string `firestore:"scheduleId"`
	TenantID    string `firestore:"tenantId"`
	WorkspaceID string `firestore:"workspaceId"`
	// UID is drawn at creation: fire task ids derive from it, so that a
	// schedule deleted and created again under the same id makes its
	// fires anew.
	UID string `firestore:"uid"`

	Cron     string     `firestore:"cron"`
	EveryMs  int64      `firestore:"everyMs"`
	TimeZone string     `firestore:"timezone"`
	StartAt  *time.Time `firestore:"startAt"`
	EndAt    *time.Time `firestore:"endAt"`
	JitterMs int64      `firestore:"jitterMs"`
	// Task is the submit body of every fire (api.SubmitRequest, JSON).
	Task            json.RawMessage `firestore:"task"`
	Overlap         string          `firestore:"overlap"`
	CatchupWindowMs int64           `firestore:"catchupWindowMs"`
	Paused          bool            `firestore:"paused"`
	Note            string          `firestore:"note"`

	// NextFireAt is the next fire time not yet decided (nil: none left).
	NextFireAt *time.Time `firestore:"nextFireAt"`
	// DueAt is when the sweeper next looks at the schedule (nil while it
	// is paused or has nothing left to do); with DueShard, it is the key
	// of the due query (DueSchedules).
	DueAt    *time.Time `firestore:"dueAt"`
	DueShard int        `firestore:"dueShard"`
	// Pending are fires decided STARTED whose tasks may not exist yet:
	// made (idempotently, by their derived ids) and then removed.
	Pending []ScheduleFire `firestore:"pending"`
	// Cancel are tasks CANCEL_OTHER cancels before Pending are made.
	Cancel []string `firestore:"cancel"`
	// Active are fire tasks not yet seen finished (overlap policies).
	Active []string `firestore:"active"`
	// Buffered is the fire BUFFER_ONE holds.
	Buffered *ScheduleFire `firestore:"buffered"`
	// Recent are the latest fires, newest first (api.ScheduleRecentFires).
	Recent    []ScheduleFire `firestore:"recent"`
	Counts    ScheduleCounts `firestore:"counts"`
	CreatedAt time.Time      `firestore:"createdAt"`
	UpdatedAt time.Time      `firestore:"updatedAt"`

	// version is the document's update time when read: UpdateSchedule's
	// precondition.
	version *timestamppb.Timestamp
}

// ScheduleCounts counts a schedule's fires by outcome.
type ScheduleCounts struct {
	Fires   int64 `firestore:"fires"`
	Skipped int64 `firestore:"skipped"`
	Missed  int64 `firestore:"missed"`
	Failed  int64 `firestore:"failed"`
}

// ScheduleFire is one fire as a schedule keeps it (api.ScheduleFire).
type ScheduleFire struct {
	At      time.Time  `firestore:"at"`
	Kind    string     `firestore:"kind"`
	Outcome string     `firestore:"outcome"`
	TaskID  string     `firestore:"taskId"`
	Count   int        `firestore:"count"`
	Until   *time.Time `firestore:"until"`
	Message string     `firestore:"message"`
	// Overlap is the policy that decided it (a trigger's or backfill's may
	// differ from the schedule's).
	Overlap string `firestore:"overlap"`
}

// SetDue sets when the sweeper next looks at sc (DueAt): at once while
// fires wait to be made (even paused: they were decided), every pass
// while a buffered fire waits for the running one, else at its next fire;
// never while paused otherwise. Call it after any change to sc.
func (sc *Schedule) SetDue(now time.Time) {
	switch {
	case len(sc.Pending) > 0 || len(sc.Cancel) > 0:
		sc.DueAt = &now
	case sc.Paused:
		sc.DueAt = nil
	case sc.Buffered != nil:
		sc.DueAt = &now
	default:
		sc.DueAt = sc.NextFireAt
	}
}

// View is f as the API shows it.
func (f ScheduleFire) View() api.ScheduleFire {
	return api.ScheduleFire{At: f.At, Kind: f.Kind, Outcome: f.Outcome, TaskID: f.TaskID, Count: f.Count, Until: f.Until, Message: f.Message}
}

// ScheduleDocID is the id of tenant's schedule id's document: a hash, so
// that ids that sort together are written all over the key range, and so
// that any tenant and id make a valid name.
func ScheduleDocID(tenant, id string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + id))
	return hex.EncodeToString(sum[:20])
}

func (s *Store) scheduleName(tenant, id string) string {
	return s.docs + "/" + SchedulesCollection + "/" + ScheduleDocID(tenant, id)
}

// CreateSchedule stores a new schedule (ErrScheduleExists when the tenant
// has one of that id). Its due shard is set here.
func (s *Store) CreateSchedule(ctx context.Context, sc Schedule) (Schedule, error) {
	sc.DueShard = DueShardOf(sc.TenantID+"\x00"+sc.ScheduleID, s.shards)
	w := setWrite(s.scheduleName(sc.TenantID, sc.ScheduleID), sc, true)
	res, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{w}})
	if status.Code(err) == codes.AlreadyExists {
		return Schedule{}, ErrScheduleExists
	}
	if err != nil {
		return Schedule{}, wrap("create schedule", err)
	}
	if wr := res.GetWriteResults(); len(wr) == 1 {
		sc.version = wr[0].GetUpdateTime()
	}
	return sc, nil
}

// GetSchedule reads tenant's schedule id (ErrScheduleNotFound).
func (s *Store) GetSchedule(ctx context.Context, tenant, id string) (Schedule, error) {
	name := s.scheduleName(tenant, id)
	docs, _, err := s.batchGet(ctx, []string{name}, nil)
	if err != nil {
		return Schedule{}, wrap("get schedule", err)
	}
	d := docs[name]
	if d == nil {
		return Schedule{}, ErrScheduleNotFound
	}
	return scheduleOf(d)
}

func scheduleOf(d *pb.Document) (Schedule, error) {
	var sc Schedule
	if err := decodeFields(d.GetFields(), &sc); err != nil {
		return Schedule{}, err
	}
	sc.version = d.GetUpdateTime()
	return sc, nil
}

// UpdateSchedule writes sc over the version GetSchedule (or
// CreateSchedule, or an earlier UpdateSchedule) returned:
// ErrScheduleChanged when the document changed meanwhile,
// ErrScheduleNotFound when it was deleted. It returns sc at its new version.
func (s *Store) UpdateSchedule(ctx context.Context, sc Schedule) (Schedule, error) {
	if sc.version == nil {
		return Schedule{}, errors.New("store: UpdateSchedule of a schedule not read from the store")
	}
	w := setWrite(s.scheduleName(sc.TenantID, sc.ScheduleID), sc, false)
	w.CurrentDocument = &pb.Precondition{ConditionType: &pb.Precondition_UpdateTime{UpdateTime: sc.version}}
	res, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{w}})
	switch status.Code(err) {
	case codes.OK:
	case codes.FailedPrecondition:
		return Schedule{}, ErrScheduleChanged
	case codes.NotFound:
		return Schedule{}, ErrScheduleNotFound
	default:
		return Schedule{}, wrap("update schedule", err)
	}
	if wr := res.GetWriteResults(); len(wr) == 1 {
		sc.version = wr[0].GetUpdateTime()
	}
	return sc, nil
}

// DeleteSchedule deletes tenant's schedule id (ErrScheduleNotFound when
// there is none). Its fires' tasks are not touched.
func (s *Store) DeleteSchedule(ctx context.Context, tenant, id string) error {
	w := &pb.Write{Operation: &pb.Write_Delete{Delete: s.scheduleName(tenant, id)},
		CurrentDocument: &pb.Precondition{ConditionType: &pb.Precondition_Exists{Exists: true}}}
	_, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{w}})
	if status.Code(err) == codes.NotFound || status.Code(err) == codes.FailedPrecondition {
		return ErrScheduleNotFound
	}
	return wrap("delete schedule", err)
}

// ScheduleFilter selects schedules for ListSchedules.
type ScheduleFilter struct {
	// TenantID lists one tenant's schedules; TenantIDs several ("in").
	TenantID  string
	TenantIDs []string
	// PageSize defaults to 50 and is capped at 200.
	PageSize int
	// After continues after this schedule's document id (a page token).
	After string
}

// ListSchedules returns schedules ordered by schedule id (through the
// composite index (tenantId, scheduleId) when filtered), and the page token
// of the next page ("" on the last).
func (s *Store) ListSchedules(ctx context.Context, f ScheduleFilter) ([]Schedule, string, error) {
	size := f.PageSize
	if size <= 0 {
		size = 50
	}
	size = min(size, 200)
	q := f.query(size + 1)
	if f.After != "" {
		after, err := s.afterSchedule(ctx, f.After)
		if err != nil {
			return nil, "", err
		}
		q.StartAt = &pb.Cursor{Values: []*pb.Value{strVal(after.ScheduleID),
			refVal(s.scheduleName(after.TenantID, after.ScheduleID))}, Before: false}
	}
	var out []Schedule
	err := s.runQuery(ctx, s.docs, q, func(d *pb.Document) error {
		sc, err := scheduleOf(d)
		out = append(out, sc)
		return err
	})
	if err != nil {
		return nil, "", wrap("list schedules", err)
	}
	next := ""
	if len(out) > size {
		out = out[:size]
		last := out[size-1]
		next = ScheduleDocID(last.TenantID, last.ScheduleID)
	}
	return out, next, nil
}

// afterSchedule reads the schedule a page token names (its document id).
func (s *Store) afterSchedule(ctx context.Context, docID string) (Schedule, error) {
	if len(docID) != 40 {
		return Schedule{}, ErrInvalidPageToken
	}
	if _, err := hex.DecodeString(docID); err != nil {
		return Schedule{}, ErrInvalidPageToken
	}
	name := s.docs + "/" + SchedulesCollection + "/" + docID
	docs, _, err := s.batchGetMasked(ctx, []string{name}, []string{"tenantId", "scheduleId"}, nil)
	if err != nil {
		return Schedule{}, wrap("list schedules", err)
	}
	if docs[name] == nil {
		return Schedule{}, ErrInvalidPageToken
	}
	return scheduleOf(docs[name])
}

// ScheduleGroups splits the due shards into the groups DueSchedules takes
// (one query a group and page).
func (s *Store) ScheduleGroups() [][]int {
	return shardGroups(s.shards, maxDisjunctions, 1)
}

// DueSchedules returns up to limit schedules of a group of due shards
// (one of ScheduleGroups) due by now, in due order, after cursor, projected
// to their tenant, id and due time: the sweeper reads each in full when it
// acts on it. Served by the index (dueShard, dueAt); a paused schedule has
// no dueAt and is not read.
func (s *Store) DueSchedules(ctx context.Context, shards []int, now time.Time, limit int, after *DueCursor) ([]Schedule, error) {
	q := s.dueScheduleQuery(shards, now, limit, after)
	var out []Schedule
	err := s.runQuery(ctx, s.docs, q, func(d *pb.Document) error {
		var sc Schedule
		if err := decodeFields(d.GetFields(), &sc); err != nil {
			return err
		}
		out = append(out, sc)
		return nil
	})
	return out, wrap("due schedules", err)
}

// TaskStates reads the state of each task of ids that exists (one
// BatchGetDocuments, masked to the state).
func (s *Store) TaskStates(ctx context.Context, ids []string) (map[string]api.State, error) {
	out := make(map[string]api.State, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	names := make([]string, len(ids))
	byName := make(map[string]string, len(ids))
	for i, id := range ids {
		names[i] = s.taskName(id)
		byName[names[i]] = id
	}
	docs, _, err := s.batchGetMasked(ctx, names, []string{"state"}, nil)
	if err != nil {
		return nil, wrap("task states", err)
	}
	for name, d := range docs {
		out[byName[name]] = api.State(d.GetFields()["state"].GetStringValue())
	}
	return out, nil
}

// query is ListSchedules' query, without its cursor.
func (f ScheduleFilter) query(limit int) *pb.StructuredQuery {
	q := &pb.StructuredQuery{
		From: []*pb.StructuredQuery_CollectionSelector{{CollectionId: SchedulesCollection}},
		OrderBy: []*pb.StructuredQuery_Order{
			{Field: fieldRef("scheduleId"), Direction: pb.StructuredQuery_ASCENDING},
			{Field: fieldRef("__name__"), Direction: pb.StructuredQuery_ASCENDING},
		},
		Limit: wrapInt(limit),
	}
	switch {
	case f.TenantID != "":
		q.Where = fieldFilter("tenantId", pb.StructuredQuery_FieldFilter_EQUAL, strVal(f.TenantID))
	case len(f.TenantIDs) > 0:
		vals := make([]*pb.Value, len(f.TenantIDs))
		for i, t := range f.TenantIDs {
			vals[i] = strVal(t)
		}
		q.Where = fieldFilter("tenantId", pb.StructuredQuery_FieldFilter_IN, &pb.Value{ValueType: &pb.Value_ArrayValue{ArrayValue: &pb.ArrayValue{Values: vals}}})
	}
	return q
}

// dueScheduleQuery is DueSchedules' query.
func (s *Store) dueScheduleQuery(shards []int, now time.Time, limit int, after *DueCursor) *pb.StructuredQuery {
	q := &pb.StructuredQuery{
		Select: &pb.StructuredQuery_Projection{Fields: []*pb.StructuredQuery_FieldReference{
			fieldRef("tenantId"), fieldRef("scheduleId"), fieldRef("dueAt"), fieldRef("dueShard")}},
		From: []*pb.StructuredQuery_CollectionSelector{{CollectionId: SchedulesCollection}},
		Where: and(shardFilter(shards),
			fieldFilter("dueAt", pb.StructuredQuery_FieldFilter_LESS_THAN_OR_EQUAL, encodeValue(reflect.ValueOf(now.UTC())))),
		OrderBy: []*pb.StructuredQuery_Order{
			{Field: fieldRef("dueAt"), Direction: pb.StructuredQuery_ASCENDING},
			{Field: fieldRef("__name__"), Direction: pb.StructuredQuery_ASCENDING},
		},
		Limit: wrapInt(limit),
	}
	if after != nil {
		q.StartAt = &pb.Cursor{Values: []*pb.Value{encodeValue(reflect.ValueOf(after.At)), refVal(s.docs + "/" + SchedulesCollection + "/" + after.ID)}}
	}
	return q
}
