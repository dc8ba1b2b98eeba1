package store

import (
	"encoding/json"
	"reflect"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// The storage schema. Packages api and task carry no `firestore` tags:
// what a document holds and what its fields are named is decided here,
// by the document types below, each the stored form of a domain type,
// with the mappings both ways. The codec sees only these (and the
// store's own types): encodeFields and decodeFields take a domain value
// and go through its document type (storedForm, decodeStored), and
// codec.fieldsOf refuses a struct of package api or task met anywhere
// else.
//
// A leaf type whose fields are all of plain types is a conversion away
// from its document type (same field names and types, in the same
// order: Go ignores tags in conversions), so that a field added to one
// side only does not compile; the others are mapped field by field, and
// docs_test.go fails when a field is added to one side only.

// taskDoc is a task.Task as stored: tasks/{hhhh}_{taskId}.
// task.Task.Attempts is not part of it (records are documents of their
// own, tasks/{hhhh}_{taskId}/attempts/{n}).
type taskDoc struct {
	ID              string          `firestore:"taskId"`
	RunID           string          `firestore:"runId"`
	TenantID        string          `firestore:"tenantId"`
	WorkspaceID     string          `firestore:"workspaceId"`
	TaskKey         string          `firestore:"taskKey"`
	AssetID         string          `firestore:"assetId"`
	Worker          string          `firestore:"worker"`
	Payload         json.RawMessage `firestore:"payload"`
	Resources       json.RawMessage `firestore:"resources"`
	IdempotencyKey  string          `firestore:"idempotencyKey"`
	Priority        int             `firestore:"priority"`
	OwnRun          bool            `firestore:"ownRun"`
	RerunOf         string          `firestore:"rerunOf"`
	ScheduleID      string          `firestore:"scheduleId"`
	ScheduledFireAt *time.Time      `firestore:"scheduledFireAt"`
	State           api.State       `firestore:"state"`
	Reason          string          `firestore:"reason"`
	CancelReason    string          `firestore:"cancelReason"`
	Attempt         int             `firestore:"attempt"`
	Seq             int64           `firestore:"seq"`
	Timing          timingDoc       `firestore:"timing"`
	Retry           retryPolicyDoc  `firestore:"retry"`
	Deadline        *time.Time      `firestore:"deadline"`
	CreatedAt       time.Time       `firestore:"createdAt"`
	UpdatedAt       time.Time       `firestore:"updatedAt"`
	EndedAt         *time.Time      `firestore:"endedAt"`
	ExpireAt        *time.Time      `firestore:"expireAt"`
	NotBefore       *time.Time      `firestore:"notBefore"`
	EnqueueAt       *time.Time      `firestore:"enqueueAt"`
	LeaseExpiresAt  *time.Time      `firestore:"leaseExpiresAt"`
	CancelDeadline  *time.Time      `firestore:"cancelDeadline"`
	DispatchCheckAt *time.Time      `firestore:"dispatchCheckAt"`
	StartTimeoutAt  *time.Time      `firestore:"startTimeoutAt"`
	Delivery        *deliveryDoc    `firestore:"delivery"`
	DueShard        int             `firestore:"dueShard"`
	Redrives        int             `firestore:"redrives"`
	ResumeFrom      json.RawMessage `firestore:"resumeFrom"`
	Quota           *quotaHoldDoc   `firestore:"quota"`
	WaitingSince    *time.Time      `firestore:"waitingSince"`
	// WaitRank is task.WaitRank, derived from waitingSince and priority
	// (not read back): the admit duty's query orders on it.
	WaitRank *time.Time      `firestore:"waitRank"`
	Live     *liveAttemptDoc `firestore:"live"`
	Ended    *attemptDoc     `firestore:"endedAttempt"`
	Recorded *bool           `firestore:"recorded"`
	Trace    string          `firestore:"trace"`
	History  []stepDoc       `firestore:"history"`
}

// deliveryDoc is an api.Delivery as stored (the task's delivery).
type deliveryDoc struct {
	Attempts      int        `firestore:"attempts"`
	LastStatus    string     `firestore:"lastStatus"`
	LastError     string     `firestore:"lastError"`
	LastAttemptAt *time.Time `firestore:"lastAttemptAt"`
	NextTryAt     *time.Time `firestore:"nextTryAt"`
	CheckedAt     time.Time  `firestore:"checkedAt"`
}

// attemptDoc is a task.Attempt as stored: tasks/{hhhh}_{taskId}/attempts/{n},
// or the task's endedAttempt.
type attemptDoc struct {
	Attempt              int             `firestore:"attempt"`
	Outcome              api.Outcome     `firestore:"outcome"`
	WorkerID             string          `firestore:"workerId"`
	CreatedAt            time.Time       `firestore:"createdAt"`
	ScheduledAt          *time.Time      `firestore:"scheduledAt"`
	StartedAt            *time.Time      `firestore:"startedAt"`
	CompletedAt          *time.Time      `firestore:"completedAt"`
	LastHeartbeatAt      *time.Time      `firestore:"lastHeartbeatAt"`
	Heartbeats           int             `firestore:"heartbeats"`
	HeartbeatTicks       []byte          `firestore:"heartbeatTicks"`
	ProgressPct          *int            `firestore:"progressPct"`
	Message              string          `firestore:"message"`
	Checkpoint           json.RawMessage `firestore:"checkpoint"`
	Error                *errorInfoDoc   `firestore:"error"`
	Output               json.RawMessage `firestore:"output"`
	Metrics              *metricsDoc     `firestore:"metrics"`
	CancelledDuringPhase string          `firestore:"cancelledDuringPhase"`
	PartialProgress      json.RawMessage `firestore:"partialProgress"`
	ReportedAt           *time.Time      `firestore:"reportedAt"`
	ExpireAt             *time.Time      `firestore:"expireAt"`
	Execution            string          `firestore:"execution"`
	CompletionDigest     string          `firestore:"completionDigest"`
}

// liveAttemptDoc is a task.LiveAttempt as stored (the task's live); a
// conversion away from it.
type liveAttemptDoc struct {
	Attempt         int             `firestore:"attempt"`
	CreatedAt       *time.Time      `firestore:"createdAt"`
	ScheduledAt     *time.Time      `firestore:"scheduledAt"`
	WorkerID        string          `firestore:"workerId"`
	StartedAt       *time.Time      `firestore:"startedAt"`
	LastHeartbeatAt *time.Time      `firestore:"lastHeartbeatAt"`
	Heartbeats      int             `firestore:"heartbeats"`
	HeartbeatTicks  []byte          `firestore:"heartbeatTicks"`
	ProgressPct     *int            `firestore:"progressPct"`
	Message         string          `firestore:"message"`
	Checkpoint      json.RawMessage `firestore:"checkpoint"`
	Execution       string          `firestore:"execution"`
}

// stepDoc is a task.Step as stored (an element of the task's history).
type stepDoc struct {
	Attempt     int           `firestore:"attempt"`
	From        api.State     `firestore:"from"`
	To          api.State     `firestore:"to"`
	Reason      string        `firestore:"reason"`
	Outcome     api.Outcome   `firestore:"outcome"`
	Error       *errorInfoDoc `firestore:"error"`
	NextAttempt int           `firestore:"nextAttempt"`
	Seq         int64         `firestore:"seq"`
	OccurredAt  time.Time     `firestore:"occurredAt"`
}

// transitionDoc is a task.Transition as stored: the fields of an outbox
// document (outboxDoc), and each of its earlier.
type transitionDoc struct {
	EventID     string        `firestore:"eventId"`
	TaskID      string        `firestore:"taskId"`
	RunID       string        `firestore:"runId"`
	TenantID    string        `firestore:"tenantId"`
	WorkspaceID string        `firestore:"workspaceId"`
	Worker      string        `firestore:"worker"`
	Attempt     int           `firestore:"attempt"`
	Priority    int           `firestore:"priority"`
	From        api.State     `firestore:"from"`
	To          api.State     `firestore:"to"`
	Reason      string        `firestore:"reason"`
	Outcome     api.Outcome   `firestore:"outcome"`
	Error       *errorInfoDoc `firestore:"error"`
	NextAttempt int           `firestore:"nextAttempt"`
	Seq         int64         `firestore:"seq"`
	OccurredAt  time.Time     `firestore:"occurredAt"`
	DeadLetter  bool          `firestore:"deadLetter"`
	// ScheduleID and ScheduledFireAt: a schedule's fire.
	ScheduleID      string     `firestore:"scheduleId"`
	ScheduledFireAt *time.Time `firestore:"scheduledFireAt"`
	Trace           string     `firestore:"trace"`
}

// quotaHoldDoc is a task.QuotaHold as stored (the task's quota); a
// conversion away from it.
type quotaHoldDoc struct {
	Tenant          bool `firestore:"tenant"`
	Worker          bool `firestore:"worker"`
	TenantShard     int  `firestore:"tenantShard"`
	WorkerShard     int  `firestore:"workerShard"`
	Slot            bool `firestore:"slot"`
	TenantSlotShard int  `firestore:"tenantSlotShard"`
	WorkerSlotShard int  `firestore:"workerSlotShard"`
	Share           bool `firestore:"share,omitempty"`
	ShareShard      int  `firestore:"shareShard,omitempty"`
	ShareSlotShard  int  `firestore:"shareSlotShard,omitempty"`
}

// outageSpanDoc is a task.Outage as stored (the span of an outageDoc); a
// conversion away from it.
type outageSpanDoc struct {
	From time.Time `firestore:"from"`
	To   time.Time `firestore:"to"`
}

// errorInfoDoc is an api.ErrorInfo as stored; a conversion away from it.
type errorInfoDoc struct {
	Category   api.Category `firestore:"category"`
	Message    string       `firestore:"message"`
	StackTrace string       `firestore:"stackTrace"`
	Retryable  *bool        `firestore:"retryable"`
}

// metricsDoc is an api.Metrics as stored; a conversion away from it.
type metricsDoc struct {
	CPUTimeMs       int64 `firestore:"cpuTimeMs"`
	PeakMemoryBytes int64 `firestore:"peakMemoryBytes"`
	IOReadBytes     int64 `firestore:"ioReadBytes"`
	IOWriteBytes    int64 `firestore:"ioWriteBytes"`
}

// timingDoc is an api.Timing as stored; a conversion away from it.
type timingDoc struct {
	HeartbeatIntervalMs int64 `firestore:"heartbeatIntervalMs"`
	HeartbeatTimeoutMs  int64 `firestore:"heartbeatTimeoutMs"`
	CancelGracePeriodMs int64 `firestore:"cancelGracePeriodMs"`
	StartTimeoutMs      int64 `firestore:"startTimeoutMs"`
}

// retryPolicyDoc is an api.RetryPolicy as stored; a conversion away from
// it.
type retryPolicyDoc struct {
	MaxAttempts        int                               `firestore:"maxAttempts"`
	InitialBackoffMs   int64                             `firestore:"initialBackoffMs"`
	BackoffCoefficient float64                           `firestore:"backoffCoefficient"`
	MaxBackoffMs       int64                             `firestore:"maxBackoffMs"`
	MaxTotalAttempts   int                               `firestore:"maxTotalAttempts"`
	ByCategory         map[api.Category]categoryRetryDoc `firestore:"byCategory"`
	// Failures is the task's task.Task.Failures, kept here (under the
	// field exempted from indexing) rather than in a field of its own.
	Failures map[api.Category]int `firestore:"failures"`
}

// categoryRetryDoc is an api.CategoryRetry as stored; a conversion away
// from it.
type categoryRetryDoc struct {
	MaxAttempts        int     `firestore:"maxAttempts"`
	InitialBackoffMs   int64   `firestore:"initialBackoffMs"`
	BackoffCoefficient float64 `firestore:"backoffCoefficient"`
	MaxBackoffMs       int64   `firestore:"maxBackoffMs"`
}

// retryDocOf is t's policy and failure counts as stored.
func retryDocOf(t *task.Task) retryPolicyDoc {
	p := t.Retry
	d := retryPolicyDoc{MaxAttempts: p.MaxAttempts, InitialBackoffMs: p.InitialBackoffMs, BackoffCoefficient: p.BackoffCoefficient,
		MaxBackoffMs: p.MaxBackoffMs, MaxTotalAttempts: p.MaxTotalAttempts, Failures: t.Failures}
	if p.ByCategory != nil {
		d.ByCategory = make(map[api.Category]categoryRetryDoc, len(p.ByCategory))
		for c, e := range p.ByCategory {
			d.ByCategory[c] = categoryRetryDoc(e)
		}
	}
	return d
}

// fill sets t's policy and failure counts from d.
func (d *retryPolicyDoc) fill(t *task.Task) {
	t.Retry = api.RetryPolicy{MaxAttempts: d.MaxAttempts, InitialBackoffMs: d.InitialBackoffMs, BackoffCoefficient: d.BackoffCoefficient,
		MaxBackoffMs: d.MaxBackoffMs, MaxTotalAttempts: d.MaxTotalAttempts}
	if d.ByCategory != nil {
		t.Retry.ByCategory = make(map[api.Category]api.CategoryRetry, len(d.ByCategory))
		for c, e := range d.ByCategory {
			t.Retry.ByCategory[c] = api.CategoryRetry(e)
		}
	}
	t.Failures = d.Failures
}

// sweepStatusDoc is an api.SweepStatus as stored: meta/sweeper.
type sweepStatusDoc struct {
	LastPassAt    time.Time               `firestore:"lastPassAt"`
	PassMs        int64                   `firestore:"passMs"`
	Passes        int64                   `firestore:"passes"`
	Duties        map[string]sweepDutyDoc `firestore:"duties"`
	RedriveErrors int                     `firestore:"redriveErrors"`
}

// sweepDutyDoc is an api.SweepDuty as stored; a conversion away from it.
type sweepDutyDoc struct {
	Due      int   `firestore:"due"`
	Applied  int   `firestore:"applied"`
	Errors   int   `firestore:"errors"`
	MaxLagMs int64 `firestore:"maxLagMs"`
}

// storedForm is what encodeFields encodes for v: the document type of a
// domain type, v itself otherwise (the store's own document types).
func storedForm(v any) any {
	switch v := v.(type) {
	case task.Task:
		return taskDocOf(&v)
	case *task.Task:
		return taskDocOf(v)
	case task.Attempt:
		return attemptDocOf(&v)
	case *task.Attempt:
		return attemptDocOf(v)
	case api.SweepStatus:
		return sweepStatusDocOf(&v)
	case *api.SweepStatus:
		return sweepStatusDocOf(v)
	case task.Outage:
		return outageSpanDoc(v)
	case *task.Outage:
		return outageSpanDoc(*v)
	case task.Transition:
		return transitionDocOf(&v)
	case *task.Transition:
		return transitionDocOf(v)
	}
	return v
}

// decodeStored decodes fields into out when it points to a domain value,
// through its document type, with decodeFields's meaning: the fields the
// document lacks keep the value they had. handled is false for any other
// out.
func decodeStored(fields map[string]*pb.Value, out any) (handled bool, err error) {
	switch out := out.(type) {
	case *task.Task:
		d := taskDocOf(out)
		err = decodeMap(fields, reflect.ValueOf(&d).Elem())
		d.fill(out)
	case *task.Attempt:
		d := attemptDocOf(out)
		err = decodeMap(fields, reflect.ValueOf(&d).Elem())
		d.fill(out)
	case *api.SweepStatus:
		d := sweepStatusDocOf(out)
		err = decodeMap(fields, reflect.ValueOf(&d).Elem())
		d.fill(out)
	case *task.Outage:
		err = decodeMap(fields, reflect.ValueOf((*outageSpanDoc)(out)).Elem())
	case *task.Transition:
		d := transitionDocOf(out)
		err = decodeMap(fields, reflect.ValueOf(&d).Elem())
		d.fill(out)
	default:
		return false, nil
	}
	return true, err
}

// taskDocOf is t as stored (all but t.Attempts). It shares t's slices and
// pointers: encode it, do not change it.
func taskDocOf(t *task.Task) taskDoc {
	d := taskDoc{
		ID: t.ID, RunID: t.RunID, TenantID: t.TenantID, WorkspaceID: t.WorkspaceID, TaskKey: t.TaskKey,
		AssetID: t.AssetID, Worker: t.Worker, Payload: t.Payload, Resources: t.Resources,
		IdempotencyKey: t.IdempotencyKey, Priority: t.Priority, OwnRun: t.OwnRun, RerunOf: t.RerunOf,
		ScheduleID: t.ScheduleID, ScheduledFireAt: t.ScheduledFireAt,
		State: t.State, Reason: t.Reason, CancelReason: t.CancelReason, Attempt: t.Attempt, Seq: t.Seq,
		Timing: timingDoc(t.Timing), Retry: retryDocOf(t), Deadline: t.Deadline,
		CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, EndedAt: t.EndedAt, ExpireAt: t.ExpireAt,
		NotBefore: t.NotBefore, EnqueueAt: t.EnqueueAt, LeaseExpiresAt: t.LeaseExpiresAt, CancelDeadline: t.CancelDeadline,
		DispatchCheckAt: t.DispatchCheckAt, StartTimeoutAt: t.StartTimeoutAt, Delivery: (*deliveryDoc)(t.Delivery), DueShard: t.DueShard, Redrives: t.Redrives, ResumeFrom: t.ResumeFrom,
		Quota: (*quotaHoldDoc)(t.Quota), WaitingSince: t.WaitingSince, WaitRank: task.WaitRank(t), Live: (*liveAttemptDoc)(t.Live),
		Recorded: t.Recorded, Trace: t.Trace, History: stepDocsOf(t.History),
	}
	if t.Ended != nil {
		e := attemptDocOf(t.Ended)
		d.Ended = &e
	}
	return d
}

// fill sets every stored field of t from d (t.Attempts is left as it is).
func (d *taskDoc) fill(t *task.Task) {
	t.ID, t.RunID, t.TenantID, t.WorkspaceID, t.TaskKey = d.ID, d.RunID, d.TenantID, d.WorkspaceID, d.TaskKey
	t.AssetID, t.Worker, t.Payload, t.Resources = d.AssetID, d.Worker, d.Payload, d.Resources
	t.IdempotencyKey, t.Priority, t.OwnRun, t.RerunOf = d.IdempotencyKey, d.Priority, d.OwnRun, d.RerunOf
	t.ScheduleID, t.ScheduledFireAt = d.ScheduleID, d.ScheduledFireAt
	t.State, t.Reason, t.CancelReason, t.Attempt, t.Seq = d.State, d.Reason, d.CancelReason, d.Attempt, d.Seq
	t.Timing, t.Deadline = api.Timing(d.Timing), d.Deadline
	d.Retry.fill(t)
	t.CreatedAt, t.UpdatedAt, t.EndedAt, t.ExpireAt = d.CreatedAt, d.UpdatedAt, d.EndedAt, d.ExpireAt
	t.NotBefore, t.EnqueueAt, t.LeaseExpiresAt, t.CancelDeadline = d.NotBefore, d.EnqueueAt, d.LeaseExpiresAt, d.CancelDeadline
	t.DispatchCheckAt, t.DueShard, t.Redrives, t.ResumeFrom = d.DispatchCheckAt, d.DueShard, d.Redrives, d.ResumeFrom
	t.StartTimeoutAt, t.Delivery = d.StartTimeoutAt, (*api.Delivery)(d.Delivery)
	t.Quota, t.WaitingSince, t.Live = (*task.QuotaHold)(d.Quota), d.WaitingSince, (*task.LiveAttempt)(d.Live)
	t.Ended = nil
	if d.Ended != nil {
		t.Ended = new(task.Attempt)
		d.Ended.fill(t.Ended)
	}
	t.Recorded, t.Trace, t.History = d.Recorded, d.Trace, stepsOf(d.History)
}

// attemptDocOf is a as stored. It shares a's slices and pointers.
func attemptDocOf(a *task.Attempt) attemptDoc {
	return attemptDoc{
		Attempt: a.Attempt, Outcome: a.Outcome, WorkerID: a.WorkerID, CreatedAt: a.CreatedAt,
		ScheduledAt: a.ScheduledAt, StartedAt: a.StartedAt, CompletedAt: a.CompletedAt, LastHeartbeatAt: a.LastHeartbeatAt,
		Heartbeats: a.Heartbeats, HeartbeatTicks: a.HeartbeatTicks, ProgressPct: a.ProgressPct, Message: a.Message,
		Checkpoint: a.Checkpoint, Error: (*errorInfoDoc)(a.Error), Output: a.Output, Metrics: (*metricsDoc)(a.Metrics),
		CancelledDuringPhase: a.CancelledDuringPhase, PartialProgress: a.PartialProgress, ReportedAt: a.ReportedAt,
		ExpireAt: a.ExpireAt, Execution: a.Execution, CompletionDigest: a.CompletionDigest,
	}
}

// fill sets every field of a from d.
func (d *attemptDoc) fill(a *task.Attempt) {
	*a = task.Attempt{
		Attempt: d.Attempt, Outcome: d.Outcome, WorkerID: d.WorkerID, CreatedAt: d.CreatedAt,
		ScheduledAt: d.ScheduledAt, StartedAt: d.StartedAt, CompletedAt: d.CompletedAt, LastHeartbeatAt: d.LastHeartbeatAt,
		Heartbeats: d.Heartbeats, HeartbeatTicks: d.HeartbeatTicks, ProgressPct: d.ProgressPct, Message: d.Message,
		Checkpoint: d.Checkpoint, Error: (*api.ErrorInfo)(d.Error), Output: d.Output, Metrics: (*api.Metrics)(d.Metrics),
		CancelledDuringPhase: d.CancelledDuringPhase, PartialProgress: d.PartialProgress, ReportedAt: d.ReportedAt,
		ExpireAt: d.ExpireAt, Execution: d.Execution, CompletionDigest: d.CompletionDigest,
	}
}

// stepDocsOf is a history as stored (nil stays nil, empty stays empty:
// the codec writes null for the one and an empty array for the other).
func stepDocsOf(h []task.Step) []stepDoc {
	if h == nil {
		return nil
	}
	out := make([]stepDoc, len(h))
	for i, s := range h {
		out[i] = stepDoc{Attempt: s.Attempt, From: s.From, To: s.To, Reason: s.Reason, Outcome: s.Outcome,
			Error: (*errorInfoDoc)(s.Error), NextAttempt: s.NextAttempt, Seq: s.Seq, OccurredAt: s.OccurredAt}
	}
	return out
}

// stepsOf is the history stored as h.
func stepsOf(h []stepDoc) []task.Step {
	if h == nil {
		return nil
	}
	out := make([]task.Step, len(h))
	for i, s := range h {
		out[i] = task.Step{Attempt: s.Attempt, From: s.From, To: s.To, Reason: s.Reason, Outcome: s.Outcome,
			Error: (*api.ErrorInfo)(s.Error), NextAttempt: s.NextAttempt, Seq: s.Seq, OccurredAt: s.OccurredAt}
	}
	return out
}

// transitionDocOf is tr as stored. It shares tr's error.
func transitionDocOf(tr *task.Transition) transitionDoc {
	return transitionDoc{
		EventID: tr.EventID, TaskID: tr.TaskID, RunID: tr.RunID, TenantID: tr.TenantID, WorkspaceID: tr.WorkspaceID,
		Worker: tr.Worker, Attempt: tr.Attempt, Priority: tr.Priority, From: tr.From, To: tr.To, Reason: tr.Reason, Outcome: tr.Outcome,
		Error: (*errorInfoDoc)(tr.Error), NextAttempt: tr.NextAttempt, Seq: tr.Seq, OccurredAt: tr.OccurredAt,
		DeadLetter: tr.DeadLetter, Trace: tr.Trace, ScheduleID: tr.ScheduleID, ScheduledFireAt: tr.ScheduledFireAt,
	}
}

// fill sets every field of tr from d.
func (d *transitionDoc) fill(tr *task.Transition) {
	*tr = d.transition()
}

// transition is the transition stored as d.
func (d *transitionDoc) transition() task.Transition {
	return task.Transition{
		EventID: d.EventID, TaskID: d.TaskID, RunID: d.RunID, TenantID: d.TenantID, WorkspaceID: d.WorkspaceID,
		Worker: d.Worker, Attempt: d.Attempt, Priority: d.Priority, From: d.From, To: d.To, Reason: d.Reason, Outcome: d.Outcome,
		Error: (*api.ErrorInfo)(d.Error), NextAttempt: d.NextAttempt, Seq: d.Seq, OccurredAt: d.OccurredAt,
		DeadLetter: d.DeadLetter, Trace: d.Trace, ScheduleID: d.ScheduleID, ScheduledFireAt: d.ScheduledFireAt,
	}
}

// transitionDocsOf is trs as stored (nil stays nil).
func transitionDocsOf(trs []task.Transition) []transitionDoc {
	if trs == nil {
		return nil
	}
	out := make([]transitionDoc, len(trs))
	for i := range trs {
		out[i] = transitionDocOf(&trs[i])
	}
	return out
}

// sweepStatusDocOf is st as stored.
func sweepStatusDocOf(st *api.SweepStatus) sweepStatusDoc {
	d := sweepStatusDoc{LastPassAt: st.LastPassAt, PassMs: st.PassMs, Passes: st.Passes, RedriveErrors: st.RedriveErrors}
	if st.Duties != nil {
		d.Duties = make(map[string]sweepDutyDoc, len(st.Duties))
		for k, v := range st.Duties {
			d.Duties[k] = sweepDutyDoc(v)
		}
	}
	return d
}

// fill sets every field of st from d.
func (d *sweepStatusDoc) fill(st *api.SweepStatus) {
	*st = api.SweepStatus{LastPassAt: d.LastPassAt, PassMs: d.PassMs, Passes: d.Passes, RedriveErrors: d.RedriveErrors}
	if d.Duties != nil {
		st.Duties = make(map[string]api.SweepDuty, len(d.Duties))
		for k, v := range d.Duties {
			st.Duties[k] = api.SweepDuty(v)
		}
	}
}
