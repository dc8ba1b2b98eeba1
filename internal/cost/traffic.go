// Package cost turns recorded traffic into a bill: what one task lifecycle
// of each workload shape causes (Firestore, Cloud Tasks, Pub/Sub, function
// invocations, logs, spans), and what the deployment costs at zero
// traffic, priced with the table in prices.go at the Terraform defaults
// read from terraform/. It is pure: the traffic is recorded by the local
// stack (BenchmarkCostRecord in internal/devstack, `go run ./bench/cost
// -record`) and read from testdata/traffic.json.
package cost

import (
	"encoding/json"
	"fmt"
	"os"
)

// Recording is what the local stack measured: one Traffic per workload
// shape, the idle sweeper's invocation, and what schedules cost besides
// their fires.
type Recording struct {
	// Recorded is the date of the recording (YYYY-MM-DD).
	Recorded string    `json:"recorded"`
	Shapes   []Traffic `json:"shapes"`
	Idle     Idle      `json:"idle"`
	// FireTick is one sweeper invocation, run the production way, whose
	// first pass made a schedule's fire: a pass that fired is not idle,
	// so the invocation sweeps on to its next pass before it may end.
	FireTick Idle `json:"fireTick"`
	// IdleSchedule is one schedule at rest.
	IdleSchedule IdleSchedule `json:"idleSchedule"`
}

// IdleSchedule is what a schedule whose next fire is hours away keeps and
// causes: its document (after its first fire) and what a sweep pass with
// Schedules such schedules read and wrote more than a pass with none.
type IdleSchedule struct {
	DocBytes     int64 `json:"docBytes"`
	IndexEntries int64 `json:"indexEntries"`
	Schedules    int64 `json:"schedules"`
	PassReads    int64 `json:"passReads"`
	PassWrites   int64 `json:"passWrites"`
}

// Traffic is what one lifecycle of a shape caused.
type Traffic struct {
	Shape string `json:"shape"`
	// Firestore: documents read (an empty query counts one), written,
	// deleted (the code's deletes, and TTL deletes: every document
	// created with a TTL field is deleted once), index entries written.
	FirestoreReads int64 `json:"firestoreReads"`
	// FirestoreMissing are lookups of documents that do not exist (a
	// BatchGetDocuments name not found): priced as reads, an upper bound
	// (Firestore's pricing page does not say).
	FirestoreMissing int64 `json:"firestoreMissing"`
	FirestoreWrites  int64 `json:"firestoreWrites"`
	FirestoreDeletes int64 `json:"firestoreDeletes"`
	IndexEntries     int64 `json:"indexEntries"`
	// StoredDocBytes and StoredIndexEntries are what the lifecycle left in
	// the database for good (documents without a TTL, and their entries).
	StoredDocBytes     int64 `json:"storedDocBytes"`
	StoredIndexEntries int64 `json:"storedIndexEntries"`
	// TTLDocByteDays and TTLIndexEntryDays are the documents with a TTL
	// field and their entries, each weighted by the days until its TTL
	// deletes it (as the code set it).
	TTLDocByteDays    float64 `json:"ttlDocByteDays"`
	TTLIndexEntryDays float64 `json:"ttlIndexEntryDays"`
	// CloudTasksCreates are the sizes of the CreateTask requests, bytes
	// (each is also one push delivery attempt of the same size).
	CloudTasksCreates []int64 `json:"cloudTasksCreates"`
	// CloudTasksDeletes are the DeleteTask calls, each a billable
	// operation: a cancel of a PENDING or QUEUED attempt deletes its Cloud
	// Task (one call per queue the attempt may be in and re-drive, one with
	// a worker's single queue); a RUNNING attempt's was delivered, and a
	// re-drive deletes its predecessor's.
	CloudTasksDeletes int64 `json:"cloudTasksDeletes,omitempty"`
	// PubSubMessages are the sizes of the messages published, bytes.
	PubSubMessages []int64 `json:"pubSubMessages"`
	// Invocations are the function invocations, by function (api,
	// callbacks), and RequestMs the request time each took, by function.
	Invocations map[string]int64   `json:"invocations"`
	RequestMs   map[string][]int64 `json:"requestMs"`
	// SubmitRequests are the api's invocations that were submits (POST
	// /v1/tasks or /v1/tasks:batch), whose request logs an exclusion may
	// drop (Defaults.NoOKSubmitRequestLogs) while the api's others stay.
	SubmitRequests int64 `json:"submitRequests,omitempty"`
	// Fires are the lifecycles a schedule's fire began: made by the
	// sweeper's schedule duty, not by a submit (no api request).
	Fires int64 `json:"fires,omitempty"`
	// SweeperMs is how much longer the sweep pass that made the fire held
	// the sweeper's request than an idle pass: priced at the sweeper's
	// sizing, without a request of its own (the pass runs in a Scheduler
	// tick's invocation).
	SweeperMs int64 `json:"sweeperMs,omitempty"`
	// CPUUs is the CPU time (user + system, microseconds) the local
	// stack's process spent during each invocation, by function: the
	// handler's work and the test client's (an upper bound of the
	// handler's).
	CPUUs map[string][]int64 `json:"cpuUs"`
	// LogLines and LogBytes are what Servo's slog handler emitted.
	LogLines int64 `json:"logLines"`
	LogBytes int64 `json:"logBytes"`
	// Spans ended (recorded unsampled: the sampling ratio is applied when
	// priced).
	Spans int64 `json:"spans"`
	// SecretAccesses are Secret Manager access operations on the
	// lifecycle's path.
	SecretAccesses int64 `json:"secretAccesses"`
}

// Idle is one sweeper invocation at zero traffic, run the production way
// (zombie.Sweeper.Run with the default window and cadence).
type Idle struct {
	// InvocationMs is how long the invocation held its request.
	InvocationMs     int64 `json:"invocationMs"`
	Passes           int64 `json:"passes"`
	FirestoreReads   int64 `json:"firestoreReads"`
	FirestoreWrites  int64 `json:"firestoreWrites"`
	FirestoreQueries int64 `json:"firestoreQueries"`
	LogLines         int64 `json:"logLines"`
	LogBytes         int64 `json:"logBytes"`
	Spans            int64 `json:"spans"`
	// StoredDocBytes is what an idle deployment keeps (meta documents).
	StoredDocBytes int64 `json:"storedDocBytes"`
}

// ReadRecording reads a recording written by WriteRecording.
func ReadRecording(path string) (Recording, error) {
	var r Recording
	b, err := os.ReadFile(path)
	if err != nil {
		return r, fmt.Errorf("cost: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("cost: %s: %w", path, err)
	}
	if len(r.Shapes) == 0 {
		return r, fmt.Errorf("cost: %s: no shapes recorded", path)
	}
	return r, nil
}

// WriteRecording writes r as indented JSON.
func WriteRecording(path string, r Recording) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("cost: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("cost: %w", err)
	}
	return nil
}
