package task

import (
	"encoding/json"
	"time"

	"github.com/servo-dev/servo/api"
)

// Task is the control plane's record of one unit of work. It is stored
// as the Firestore document tasks/{hhhh}_{taskId} (package store's
// taskDoc decides the stored fields and their names) and, with its
// attempts, is the control API's JSON.
type Task struct {
	ID             string          `json:"taskId"`
	RunID          string          `json:"runId"`
	TenantID       string          `json:"tenantId"`
	WorkspaceID    string          `json:"workspaceId"`
	TaskKey        string          `json:"taskKey"`
	AssetID        string          `json:"assetId,omitempty"`
	Worker         string          `json:"worker"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	Resources      json.RawMessage `json:"resources,omitempty"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	// Priority is 1 (highest) to 5 (lowest); 0 in documents written
	// before priorities existed, which PriorityOf reads as the default.
	Priority int `json:"priority"`
	// OwnRun: the task is its run's only task, in a run Servo named for it
	// (a submit without a runId). No run document is written for it: the
	// runs listing reads the task instead (store.ListRuns). Not in the
	// API's JSON.
	OwnRun bool `json:"-"`
	// RerunOf is the id of the task this one reruns (servo rerun).
	RerunOf string `json:"rerunOf,omitempty"`
	// ScheduleID and ScheduledFireAt are set on a schedule's fire: the
	// schedule (of the task's tenant) and the fire time it was made for.
	ScheduleID      string     `json:"scheduleId,omitempty"`
	ScheduledFireAt *time.Time `json:"scheduledFireAt,omitempty"`

	State api.State `json:"state"`
	// Reason says why the task ended (or is cancelling).
	Reason string `json:"reason,omitempty"`
	// CancelReason is the reason given to cancel, handed to the worker.
	CancelReason string `json:"cancelReason,omitempty"`
	// Attempt is the current attempt number, from 1; it only grows.
	Attempt int `json:"attempt"`
	// Seq counts transitions; the next transition has Seq+1.
	Seq int64 `json:"seq"`

	Timing   api.Timing      `json:"timing"`
	Retry    api.RetryPolicy `json:"retry"`
	Deadline *time.Time      `json:"deadline,omitempty"`
	// Failures counts the attempts that failed in each category with a
	// policy of its own (Retry.For), for its maxAttempts; the categories
	// without one share the rest of the attempts (FailedIn). Not in the
	// API's JSON.
	Failures map[api.Category]int `json:"-"`

	CreatedAt time.Time  `json:"createdAt"`
	UpdatedAt time.Time  `json:"updatedAt"`
	EndedAt   *time.Time `json:"endedAt,omitempty"`
	// ExpireAt is when Firestore may delete the ended task (a TTL policy):
	// its end plus its tenant's retention; nil while it runs.
	ExpireAt *time.Time `json:"-"`

	// NotBefore is the schedule time of the current attempt: a retry's,
	// or the first attempt's delayed start (startAt).
	NotBefore *time.Time `json:"notBefore,omitempty"`
	// EnqueueAt, set on a delayed start further ahead than its worker's
	// transport can hold (EnqueueHorizon, PullHorizon), is when the task
	// is handed to it: until then it waits QUEUED in Firestore alone, and
	// the sweeper's dispatch duty enqueues it then (DispatchCheckAt).
	EnqueueAt *time.Time `json:"enqueueAt,omitempty"`
	// LeaseExpiresAt is when a RUNNING/CANCELLING attempt becomes a zombie.
	LeaseExpiresAt *time.Time `json:"leaseExpiresAt,omitempty"`
	// CancelDeadline is when a CANCELLING task times out.
	CancelDeadline *time.Time `json:"cancelDeadline,omitempty"`
	// DispatchCheckAt is when the sweeper next looks at a PENDING/QUEUED
	// task's dispatch: to probe its delivery while the start timeout runs
	// (StartTimeoutAt), then to re-drive it when it counts as stuck.
	DispatchCheckAt *time.Time `json:"dispatchCheckAt,omitempty"`
	// StartTimeoutAt is when a QUEUED attempt handed to its transport counts
	// as stuck (its start timeout ends); nil when DispatchCheckAt is that
	// time itself (a PENDING task, a document written before it existed).
	StartTimeoutAt *time.Time `json:"-"`
	// Delivery is what Cloud Tasks last said of a QUEUED push attempt whose
	// deliveries are failing (probeDelivery); nil once it starts.
	Delivery *api.Delivery `json:"delivery,omitempty"`
	// DueShard spreads the sweeper's due indexes: fixed at creation in
	// [0, shards), it leads every due index, so that no index sees one
	// steadily increasing run of writes (see store.DueShardOf).
	DueShard int `json:"-"`
	// Redrives counts re-enqueues of the current attempt by the sweeper;
	// re-drive n is created under its own Cloud Tasks name (RedriveName).
	Redrives int `json:"redrives"`
	// ResumeFrom is the last checkpoint of an earlier attempt, handed to
	// the current attempt in its envelope.
	ResumeFrom json.RawMessage `json:"resumeFrom,omitempty"`
	// Quota is where a task of a limited tenant or worker keeps its counts
	// (nil when no quota applies); see QuotaHold.
	Quota *QuotaHold `json:"-"`
	// WaitingSince is set while a QUEUED task waits for a run slot (its
	// tenant or worker is at maxRunning): it has no Cloud Task yet, and the
	// sweeper's admit duty hands it one, oldest first, when a slot frees.
	WaitingSince *time.Time `json:"waitingSince,omitempty"`

	// Live is the current attempt's heartbeat state (and a retry's
	// creation and schedule), kept on the task document so that a
	// heartbeat reads and writes one small document. The
	// store folds it into the attempt record at the attempt's transitions
	// that change something else of it (an outcome) and
	// overlays it on reads (Attempts shows it); it is not part of the
	// API's JSON.
	Live *LiveAttempt `json:"-"`

	// Ended is the record of the current attempt once it has ended, when
	// the store keeps it on the task document instead of a document of its
	// own (a task whose last attempt ended without a retry, and whose
	// record fits: store.Apply). Not in the API's JSON; reads show it among
	// the attempts.
	Ended *Attempt `json:"-"`
	// Recorded says whether the current attempt has a record document, so
	// that a transition reads one only when there is one; nil in documents
	// written before it existed (the store then looks the record up).
	Recorded *bool `json:"-"`

	// Trace is the W3C traceparent of the span that submitted the task
	// (package telemetry), so that later hops (the sweeper) can link to the
	// task's trace; empty when the submit was not traced. Not in the API's
	// JSON.
	Trace string `json:"-"`

	// History is the task's recent transitions, oldest first, bounded
	// (HistoryLimit, HistoryBytes) and exempt from indexing: the events
	// endpoints read it. Every commit that transitions the task appends to
	// it; tasks written before it existed have none. Not in the API's JSON.
	History []Step `json:"-"`

	// Attempts is the per-attempt history; filled by reads that ask for it
	// (stored as documents tasks/{id}/attempts/{n}, not in this document).
	Attempts []Attempt `json:"attempts,omitempty"`
}

// FailedIn is how many of the task's attempts before the current one
// failed in category c: Failures[c] for a category with a policy of its
// own (own), otherwise the earlier attempts not counted in Failures (every
// earlier attempt failed: it was retried).
func (t *Task) FailedIn(c api.Category, own bool) int {
	if own {
		return t.Failures[c]
	}
	n := t.Attempt - 1
	for _, k := range t.Failures {
		n -= k
	}
	return max(n, 0)
}

// Attempt is the record of one attempt: tasks/{taskId}/attempts/{n}.
type Attempt struct {
	Attempt         int         `json:"attempt"`
	Outcome         api.Outcome `json:"outcome,omitempty"`
	WorkerID        string      `json:"workerId,omitempty"`
	CreatedAt       time.Time   `json:"createdAt"`
	ScheduledAt     *time.Time  `json:"scheduledAt,omitempty"`
	StartedAt       *time.Time  `json:"startedAt,omitempty"`
	CompletedAt     *time.Time  `json:"completedAt,omitempty"`
	LastHeartbeatAt *time.Time  `json:"lastHeartbeatAt,omitempty"`
	// Heartbeats counts the heartbeats the attempt received;
	// HeartbeatTicks keeps a bounded sample of their instants (read them
	// with HeartbeatTimes).
	Heartbeats     int             `json:"-"`
	HeartbeatTicks []byte          `json:"-"`
	ProgressPct    *int            `json:"progressPct,omitempty"`
	Message        string          `json:"message,omitempty"`
	Checkpoint     json.RawMessage `json:"checkpoint,omitempty"`
	Error          *api.ErrorInfo  `json:"error,omitempty"`
	Output         json.RawMessage `json:"output,omitempty"`
	Metrics        *api.Metrics    `json:"metrics,omitempty"`
	// CancelledDuringPhase and PartialProgress come with a CANCELLED report.
	CancelledDuringPhase string          `json:"cancelledDuringPhase,omitempty"`
	PartialProgress      json.RawMessage `json:"partialProgress,omitempty"`
	// ReportedAt is the worker's own completedAt (informational).
	ReportedAt *time.Time `json:"reportedAt,omitempty"`
	// ExpireAt is when Firestore may delete the ended attempt's record (a
	// TTL policy; setExpiry).
	ExpireAt *time.Time `json:"-"`
	// Execution is the Cloud Run Job execution that runs the attempt (job
	// workers only): projects/P/locations/L/jobs/J/executions/E.
	Execution string `json:"execution,omitempty"`
	// CompletionDigest identifies the accepted `completed` report, so an
	// identical repeat replays and a different one conflicts.
	CompletionDigest string `json:"-"`
}

// LiveAttempt is what a heartbeat changes of the current attempt, stored
// on the task document (Task.Live), and a later attempt's creation (its
// record is written when it holds something more).
type LiveAttempt struct {
	Attempt         int
	CreatedAt       *time.Time
	ScheduledAt     *time.Time
	WorkerID        string
	StartedAt       *time.Time
	LastHeartbeatAt *time.Time
	Heartbeats      int
	HeartbeatTicks  []byte
	ProgressPct     *int
	Message         string
	Checkpoint      json.RawMessage
	// Execution is the attempt's Cloud Run Job execution (job workers).
	Execution string
}

// View is the attempt's record as the control API, the dead letters and
// the dashboard show it.
func (a Attempt) View() api.Attempt {
	return api.Attempt{
		Attempt: a.Attempt, Outcome: a.Outcome, WorkerID: a.WorkerID, CreatedAt: a.CreatedAt, ScheduledAt: a.ScheduledAt,
		StartedAt: a.StartedAt, CompletedAt: a.CompletedAt, LastHeartbeatAt: a.LastHeartbeatAt, ProgressPct: a.ProgressPct,
		Message: a.Message, Checkpoint: a.Checkpoint, Error: a.Error, Output: a.Output, Metrics: a.Metrics,
		CancelledDuringPhase: a.CancelledDuringPhase, PartialProgress: a.PartialProgress, ReportedAt: a.ReportedAt,
		Execution: a.Execution,
	}
}

// Ended reports whether the attempt has an outcome.
func (a *Attempt) Ended() bool { return a.Outcome != "" }

// Transition is the event every state change produces (docs/contract.md
// §8.2). It is written to the outbox in the transaction that makes the
// change.
type Transition struct {
	// EventID is deterministic from (task, seq): a repeat
	// delivery carries the same id.
	EventID     string         `json:"eventId"`
	TaskID      string         `json:"taskId"`
	RunID       string         `json:"runId"`
	TenantID    string         `json:"tenantId"`
	WorkspaceID string         `json:"workspaceId"`
	Worker      string         `json:"worker,omitempty"`
	Attempt     int            `json:"attempt"`
	Priority    int            `json:"priority"`
	From        api.State      `json:"from,omitempty"`
	To          api.State      `json:"to"`
	Reason      string         `json:"reason,omitempty"`
	Outcome     api.Outcome    `json:"outcome,omitempty"`
	Error       *api.ErrorInfo `json:"error,omitempty"`
	NextAttempt int            `json:"nextAttempt,omitempty"`
	Seq         int64          `json:"seq"`
	OccurredAt  time.Time      `json:"occurredAt"`
	// DeadLetter marks a task that ended FAILED with no retry left.
	DeadLetter bool `json:"deadLetter,omitempty"`
	// ScheduleID and ScheduledFireAt are the task's (a schedule's fire).
	ScheduleID      string     `json:"scheduleId,omitempty"`
	ScheduledFireAt *time.Time `json:"scheduledFireAt,omitempty"`
	// Trace is the W3C traceparent of the span that committed the
	// transition; the events publisher puts it in the message's
	// attributes, not in the event's JSON.
	Trace string `json:"-"`
}
