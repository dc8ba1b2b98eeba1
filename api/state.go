package api

// State is a task's lifecycle state (docs/contract.md §1.1).
type State string

// Task states.
const (
	// Pending: stored, not yet accepted by Cloud Tasks.
	Pending State = "PENDING"
	// Queued: enqueued for the current attempt (possibly scheduled later).
	Queued State = "QUEUED"
	// Running: the current attempt's worker said started (or heartbeat/completed).
	Running State = "RUNNING"
	// Cancelling: cancel requested while running; waiting within the grace period.
	Cancelling State = "CANCELLING"
	// Succeeded is terminal.
	Succeeded State = "SUCCEEDED"
	// Failed is terminal.
	Failed State = "FAILED"
	// Cancelled is terminal.
	Cancelled State = "CANCELLED"
)

// States lists every state.
var States = []State{Pending, Queued, Running, Cancelling, Succeeded, Failed, Cancelled}

// Terminal reports whether s never changes again.
func (s State) Terminal() bool { return s == Succeeded || s == Failed || s == Cancelled }

// Valid reports whether s is a known state.
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// Outcome is how one attempt ended.
type Outcome string

// Attempt outcomes.
const (
	OutcomeSucceeded     Outcome = "SUCCEEDED"
	OutcomeFailed        Outcome = "FAILED"
	OutcomeCancelled     Outcome = "CANCELLED"
	OutcomeZombie        Outcome = "ZOMBIE"
	OutcomeTimedOut      Outcome = "TIMED_OUT"
	OutcomeCancelTimeout Outcome = "CANCEL_TIMEOUT"
)

// Reasons why a task ended, or why it is cancelling.
const (
	ReasonHeartbeatTimeout = "HEARTBEAT_TIMEOUT"
	ReasonCancelTimeout    = "CANCEL_TIMEOUT"
	ReasonDeadlineExceeded = "DEADLINE_EXCEEDED"
	ReasonDispatchTimeout  = "DISPATCH_TIMEOUT"
	ReasonRetriesExhausted = "RETRIES_EXHAUSTED"
	ReasonNonRetryable     = "NON_RETRYABLE"
	ReasonFailedCancelling = "FAILED_WHILE_CANCELLING"
	ReasonWorkerCancelled  = "WORKER_CANCELLED"
	ReasonUserRequested    = "user_requested"
	ReasonRetryScheduled   = "RETRY_SCHEDULED"
	ReasonSubmitted        = "SUBMITTED"
	ReasonEnqueued         = "ENQUEUED"
	ReasonDispatchFailed   = "DISPATCH_FAILED"
	ReasonStarted          = "STARTED"
	ReasonSucceeded        = "SUCCEEDED"
)

// Category is a worker error category (docs/contract.md §6.1).
type Category string

// Error categories.
const (
	CategoryUserCode       Category = "USER_CODE"
	CategoryDataQuality    Category = "DATA_QUALITY"
	CategoryInfrastructure Category = "INFRASTRUCTURE"
	CategoryConfiguration  Category = "CONFIGURATION"
	CategoryTimeout        Category = "TIMEOUT"
	CategoryCancelled      Category = "CANCELLED"
	// CategoryConflict is a compare-and-swap or optimistic-concurrency
	// conflict: retryable, with a policy of its own by default
	// (5 s doubling to a minute, 5 attempts).
	CategoryConflict Category = "CONFLICT"
)

// Valid reports whether c is one of the categories of docs/contract.md
// §6.1.
func (c Category) Valid() bool {
	switch c {
	case CategoryUserCode, CategoryDataQuality, CategoryInfrastructure, CategoryConfiguration, CategoryTimeout, CategoryCancelled, CategoryConflict:
		return true
	}
	return false
}
