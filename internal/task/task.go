package task

import (
	"encoding/json"
	"time"

	"github.com/servo-dev/servo/api"
)

// Task is the control plane's record of one unit of work. It is the
// Firestore document tasks/{taskId} (field names are the firestore tags)
// and, with its attempts, the control API's JSON.
type Task struct {
	ID             string          `json:"taskId" firestore:"taskId"`
	RunID          string          `json:"runId" firestore:"runId"`
	TenantID       string          `json:"tenantId" firestore:"tenantId"`
	WorkspaceID    string          `json:"workspaceId" firestore:"workspaceId"`
	TaskKey        string          `json:"taskKey" firestore:"taskKey"`
	AssetID        string          `json:"assetId,omitempty" firestore:"assetId"`
	Worker         string          `json:"worker" firestore:"worker"`
	Payload        json.RawMessage `json:"payload,omitempty" firestore:"payload"`
	Resources      json.RawMessage `json:"resources,omitempty" firestore:"resources"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty" firestore:"idempotencyKey"`
	// OwnRun: the task is its run's only task, in a run Servo named for it
	// (a submit without a runId). No run document is written for it: the
	// runs listing reads the task instead (store.ListRuns). Not in the
	// API's JSON.
	OwnRun bool `json:"-" firestore:"ownRun"`
	// RerunOf is the id of the task this one reruns (servo rerun).
	RerunOf string `json:"rerunOf,omitempty" firestore:"rerunOf"`

	State api.State `json:"state" firestore:"state"`
	// Reason says why the task ended (or is cancelling).
	Reason string `json:"reason,omitempty" firestore:"reason"`
	// CancelReason is the reason given to cancel, handed to the worker.
	CancelReason string `json:"cancelReason,omitempty" firestore:"cancelReason"`
	// Attempt is the current attempt number, from 1; it only grows.
	Attempt int `json:"attempt" firestore:"attempt"`
	// Seq counts transitions; the next transition has Seq+1.
	Seq int64 `json:"seq" firestore:"seq"`

	Timing   api.Timing      `json:"timing" firestore:"timing"`
	Retry    api.RetryPolicy `json:"retry" firestore:"retry"`
	Deadline *time.Time      `json:"deadline,omitempty" firestore:"deadline"`

	CreatedAt time.Time  `json:"createdAt" firestore:"createdAt"`
	UpdatedAt time.Time  `json:"updatedAt" firestore:"updatedAt"`
	EndedAt   *time.Time `json:"endedAt,omitempty" firestore:"endedAt"`
	// ExpireAt is when Firestore may delete the ended task (a TTL policy):
	// its end plus its tenant's retention; nil while it runs.
	ExpireAt *time.Time `json:"-" firestore:"expireAt"`

	// NotBefore is the schedule time of the current attempt (retries).
	NotBefore *time.Time `json:"notBefore,omitempty" firestore:"notBefore"`
	// LeaseExpiresAt is when a RUNNING/CANCELLING attempt becomes a zombie.
	LeaseExpiresAt *time.Time `json:"leaseExpiresAt,omitempty" firestore:"leaseExpiresAt"`
	// CancelDeadline is when a CANCELLING task times out.
	CancelDeadline *time.Time `json:"cancelDeadline,omitempty" firestore:"cancelDeadline"`
	// DispatchCheckAt is when a PENDING/QUEUED task counts as stuck.
	DispatchCheckAt *time.Time `json:"dispatchCheckAt,omitempty" firestore:"dispatchCheckAt"`
	// DueShard spreads the sweeper's due indexes: fixed at creation in
	// [0, shards), it leads every due index, so that no index sees one
	// steadily increasing run of writes (see store.DueShardOf).
	DueShard int `json:"-" firestore:"dueShard"`
	// Redrives counts re-enqueues of the current attempt by the sweeper;
	// re-drive n is created under its own Cloud Tasks name (RedriveName).
	Redrives int `json:"redrives" firestore:"redrives"`
	// ResumeFrom is the last checkpoint of an earlier attempt, handed to
	// the current attempt in its envelope.
	ResumeFrom json.RawMessage `json:"resumeFrom,omitempty" firestore:"resumeFrom"`
	// Quota is where a task of a limited tenant or worker keeps its counts
	// (nil when no quota applies); see QuotaHold.
	Quota *QuotaHold `json:"-" firestore:"quota"`
	// WaitingSince is set while a QUEUED task waits for a run slot (its
	// tenant or worker is at maxRunning): it has no Cloud Task yet, and the
	// sweeper's admit duty hands it one, oldest first, when a slot frees.
	WaitingSince *time.Time `json:"waitingSince,omitempty" firestore:"waitingSince"`

	// Live is the current attempt's heartbeat state (and a retry's
	// creation and schedule), kept on the task document so that a
	// heartbeat reads and writes one small document. The
	// store folds it into the attempt record at the attempt's transitions
	// that change something else of it (an outcome) and
	// overlays it on reads (Attempts shows it); it is not part of the
	// API's JSON.
	Live *LiveAttempt `json:"-" firestore:"live"`

	// Ended is the record of the current attempt once it has ended, when
	// the store keeps it on the task document instead of a document of its
	// own (a task whose last attempt ended without a retry, and whose
	// record fits: store.Apply). Not in the API's JSON; reads show it among
	// the attempts.
	Ended *Attempt `json:"-" firestore:"endedAttempt"`
	// Recorded says whether the current attempt has a record document, so
	// that a transition reads one only when there is one; nil in documents
	// written before it existed (the store then looks the record up).
	Recorded *bool `json:"-" firestore:"recorded"`

	// Trace is the W3C traceparent of the span that submitted the task
	// (package telemetry), so that later hops (the sweeper) can link to the
	// task's trace; empty when the submit was not traced. Not in the API's
	// JSON.
	Trace string `json:"-" firestore:"trace"`

	// History is the task's recent transitions, oldest first, bounded
	// (HistoryLimit, HistoryBytes) and exempt from indexing: the events
	// endpoints read it. Every commit that transitions the task appends to
	// it; tasks written before it existed have none. Not in the API's JSON.
	History []Step `json:"-" firestore:"history"`

	// Attempts is the per-attempt history; filled by reads that ask for it
	// (stored as documents tasks/{id}/attempts/{n}, not in this document).
	Attempts []Attempt `json:"attempts,omitempty" firestore:"-"`
}

// Attempt is the record of one attempt: tasks/{taskId}/attempts/{n}.
type Attempt struct {
	Attempt         int         `json:"attempt" firestore:"attempt"`
	Outcome         api.Outcome `json:"outcome,omitempty" firestore:"outcome"`
	WorkerID        string      `json:"workerId,omitempty" firestore:"workerId"`
	CreatedAt       time.Time   `json:"createdAt" firestore:"createdAt"`
	ScheduledAt     *time.Time  `json:"scheduledAt,omitempty" firestore:"scheduledAt"`
	StartedAt       *time.Time  `json:"startedAt,omitempty" firestore:"startedAt"`
	CompletedAt     *time.Time  `json:"completedAt,omitempty" firestore:"completedAt"`
	LastHeartbeatAt *time.Time  `json:"lastHeartbeatAt,omitempty" firestore:"lastHeartbeatAt"`
	// Heartbeats counts the heartbeats the attempt received;
	// HeartbeatTicks keeps a bounded sample of their instants (read them
	// with HeartbeatTimes).
	Heartbeats     int             `json:"-" firestore:"heartbeats"`
	HeartbeatTicks []byte          `json:"-" firestore:"heartbeatTicks"`
	ProgressPct    *int            `json:"progressPct,omitempty" firestore:"progressPct"`
	Message        string          `json:"message,omitempty" firestore:"message"`
	Checkpoint     json.RawMessage `json:"checkpoint,omitempty" firestore:"checkpoint"`
	Error          *api.ErrorInfo  `json:"error,omitempty" firestore:"error"`
	Output         json.RawMessage `json:"output,omitempty" firestore:"output"`
	Metrics        *api.Metrics    `json:"metrics,omitempty" firestore:"metrics"`
	// CancelledDuringPhase and PartialProgress come with a CANCELLED report.
	CancelledDuringPhase string          `json:"cancelledDuringPhase,omitempty" firestore:"cancelledDuringPhase"`
	PartialProgress      json.RawMessage `json:"partialProgress,omitempty" firestore:"partialProgress"`
	// ReportedAt is the worker's own completedAt (informational).
	ReportedAt *time.Time `json:"reportedAt,omitempty" firestore:"reportedAt"`
	// ExpireAt is when Firestore may delete the ended attempt's record (a
	// TTL policy; setExpiry).
	ExpireAt *time.Time `json:"-" firestore:"expireAt"`
	// Execution is the Cloud Run Job execution that runs the attempt (job
	// workers only): projects/P/locations/L/jobs/J/executions/E.
	Execution string `json:"execution,omitempty" firestore:"execution"`
	// CompletionDigest identifies the accepted `completed` report, so an
	// identical repeat replays and a different one conflicts.
	CompletionDigest string `json:"-" firestore:"completionDigest"`
}

// LiveAttempt is what a heartbeat changes of the current attempt, stored
// on the task document (Task.Live), and a later attempt's creation (its
// record is written when it holds something more).
type LiveAttempt struct {
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
	// Execution is the attempt's Cloud Run Job execution (job workers).
	Execution string `firestore:"execution"`
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
	EventID     string         `json:"eventId" firestore:"eventId"`
	TaskID      string         `json:"taskId" firestore:"taskId"`
	RunID       string         `json:"runId" firestore:"runId"`
	TenantID    string         `json:"tenantId" firestore:"tenantId"`
	WorkspaceID string         `json:"workspaceId" firestore:"workspaceId"`
	Worker      string         `json:"worker,omitempty" firestore:"worker"`
	Attempt     int            `json:"attempt" firestore:"attempt"`
	From        api.State      `json:"from,omitempty" firestore:"from"`
	To          api.State      `json:"to" firestore:"to"`
	Reason      string         `json:"reason,omitempty" firestore:"reason"`
	Outcome     api.Outcome    `json:"outcome,omitempty" firestore:"outcome"`
	Error       *api.ErrorInfo `json:"error,omitempty" firestore:"error"`
	NextAttempt int            `json:"nextAttempt,omitempty" firestore:"nextAttempt"`
	Seq         int64          `json:"seq" firestore:"seq"`
	OccurredAt  time.Time      `json:"occurredAt" firestore:"occurredAt"`
	// DeadLetter marks a task that ended FAILED with no retry left.
	DeadLetter bool `json:"deadLetter,omitempty" firestore:"deadLetter"`
	// Trace is the W3C traceparent of the span that committed the
	// transition; the events publisher puts it in the message's
	// attributes, not in the event's JSON.
	Trace string `json:"-" firestore:"trace"`
}
