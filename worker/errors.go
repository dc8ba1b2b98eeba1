package worker

import (
	"errors"
	"fmt"

	"github.com/servo-dev/servo/api"
)

// Error is a failure with a category of docs/contract.md §6.1. Wrap an error with one of
// [UserCode], [DataQuality], [Infrastructure], [Configuration], [Timeout],
// [Conflict] or [Cancelled] (or build an Error yourself) and return it from a [Func]: the
// SDK finds it with errors.As anywhere in the returned chain and reports
// FAILED with that category (CANCELLED with the outcome CANCELLED). An error
// without an Error in its chain is reported as USER_CODE.
type Error struct {
	// Category is one of the api.Category constants.
	Category api.Category
	// Retryable is the worker's advice to Servo; nil means the category's
	// default (api.Category.RetryableByDefault). Servo decides.
	Retryable *bool
	// Err is the underlying error; its message is reported.
	Err error
}

// Error returns the underlying error's message prefixed with the category.
func (e *Error) Error() string {
	if e.Err == nil {
		return string(e.Category)
	}
	return string(e.Category) + ": " + e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

func categorise(c api.Category, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Category: c, Err: err}
}

// UserCode marks err as a bug or exception in the task's own code
// (retryable by default). It is also what an uncategorised error becomes.
// A nil err gives nil.
func UserCode(err error) error { return categorise(api.CategoryUserCode, err) }

// DataQuality marks err as input that failed validation (not retryable by
// default: the same input fails again). A nil err gives nil.
func DataQuality(err error) error { return categorise(api.CategoryDataQuality, err) }

// Infrastructure marks err as a cloud service error, OOM or full disk
// (retryable by default). A nil err gives nil.
func Infrastructure(err error) error { return categorise(api.CategoryInfrastructure, err) }

// Configuration marks err as missing or invalid configuration (not
// retryable by default). A nil err gives nil.
func Configuration(err error) error { return categorise(api.CategoryConfiguration, err) }

// Timeout marks err as execution that exceeded a deadline (retryable by
// default, with backoff). A nil err gives nil.
func Timeout(err error) error { return categorise(api.CategoryTimeout, err) }

// Conflict marks err as a compare-and-swap or optimistic-concurrency
// conflict (retryable by default, with a backoff of its own). A nil err
// gives nil.
func Conflict(err error) error { return categorise(api.CategoryConflict, err) }

// Cancelled marks err as the worker's own decision to cancel the task: the
// attempt is reported with the outcome CANCELLED (and the last checkpoint as
// partialProgress), which ends the task CANCELLED. A nil err gives nil.
func Cancelled(err error) error { return categorise(api.CategoryCancelled, err) }

// WithRetryable returns err with retryable as the worker's retry advice,
// keeping the category of the Error in err's chain (USER_CODE if there is
// none). A nil err gives nil.
func WithRetryable(err error, retryable bool) error {
	if err == nil {
		return nil
	}
	c := api.CategoryUserCode
	var we *Error
	if errors.As(err, &we) && we.Category.Valid() {
		c = we.Category
	}
	return &Error{Category: c, Retryable: &retryable, Err: err}
}

// Causes of a Func's context ending (read them with context.Cause). After
// ErrLeaseLost or ErrRejected the SDK reports nothing more for the attempt;
// after ErrCancelled it reports CANCELLED when the Func returns.
var (
	// ErrCancelled: Servo asked the attempt to stop (a heartbeat answered
	// shouldCancel). The cause is a *CancelledError carrying the reason.
	ErrCancelled = errors.New("worker: task cancelled by Servo")
	// ErrLeaseLost: the attempt no longer has authority: Servo answered 410
	// (lease expired, zombie) or 409 (task already terminal, a newer
	// attempt, or another worker runs it), or no heartbeat was acknowledged
	// for heartbeatTimeoutMs (the SDK fences itself: Servo has expired the
	// lease or will), or the task token expired while Servo could not be
	// reached. The cause is a *LeaseLostError.
	ErrLeaseLost = errors.New("worker: lease lost")
	// ErrRejected: Servo rejected a callback as invalid (4xx with
	// disposition REJECTED); the attempt stops and is not retried by the
	// SDK. The cause is a *RejectedError.
	ErrRejected = errors.New("worker: callback rejected by Servo")
	// ErrDeadlineExceeded: the task's deadline (envelope "deadline")
	// passed. An error returned after it is reported as FAILED/TIMEOUT.
	ErrDeadlineExceeded = errors.New("worker: task deadline exceeded")
)

// CancelledError is the cause of a Func's context when Servo asked to
// cancel. errors.Is(err, ErrCancelled) holds.
type CancelledError struct {
	// Reason is Servo's cancelReason, e.g. "user_requested".
	Reason string
}

func (e *CancelledError) Error() string {
	if e.Reason == "" {
		return ErrCancelled.Error()
	}
	return ErrCancelled.Error() + ": " + e.Reason
}

// Unwrap returns ErrCancelled.
func (e *CancelledError) Unwrap() error { return ErrCancelled }

// LeaseLostError is the cause of a Func's context when the attempt lost its
// authority. errors.Is(err, ErrLeaseLost) holds.
type LeaseLostError struct {
	// Status is the HTTP status Servo answered (0 when Servo was unreachable).
	Status int
	// Code is Servo's error code, e.g. "task_expired", "attempt_mismatch",
	// or the SDK's own: CodeHeartbeatTimeout, CodeServoUnreachable.
	Code string
	// Message is Servo's message.
	Message string
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("%v: %s (HTTP %d): %s", ErrLeaseLost, e.Code, e.Status, e.Message)
}

// Unwrap returns ErrLeaseLost.
func (e *LeaseLostError) Unwrap() error { return ErrLeaseLost }

// Codes of a [*LeaseLostError] that the SDK sets itself (Status 0).
const (
	// CodeHeartbeatTimeout: no heartbeat (nor `started`) was acknowledged
	// for the envelope's heartbeatTimeoutMs, e.g. in a network partition.
	CodeHeartbeatTimeout = "heartbeat_timeout"
	// CodeServoUnreachable: the task token expired while Servo could not be
	// reached.
	CodeServoUnreachable = "servo_unreachable"
)

// RejectedError is a callback Servo refused as invalid: a protocol error
// that retrying cannot fix. errors.Is(err, ErrRejected) holds.
type RejectedError struct {
	// Op is the callback: "started", "heartbeat" or "completed".
	Op string
	// Status is the HTTP status.
	Status int
	// Code is Servo's error code, e.g. "invalid_token".
	Code string
	// Field names the offending field of an invalid_request.
	Field string
	// Message is Servo's message.
	Message string
}

func (e *RejectedError) Error() string {
	s := fmt.Sprintf("%v: %s: %s (HTTP %d)", ErrRejected, e.Op, e.Code, e.Status)
	if e.Field != "" {
		s += " field " + e.Field
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap returns ErrRejected.
func (e *RejectedError) Unwrap() error { return ErrRejected }

// ErrCheckpointTooLarge: a checkpoint's JSON exceeds api.MaxCheckpointBytes.
var ErrCheckpointTooLarge = fmt.Errorf("worker: checkpoint exceeds %d bytes", api.MaxCheckpointBytes)

// errUnreachable: a callback could not be delivered within its retry window.
var errUnreachable = errors.New("servo unreachable")
