package task

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/servo-dev/servo/api"
)

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
	return validText("workerId", workerID, false)
}

// validText refuses control characters in text a worker gives, which
// reaches people (pages, streams, terminals): every C0 and C1 control and
// DEL but tab, and, where multiline is allowed, newline and CRLF. A bare
// CR, an ESC or a NUL is refused, naming the field.
func validText(field, s string, multiline bool) *FieldError {
	for i, r := range s {
		switch {
		case r == '\t', multiline && r == '\n':
		case multiline && r == '\r' && i+1 < len(s) && s[i+1] == '\n':
		case unicode.IsControl(r):
			return fieldErr(field, "must not hold control characters (found U+%04X at byte %d): tab%s only", r, i,
				map[bool]string{true: ", newline and CRLF", false: ""}[multiline])
		}
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
	if d := JSONDepth(raw, api.MaxJSONDepth); d > api.MaxJSONDepth {
		return fieldErr(field, "nests more than %d levels of arrays and objects", api.MaxJSONDepth)
	}
	return nil
}

// JSONDepth is how deeply raw (valid JSON) nests arrays and objects (0 for
// a scalar), counted up to limit+1: a deeper value reads limit+1.
func JSONDepth(raw []byte, limit int) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > deepest {
				if deepest = depth; deepest > limit {
					return deepest
				}
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// ValidateStarted checks a started request.
func ValidateStarted(r *api.StartedRequest) *FieldError { return validWorker(r.Attempt, r.WorkerID) }

// ValidateHeartbeat checks a heartbeat request.
func ValidateHeartbeat(r *api.HeartbeatRequest) *FieldError {
	if err := validWorker(r.Attempt, r.WorkerID); err != nil {
		return err
	}
	if r.ProgressPct != nil && (*r.ProgressPct < 0 || *r.ProgressPct > 100) {
		return fieldErr("progressPct", "must be between 0 and 100")
	}
	if len(r.Message) > api.MaxMessageBytes || !utf8.ValidString(r.Message) {
		return fieldErr("message", "must be valid UTF-8 of at most %d bytes", api.MaxMessageBytes)
	}
	if err := validText("message", r.Message, true); err != nil {
		return err
	}
	return validJSON("checkpoint", r.Checkpoint, api.MaxCheckpointBytes)
}

// ValidateCompleted checks a completed request.
func ValidateCompleted(r *api.CompletedRequest) *FieldError {
	if err := validWorker(r.Attempt, r.WorkerID); err != nil {
		return err
	}
	if !ReportableOutcome(r.Outcome) {
		return fieldErr("outcome", "must be SUCCEEDED, FAILED or CANCELLED")
	}
	if r.Outcome == api.OutcomeFailed {
		if r.Error == nil {
			return fieldErr("error", "is required when outcome is FAILED")
		}
		if !r.Error.Category.Valid() {
			return fieldErr("error.category", "must be one of USER_CODE, DATA_QUALITY, INFRASTRUCTURE, CONFIGURATION, TIMEOUT, CANCELLED")
		}
		if !utf8.ValidString(r.Error.Message) || !utf8.ValidString(r.Error.StackTrace) {
			return fieldErr("error.message", "must be valid UTF-8")
		}
		if err := validText("error.message", r.Error.Message, true); err != nil {
			return err
		}
		if err := validText("error.stackTrace", r.Error.StackTrace, true); err != nil {
			return err
		}
	}
	if err := validJSON("output", r.Output, api.MaxOutputBytes); err != nil {
		return err
	}
	if err := validJSON("partialProgress", r.PartialProgress, api.MaxPartialProgressBytes); err != nil {
		return err
	}
	if len(r.CancelledDuringPhase) > 256 {
		return fieldErr("cancelledDuringPhase", "must be at most 256 bytes")
	}
	return validText("cancelledDuringPhase", r.CancelledDuringPhase, false)
}

// NormalizeCompleted truncates free text to the stored limits.
func NormalizeCompleted(r *api.CompletedRequest) {
	if r.Error != nil {
		r.Error.Message = truncate(r.Error.Message, api.MaxMessageBytes)
		r.Error.StackTrace = truncate(r.Error.StackTrace, api.MaxStackTraceBytes)
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

// CompletionDigest identifies the substance of a completed report: the same outcome,
// worker, output and error give the same digest; the informational
// completedAt and metrics do not count.
func CompletionDigest(r *api.CompletedRequest) string {
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
func (t *Task) Envelope(callbackBaseURL, token string, tokenExpiresAt, enqueuedAt time.Time) api.Envelope {
	return api.Envelope{
		TaskID: t.ID, RunID: t.RunID, AssetID: t.AssetID, TaskKey: t.TaskKey, TenantID: t.TenantID,
		WorkspaceID: t.WorkspaceID, Attempt: t.Attempt, Worker: t.Worker, Payload: t.Payload,
		Resources: t.Resources, ResumeFrom: t.ResumeFrom, EnqueuedAt: enqueuedAt.UTC(), Deadline: t.Deadline,
		CallbackBaseURL: callbackBaseURL, TaskToken: token, TokenExpiresAt: tokenExpiresAt.UTC(),
		HeartbeatIntervalMs: t.Timing.HeartbeatIntervalMs, HeartbeatTimeoutMs: t.Timing.HeartbeatTimeoutMs,
		CancelGracePeriodMs: t.Timing.CancelGracePeriodMs,
	}
}

// ExecutionLabelsEnv holds, in a Cloud Run Job execution that runs an
// attempt, the execution's labels (task id and attempt, "k=v,k=v"
// sorted), by which a second dispatch of the same attempt finds the
// execution instead of starting another. The envelope is in
// api.EnvelopeEnv.
const ExecutionLabelsEnv = "SERVO_EXECUTION_LABELS"
