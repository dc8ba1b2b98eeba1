package api

import (
	"encoding/json"
	"time"
)

// Envelope is what Cloud Tasks pushes to a worker (docs/contract.md §2,
// camelCase), plus the worker name, payload and the checkpoint to resume
// from.
type Envelope struct {
	TaskID              string          `json:"taskId"`
	RunID               string          `json:"runId"`
	AssetID             string          `json:"assetId,omitempty"`
	TaskKey             string          `json:"taskKey"`
	TenantID            string          `json:"tenantId"`
	WorkspaceID         string          `json:"workspaceId"`
	Attempt             int             `json:"attempt"`
	Worker              string          `json:"worker"`
	Payload             json.RawMessage `json:"payload,omitempty"`
	Resources           json.RawMessage `json:"resources,omitempty"`
	ResumeFrom          json.RawMessage `json:"resumeFrom,omitempty"`
	EnqueuedAt          time.Time       `json:"enqueuedAt"`
	Deadline            *time.Time      `json:"deadline,omitempty"`
	CallbackBaseURL     string          `json:"callbackBaseUrl"`
	TaskToken           string          `json:"taskToken"`
	TokenExpiresAt      time.Time       `json:"tokenExpiresAt"`
	HeartbeatIntervalMs int64           `json:"heartbeatIntervalMs"`
	HeartbeatTimeoutMs  int64           `json:"heartbeatTimeoutMs"`
	CancelGracePeriodMs int64           `json:"cancelGracePeriodMs"`
}

// StartedRequest is the body of POST /v1/tasks/{id}/started.
type StartedRequest struct {
	Attempt   int        `json:"attempt"`
	WorkerID  string     `json:"workerId"`
	StartedAt *time.Time `json:"startedAt,omitempty"`
}

// HeartbeatRequest is the body of POST /v1/tasks/{id}/heartbeat.
type HeartbeatRequest struct {
	Attempt     int             `json:"attempt"`
	WorkerID    string          `json:"workerId"`
	HeartbeatAt *time.Time      `json:"heartbeatAt,omitempty"`
	ProgressPct *int            `json:"progressPct,omitempty"`
	Message     string          `json:"message,omitempty"`
	Checkpoint  json.RawMessage `json:"checkpoint,omitempty"`
}

// CompletedRequest is the body of POST /v1/tasks/{id}/completed.
type CompletedRequest struct {
	Attempt              int             `json:"attempt"`
	WorkerID             string          `json:"workerId"`
	Outcome              Outcome         `json:"outcome"`
	CompletedAt          *time.Time      `json:"completedAt,omitempty"`
	Output               json.RawMessage `json:"output,omitempty"`
	Error                *ErrorInfo      `json:"error,omitempty"`
	Metrics              *Metrics        `json:"metrics,omitempty"`
	CancelledDuringPhase string          `json:"cancelledDuringPhase,omitempty"`
	PartialProgress      json.RawMessage `json:"partialProgress,omitempty"`
}

// Disposition tells the worker what to do next (docs/contract.md §4.7).
type Disposition string

// Dispositions.
const (
	Continue  Disposition = "CONTINUE"
	Committed Disposition = "COMMITTED"
	Cancel    Disposition = "CANCELLED"
	Rejected  Disposition = "REJECTED"
	Retry     Disposition = "RETRY"
)

// Error codes of callback and API responses (docs/contract.md §13).
const (
	CodeInvalidRequest        = "invalid_request"
	CodeInvalidToken          = "invalid_token"
	CodeTokenExpired          = "token_expired"
	CodeTokenScopeMismatch    = "token_scope_mismatch"
	CodeTaskNotFound          = "task_not_found"
	CodeTaskAlreadyTerminal   = "task_already_terminal"
	CodeAttemptMismatch       = "attempt_mismatch"
	CodeAttemptAlreadyStarted = "attempt_already_started"
	CodeTaskExpired           = "task_expired"
	CodeCompletionConflict    = "completion_conflict"
	CodePayloadTooLarge       = "payload_too_large"
	CodeUnsupportedMediaType  = "unsupported_media_type"
	CodeMethodNotAllowed      = "method_not_allowed"
	CodeUnavailable           = "unavailable"
	// CodeMisconfigured: the function cannot start because of its own
	// configuration (its environment, the database's schema, its due
	// shards); retrying helps only after an operator fixes and redeploys
	// it (503 with Retry-After, disposition RETRY).
	CodeMisconfigured = "misconfigured"
	// CodeSecretUnavailable: the function cannot read its task-token key
	// ring from Secret Manager (missing secret or version, permission, or
	// content it cannot parse); as CodeMisconfigured otherwise.
	CodeSecretUnavailable = "secret_unavailable"
	// CodeTooEarly: the task token is valid only from a later time (a
	// delivery ahead of its schedule); retry after Retry-After.
	CodeTooEarly = "too_early"
	CodeNotFound = "not_found"
	// CodeExecutionConflict: the attempt already records another Cloud Run
	// Job execution (EventExecution; internal, never a callback answer).
	CodeExecutionConflict = "execution_conflict"
	// CodeInternal answers a failure that retrying the same request cannot
	// fix (Firestore refused the write as invalid).
	CodeInternal = "internal"
)

// CallbackResponse is the JSON body of every callback response. Fields that
// do not apply are omitted.
type CallbackResponse struct {
	Acknowledged bool        `json:"acknowledged"`
	Disposition  Disposition `json:"disposition"`
	ServerTime   time.Time   `json:"serverTime"`

	// Started and heartbeat: the longest the worker may wait before its
	// next plain heartbeat, in ms from the answer (docs/contract.md §5.7);
	// never less than the heartbeat interval. 0 (absent): an older Servo,
	// heartbeat at the interval.
	NextHeartbeatInMs int64 `json:"nextHeartbeatInMs,omitempty"`

	// Heartbeat.
	ShouldCancel   *bool      `json:"shouldCancel,omitempty"`
	CancelReason   string     `json:"cancelReason,omitempty"`
	TaskToken      string     `json:"taskToken,omitempty"`
	TokenExpiresAt *time.Time `json:"tokenExpiresAt,omitempty"`

	// Completed.
	FinalState     State `json:"finalState,omitempty"`
	RetryScheduled bool  `json:"retryScheduled,omitempty"`
	NextAttempt    int   `json:"nextAttempt,omitempty"`

	// Errors.
	Error           string `json:"error,omitempty"`
	Message         string `json:"message,omitempty"`
	Field           string `json:"field,omitempty"`
	State           State  `json:"state,omitempty"`
	ExpectedAttempt int    `json:"expectedAttempt,omitempty"`
	ReceivedAttempt int    `json:"receivedAttempt,omitempty"`
}

// Environment of a Cloud Run Job execution that runs an attempt (job
// workers): the jobs dispatch endpoint sets both as per-execution
// overrides, and worker.RunJob reads the envelope.
const (
	// EnvelopeEnv holds the attempt's envelope (JSON), task token included:
	// it exists only in that execution's overrides.
	EnvelopeEnv = "SERVO_ENVELOPE"
)

// ErrorInfo is a worker-reported failure (docs/contract.md §4.2).
type ErrorInfo struct {
	Category   Category `json:"category"`
	Message    string   `json:"message,omitempty"`
	StackTrace string   `json:"stackTrace,omitempty"`
	// Retryable is the worker's advice; the control plane decides.
	Retryable *bool `json:"retryable,omitempty"`
}

// Metrics are a worker's resource figures for an attempt.
type Metrics struct {
	CPUTimeMs       int64 `json:"cpuTimeMs,omitempty"`
	PeakMemoryBytes int64 `json:"peakMemoryBytes,omitempty"`
	IOReadBytes     int64 `json:"ioReadBytes,omitempty"`
	IOWriteBytes    int64 `json:"ioWriteBytes,omitempty"`
}
