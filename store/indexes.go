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

func asc(path string) IndexField { return IndexField{Path: path, Order: "ASCENDING"} }

// Indexes lists every composite index Servo's queries need.
var Indexes = []Index{
	// Sweeper: leases past due (RUNNING, CANCELLING).
	{Collection: TasksCollection, Fields: []IndexField{asc("state"), asc("leaseExpiresAt")}},
	// Sweeper: cancel grace periods past due (CANCELLING).
	{Collection: TasksCollection, Fields: []IndexField{asc("state"), asc("cancelDeadline")}},
	// Sweeper: dispatches to check (PENDING, QUEUED).
	{Collection: TasksCollection, Fields: []IndexField{asc("state"), asc("dispatchCheckAt")}},
	// Sweeper: task deadlines past due (every non-terminal state).
	{Collection: TasksCollection, Fields: []IndexField{asc("state"), asc("deadline")}},
	// Publisher re-drive: undelivered events older than the grace period.
	{Collection: OutboxCollection, Fields: []IndexField{asc("delivered"), asc("createdAt")}},
	// servo runs --tenant: a tenant's runs, newest first.
	{Collection: RunsCollection, Fields: []IndexField{asc("tenantId"), {Path: "runId", Order: "DESCENDING"}}},
}

// TTLFields lists the documents Firestore deletes by TTL policy.
var TTLFields = []TTLField{
	{Collection: OutboxCollection, Path: "expireAt"},
	{Collection: IdempotencyCollection, Path: "expireAt"},
}
