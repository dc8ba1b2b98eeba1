package task

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
	"unicode/utf8"
)

// Envelope is what Cloud Tasks pushes to a worker (ADR-023 §8, camelCase),
// plus the worker name, payload and the checkpoint to resume from.
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

// Disposition tells the worker what to do next (seed 001 vocabulary).
type Disposition string

// Dispositions.
const (
	Continue  Disposition = "CONTINUE"
	Committed Disposition = "COMMITTED"
	Cancel    Disposition = "CANCELLED"
	Rejected  Disposition = "REJECTED"
	Retry     Disposition = "RETRY"
)

// Error codes of callback and API responses (PRODUCT §4).
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
	CodeNotFound              = "not_found"
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

func validWorker(attempt int, workerID string) *FieldError {
	if attempt < 1 {
		return fieldErr("attempt", "must be a positive integer")
	}
	if workerID == "" {
		return fieldErr("workerId", "is required")
	}
	if len(workerID) > 256 || !utf8.ValidString(workerID) {
		return fieldErr("workerId", "must be valid UTF-8 of at most 256 bytes")
	}
	return nil
}

func validJSON(field string, raw json.RawMessage, limit int) *FieldError {
	if len(raw) == 0 {
		return nil
	}
	if len(raw) > limit {
		return fieldErr(field, "must be at most %d bytes", limit)
	}
	if !json.Valid(raw) {
		return fieldErr(field, "must be valid JSON")
	}
	return nil
}

// Validate checks a started request.
func (r *StartedRequest) Validate() *FieldError { return validWorker(r.Attempt, r.WorkerID) }

// Validate checks a heartbeat request.
func (r *HeartbeatRequest) Validate() *FieldError {
	if err := validWorker(r.Attempt, r.WorkerID); err != nil {
		return err
	}
	if r.ProgressPct != nil && (*r.ProgressPct < 0 || *r.ProgressPct > 100) {
		return fieldErr("progressPct", "must be between 0 and 100")
	}
	if len(r.Message) > MaxMessageBytes || !utf8.ValidString(r.Message) {
		return fieldErr("message", "must be valid UTF-8 of at most %d bytes", MaxMessageBytes)
	}
	return validJSON("checkpoint", r.Checkpoint, MaxCheckpointBytes)
}

// Validate checks a completed request.
func (r *CompletedRequest) Validate() *FieldError {
	if err := validWorker(r.Attempt, r.WorkerID); err != nil {
		return err
	}
	if !ReportableOutcome(r.Outcome) {
		return fieldErr("outcome", "must be SUCCEEDED, FAILED or CANCELLED")
	}
	if r.Outcome == OutcomeFailed {
		if r.Error == nil {
			return fieldErr("error", "is required when outcome is FAILED")
		}
		if !r.Error.Category.Valid() {
			return fieldErr("error.category", "must be one of USER_CODE, DATA_QUALITY, INFRASTRUCTURE, CONFIGURATION, TIMEOUT, CANCELLED")
		}
		if !utf8.ValidString(r.Error.Message) || !utf8.ValidString(r.Error.StackTrace) {
			return fieldErr("error.message", "must be valid UTF-8")
		}
	}
	if err := validJSON("output", r.Output, MaxOutputBytes); err != nil {
		return err
	}
	if err := validJSON("partialProgress", r.PartialProgress, MaxPartialProgressBytes); err != nil {
		return err
	}
	if len(r.CancelledDuringPhase) > 256 {
		return fieldErr("cancelledDuringPhase", "must be at most 256 bytes")
	}
	return nil
}

// Normalize truncates free text to the stored limits.
func (r *CompletedRequest) Normalize() {
	if r.Error != nil {
		r.Error.Message = truncate(r.Error.Message, MaxMessageBytes)
		r.Error.StackTrace = truncate(r.Error.StackTrace, MaxStackTraceBytes)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// Digest identifies the substance of a completed report: the same outcome,
// worker, output and error give the same digest; the informational
// completedAt and metrics do not count.
func (r *CompletedRequest) Digest() string {
	h := sha256.New()
	write := func(b []byte) {
		var buf bytes.Buffer
		if len(b) > 0 && json.Compact(&buf, b) == nil {
			b = buf.Bytes()
		}
		h.Write(b)
		h.Write([]byte{0})
	}
	write([]byte(r.WorkerID))
	write([]byte(r.Outcome))
	write(r.Output)
	if r.Error != nil {
		e, _ := json.Marshal(r.Error)
		write(e)
	}
	write([]byte(r.CancelledDuringPhase))
	write(r.PartialProgress)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Envelope builds the envelope for the task's current attempt.
func (t *Task) Envelope(callbackBaseURL, token string, tokenExpiresAt, enqueuedAt time.Time) Envelope {
	return Envelope{
		TaskID: t.ID, RunID: t.RunID, AssetID: t.AssetID, TaskKey: t.TaskKey, TenantID: t.TenantID,
		WorkspaceID: t.WorkspaceID, Attempt: t.Attempt, Worker: t.Worker, Payload: t.Payload,
		Resources: t.Resources, ResumeFrom: t.ResumeFrom, EnqueuedAt: enqueuedAt.UTC(), Deadline: t.Deadline,
		CallbackBaseURL: callbackBaseURL, TaskToken: token, TokenExpiresAt: tokenExpiresAt.UTC(),
		HeartbeatIntervalMs: t.Timing.HeartbeatIntervalMs, HeartbeatTimeoutMs: t.Timing.HeartbeatTimeoutMs,
		CancelGracePeriodMs: t.Timing.CancelGracePeriodMs,
	}
}

// Environment of a Cloud Run Job execution that runs an attempt (job
// workers): the jobs dispatch endpoint sets both as per-execution
// overrides, and worker.RunJob reads the envelope.
const (
	// EnvelopeEnv holds the attempt's envelope (JSON), task token included:
	// it exists only in that execution's overrides.
	EnvelopeEnv = "SERVO_ENVELOPE"
	// ExecutionLabelsEnv holds the execution's labels (task id and attempt,
	// "k=v,k=v" sorted), by which a second dispatch of the same attempt
	// finds the execution instead of starting another.
	ExecutionLabelsEnv = "SERVO_EXECUTION_LABELS"
)
