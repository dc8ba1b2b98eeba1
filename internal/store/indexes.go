package store

// IndexField is one field of a composite index, in order.
type IndexField struct {
	// Path is the document field path.
	Path string
	// Order is "ASCENDING" or "DESCENDING".
	Order string
}

// Index is a Firestore composite index (collection scope) that one of
// Servo's queries needs. Indexes is the single list: the Terraform module
// declares exactly these (a test in terraform/ checks it).
type Index struct {
	// Collection is the collection group the index serves.
	Collection string
	// Fields lists the indexed fields in order.
	Fields []IndexField
}

// TTLField names a field that holds a document's expiry time; Terraform sets
// a Firestore TTL policy on each.
type TTLField struct {
	// Collection is the collection group.
	Collection string
	// Path is the timestamp field whose value is the expiry.
	Path string
}

// Collection names.
const (
	// TasksCollection holds one document per task.
	TasksCollection = "tasks"
	// OutboxCollection holds transition events waiting for (or past) delivery.
	OutboxCollection = "outbox"
	// IdempotencyCollection maps (tenant, idempotency key) to a task id.
	IdempotencyCollection = "idempotency"
)

func asc(path string) IndexField  { return IndexField{Path: path, Order: "ASCENDING"} }
func desc(path string) IndexField { return IndexField{Path: path, Order: "DESCENDING"} }

// Indexes lists every composite index Servo's queries need.
var Indexes = []Index{
	// Sweeper: leases past due (RUNNING, CANCELLING).
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), asc("state"), asc("leaseExpiresAt")}},
	// Sweeper: cancel grace periods past due (CANCELLING).
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), asc("state"), asc("cancelDeadline")}},
	// Sweeper: dispatches to check (PENDING, QUEUED).
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), asc("state"), asc("dispatchCheckAt")}},
	// Sweeper: task deadlines past due (every non-terminal state).
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), asc("state"), asc("deadline")}},
	// Sweeper: tasks waiting for a run slot (quotas), lowest rank first
	// (task.WaitRank: priority and waiting time), and, once a repair
	// period, oldest first (DueAdmitOldest).
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), asc("state"), asc("waitRank")}},
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), asc("state"), asc("waitingSince")}},
	// Publisher re-drive: undelivered events due for a (re)try.
	{Collection: OutboxCollection, Fields: []IndexField{asc("dueShard"), asc("delivered"), asc("nextTryAt")}},
	// servo runs: runs newest first, a group of due shards a query merged
	// on read (ListRuns), all tenants' or some tenants'.
	{Collection: RunsCollection, Fields: []IndexField{asc("dueShard"), desc("runId")}},
	{Collection: RunsCollection, Fields: []IndexField{asc("dueShard"), asc("tenantId"), desc("runId")}},
	// ... and the runs that are a task's own (task.Task.OwnRun: no run
	// document), read from their tasks.
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), asc("ownRun"), desc("runId")}},
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), asc("ownRun"), asc("tenantId"), desc("runId")}},
	// Task listings (List), one query per due shard merged on read,
	// oldest and newest first; Firestore merges the indexes of a
	// listing with several filters.
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), asc("taskId")}},
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), desc("taskId")}},
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), asc("tenantId"), asc("taskId")}},
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), asc("tenantId"), desc("taskId")}},
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), asc("runId"), asc("taskId")}},
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), asc("runId"), desc("taskId")}},
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), asc("state"), asc("taskId")}},
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), asc("state"), desc("taskId")}},
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), asc("worker"), asc("taskId")}},
	{Collection: TasksCollection, Fields: []IndexField{asc("dueShard"), asc("worker"), desc("taskId")}},
	// Sweeper: schedules due to fire (a paused one has no dueAt).
	{Collection: SchedulesCollection, Fields: []IndexField{asc("dueShard"), asc("dueAt")}},
	// Schedule listings of some tenants, by schedule id.
	{Collection: SchedulesCollection, Fields: []IndexField{asc("tenantId"), asc("scheduleId")}},
}

// Every due index leads with dueShard, a number fixed per task in [0, S)
// (store.WithDueShards, default 384): a steadily increasing due time is
// then written into S separate ranges of each index instead of one, so no
// range takes more than its share of the writes (at 10 000 tasks/s and
// 1 000 000 running tasks with 30 s heartbeats, twice the mean moves
// ~156 000 lease index entries a second, deletes counted; 384 shards keep
// each range near 410 a second, under the ~500 a second at which
// Firestore starts to hot-spot a range of sequential values). The runs'
// listing indexes lead with the run id's shard the same way.
// docs/scale.md has the numbers.

// FieldExemption is a field exempted from Firestore's automatic
// single-field indexes: no query filters or orders on it alone, and
// indexing it would only cost writes (a large or opaque value) or hot-spot
// (a steadily increasing timestamp). Composite indexes that name the field
// are unaffected.
type FieldExemption struct {
	// Collection is the collection group.
	Collection string
	// Path is the field; a map field's exemption covers its subfields.
	Path string
}

// AttemptsCollection is the collection group of attempt records
// (tasks/{id}/attempts/{n}).
const AttemptsCollection = "attempts"

// FieldExemptions lists every field exempted from single-field indexing;
// Terraform declares exactly these (and TTLFields, also exempted).
var FieldExemptions = []FieldExemption{
	// Large or opaque.
	{TasksCollection, "payload"}, {TasksCollection, "resources"}, {TasksCollection, "resumeFrom"}, {TasksCollection, "live"}, {TasksCollection, "history"}, {TasksCollection, "endedAttempt"},
	{TasksCollection, "delivery"},
	{AttemptsCollection, "output"}, {AttemptsCollection, "checkpoint"}, {AttemptsCollection, "error"},
	{AttemptsCollection, "metrics"}, {AttemptsCollection, "partialProgress"}, {AttemptsCollection, "heartbeatTicks"},
	{OutboxCollection, "error"}, {OutboxCollection, outboxEarlier},
	// Steadily increasing timestamps.
	{TasksCollection, "createdAt"}, {TasksCollection, "updatedAt"}, {TasksCollection, "endedAt"}, {TasksCollection, "notBefore"}, {TasksCollection, "enqueueAt"},
	{TasksCollection, "leaseExpiresAt"}, {TasksCollection, "cancelDeadline"}, {TasksCollection, "dispatchCheckAt"}, {TasksCollection, "deadline"},
	{TasksCollection, "startTimeoutAt"},
	{TasksCollection, "waitingSince"}, {TasksCollection, "waitRank"},
	{AttemptsCollection, "createdAt"}, {AttemptsCollection, "scheduledAt"}, {AttemptsCollection, "startedAt"},
	{AttemptsCollection, "completedAt"}, {AttemptsCollection, "lastHeartbeatAt"}, {AttemptsCollection, "reportedAt"},
	{OutboxCollection, "createdAt"}, {OutboxCollection, "occurredAt"}, {OutboxCollection, "deliveredAt"}, {OutboxCollection, "nextTryAt"},
	{RunsCollection, "lastSubmitAt"},
	// Sequential ids (ULIDs) no query uses alone: listings order by
	// taskId behind the due shard (the composite indexes above); a task's
	// events are read from its history (TaskEvents; an older task's
	// entries by name). Run ids likewise: a run's counts take the
	// listing's indexes behind the due shard (runCountQuery), a run's
	// events come with its listed tasks (RunEvents), and runs are listed behind their shard (the
	// composite indexes above), never by runId or tenantId alone.
	{TasksCollection, "taskId"}, {OutboxCollection, "taskId"},
	{TasksCollection, "runId"}, {OutboxCollection, "runId"},
	// Queried by none of the outbox's queries (due shard, delivered and
	// next try, through the composite index; a task's entries by name):
	// indexing them only costs writes, and a value many entries share
	// sorts them by name.
	{OutboxCollection, "eventId"}, {OutboxCollection, "worker"}, {OutboxCollection, "workspaceId"}, {OutboxCollection, "tenantId"}, {OutboxCollection, "attempt"}, {OutboxCollection, "from"}, {OutboxCollection, "to"}, {OutboxCollection, "reason"},
	{OutboxCollection, "outcome"}, {OutboxCollection, "nextAttempt"}, {OutboxCollection, "seq"}, {OutboxCollection, "deadLetter"}, {OutboxCollection, "trace"}, {OutboxCollection, "tries"}, {OutboxCollection, "eventPublished"},
	{RunsCollection, "runId"}, {RunsCollection, "tenantId"},
	{IdempotencyCollection, "taskId"}, {IdempotencyCollection, "createdAt"},
	// A schedule's large or repeated values, and its steadily increasing
	// due and next-fire times (the due query reads dueAt through the
	// composite index above): indexing them only costs writes, or
	// hot-spots when many schedules fire on the same minute.
	{SchedulesCollection, "task"}, {SchedulesCollection, "recent"}, {SchedulesCollection, "pending"}, {SchedulesCollection, "active"},
	{SchedulesCollection, "buffered"}, {SchedulesCollection, "cancel"}, {SchedulesCollection, "note"},
	{SchedulesCollection, "nextFireAt"}, {SchedulesCollection, "dueAt"},
	// A fire's schedule, on its task and events: shown, never queried.
	{TasksCollection, "scheduleId"}, {TasksCollection, "scheduledFireAt"}, {OutboxCollection, "scheduleId"}, {OutboxCollection, "scheduledFireAt"},
	// A task's and an attempt record's fields that no query filters or
	// orders on (tasks are queried by due shard, state, tenant, run,
	// worker and quota fields; attempt records are read by task, in
	// attempt order): their entries only cost storage, about 40 of a
	// task's 63 and 14 of an attempt's 18 (docs/cost.md).
	{TasksCollection, "timing"}, {TasksCollection, "retry"}, {TasksCollection, "attempt"}, {TasksCollection, "seq"}, {TasksCollection, "reason"}, {TasksCollection, "cancelReason"}, {TasksCollection, "redrives"},
	{TasksCollection, "idempotencyKey"}, {TasksCollection, "taskKey"}, {TasksCollection, "rerunOf"}, {TasksCollection, "assetId"}, {TasksCollection, "workspaceId"}, {TasksCollection, "trace"}, {TasksCollection, "recorded"}, {TasksCollection, "ownRun"},
	// A task's priority: shown, and ordered on only behind other fields
	// (composite indexes); its event's likewise.
	{TasksCollection, "priority"}, {OutboxCollection, "priority"},
	{AttemptsCollection, "outcome"}, {AttemptsCollection, "workerId"}, {AttemptsCollection, "message"}, {AttemptsCollection, "progressPct"}, {AttemptsCollection, "heartbeats"}, {AttemptsCollection, "cancelledDuringPhase"}, {AttemptsCollection, "execution"}, {AttemptsCollection, "completionDigest"},
}

// TTLFields lists the documents Firestore deletes by TTL policy.
var TTLFields = []TTLField{
	{Collection: OutboxCollection, Path: "expireAt"},
	{Collection: IdempotencyCollection, Path: "expireAt"},
	{Collection: OutagesCollection, Path: "expireAt"},
	// Retention (retention.go): ended tasks, their attempts, runs.
	{Collection: TasksCollection, Path: "expireAt"},
	{Collection: AttemptsCollection, Path: "expireAt"},
	{Collection: RunsCollection, Path: "expireAt"},
}
