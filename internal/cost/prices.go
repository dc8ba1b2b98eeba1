package cost

// Price is one list price with where it was read.
type Price struct {
	// USD per Unit.
	USD    float64
	Unit   string
	Source string
	Read   string // date read, YYYY-MM-DD
	// Unconfirmed marks a price the stored copy of its page did not show
	// (the figure is the page's as last known): check it first.
	Unconfirmed bool
}

// Prices are the list prices the bill uses: USD, us-central1 (Cloud Run
// tier 1, Firestore Standard edition regional). Free tiers are not
// modelled (they are per billing account, shared with everything else
// the account runs): the bill is an upper bound for a small deployment.
type Prices struct {
	FirestoreRead, FirestoreWrite, FirestoreDelete, FirestoreStorage Price
	CloudTasksOp                                                     Price
	PubSubThroughput, PubSubStorage                                  Price
	RunRequest, RunCPU, RunMemory                                    Price
	Logging, Trace                                                   Price
	Scheduler                                                        Price
	SecretAccess, SecretVersion                                      Price
}

const read = "2026-11-26"

// ListPrices is the price table, each price with its source and date read.
var ListPrices = Prices{
	FirestoreRead:    Price{0.03 / 1e5, "document read", "https://cloud.google.com/firestore/pricing", read, false},
	FirestoreWrite:   Price{0.09 / 1e5, "document write", "https://cloud.google.com/firestore/pricing", read, false},
	FirestoreDelete:  Price{0.01 / 1e5, "document delete", "https://cloud.google.com/firestore/pricing", read, false},
	FirestoreStorage: Price{0.15, "GiB-month", "https://cloud.google.com/firestore/pricing", read, true},
	CloudTasksOp:     Price{0.40 / 1e6, "billable operation (32 KB chunk)", "https://cloud.google.com/tasks/pricing", read, false},
	PubSubThroughput: Price{40.0 / (1 << 40), "byte (≥ 1 KB per message)", "https://cloud.google.com/pubsub/pricing", read, false},
	PubSubStorage:    Price{0.27, "GiB-month retained", "https://cloud.google.com/pubsub/pricing", read, true},
	RunRequest:       Price{0.40 / 1e6, "request", "https://cloud.google.com/run/pricing", read, false},
	RunCPU:           Price{0.000024, "vCPU-second (request-based)", "https://cloud.google.com/run/pricing", read, false},
	RunMemory:        Price{0.0000025, "GiB-second (request-based)", "https://cloud.google.com/run/pricing", read, false},
	Logging:          Price{0.50, "GiB ingested", "https://cloud.google.com/stackdriver/pricing", read, true},
	Trace:            Price{0.20 / 1e6, "span ingested", "https://cloud.google.com/stackdriver/pricing", read, true},
	Scheduler:        Price{0.10, "job-month", "https://cloud.google.com/scheduler/pricing", read, false},
	SecretAccess:     Price{0.03 / 1e4, "access operation", "https://cloud.google.com/secret-manager/pricing", read, false},
	SecretVersion:    Price{0.06, "active version-month", "https://cloud.google.com/secret-manager/pricing", read, false},
}

// Assumptions are the figures the local stack cannot measure.
type Assumptions struct {
	// RequestLogBytes is the request log entry Cloud Run writes per
	// invocation (httpRequest, resource labels, trace: about 1 KB).
	RequestLogBytes int64
	// LogEntryBytes is what Cloud Logging adds to each line Servo writes
	// when it makes it a log entry (the log name, the resource and its
	// labels, the instance id, timestamps, an insert id): an entry is
	// billed at its size, not the line's.
	LogEntryBytes int64
	// IndexEntryBytes is the storage of one index entry (Firestore's
	// storage size: the document name, the value, 32 bytes of overhead).
	IndexEntryBytes int64
	// BillingGranularityMs is Cloud Run's rounding of an instance's
	// billed busy time.
	BillingGranularityMs int64
	// LifecyclesPerSecond is the steady rate the functions' instance time
	// is priced at (NewLoad): requests that overlap on an instance share
	// its billed time, so the busier a deployment, the less compute a
	// lifecycle costs. Everything else is priced per operation.
	LifecyclesPerSecond float64
	// CPUTarget is the utilisation of CPU and of concurrency Cloud Run's
	// autoscaler keeps instances at
	// (https://cloud.google.com/run/docs/configuring/scaling-controls).
	CPUTarget float64
	// NoTTLMonths is how many months of storage a lifecycle's documents
	// are priced for when they have no TTL (they never expire).
	NoTTLMonths float64
	// EventSubscriptions is how many subscriptions consume the events
	// topic (each delivery is billed as throughput again).
	EventSubscriptions int
	// SecretReadsPerHour is how often a running instance re-reads the
	// signing-key secret (auth.DefaultRefresh, 5 min).
	SecretReadsPerHour float64
}

// DefaultAssumptions are the model's.
var DefaultAssumptions = Assumptions{
	RequestLogBytes:      1000,
	LogEntryBytes:        400,
	IndexEntryBytes:      100,
	BillingGranularityMs: 100,
	LifecyclesPerSecond:  10,
	CPUTarget:            0.6,
	NoTTLMonths:          12,
	EventSubscriptions:   1,
	SecretReadsPerHour:   12,
}

// HoursPerMonth and MinutesPerMonth are an average month's.
const (
	HoursPerMonth   = 730.0
	MinutesPerMonth = HoursPerMonth * 60
)

// Targets are issue 35's.
var Targets = []Target{
	{Shape: "1 attempt, 10 heartbeats", MaxUSD: 25, Per: "per million lifecycles"},
	{Shape: "1 attempt, 1 heartbeat", MaxUSD: 12, Per: "per million lifecycles"},
	{Shape: FixedShape, MaxUSD: 3, Per: "per month"},
}

// FixedShape names the fixed monthly cost among the targets.
const FixedShape = "fixed, zero traffic"

// Target is a ceiling for a shape's bill.
type Target struct {
	Shape  string
	MaxUSD float64
	Per    string
}

// Alternative is a managed alternative's price for a task that calls a
// worker and reports 10 heartbeats.
type Alternative struct {
	Name, PerMillion, How, Source string
}

// Alternatives are the comparison rows of issue 35.
var Alternatives = []Alternative{
	{"AWS Step Functions Standard", "≈ $75", "a waitForTaskToken task: state transitions at $25 per million, each heartbeat an API call (SendTaskHeartbeat)", "https://aws.amazon.com/step-functions/pricing/"},
	{"Google Cloud Workflows", "≈ $330", "progress polled: each poll step billed ($0.01 per 1 000 internal steps, external HTTP steps at $0.025 per 1 000)", "https://cloud.google.com/workflows/pricing"},
	{"Temporal Cloud", "$300–600", "each heartbeat, activity start and completion is an action ($25–50 per million actions)", "https://temporal.io/pricing"},
}
