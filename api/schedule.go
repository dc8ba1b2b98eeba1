package api

import "time"

// Overlap policies of a schedule (docs/contract.md §16): what a fire does
// while an earlier fire's task of the same schedule has not finished.
const (
	// OverlapSkip drops the fire (the default).
	OverlapSkip = "SKIP"
	// OverlapBufferOne holds one fire until the running one finishes;
	// further fires meanwhile are dropped.
	OverlapBufferOne = "BUFFER_ONE"
	// OverlapAllowAll starts every fire.
	OverlapAllowAll = "ALLOW_ALL"
	// OverlapCancelOther cancels the running fire's task and starts the new one.
	OverlapCancelOther = "CANCEL_OTHER"
)

// Fire outcomes, as a schedule's recent fires show them.
const (
	// FireStarted: the fire's task was created (TaskID).
	FireStarted = "STARTED"
	// FireSkipped: dropped by the overlap policy.
	FireSkipped = "SKIPPED"
	// FireBuffered: held by BUFFER_ONE until the running task finishes.
	FireBuffered = "BUFFERED"
	// FireMissed: outside the catch-up window when the sweeper came to it
	// (Servo down or the schedule paused); Count fires from At to Until.
	FireMissed = "MISSED"
	// FireFailed: the task could not be created (Message says why: the
	// worker is no longer configured, the tenant is at maxQueued, …).
	FireFailed = "FAILED"
)

// Fire kinds: what made a fire.
const (
	FireBySchedule = "SCHEDULE"
	FireByTrigger  = "TRIGGER"
	FireByBackfill = "BACKFILL"
)

// Error codes of the schedules API.
const (
	CodeScheduleNotFound = "schedule_not_found"
	CodeScheduleExists   = "schedule_exists"
)

// Schedule bounds.
const (
	// MaxBackfillFires is the most fires one backfill makes.
	MaxBackfillFires = 1000
	// DefaultCatchupWindow is a schedule's catch-up window when none is given.
	DefaultCatchupWindow = time.Minute
	// MaxCatchupWindow bounds catchupWindowMs.
	MaxCatchupWindow = 366 * 24 * time.Hour
	// ScheduleRecentFires is how many recent fires a schedule keeps.
	ScheduleRecentFires = 10
	// ScheduleNextFires is how many coming fire times a schedule shows.
	ScheduleNextFires = 10
)

// ScheduleSpec says when a schedule fires: a cron expression (five
// fields, or a shorthand such as @hourly) in TimeZone, or every EveryMs.
type ScheduleSpec struct {
	Cron    string `json:"cron,omitempty"`
	EveryMs int64  `json:"everyMs,omitempty"`
	// TimeZone is an IANA name (Europe/Berlin); UTC when absent.
	TimeZone string `json:"timezone,omitempty"`
	// StartAt and EndAt (RFC 3339) bound the fires.
	StartAt string `json:"startAt,omitempty"`
	EndAt   string `json:"endAt,omitempty"`
	// JitterMs delays each fire's task start by a deterministic amount
	// below it.
	JitterMs int64 `json:"jitterMs,omitempty"`
}

// ScheduleRequest is the body of POST /v1/schedules.
type ScheduleRequest struct {
	ScheduleID  string       `json:"scheduleId"`
	TenantID    string       `json:"tenantId"`
	WorkspaceID string       `json:"workspaceId"`
	Spec        ScheduleSpec `json:"spec"`
	// Task is the submit body of every fire (docs/contract.md §9.2),
	// without tenantId and workspaceId (the schedule's), runId,
	// idempotencyKey, rerunOf, deadline, startAt and startDelayMs.
	Task SubmitRequest `json:"task"`
	// Overlap is SKIP (default), BUFFER_ONE, ALLOW_ALL or CANCEL_OTHER.
	Overlap string `json:"overlap,omitempty"`
	// CatchupWindowMs: fires missed (Servo down, schedule paused) are
	// made when no older than this, oldest first; default 60 000.
	CatchupWindowMs *int64 `json:"catchupWindowMs,omitempty"`
	Paused          bool   `json:"paused,omitempty"`
	Note            string `json:"note,omitempty"`
}

// SchedulePatch is the body of PATCH /v1/schedules/{id}: absent fields
// are left as they are.
type SchedulePatch struct {
	Spec            *ScheduleSpec  `json:"spec,omitempty"`
	Task            *SubmitRequest `json:"task,omitempty"`
	Overlap         *string        `json:"overlap,omitempty"`
	CatchupWindowMs *int64         `json:"catchupWindowMs,omitempty"`
	Paused          *bool          `json:"paused,omitempty"`
	Note            *string        `json:"note,omitempty"`
}

// ScheduleFire is one fire of a schedule.
type ScheduleFire struct {
	// At is the fire time (the spec's, before jitter).
	At time.Time `json:"at"`
	// Kind is SCHEDULE, TRIGGER or BACKFILL.
	Kind    string `json:"kind"`
	Outcome string `json:"outcome"`
	TaskID  string `json:"taskId,omitempty"`
	// State is the task's state when read (GET of one schedule).
	State State `json:"state,omitempty"`
	// Count and Until: a MISSED entry stands for Count fires from At to Until.
	Count   int        `json:"count,omitempty"`
	Until   *time.Time `json:"until,omitempty"`
	Message string     `json:"message,omitempty"`
}

// Schedule is a schedule as the control API shows it.
type Schedule struct {
	ScheduleID      string        `json:"scheduleId"`
	TenantID        string        `json:"tenantId"`
	WorkspaceID     string        `json:"workspaceId"`
	Spec            ScheduleSpec  `json:"spec"`
	Task            SubmitRequest `json:"task"`
	Overlap         string        `json:"overlap"`
	CatchupWindowMs int64         `json:"catchupWindowMs"`
	Paused          bool          `json:"paused"`
	Note            string        `json:"note,omitempty"`
	// NextFireAt is the next fire not yet made (absent past endAt).
	NextFireAt *time.Time `json:"nextFireAt,omitempty"`
	// NextFires are the coming fire times (GET of one schedule).
	NextFires []time.Time `json:"nextFires,omitempty"`
	// RecentFires are the latest fires, newest first.
	RecentFires []ScheduleFire `json:"recentFires"`
	// Fires, Skipped and Missed count the schedule's fires by outcome.
	Fires     int64     `json:"fires"`
	Skipped   int64     `json:"skipped"`
	Missed    int64     `json:"missed"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// SchedulesResponse answers GET /v1/schedules.
type SchedulesResponse struct {
	Schedules     []Schedule `json:"schedules"`
	NextPageToken string     `json:"nextPageToken,omitempty"`
}

// TriggerRequest is the optional body of POST /v1/schedules/{id}:trigger.
type TriggerRequest struct {
	// Overlap overrides the schedule's policy for this fire.
	Overlap string `json:"overlap,omitempty"`
}

// BackfillRequest is the body of POST /v1/schedules/{id}:backfill: every
// fire time from From to To (RFC 3339, both inclusive), oldest first.
type BackfillRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Overlap overrides the schedule's policy for these fires.
	Overlap string `json:"overlap,omitempty"`
}

// FireResponse answers a trigger or a backfill: the fires it made.
type FireResponse struct {
	Fires []ScheduleFire `json:"fires"`
}
