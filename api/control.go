package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// SubmitRequest is the body of POST /v1/tasks (docs/contract.md §9.2).
// Timers are in milliseconds; absent ones take the defaults (heartbeat
// interval 30 s, heartbeat timeout max(90 s, 3 × interval), cancel grace
// 30 s).
type SubmitRequest struct {
	TenantID    string `json:"tenantId"`
	WorkspaceID string `json:"workspaceId"`
	// RunID groups tasks; a new one is generated when absent. When given it
	// must be a Servo run id ("run_" + ULID).
	RunID   string `json:"runId,omitempty"`
	TaskKey string `json:"taskKey"`
	AssetID string `json:"assetId,omitempty"`
	// Worker is a configured worker name; URLs are never accepted.
	Worker string `json:"worker"`
	// Payload is handed to the worker in the envelope.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Resources is a JSON object passed through to the envelope.
	Resources json.RawMessage `json:"resources,omitempty"`
	// Deadline is an RFC 3339 time in the future.
	Deadline string `json:"deadline,omitempty"`
	// StartAt (RFC 3339) or StartDelayMs, not both, delays the task's
	// start up to a year: no worker receives it before (docs/contract.md
	// §9.2). A time already past starts it now.
	StartAt             string        `json:"startAt,omitempty"`
	StartDelayMs        *int64        `json:"startDelayMs,omitempty"`
	HeartbeatIntervalMs *int64        `json:"heartbeatIntervalMs,omitempty"`
	HeartbeatTimeoutMs  *int64        `json:"heartbeatTimeoutMs,omitempty"`
	CancelGracePeriodMs *int64        `json:"cancelGracePeriodMs,omitempty"`
	Retry               *RetryRequest `json:"retry,omitempty"`
	// Priority is 1 (highest) to 5 (lowest), default 3: it orders what
	// waits (docs/contract.md §9.2).
	Priority *int `json:"priority,omitempty"`
	// IdempotencyKey makes a repeated submit (same tenant, same key) return
	// the task the first one created.
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// RerunOf names the finished task this one reruns (a task id); the
	// submit is refused with 409 while that task has not finished.
	RerunOf string `json:"rerunOf,omitempty"`
}

// RetryRequest is a submit's retry policy (docs/contract.md §6.3); absent
// fields take the defaults (3 attempts, 30 s initial backoff, coefficient 2, 10 min
// maximum backoff).
type RetryRequest struct {
	MaxAttempts        *int     `json:"maxAttempts,omitempty"`
	InitialBackoffMs   *int64   `json:"initialBackoffMs,omitempty"`
	BackoffCoefficient *float64 `json:"backoffCoefficient,omitempty"`
	MaxBackoffMs       *int64   `json:"maxBackoffMs,omitempty"`
	// MaxTotalAttempts bounds the attempts whatever their categories
	// (absent: the largest maxAttempts of the policies in force).
	MaxTotalAttempts *int `json:"maxTotalAttempts,omitempty"`
	// ByCategory gives a retryable category a policy of its own; its
	// absent fields are the task's (CONFLICT's: its default's, 5 s doubling
	// to a minute, 5 attempts).
	ByCategory map[Category]*CategoryRetryRequest `json:"byCategory,omitempty"`
}

// CategoryRetryRequest is one category's entry in RetryRequest.ByCategory.
type CategoryRetryRequest struct {
	MaxAttempts        *int     `json:"maxAttempts,omitempty"`
	InitialBackoffMs   *int64   `json:"initialBackoffMs,omitempty"`
	BackoffCoefficient *float64 `json:"backoffCoefficient,omitempty"`
	MaxBackoffMs       *int64   `json:"maxBackoffMs,omitempty"`
}

// SubmitResponse answers a submit: 201 for a new task, 200 for a repeated
// idempotency key.
type SubmitResponse struct {
	TaskID  string `json:"taskId"`
	RunID   string `json:"runId"`
	Attempt int    `json:"attempt"`
	State   State  `json:"state"`
}

// MaxBatchTasks is the most tasks one POST /v1/tasks:batch may hold.
const MaxBatchTasks = 500

// BatchRequest is the body of POST /v1/tasks:batch. Tasks without a runId
// join RunID, which is generated once when absent: a batch is one run
// unless its tasks say otherwise.
type BatchRequest struct {
	RunID string          `json:"runId,omitempty"`
	Tasks []SubmitRequest `json:"tasks"`
}

// BatchResult is one task's outcome in a BatchResponse, in request order.
type BatchResult struct {
	TaskID  string `json:"taskId"`
	RunID   string `json:"runId"`
	Attempt int    `json:"attempt,omitempty"`
	State   State  `json:"state,omitempty"`
	// Status is the HTTP status the task would have had on its own: 201
	// created, 200 repeated idempotency key, 503 not stored (retry).
	Status  int    `json:"status"`
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
}

// BatchResponse answers a batch: 201 when every task was stored and at
// least one is new, 200 when all were repeats, 207 when some failed (see
// each result's status), 503 when none could be stored.
type BatchResponse struct {
	RunID    string        `json:"runId"`
	Created  int           `json:"created"`
	Existing int           `json:"existing"`
	Failed   int           `json:"failed"`
	Tasks    []BatchResult `json:"tasks"`
	// Error and Message are set when no task could be stored (503).
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
}

// Task is a task as the control API shows it (docs/contract.md §9.4):
// identity, payload, state, the reason it ended, the current attempt,
// timers, retry policy, times, and (GET /v1/tasks/{id} only) every
// attempt's record.
type Task struct {
	TaskID       string `json:"taskId"`
	RunID        string `json:"runId"`
	TenantID     string `json:"tenantId"`
	WorkspaceID  string `json:"workspaceId"`
	TaskKey      string `json:"taskKey"`
	AssetID      string `json:"assetId,omitempty"`
	Worker       string `json:"worker"`
	State        State  `json:"state"`
	Reason       string `json:"reason,omitempty"`
	CancelReason string `json:"cancelReason,omitempty"`
	Attempt      int    `json:"attempt"`
	// Priority is 1 (highest) to 5 (lowest).
	Priority       int             `json:"priority"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	Resources      json.RawMessage `json:"resources,omitempty"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	// RerunOf is the task this one reruns.
	RerunOf string `json:"rerunOf,omitempty"`
	// ScheduleID and ScheduledFireAt are set on a schedule's fire
	// (docs/contract.md §16).
	ScheduleID      string     `json:"scheduleId,omitempty"`
	ScheduledFireAt *time.Time `json:"scheduledFireAt,omitempty"`

	HeartbeatIntervalMs int64       `json:"heartbeatIntervalMs"`
	HeartbeatTimeoutMs  int64       `json:"heartbeatTimeoutMs"`
	CancelGracePeriodMs int64       `json:"cancelGracePeriodMs"`
	StartTimeoutMs      int64       `json:"startTimeoutMs"`
	Retry               RetryPolicy `json:"retry"`
	Deadline            *time.Time  `json:"deadline,omitempty"`

	CreatedAt time.Time  `json:"createdAt"`
	UpdatedAt time.Time  `json:"updatedAt"`
	EndedAt   *time.Time `json:"endedAt,omitempty"`
	// ScheduledAt is when a QUEUED retry attempt is due to be delivered.
	ScheduledAt *time.Time `json:"scheduledAt,omitempty"`
	// WaitingSince is set while a QUEUED task waits for a run slot of its
	// tenant or worker (maxRunning; Reason is then QUOTA_WAIT).
	WaitingSince *time.Time `json:"waitingSince,omitempty"`
	// CancelDeadline is when a CANCELLING task's grace period ends.
	CancelDeadline *time.Time `json:"cancelDeadline,omitempty"`

	// Delivery is what the transport last said of a QUEUED push task's
	// dispatch: set when the sweeper found its delivery to the worker
	// failing (docs/contract.md §5.4), cleared when the attempt starts.
	Delivery *Delivery `json:"delivery,omitempty"`

	// Attempts are the attempt records, oldest first: outcome, worker id,
	// times, last heartbeat, progress, message, error, output, metrics.
	Attempts []Attempt `json:"attempts,omitempty"`
}

// Delivery is the state of a push task's delivery to its worker, as Cloud
// Tasks reported it when the sweeper last asked (CheckedAt): how many
// deliveries were tried for the current dispatch, the last one's status
// (Cloud Tasks' response status: a gRPC code name such as UNAVAILABLE for
// a refused connection or a 503, DEADLINE_EXCEEDED for a timeout, INTERNAL
// for another 5xx) and message, and when the next try is due.
type Delivery struct {
	Attempts      int        `json:"attempts"`
	LastStatus    string     `json:"lastStatus,omitempty"`
	LastError     string     `json:"lastError,omitempty"`
	LastAttemptAt *time.Time `json:"lastAttemptAt,omitempty"`
	NextTryAt     *time.Time `json:"nextTryAt,omitempty"`
	CheckedAt     time.Time  `json:"checkedAt"`
}

// ListResponse answers GET /v1/tasks: a page of tasks (without attempts)
// in creation order, and the token of the next page ("" on the last).
type ListResponse struct {
	Tasks         []Task `json:"tasks"`
	NextPageToken string `json:"nextPageToken,omitempty"`
}

// CountsResponse answers GET /v1/tasks:counts: how many tasks matching the
// filter are in each state (every state is present, zeros included).
type CountsResponse struct {
	Counts map[State]int `json:"counts"`
	Total  int           `json:"total"`
}

// EventsResponse answers GET /v1/tasks/{id}/events and
// GET /v1/runs/{runId}/events: the recorded transitions, each task's in seq
// order (a run's grouped by task), exactly as the events topic carries
// them. They are kept on the task's document (its most recent 200
// transitions) for as long as the task.
type EventsResponse struct {
	Events []Event `json:"events"`
}

// Run is a run as GET /v1/runs shows it.
type Run struct {
	RunID    string `json:"runId"`
	TenantID string `json:"tenantId"`
	// CreatedAt is the time in the run id (when it was generated).
	CreatedAt time.Time `json:"createdAt"`
	// LastSubmitAt is when tasks were last submitted to the run.
	LastSubmitAt time.Time `json:"lastSubmitAt"`
}

// RunsResponse answers GET /v1/runs: a page of runs, newest first.
type RunsResponse struct {
	Runs          []Run  `json:"runs"`
	NextPageToken string `json:"nextPageToken,omitempty"`
}

// CancelRequest is the optional body of POST /v1/tasks/{id}/cancel and
// POST /v1/runs/{runId}/cancel. An empty body cancels with reason
// "user_requested".
type CancelRequest struct {
	// Reason is recorded as the task's reason and handed to the worker.
	Reason string `json:"reason,omitempty"`
}

// RunCancelResponse answers POST /v1/runs/{runId}/cancel with counts.
type RunCancelResponse struct {
	RunID string `json:"runId"`
	// Matched counts the run's tasks, terminal ones included.
	Matched int `json:"matched"`
	// Cancelled counts tasks that became CANCELLED (they were PENDING or QUEUED).
	Cancelled int `json:"cancelled"`
	// Cancelling counts tasks that are now CANCELLING (they were running).
	Cancelling int `json:"cancelling"`
	// AlreadyTerminal counts tasks that had ended before the cancel.
	AlreadyTerminal int `json:"alreadyTerminal"`
	// Failed counts tasks the store could not cancel now; retry the request.
	Failed int `json:"failed"`
	// Error and Message are set with a 503: some tasks were not cancelled.
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
}

// HealthResponse answers GET /v1/health: what operators check to tell
// whether Servo's background work is alive.
type HealthResponse struct {
	// ServerTime is the API's clock.
	ServerTime time.Time `json:"serverTime"`
	// Sweeper is the latest sweeper pass; nil when none was ever recorded.
	Sweeper *SweeperHealth `json:"sweeper"`
	// Identity says how the API identifies its callers.
	Identity IdentityHealth `json:"identity"`
}

// IdentityHealth says how the API identifies its callers, as GET
// /v1/health shows it.
type IdentityHealth struct {
	// Accepts names the identities the API verifies: "google" (Google ID
	// tokens for the API's audiences), "iap" (IAP's signed header), "dev"
	// (servo dev's tokens). Empty: none (only the open policy lets
	// callers in, as anonymous).
	Accepts []string `json:"accepts"`
	// Problems are configuration problems an operator must fix (servo
	// doctor fails on them), such as an unset API audience.
	Problems []string `json:"problems,omitempty"`
}

// SweeperHealth is the latest sweeper pass as GET /v1/health shows it.
type SweeperHealth struct {
	SweepStatus
	// AgeMs is the time since that pass ended, by the API's clock.
	AgeMs int64 `json:"ageMs"`
}

// UsageResponse answers GET /v1/tenants/{tenant}/usage.
type UsageResponse struct {
	TenantID string `json:"tenantId"`
	// Running counts the tenant's tasks holding a run slot: RUNNING or
	// CANCELLING, and (for a limited tenant) those enqueued to their worker
	// and not yet started.
	Running int `json:"running"`
	// Queued counts the tenant's tasks PENDING or QUEUED.
	Queued int `json:"queued"`
	// Limits are the tenant's limits (0: unlimited).
	Limits Limits `json:"limits"`
	// Source says where the figures come from: "counters" (the quota
	// counter shards of a limited tenant, one query) or "tasks" (count
	// aggregations over the tenant's tasks).
	Source string `json:"source"`
}

// Error is an error answer of the control API, the callbacks' and claims'
// transport errors included: its JSON is the answer's body, and Status the
// HTTP status, which the body does not carry. Clients and the worker SDK
// return it as a *Error.
type Error struct {
	// Status is the answer's HTTP status.
	Status int `json:"-"`
	// Code is the machine-readable code (invalid_request, task_not_found, …:
	// the Code constants).
	Code string `json:"error"`
	// Field names the offending request field (invalid_request).
	Field string `json:"field,omitempty"`
	// Message is for people.
	Message string `json:"message"`
	// Disposition tells a worker what to do next, where the answer is a
	// worker's (claims).
	Disposition Disposition `json:"disposition,omitempty"`
	// State is the task's state (task_already_terminal, task_not_terminal).
	State State `json:"state,omitempty"`
	// LimitBytes is the limit that was exceeded (payload_too_large).
	LimitBytes int64 `json:"limitBytes,omitempty"`
}

// ErrNotFound matches, with errors.Is, an *Error whose status is 404.
var ErrNotFound = errors.New("not found")

func (e *Error) Error() string {
	s := fmt.Sprintf("%d %s", e.Status, e.Code)
	if e.Field != "" {
		s += " (" + e.Field + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Is reports whether target is ErrNotFound and e a 404.
func (e *Error) Is(target error) bool {
	return target == ErrNotFound && e.Status == http.StatusNotFound
}

// Event is the JSON body of a message on the events topic: one task
// transition (docs/contract.md §8.2). Delivery is at least once; EventID
// identifies duplicates and Seq orders a task's events.
type Event struct {
	// EventID is deterministic from the task and Seq: a repeated delivery
	// carries the same id, and no two transitions of a task share one.
	EventID     string `json:"eventId"`
	TaskID      string `json:"taskId"`
	RunID       string `json:"runId"`
	TenantID    string `json:"tenantId"`
	WorkspaceID string `json:"workspaceId"`
	// Worker is the task's worker name.
	Worker string `json:"worker,omitempty"`
	// Attempt is the attempt the transition happened in.
	Attempt int `json:"attempt"`
	// Priority is the task's priority (1 highest, 5 lowest).
	Priority int `json:"priority"`
	// From is the previous state; empty for the creation event.
	From State `json:"from,omitempty"`
	To   State `json:"to"`
	// Reason is the machine's reason (SUBMITTED, ENQUEUED, RETRY_SCHEDULED, …).
	Reason     string    `json:"reason,omitempty"`
	OccurredAt time.Time `json:"occurredAt"`
	// Outcome is the attempt's outcome when the transition ended it.
	Outcome Outcome `json:"outcome,omitempty"`
	// Error is the attempt's error when the transition ended it with one.
	Error *ErrorInfo `json:"error,omitempty"`
	// NextAttempt is set when a retry was scheduled (to = QUEUED).
	NextAttempt int `json:"nextAttempt,omitempty"`
	// Seq numbers the task's transitions from 1, without gaps.
	Seq int64 `json:"seq"`
	// ScheduleID and ScheduledFireAt are set on a schedule's fire.
	ScheduleID      string     `json:"scheduleId,omitempty"`
	ScheduledFireAt *time.Time `json:"scheduledFireAt,omitempty"`
}

// SweepStatus is the document meta/sweeper: the latest sweeper pass, written
// once at the end of every pass (one write per pass, Every apart: far below
// a document's sustained write rate). Operators, `servo doctor` and the
// dashboard read it to tell whether the sweeper is alive and keeping up.
type SweepStatus struct {
	// LastPassAt is when the latest pass ended.
	LastPassAt time.Time `json:"lastPassAt"`
	// PassMs is how long that pass took.
	PassMs int64 `json:"passMs"`
	// Passes counts the passes recorded since the document was created
	// (an increment, so that concurrent sweeper instances do not lose
	// counts).
	Passes int64 `json:"passes"`
	// Duties holds each duty's figures by duty name (deadline, cancel,
	// lease, dispatch).
	Duties map[string]SweepDuty `json:"duties"`
	// RedriveErrors is 1 when the pass's outbox re-drive failed.
	RedriveErrors int `json:"redriveErrors"`
}

// SweepDuty is what one duty of a sweeper pass did.
type SweepDuty struct {
	// Due is the number of due tasks the duty's query returned.
	Due int `json:"due"`
	// Applied is the number of committed transitions or re-drives.
	Applied int `json:"applied"`
	// Errors counts failed transactions and queries.
	Errors int `json:"errors"`
	// MaxLagMs is the longest time between a handled task's due time and
	// its transaction (0 when nothing was applied).
	MaxLagMs int64 `json:"maxLagMs"`
}

// Attempt is one attempt's record as the control API shows it.
type Attempt struct {
	Attempt         int             `json:"attempt"`
	Outcome         Outcome         `json:"outcome,omitempty"`
	WorkerID        string          `json:"workerId,omitempty"`
	CreatedAt       time.Time       `json:"createdAt"`
	ScheduledAt     *time.Time      `json:"scheduledAt,omitempty"`
	StartedAt       *time.Time      `json:"startedAt,omitempty"`
	CompletedAt     *time.Time      `json:"completedAt,omitempty"`
	LastHeartbeatAt *time.Time      `json:"lastHeartbeatAt,omitempty"`
	ProgressPct     *int            `json:"progressPct,omitempty"`
	Message         string          `json:"message,omitempty"`
	Checkpoint      json.RawMessage `json:"checkpoint,omitempty"`
	Error           *ErrorInfo      `json:"error,omitempty"`
	Output          json.RawMessage `json:"output,omitempty"`
	Metrics         *Metrics        `json:"metrics,omitempty"`
	// CancelledDuringPhase and PartialProgress come with a CANCELLED report.
	CancelledDuringPhase string          `json:"cancelledDuringPhase,omitempty"`
	PartialProgress      json.RawMessage `json:"partialProgress,omitempty"`
	// ReportedAt is the worker's own completedAt (informational).
	ReportedAt *time.Time `json:"reportedAt,omitempty"`
	// Execution is the Cloud Run Job execution that runs the attempt (job
	// workers only): projects/P/locations/L/jobs/J/executions/E.
	Execution string `json:"execution,omitempty"`
	// RetryPolicy is the policy in force for the category of the attempt's
	// error (docs/contract.md §6.3), on an attempt that failed with one.
	RetryPolicy *CategoryRetry `json:"retryPolicy,omitempty"`
}

// Limits are a tenant's or a worker's quota limits; 0 is unlimited.
type Limits struct {
	// MaxRunning bounds the tasks holding a run slot: RUNNING or CANCELLING,
	// or enqueued to their worker and not yet started. Tasks past it stay
	// QUEUED, without a Cloud Task, until a slot frees.
	MaxRunning int `json:"maxRunning,omitempty"`
	// MaxQueued bounds the tasks PENDING or QUEUED; a submit past it is
	// refused (429 quota_exceeded).
	MaxQueued int `json:"maxQueued,omitempty"`
}

// DeadLetter is the JSON body of a message on the dead-letter topic: a task
// that ended FAILED with no retry left (retries exhausted, non-retryable
// error, timeouts), with its error and every attempt's record.
type DeadLetter struct {
	// EventID is the id of the transition to FAILED (same as on the events
	// topic), so duplicates are detectable here too.
	EventID     string `json:"eventId"`
	TaskID      string `json:"taskId"`
	RunID       string `json:"runId"`
	TenantID    string `json:"tenantId"`
	WorkspaceID string `json:"workspaceId"`
	Worker      string `json:"worker,omitempty"`
	State       State  `json:"state"`
	// Reason says why the task failed (RETRIES_EXHAUSTED, NON_RETRYABLE,
	// HEARTBEAT_TIMEOUT, DEADLINE_EXCEEDED, DISPATCH_TIMEOUT, CANCEL_TIMEOUT, …).
	Reason string `json:"reason"`
	// Attempt is the last attempt.
	Attempt int `json:"attempt"`
	// Priority is the task's priority (1 highest, 5 lowest).
	Priority   int       `json:"priority"`
	Outcome    Outcome   `json:"outcome,omitempty"`
	OccurredAt time.Time `json:"occurredAt"`
	// Error is the last attempt's error; when no worker reported one (a
	// timeout) it is synthesized from the reason.
	Error *ErrorInfo `json:"error"`
	// Attempts is the attempt history, oldest first (the latest ones only
	// when OmittedAttempts > 0).
	Attempts []Attempt `json:"attempts"`
	// Truncated is set when the full dead letter would exceed 1 MiB: large
	// fields (output, checkpoint, partial progress, messages, stack traces)
	// are then cut to 2 KiB, strings marked "…[truncated; N bytes]" and
	// JSON values replaced by {"truncated": true, "bytes": N, "head": "…"},
	// and, if that is not enough, the oldest attempts are left out.
	Truncated bool `json:"truncated,omitempty"`
	// OmittedAttempts is how many of the oldest attempts were left out.
	OmittedAttempts int `json:"omittedAttempts,omitempty"`
}
