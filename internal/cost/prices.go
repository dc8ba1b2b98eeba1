package cost

import (
	"fmt"
	"regexp"
)

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
// tier 1), Firestore Standard edition at the location class priced (At).
// Free tiers are not modelled in the bill (they are per billing account,
// shared with everything else the account runs): the bill is an upper
// bound for a small deployment. Firestore's free quota, which only the
// (default) database has, is shown beside the fixed cost (FreeQuota).
type Prices struct {
	// FirestoreRead, FirestoreWrite, FirestoreDelete and FirestoreStorage
	// are the class priced's (At sets them from Firestore).
	FirestoreRead, FirestoreWrite, FirestoreDelete, FirestoreStorage Price
	// Firestore are the prices of each location class.
	Firestore map[LocationClass]FirestorePrices
	// AlertCondition and AlertSeries are Cloud Monitoring's alerting
	// prices: a condition a month, a time series a condition's query
	// returns at an evaluation.
	AlertCondition, AlertSeries     Price
	CloudTasksOp                    Price
	PubSubThroughput, PubSubStorage Price
	// RunRequest, RunCPU and RunMemory are request-based billing's: a
	// fee a request, and CPU and memory while an instance serves at least
	// one request. RunCPUInstance and RunMemoryInstance are
	// instance-based billing's: CPU and memory for an instance's whole
	// life, idle or not, and no fee a request.
	RunRequest, RunCPU, RunMemory     Price
	RunCPUInstance, RunMemoryInstance Price
	Logging, Trace                    Price
	Scheduler                         Price
	SecretAccess, SecretVersion       Price
}

const (
	read = "2026-11-26"
	// read2 is when the Firestore location classes, the free quota and
	// the alerting prices were read.
	read2 = "2026-11-28"
)

// LocationClass is a Firestore location's kind: a region (us-central1,
// europe-west1) or a multi-region (nam5, eur3), whose reads, writes and
// deletes cost twice a region's.
type LocationClass string

// The location classes.
const (
	Regional    LocationClass = "regional"
	MultiRegion LocationClass = "multi-region"
)

// Classes are the location classes, in the doc's order.
var Classes = []LocationClass{Regional, MultiRegion}

var (
	multiRegion = regexp.MustCompile(`^(nam|eur)[0-9]+$`)
	region      = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+$`)
)

// Class is the class of Firestore location loc: nam5, eur3 (and any
// namN, eurN) are multi-regions, a name like europe-west1 a region.
func Class(loc string) (LocationClass, error) {
	switch {
	case multiRegion.MatchString(loc):
		return MultiRegion, nil
	case region.MatchString(loc):
		return Regional, nil
	}
	return "", fmt.Errorf("cost: firestore_location %q is neither a region (europe-west1) nor a multi-region (nam5, eur3)", loc)
}

// FirestorePrices are a location class's Firestore prices.
type FirestorePrices struct {
	Read, Write, Delete, Storage Price
}

const firestorePricing = "https://cloud.google.com/firestore/pricing"

// At is p with the Firestore prices of class c.
func (p Prices) At(c LocationClass) Prices {
	f := p.Firestore[c]
	p.FirestoreRead, p.FirestoreWrite, p.FirestoreDelete, p.FirestoreStorage = f.Read, f.Write, f.Delete, f.Storage
	return p
}

// FreeQuota is Firestore's free quota: a day's reads, writes and deletes
// and the storage, for the (default) database only ("Only the (default)
// database qualifies for the free quota"; TTL deletes get none).
type FreeQuota struct {
	ReadsPerDay, WritesPerDay, DeletesPerDay, StorageGiB float64
	Source, Read                                         string
}

// FirestoreFreeQuota is the free quota, as the stored copy of the pricing
// page shows it.
var FirestoreFreeQuota = FreeQuota{50_000, 20_000, 20_000, 1, firestorePricing, read2}

// AlertEvaluationsPerMonth is how many times a month an alerting
// condition is evaluated: every 30 s (the pricing examples' "86,400
// 30-second execution periods" in a 30-day month), in an average month.
const AlertEvaluationsPerMonth = HoursPerMonth * 120

// ListPrices is the price table, each price with its source and date read,
// at the regional class (us-central1's).
var ListPrices = Prices{
	FirestoreRead:    Price{0.03 / 1e5, "document read", firestorePricing, read, false},
	FirestoreWrite:   Price{0.09 / 1e5, "document write", firestorePricing, read, false},
	FirestoreDelete:  Price{0.01 / 1e5, "document delete", firestorePricing, read, false},
	FirestoreStorage: Price{0.15, "GiB-month", firestorePricing, read, true},
	Firestore: map[LocationClass]FirestorePrices{
		Regional: {
			Price{0.03 / 1e5, "document read", firestorePricing, read, false},
			Price{0.09 / 1e5, "document write", firestorePricing, read, false},
			Price{0.01 / 1e5, "document delete", firestorePricing, read, false},
			Price{0.15, "GiB-month", firestorePricing, read, true},
		},
		// The stored copy of the current page does not show its per-location
		// table; its earlier versions' do: $0.06, $0.18 and $0.02 per
		// 100 000 and $0.18 a GiB-month for the multi-regions.
		MultiRegion: {
			Price{0.06 / 1e5, "document read", firestorePricing, read2, true},
			Price{0.18 / 1e5, "document write", firestorePricing, read2, true},
			Price{0.02 / 1e5, "document delete", firestorePricing, read2, true},
			Price{0.18, "GiB-month", firestorePricing, read2, true},
		},
	},
	// Shown by the stored copy of "Manage alerting costs" ("$1.50 per
	// condition per month", "$0.35 per million time series"); its newest
	// copy words it per metric reference and point returned, without the
	// figures: unconfirmed.
	AlertCondition:   Price{1.50, "condition-month", "https://cloud.google.com/monitoring/alerts/cost-control", read2, true},
	AlertSeries:      Price{0.35 / 1e6, "time series returned", "https://cloud.google.com/monitoring/alerts/cost-control", read2, true},
	CloudTasksOp:     Price{0.40 / 1e6, "billable operation (32 KB chunk)", "https://cloud.google.com/tasks/pricing", read, false},
	PubSubThroughput: Price{40.0 / (1 << 40), "byte (≥ 1 KB per message)", "https://cloud.google.com/pubsub/pricing", read, false},
	PubSubStorage:    Price{0.27, "GiB-month retained", "https://cloud.google.com/pubsub/pricing", read, true},
	RunRequest:       Price{0.40 / 1e6, "request", "https://cloud.google.com/run/pricing", read, false},
	RunCPU:           Price{0.000024, "vCPU-second (request-based)", "https://cloud.google.com/run/pricing", read, false},
	RunMemory:        Price{0.0000025, "GiB-second (request-based)", "https://cloud.google.com/run/pricing", read, false},
	// Instance-based billing ("Services with CPU always allocated", tier
	// 1): the stored copy shows the CPU figure, $0.00001800 a vCPU-second,
	// and no request fee; its memory figure is cut off ($0.00000200 a
	// GiB-second, the page's as last known).
	RunCPUInstance:    Price{0.000018, "vCPU-second (instance-based)", "https://cloud.google.com/run/pricing", read2, false},
	RunMemoryInstance: Price{0.000002, "GiB-second (instance-based)", "https://cloud.google.com/run/pricing", read2, true},
	Logging:           Price{0.50, "GiB ingested", "https://cloud.google.com/stackdriver/pricing", read, true},
	Trace:             Price{0.20 / 1e6, "span ingested", "https://cloud.google.com/stackdriver/pricing", read, true},
	Scheduler:         Price{0.10, "job-month", "https://cloud.google.com/scheduler/pricing", read, false},
	SecretAccess:      Price{0.03 / 1e4, "access operation", "https://cloud.google.com/secret-manager/pricing", read, false},
	SecretVersion:     Price{0.06, "active version-month", "https://cloud.google.com/secret-manager/pricing", read, false},
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
	// IdleInstanceSeconds is how long an instance the autoscaler no
	// longer needs stays up after its last request: billed under
	// instance-based billing (its whole life is), free under
	// request-based. Cloud Run keeps idle instances up to 15 minutes
	// (https://cloud.google.com/run/docs/about-instance-autoscaling):
	// the most is assumed.
	IdleInstanceSeconds float64
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
	IdleInstanceSeconds:  900,
}

// HoursPerMonth and MinutesPerMonth are an average month's.
const (
	HoursPerMonth   = 730.0
	MinutesPerMonth = HoursPerMonth * 60
)

// MillionAMonth is the steady rate of a million lifecycles a month.
const MillionAMonth = 1e6 / (HoursPerMonth * 3600)

// TargetKind says what a target checks.
type TargetKind int

// The kinds of targets.
const (
	// PerMillion is a shape's bill per million lifecycles, priced at the
	// target's rate, declared as the deployment's
	// (expected_lifecycles_per_second: the functions' billing follows it),
	// at the regional class.
	PerMillion TargetKind = iota
	// MultiRegionRatio is the largest ratio of a PerMillion target's bill
	// at the multi-region class to the same bill at the regional class.
	MultiRegionRatio
	// FixedAlertsOff is the fixed cost a month of Servo's own resources,
	// at the regional class; FixedAlertsOn the same with the alert
	// policies.
	FixedAlertsOff
	FixedAlertsOn
)

// Targets are issue 54's, at the Terraform defaults with regional
// Firestore.
var Targets = []Target{
	{Name: "1 attempt, 10 heartbeats, at 10 a second", Shape: "1 attempt, 10 heartbeats", Rate: 10, Kind: PerMillion, Max: 15, Per: "per million lifecycles"},
	{Name: "1 attempt, 1 heartbeat, at 10 a second", Shape: "1 attempt, 1 heartbeat", Rate: 10, Kind: PerMillion, Max: 8, Per: "per million lifecycles"},
	{Name: "1 attempt, 10 heartbeats, at 1 M a month", Shape: "1 attempt, 10 heartbeats", Rate: MillionAMonth, Kind: PerMillion, Max: 25, Per: "per million lifecycles"},
	{Name: "1 attempt, 1 heartbeat, at 1 M a month", Shape: "1 attempt, 1 heartbeat", Rate: MillionAMonth, Kind: PerMillion, Max: 12, Per: "per million lifecycles"},
	{Name: "multi-region Firestore, each bill above", Kind: MultiRegionRatio, Max: 1.6, Per: "× the regional bill"},
	{Name: "fixed, zero traffic, alerts off", Kind: FixedAlertsOff, Max: 3, Per: "per month"},
	{Name: "fixed, zero traffic, alerts on", Kind: FixedAlertsOn, Max: 12, Per: "per month"},
}

// Target is a ceiling on a bill, or on a ratio of bills.
type Target struct {
	// Name is what the doc calls it.
	Name string
	// Shape and Rate are a PerMillion target's recorded shape and steady
	// rate (lifecycles a second).
	Shape string
	Rate  float64
	Kind  TargetKind
	Max   float64
	Per   string
}

// USD says whether the target's figure is an amount (not a ratio).
func (t Target) USD() bool { return t.Kind != MultiRegionRatio }

// Alternative is a managed alternative's price for a task that calls a
// worker and reports 10 heartbeats.
type Alternative struct {
	Name, PerMillion, How, Source string
}

// Alternatives are the comparison rows of issue 35.
var Alternatives = []Alternative{
	{"AWS Step Functions Standard", "$25–75", "a waitForTaskToken task: 1 to 3 state transitions at $25 per million; a heartbeat (SendTaskHeartbeat) is an API call, not a state transition, so not billed, whatever their count", "https://aws.amazon.com/step-functions/pricing/"},
	{"Google Cloud Workflows", "≈ $330", "progress polled: each poll step billed ($0.01 per 1 000 internal steps, external HTTP steps at $0.025 per 1 000)", "https://cloud.google.com/workflows/pricing"},
	{"Temporal Cloud", "$300–600", "each heartbeat, activity start and completion is an action ($25–50 per million actions)", "https://temporal.io/pricing"},
}
