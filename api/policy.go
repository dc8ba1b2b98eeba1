package api

import (
	"time"
)

// Timer defaults (docs/contract.md).
const (
	DefaultHeartbeatInterval = 30 * time.Second
	DefaultHeartbeatTimeout  = 90 * time.Second
	DefaultCancelGracePeriod = 30 * time.Second
	DefaultStartTimeout      = 10 * time.Minute
)

// Size limits.
const (
	// MaxCheckpointBytes bounds a heartbeat checkpoint.
	MaxCheckpointBytes = 64 << 10
	// MaxJSONDepth bounds the nesting of the JSON a caller or worker
	// gives (payload, resources, checkpoint, output, partialProgress):
	// deeper values are refused (400 naming the field) before any SDK's
	// parser meets them.
	MaxJSONDepth = 64
	// MaxOutputBytes bounds a completed output.
	MaxOutputBytes = 256 << 10
	// MaxPartialProgressBytes bounds a CANCELLED report's partialProgress.
	MaxPartialProgressBytes = 64 << 10
	// MaxStackTraceBytes is where a stack trace is truncated.
	MaxStackTraceBytes = 16 << 10
	// MaxMessageBytes is where messages are truncated.
	MaxMessageBytes = 4 << 10
)

// Timing holds a task's timers in milliseconds (docs/contract.md §5.2).
type Timing struct {
	HeartbeatIntervalMs int64 `json:"heartbeatIntervalMs"`
	HeartbeatTimeoutMs  int64 `json:"heartbeatTimeoutMs"`
	CancelGracePeriodMs int64 `json:"cancelGracePeriodMs"`
	// StartTimeoutMs is how long PENDING/QUEUED may last before a re-drive.
	StartTimeoutMs int64 `json:"startTimeoutMs"`
}

// WithDefaults fills zero fields with the defaults.
func (t Timing) WithDefaults() Timing {
	if t.HeartbeatIntervalMs == 0 {
		t.HeartbeatIntervalMs = DefaultHeartbeatInterval.Milliseconds()
	}
	if t.HeartbeatTimeoutMs == 0 {
		t.HeartbeatTimeoutMs = max(DefaultHeartbeatTimeout.Milliseconds(), 3*t.HeartbeatIntervalMs)
	}
	if t.CancelGracePeriodMs == 0 {
		t.CancelGracePeriodMs = DefaultCancelGracePeriod.Milliseconds()
	}
	if t.StartTimeoutMs == 0 {
		t.StartTimeoutMs = DefaultStartTimeout.Milliseconds()
	}
	return t
}

// MaxAttemptsLimit bounds RetryPolicy.MaxAttempts.
const MaxAttemptsLimit = 100

// HeartbeatInterval is the interval as a duration.
func (t Timing) HeartbeatInterval() time.Duration {
	return time.Duration(t.HeartbeatIntervalMs) * time.Millisecond
}

// HeartbeatTimeout is the timeout as a duration.
func (t Timing) HeartbeatTimeout() time.Duration {
	return time.Duration(t.HeartbeatTimeoutMs) * time.Millisecond
}

// CancelGracePeriod is the grace period as a duration.
func (t Timing) CancelGracePeriod() time.Duration {
	return time.Duration(t.CancelGracePeriodMs) * time.Millisecond
}

// StartTimeout is the start timeout as a duration.
func (t Timing) StartTimeout() time.Duration {
	return time.Duration(t.StartTimeoutMs) * time.Millisecond
}

// RetryPolicy decides when a failed attempt is retried (docs/contract.md
// §6.2). Its own four fields are the policy of every category without an
// entry in ByCategory (CONFLICT excepted: it has a default of its own).
type RetryPolicy struct {
	MaxAttempts        int     `json:"maxAttempts"`
	InitialBackoffMs   int64   `json:"initialBackoffMs"`
	BackoffCoefficient float64 `json:"backoffCoefficient"`
	MaxBackoffMs       int64   `json:"maxBackoffMs"`
	// MaxTotalAttempts bounds the task's attempts whatever their
	// categories; 0 means the largest MaxAttempts of the policies in force.
	MaxTotalAttempts int `json:"maxTotalAttempts,omitempty"`
	// ByCategory is a category's own policy, complete (the fields a submit
	// left out filled in).
	ByCategory map[Category]CategoryRetry `json:"byCategory,omitempty"`
}

// CategoryRetry is the retry policy of one error category
// (docs/contract.md §6.3).
type CategoryRetry struct {
	MaxAttempts        int     `json:"maxAttempts"`
	InitialBackoffMs   int64   `json:"initialBackoffMs"`
	BackoffCoefficient float64 `json:"backoffCoefficient"`
	MaxBackoffMs       int64   `json:"maxBackoffMs"`
}

// Retry defaults.
const (
	DefaultMaxAttempts        = 3
	DefaultInitialBackoff     = 30 * time.Second
	DefaultBackoffCoefficient = 2.0
	DefaultMaxBackoff         = 10 * time.Minute
)

// WithDefaults fills zero fields with the defaults.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.InitialBackoffMs == 0 {
		p.InitialBackoffMs = DefaultInitialBackoff.Milliseconds()
	}
	if p.BackoffCoefficient == 0 {
		p.BackoffCoefficient = DefaultBackoffCoefficient
	}
	if p.MaxBackoffMs == 0 {
		p.MaxBackoffMs = max(DefaultMaxBackoff.Milliseconds(), p.InitialBackoffMs)
	}
	return p
}
