// Package scale is Servo's hot-spot model: it extrapolates traffic
// recorded on the local stack (bench/scale records it) to a target load,
// and sets the peak sustained rate of every document, index range,
// collection, Cloud Tasks queue and Pub/Sub topic and ordering key beside
// the published limit it must stay under. docs/scale.md explains the
// model; this package is pure.
package scale

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Kind is what a recorded event touches.
type Kind string

// Kinds of events.
const (
	// Document is a Firestore document write; Name is the document.
	Document Kind = "document"
	// IndexEntry is one index entry a write makes; Name is the index,
	// Range its equality prefix, Value the entry's value (byte order is
	// index order) and Doc the document (entries sort by value, then name).
	IndexEntry Kind = "index"
	// Dispatch is a Cloud Tasks CreateTask; Name is the queue.
	Dispatch Kind = "queue"
	// Publish is a Pub/Sub message; Name is the topic, Key its ordering
	// key, Bytes its size.
	Publish Kind = "topic"
)

// Event is one recorded unit of traffic, with the task it is for ("" when
// none: the sweeper's meta documents).
type Event struct {
	Kind       Kind
	Name       string
	Collection string // Document
	Range      string // IndexEntry
	Value, Doc string // IndexEntry
	Text       string // IndexEntry: Value for people
	// At is when the entry was written (IndexEntry; zero: unknown): a
	// time value that keeps a fixed distance from it tracks the clock.
	At    time.Time
	Key   string // Publish
	Bytes int    // Publish
	Task  string
	// Schedule is the schedule document a write of no task is for (a
	// schedule's own record: its fires decided and settled).
	Schedule string
	// Delete is a document's delete (Document), or an entry removed
	// (IndexEntry: the old value's when a value changed or was cleared,
	// every entry of a deleted document): a write to the document and to
	// the range like any other. Expiry is a delete Firestore makes by TTL
	// policy, At then when the document expires: a recording lists its
	// expiries after its writes, in the order they expire.
	Delete, Expiry bool
}

// TaskInfo is what the model knows of a recorded task.
type TaskInfo struct {
	Tenant, Worker string
}

// Role is the part a recorded tenant or worker plays at the target.
type Role string

// Roles.
const (
	// Hot is the tenant with Target.HotShare of the submits, or the worker
	// with Target.BigWorkerShare of the tasks.
	Hot Role = "hot"
	// Limited is a tenant at its quota limit (Target.Limited of them).
	Limited Role = "limited"
	// Ordinary is any other tenant or worker.
	Ordinary Role = "ordinary"
)

// Traffic is a recorded workload.
type Traffic struct {
	Events []Event
	// Tasks are the submitted tasks (each submit is one task: a duplicate
	// submit with an idempotency key is not a task).
	Tasks map[string]TaskInfo
	// Tenants and Workers give each recorded tenant and worker its role.
	Tenants, Workers map[string]Role
	// Duration is how long the recording took, SweepEvery the recorded
	// sweeper's cadence: events for no task (the sweeper's records) recur
	// with time, not with tasks.
	Duration, SweepEvery time.Duration
	// Spread names the families a hash spreads evenly over n members at
	// the target: a document or queue name with ShardMark in place of its
	// member number (quotas/t_x-{k}), or an index field whose value is a
	// hash shard (dueShard: its ranges recorded as dueShard={k}). The
	// model sums a family's traffic and gives each member 1/n of it: a
	// small recording spreads too few events over n members for its
	// busiest one to be the target's.
	Spread map[string]int
	// Fires are the fires recorded of each schedule, by its document (a
	// recording of schedules: each fire made one of Tasks).
	Fires map[string]int
	// Runs are the recorded run documents, by name: a run's document is
	// written by the submits of its tasks, at most once every RunEvery
	// by one process (store.RunDocumentEvery), so that its rate at the
	// target follows from the run's size and the processes submitting
	// into it (Target.RunWrites), not from its recorded writes a task. A
	// run document the recording wrote more than once every RunEvery
	// (the rule broken; RunEvery 0: no rule) is priced at its recorded
	// writes a request instead.
	Runs     map[string]RunInfo
	RunEvery time.Duration
	// Pairs are the documents (by name, after Spread's renaming) that
	// count one tenant's tasks on one worker: a tenant's share of a
	// limited worker's quota (quota.Limits.PerTenant). Written for one
	// tenant's tasks on one worker, they are priced at that tenant's
	// rate times the worker's share of all tasks (PerShare).
	Pairs map[string]bool
}

// RunInfo is what the model knows of a recorded run document: the tenant
// whose run it is and the submit requests recorded into it (a batch of
// its tasks is one request).
type RunInfo struct {
	Tenant   string
	Requests int
}

// ShardMark stands for a member's number in a Spread family's name.
const ShardMark = "{k}"

// spread is the number of members name (a document, queue or index range)
// shares its family's traffic with (1: not a family).
func (m *Model) spread(name string) float64 {
	if n := m.tr.Spread[name]; n > 0 {
		return float64(n)
	}
	d := 1
	for field, n := range m.tr.Spread {
		if n > 0 && strings.Contains(name, field+"="+ShardMark) {
			d *= n
		}
	}
	return float64(d)
}

// Target is the load to extrapolate to.
type Target struct {
	// Submits and Completions are tasks a second.
	Submits, Completions float64
	// Tenants is the number of tenants; HotShare the hot one's share of
	// submits; Limited the tenants at their quota limits, each submitting
	// LimitedRate tasks a second.
	Tenants     int
	HotShare    float64
	Limited     int
	LimitedRate float64
	// Running tasks heartbeat every HeartbeatEvery.
	Running        float64
	HeartbeatEvery time.Duration
	// Workers is the number of workers; BigWorkerShare the share of all
	// tasks one of them takes.
	Workers        int
	BigWorkerShare float64
	// SweepEvery is production's sweeper cadence (SERVO_SWEEP_EVERY).
	SweepEvery time.Duration
	// Region is the deployment's region (Terraform's region): its Pub/Sub
	// publisher throughput quota is a large region's or a small one's
	// (TopicLimit). "" is us-central1.
	Region string
	// PublishQuota, when above 0, is the publisher throughput quota
	// (bytes/s) the deployment's project was granted in Region on request
	// (the quota is soft), checked instead of the region's default.
	PublishQuota float64
	// Peak is how far above its mean the load peaks: every rate the
	// target's load makes is checked at Peak times its mean (the sweeper's
	// own records and a schedule's own record, whose rates are set by
	// their cadence, are not). A tenant's or worker's declared peak
	// (quota peakRate, maxDispatchesPerSecond) is Peak times its mean
	// rate, so quota shards and queues are checked at their declared
	// peak. 0 is 1: the mean.
	Peak float64
	// Schedules is the number of schedules, each firing once every
	// ScheduleEvery; SameMinute is the share of them that fire on the
	// same minute (the top of the hour), and FireWithin how soon after
	// it the sweeper has made all of that minute's fires.
	Schedules     int
	SameMinute    float64
	ScheduleEvery time.Duration
	FireWithin    time.Duration
	// RunSize is the tasks of one run (1: every task its own run, which
	// has no run document), submitted at its tenant's rate; Batch the
	// tasks of one submit request (POST /v1/tasks:batch; 1: one task a
	// request). APIInstances is the most processes serving submits
	// (Terraform's functions.api.max_instances): each writes a run's
	// document at most once every RunEvery.
	RunSize, Batch, APIInstances int
	// RunEvery is the deployment's run document interval
	// (SERVO_RUN_DOCUMENT_EVERY, store.RunDocumentEveryFor(APIInstances);
	// 0: the recording's, Traffic.RunEvery).
	RunEvery time.Duration
}

// DefaultTarget is issue 32's target.
var DefaultTarget = Target{
	Submits: 10000, Completions: 10000, Tenants: 1000, HotShare: 0.30, Limited: 20,
	Running: 1_000_000, HeartbeatEvery: 30 * time.Second, Workers: 20, BigWorkerShare: 0.5,
	SweepEvery: 15 * time.Second, Peak: DefaultPeak, Region: "us-central1",
	Schedules: 100_000, SameMinute: 0.10, ScheduleEvery: time.Hour, FireWithin: time.Minute,
	RunSize: 1_000_000, Batch: 1, APIInstances: DefaultAPIInstances,
}

// DefaultAPIInstances is Terraform's default functions.api.max_instances
// (bench/scale's TestTerraformDefaults holds them equal).
const DefaultAPIInstances = 20

// DefaultPeak is Target.Peak's default: peaks twice the mean.
const DefaultPeak = 2.0

// PeakFactor is t.Peak, 1 when unset.
func (t Target) PeakFactor() float64 {
	if t.Peak <= 0 {
		return 1
	}
	return t.Peak
}

// FireBurst is the fires a second of the same minute's schedules, made
// within FireWithin.
func (t Target) FireBurst() float64 {
	if t.FireWithin <= 0 {
		return 0
	}
	return float64(t.Schedules) * t.SameMinute / t.FireWithin.Seconds()
}

// SteadyFires is the fires a second of the other schedules, spread over
// their period's other minutes.
func (t Target) SteadyFires() float64 {
	rest := t.ScheduleEvery - time.Minute
	if rest <= 0 {
		return 0
	}
	return float64(t.Schedules) * (1 - t.SameMinute) / rest.Seconds()
}

// Fires is the target of a recording of schedules (Traffic.Fires) at the
// top of the minute: the same-minute burst's fires are its submits, each
// fire's task lives the target's lifetime, and the tenants' and workers'
// shares are t's. The burst is a peak already: its Peak is 1 (Combine
// adds the steady load at its peak).
func (t Target) Fires() Target {
	f := t
	f.Peak = 1
	f.Submits, f.Completions = t.FireBurst(), t.FireBurst()
	f.Running = t.FireBurst() * t.Lifetime()
	return f
}

// Lifetime is a task's mean lifetime at the target (Little's law: running
// tasks over completions a second).
func (t Target) Lifetime() float64 { return t.Running / t.Completions }

// HeartbeatsPerTask is how many heartbeats a task sends in its lifetime at
// the target: what a recorded task should send.
func (t Target) HeartbeatsPerTask() int {
	return int(t.Lifetime()/t.HeartbeatEvery.Seconds() + 0.5)
}

// TenantRate is a tenant's submits a second at the target.
func (t Target) TenantRate(r Role) float64 {
	switch r {
	case Hot:
		return t.HotShare * t.Submits
	case Limited:
		return t.limitedRate()
	}
	rest := t.Submits*(1-t.HotShare) - float64(t.Limited)*t.limitedRate()
	return rest / float64(max(1, t.Tenants-1-t.Limited))
}

func (t Target) limitedRate() float64 {
	if t.LimitedRate > 0 {
		return t.LimitedRate
	}
	return t.Submits * (1 - t.HotShare) / float64(max(1, t.Tenants-1))
}

// RunWrites is the writes a second of one run's document at t while its
// tasks are submitted, by a tenant submitting rate tasks a second: the
// run's RunSize tasks come Batch a request, N/Batch requests over the
// run's N/rate seconds, spread over min(APIInstances, requests)
// processes. The document is created once (the first process to take a
// submit into the run creates it unless it exists; the others write
// nothing, store.Store.createRun), and then each process rewrites it
// once every `every` (SERVO_RUN_DOCUMENT_EVERY) after its first submit
// into the run, if it takes another: never more than once a request.
// With perRequest > 0 (the recording found the rule broken) every
// request writes it perRequest times. The rate is over the run's life,
// at least a second. A task that is its own run (RunSize 1) writes no run
// document: 0.
func (t Target) RunWrites(rate float64, every time.Duration, perRequest float64) float64 {
	if t.RunSize <= 1 || rate <= 0 {
		return 0
	}
	n := float64(t.RunSize)
	requests := math.Ceil(n / float64(max(1, t.Batch)))
	life := n / rate
	if perRequest > 0 {
		return requests * perRequest / max(life, 1)
	}
	procs := min(float64(max(1, t.APIInstances)), requests)
	refreshes := requests/procs - 1 // a process's requests after its first
	if every > 0 {
		refreshes = min(refreshes, math.Ceil(life/every.Seconds())-1)
	}
	return min(requests, 1+procs*max(0, refreshes)) / max(life, 1)
}

// MinRunRequests is the fewest recorded requests into a run whose
// document's writes can tell the store's rule broken (runRate).
const MinRunRequests = 4

// SubmitRequests is the submit requests a second at t (Batch tasks each).
func (t Target) SubmitRequests() float64 { return t.Submits / float64(max(1, t.Batch)) }

// WorkerRate is a worker's tasks a second at the target.
func (t Target) WorkerRate(r Role) float64 {
	if r == Hot {
		return t.BigWorkerShare * t.Submits
	}
	return t.Submits * (1 - t.BigWorkerShare) / float64(max(1, t.Workers-1))
}

// Scope is what a document, range, queue or key is shared by.
type Scope string

// Scopes, from the narrowest.
const (
	PerTask   Scope = "task"
	PerTenant Scope = "tenant"
	PerWorker Scope = "worker"
	Global    Scope = "global"
	// PerShare is a tenant's share of a worker (Traffic.Pairs): the
	// tenant's rate times the worker's share of all tasks.
	PerShare Scope = "tenant × worker"
	// PerRun is a run's document (Traffic.Runs, Target.RunWrites).
	PerRun Scope = "run"
	// PerSchedule is one schedule's own record (no task), written with
	// its fires.
	PerSchedule Scope = "schedule"
	// Periodic is for no task: the sweeper's own records, which recur
	// with its cadence.
	Periodic Scope = "periodic"
)

// Row is one line of the table.
type Row struct {
	// Section is "document", "index", "collection", "queue",
	// "ordering key" or "topic".
	Section string
	// Name is the document class (ids replaced by {id}), index, queue…;
	// Example the recorded instance that peaked.
	Name, Example string
	Scope         Scope
	// Monotonic is an index range whose values increase in write order.
	Monotonic bool
	// Recorded is the events recorded on Example, Deleted how many of
	// them are deletes (a document's, an index entry's removal; TTL
	// expiries included); Rate its peak sustained rate at the target, in
	// Unit: Mean, its mean, times the target's Peak.
	Recorded, Deleted int
	Rate, Mean        float64
	Unit              string
	// Limit is the published limit that applies (nil: none).
	Limit *Limit
	// Steady is the part of Rate another recording's row of the same
	// name adds (Combine): the steady load under a burst.
	Steady float64
}

// Over reports whether the row is over its limit.
func (r Row) Over() bool { return r.Limit != nil && r.Rate > r.Limit.PerSecond }

// MinMonotonic is the fewest entries in which a range can be called
// monotonic; MonotonicCorrelation the rank correlation of its values with
// their write order it needs (a short range needs more), see Monotonic.
const (
	MinMonotonic         = 8
	MonotonicCorrelation = 0.5
	MonotonicDeviations  = 3.5
	// LowCardinality is the most distinct values an index's last field
	// may take to count as an equality-like prefix (a state, a flag, an
	// empty string): its entries then sort by document name within each
	// value. A number or a time never counts as one (ordered).
	LowCardinality = 16
)

// ordered reports whether an index entry's value (store.WriteRecorder's
// encoding: a type tag, then the value in index order) is a number or a
// time: a value whose range can be sequential however few distinct
// values a recording saw.
func ordered(value string) bool { return value != "" && (value[0] == '2' || value[0] == '3') }

// ClockBand is how far apart a range's time values may lie from their
// write times, less a fixed distance, and still track the clock: a time
// rounded to the second, written by a loaded machine.
const ClockBand = 2 * time.Second

// TracksClock reports whether a range's time values, less their write
// times (offsets), keep a fixed distance from the clock, within
// ClockBand: such values are sequential at any rate however few distinct
// values (a time rounded to the second) a short recording saw.
func TracksClock(offsets []time.Duration) bool {
	if len(offsets) < MinMonotonic {
		return false
	}
	lo, hi := slices.Min(offsets), slices.Max(offsets)
	return hi-lo <= ClockBand
}

// timeValue decodes an entry's value when it is a time
// (store.WriteRecorder's encoding: '3', the seconds with the sign bit
// flipped, big-endian, then the nanoseconds).
func timeValue(v string) (time.Time, bool) {
	if len(v) != 13 || v[0] != '3' {
		return time.Time{}, false
	}
	secs := int64(binary.BigEndian.Uint64([]byte(v[1:9])) ^ 1<<63)
	nanos := int64(binary.BigEndian.Uint32([]byte(v[9:13])))
	return time.Unix(secs, nanos), true
}

// orderedMark stands, among an index's distinct values, for "has numbers
// or times".
const orderedMark = "\x00ordered"

// subject accumulates the events of one document, range, queue or key.
type subject struct {
	name, example string
	count, bytes  int
	quotaBytes    int // Publish: what its messages count against the quota (QuotaBytes)
	deleted       int
	tasks         map[string]bool // up to two: one is a per-task subject
	schedules     map[string]bool // up to two, for writes of no task
	tenants       map[string]bool
	workers       map[string]bool
	keys          []string        // written entries' keys, in write order
	delKeys       []string        // removed entries' keys, in write order
	ttlKeys       []string        // entries removed by TTL, in expiry order
	ttlAt         time.Time       // the last expiry's time (ttlKeys keeps one key an instant)
	offsets       []time.Duration // written time values less their write times
}

func newSubject(name string) *subject {
	return &subject{name: name, tasks: map[string]bool{}, schedules: map[string]bool{}, tenants: map[string]bool{}, workers: map[string]bool{}}
}

func (s *subject) add(e Event, ti TaskInfo, key string) {
	s.count++
	s.bytes += e.Bytes
	if e.Kind == Publish {
		s.quotaBytes += QuotaBytes(e.Bytes)
	}
	if e.Delete {
		s.deleted++
	}
	if e.Task != "" {
		if len(s.tasks) < 2 {
			s.tasks[e.Task] = true
		}
		s.tenants[ti.Tenant] = true
		s.workers[ti.Worker] = true
	} else if e.Schedule != "" && len(s.schedules) < 2 {
		s.schedules[e.Schedule] = true
	}
	switch {
	case key == "":
	case e.Expiry:
		// Documents expiring at the same instant (written by one
		// commit: a batch's) have no order among them: one stands
		// for them all.
		if len(s.ttlKeys) == 0 || e.At.IsZero() || !e.At.Equal(s.ttlAt) {
			s.ttlKeys = append(s.ttlKeys, key)
		}
		s.ttlAt = e.At
	case e.Delete:
		s.delKeys = append(s.delKeys, key)
	default:
		s.keys = append(s.keys, key)
	}
	if v, ok := timeValue(e.Value); ok && !e.At.IsZero() && !e.Delete {
		s.offsets = append(s.offsets, v.Sub(e.At))
	}
}

// Model is a recorded workload ready to extrapolate.
type Model struct {
	tr              Traffic
	tenantN, workrN map[string]int
	pairN           map[TaskInfo]int
}

// New prepares tr.
func New(tr Traffic) *Model {
	m := &Model{tr: tr, tenantN: map[string]int{}, workrN: map[string]int{}, pairN: map[TaskInfo]int{}}
	for _, ti := range tr.Tasks {
		m.tenantN[ti.Tenant]++
		m.workrN[ti.Worker]++
		m.pairN[ti]++
	}
	return m
}

// runRate is the rate of run document s at t, at the mean and at the
// peak (its tenant's rate times t's Peak), and whether s is one
// (Traffic.Runs). The recording is one process: a document of at least
// MinRunRequests requests written by more than half of them in each
// RunEvery it lasted broke the rule (not a race of the few in flight at
// once), and is priced at its recorded writes a request.
func (m *Model) runRate(s *subject, t Target) (mean, peak float64, ok bool) {
	info, ok := m.tr.Runs[s.name]
	if !ok {
		return 0, 0, false
	}
	perRequest := 0.0
	writes := float64(s.count - s.deleted)
	windows := 1.0
	if m.tr.RunEvery > 0 {
		windows = max(1, math.Ceil(m.tr.Duration.Seconds()/m.tr.RunEvery.Seconds()))
	}
	if m.tr.RunEvery <= 0 || info.Requests >= MinRunRequests && writes/windows > 1+float64(info.Requests-1)/2 {
		perRequest = writes / float64(max(1, info.Requests))
	}
	rate := t.TenantRate(m.tr.Tenants[info.Tenant])
	every := cmp.Or(t.RunEvery, m.tr.RunEvery) // the deployment's interval, else the recording's
	return t.RunWrites(rate, every, perRequest), t.RunWrites(rate*t.PeakFactor(), every, perRequest), true
}

// scope classifies a subject by the tasks it was recorded for, and returns
// its rate at t for n events (or bytes) recorded.
func (m *Model) rate(s *subject, n int, t Target) (Scope, float64) {
	total := float64(max(1, len(m.tr.Tasks)))
	if m.tr.Pairs[s.name] && len(s.tasks) > 0 && len(s.tenants) == 1 && len(s.workers) == 1 && t.Submits > 0 {
		for tn := range s.tenants {
			for w := range s.workers {
				pair := TaskInfo{Tenant: tn, Worker: w}
				return PerShare, float64(n) / float64(max(1, m.pairN[pair])) * t.TenantRate(m.tr.Tenants[tn]) * t.WorkerRate(m.tr.Workers[w]) / t.Submits
			}
		}
	}
	if len(s.tasks) == 0 && len(s.schedules) == 1 {
		// One schedule's record, written with its fires: at the
		// shortest period there is, a fire every sweep.
		for sc := range s.schedules {
			if f := m.tr.Fires[sc]; f > 0 && t.SweepEvery > 0 {
				return PerSchedule, float64(n) / float64(f) / t.SweepEvery.Seconds()
			}
		}
	}
	if len(s.tasks) == 0 && len(s.schedules) > 1 {
		// Several schedules' records: with the fires, of which there
		// are as many as tasks.
		return Global, float64(n) / total * t.Submits
	}
	if len(s.tasks) == 0 {
		if m.tr.Duration <= 0 || t.SweepEvery <= 0 {
			return Periodic, 0
		}
		return Periodic, float64(n) / m.tr.Duration.Seconds() * m.tr.SweepEvery.Seconds() / t.SweepEvery.Seconds()
	}
	if len(s.tasks) == 1 {
		// One task's document (or key): written over the task's lifetime.
		return PerTask, float64(n) / t.Lifetime()
	}
	tenants, workers := s.tenants, s.workers
	if len(s.tasks) > 1 && len(tenants) == 1 {
		for tn := range tenants {
			return PerTenant, float64(n) / float64(max(1, m.tenantN[tn])) * t.TenantRate(m.tr.Tenants[tn])
		}
	}
	if len(s.tasks) > 1 && len(workers) == 1 {
		for w := range workers {
			return PerWorker, float64(n) / float64(max(1, m.workrN[w])) * t.WorkerRate(m.tr.Workers[w])
		}
	}
	return Global, float64(n) / total * t.Submits
}

// sequential reports whether a range's entries are sequential: those
// written, those removed, or those TTL removes (each in its own order),
// or its time values track the clock.
func (s *subject) sequential() bool {
	return Monotonic(s.keys) || Monotonic(s.delKeys) || Monotonic(s.ttlKeys) || TracksClock(s.offsets)
}

// atPeak is a mean rate of scope sc at t's peak: the load's rates peak,
// the sweeper's records (periodic) and a schedule's own record (priced at
// its shortest period) do not.
func atPeak(sc Scope, mean float64, t Target) float64 {
	if sc == Periodic || sc == PerSchedule {
		return mean
	}
	return mean * t.PeakFactor()
}

// Extrapolate returns the table's rows at t: per document class, index,
// collection, queue, ordering key and topic, the peak over its instances,
// each at t's Peak. Deletes count as writes: a document's delete, each
// index entry removed (Event.Delete), and TTL expiries, each recorded
// once per document as it is written once: at the rate documents expire.
func (m *Model) Extrapolate(t Target) []Row {
	docs, colls := map[string]*subject{}, map[string]*subject{}
	queues, keys, topics := map[string]*subject{}, map[string]*subject{}, map[string]*subject{}
	type ixKey struct{ index, rng string }
	ranges := map[ixKey]*subject{}
	var ixOrder []ixKey
	distinct := map[string]map[string]bool{}
	get := func(subs map[string]*subject, k string) *subject {
		s := subs[k]
		if s == nil {
			s = newSubject(k)
			subs[k] = s
		}
		return s
	}
	for _, e := range m.tr.Events {
		if e.Kind == IndexEntry {
			if distinct[e.Name] == nil {
				distinct[e.Name] = map[string]bool{}
			}
			switch {
			case ordered(e.Value):
				// Numbers and times are tested as ranges however few
				// values the recording gave them (a time rounded to the
				// second takes a handful in a short recording).
				distinct[e.Name][orderedMark] = true
			case len(distinct[e.Name]) <= LowCardinality:
				distinct[e.Name][e.Value] = true
			}
		}
	}
	lowCard := func(index string) bool {
		return !distinct[index][orderedMark] && len(distinct[index]) <= LowCardinality
	}
	for _, e := range m.tr.Events {
		ti := m.tr.Tasks[e.Task]
		switch e.Kind {
		case Document:
			get(docs, e.Name).add(e, ti, "")
			get(colls, e.Collection).add(e, ti, "")
		case Dispatch:
			get(queues, e.Name).add(e, ti, "")
		case Publish:
			get(topics, e.Name).add(e, ti, "")
			if e.Key != "" {
				get(keys, e.Name+" "+e.Key).add(e, ti, "")
			}
		case IndexEntry:
			k := ixKey{e.Name, e.Range}
			key := e.Value + "\x00" + e.Doc
			if lowCard(e.Name) {
				k.rng += " | " + cmp.Or(e.Text, e.Value)
				key = e.Doc
			}
			s := ranges[k]
			if s == nil {
				s = newSubject(k.rng)
				ranges[k] = s
				ixOrder = append(ixOrder, k)
			}
			s.add(e, ti, key)
		}
	}
	var rows []Row
	// bytes: 0 counts events, 1 their bytes, 2 their quota bytes.
	peak := func(section string, subs map[string]*subject, class func(string, Scope) string, unit string, bytes int, limit *Limit) {
		best := map[string]Row{}
		for name, s := range subs {
			n := s.count
			switch bytes {
			case 1:
				n = s.bytes
			case 2:
				n = s.quotaBytes
			}
			sc, r := m.rate(s, n, t)
			r /= m.spread(name)
			pk := atPeak(sc, r, t)
			if section == "document" {
				if mean, p, ok := m.runRate(s, t); ok {
					sc, r, pk = PerRun, mean, p
				}
			}
			c := class(name, sc)
			if old, ok := best[c]; !ok || pk > old.Rate {
				best[c] = Row{Section: section, Name: c, Example: name, Scope: sc, Recorded: n, Deleted: s.deleted, Rate: pk, Mean: r, Unit: unit, Limit: limit}
			}
		}
		for _, r := range best {
			rows = append(rows, r)
		}
	}
	same := func(s string, _ Scope) string { return s }
	// A collection's documents of another scope than its tenants' (a
	// worker's quota counters, a tenant's share of a worker) are a class
	// of their own.
	docClass := func(name string, sc Scope) string {
		if sc == PerWorker || sc == PerShare {
			return DocClass(name, sc) + " (" + string(sc) + ")"
		}
		return DocClass(name, sc)
	}
	peak("document", docs, docClass, "writes/s", 0, &DocumentWrites)
	peak("collection", colls, same, "writes/s", 0, nil)
	peak("queue", queues, same, "dispatches/s", 0, &QueueDispatches)
	peak("ordering key", keys, func(k string, _ Scope) string { tp, _, _ := strings.Cut(k, " "); return tp + " {key}" }, "bytes/s", 1, &OrderingKeyBytes)
	topicLimit := TopicLimit(t.Region)
	if t.PublishQuota > 0 {
		topicLimit = Limit{Name: fmt.Sprintf("Pub/Sub: publisher throughput in %s, raised on request to %.0f MB/s", cmp.Or(t.Region, "us-central1"), t.PublishQuota/1e6),
			PerSecond: t.PublishQuota, Source: topicLimit.Source + "; raised on the project's Quotas page (IAM & Admin, Quotas: Pub/Sub publisher throughput per region)", Read: topicLimit.Read}
	}
	peak("topic", topics, same, "quota bytes/s", 2, &topicLimit)
	best := map[string]Row{}
	var ixNames []string
	for _, k := range ixOrder {
		s := ranges[k]
		sc, r := m.rate(s, s.count, t)
		r /= m.spread(k.rng)
		mono := s.sequential()
		row := Row{Section: "index", Name: k.index, Example: strings.TrimPrefix(k.rng, " | "), Scope: sc, Monotonic: mono, Recorded: s.count, Deleted: s.deleted,
			Rate: atPeak(sc, r, t), Mean: r, Unit: "entries/s"}
		if mono {
			row.Limit = &SequentialIndex
		}
		old, ok := best[k.index]
		if !ok {
			ixNames = append(ixNames, k.index)
		}
		// The worst range: a monotonic one over a spread one, then the fastest.
		if !ok || (row.Monotonic && !old.Monotonic) || (row.Monotonic == old.Monotonic && row.Rate > old.Rate) {
			best[k.index] = row
		}
	}
	for _, n := range ixNames {
		rows = append(rows, best[n])
	}
	order := map[string]int{"document": 0, "index": 1, "collection": 2, "queue": 3, "ordering key": 4, "topic": 5}
	slices.SortStableFunc(rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(order[a.Section], order[b.Section]), cmp.Compare(b.Rate, a.Rate), cmp.Compare(a.Name, b.Name))
	})
	return rows
}

// DocumentRows are the rows of each document whose name begins with
// prefix (a scope's counter shards), one a document, not its class's
// peak: what one tenant's documents take at t.
func (m *Model) DocumentRows(t Target, prefix string) []Row {
	docs := map[string]*subject{}
	for _, e := range m.tr.Events {
		if e.Kind != Document || !strings.HasPrefix(e.Name, prefix) {
			continue
		}
		if docs[e.Name] == nil {
			docs[e.Name] = newSubject(e.Name)
		}
		docs[e.Name].add(e, m.tr.Tasks[e.Task], "")
	}
	var rows []Row
	for name, s := range docs {
		sc, r := m.rate(s, s.count, t)
		r /= m.spread(name)
		rows = append(rows, Row{Section: "document", Name: DocClass(name, sc), Example: name, Scope: sc, Recorded: s.count, Deleted: s.deleted,
			Rate: atPeak(sc, r, t), Mean: r, Unit: "writes/s", Limit: &DocumentWrites})
	}
	slices.SortFunc(rows, func(a, b Row) int { return cmp.Or(cmp.Compare(b.Rate, a.Rate), cmp.Compare(a.Example, b.Example)) })
	return rows
}

// Monotonic reports whether keys, in write order, increase (or
// decrease): the rank correlation (Spearman's) of each key's place in
// the sorted range with its place in write order is at least
// MonotonicCorrelation (or at most its opposite), and at least
// MonotonicDeviations deviations of what spread keys give by chance
// (1/√(n−1)), but no more than 0.95 (a short range that only increases).
// A table tests a few hundred ranges: at 3.5 deviations a spread range
// passes for sequential about once in 2 000. Concurrent
// writers, and a task's entries written over its life while newer tasks
// write theirs (a window of recent ids moving up), still correlate;
// hashed or random keys do not.
func Monotonic(keys []string) bool {
	n := len(keys)
	if n < MinMonotonic {
		return false
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	// rank[i] is key i's place in the sorted range; equal keys (one
	// document's entry rewritten) share their mean place: the same key
	// again is a hot document, not a sequence.
	rank := make([]float64, n)
	for lo := 0; lo < n; {
		hi := lo + 1
		for hi < n && keys[order[hi]] == keys[order[lo]] {
			hi++
		}
		for _, i := range order[lo:hi] {
			rank[i] = float64(lo+hi-1) / 2
		}
		lo = hi
	}
	mean := float64(n-1) / 2
	var cov, v float64
	for i, r := range rank {
		cov += (float64(i) - mean) * (r - mean)
		v += (float64(i) - mean) * (float64(i) - mean)
	}
	rho := cov / v
	need := min(0.95, max(MonotonicCorrelation, MonotonicDeviations/math.Sqrt(float64(n-1))))
	return rho >= need || rho <= -need
}

// DocClass names a document's class: its path with the ids of per-task,
// per-tenant and per-worker documents replaced by {id} (tasks/{id},
// tasks/{id}/attempts/{id}, quotas/{id}); a global or periodic document
// keeps its name (meta/sweeper).
func DocClass(name string, sc Scope) string {
	if sc == Global || sc == Periodic {
		return name
	}
	parts := strings.Split(name, "/")
	for i := 1; i < len(parts); i += 2 {
		parts[i] = "{id}"
	}
	return strings.Join(parts, "/")
}

// Combine adds to each row of burst (a recording of load that comes on
// top of another's, such as the same minute's schedule fires) the rate of
// steady's row of the same section and name, kept in Row.Steady: the two
// loads at once. A range or queue whose instances differ in the two is
// held to the sum of both peaks, an upper bound; a row either recording
// finds sequential is held to the sequential limit. Rows of the sweeper's
// own records (Periodic) are left out: they recur with the sweeper, not
// with the load, and steady has them.
func Combine(burst, steady []Row) []Row {
	type key struct{ section, name string }
	base := map[key]Row{}
	for _, r := range steady {
		base[key{r.Section, r.Name}] = r
	}
	var out []Row
	for _, r := range burst {
		if r.Scope == Periodic {
			continue
		}
		if b, ok := base[key{r.Section, r.Name}]; ok && b.Scope != Periodic {
			r.Steady = b.Rate
			r.Rate += b.Rate
			r.Mean += b.Mean
			if b.Monotonic && !r.Monotonic {
				r.Monotonic, r.Limit = true, b.Limit
			}
		}
		out = append(out, r)
	}
	return out
}

// Over returns the rows over their limits.
func Over(rows []Row) []Row {
	var out []Row
	for _, r := range rows {
		if r.Over() {
			out = append(out, r)
		}
	}
	return out
}

// Print writes the table as Markdown. Single-field indexes under their
// limits (spread, or sequential but slow) are folded into one line per
// collection, and a field's ascending and descending indexes over their
// limits into one line.
func Print(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| | name | peak instance | shared by | recorded | at the target | limit | |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	folded := map[string]*Row{}
	var shown []Row
	for _, r := range rows {
		coll, _, single := strings.Cut(r.Name, ".")
		if r.Section == "index" && single && !r.Over() && !strings.HasSuffix(r.Name, ".__name__") {
			f := folded[coll]
			if f == nil {
				f = &Row{Section: "index", Scope: r.Scope, Unit: r.Unit}
				folded[coll] = f
				shown = append(shown, Row{Section: "folded", Name: coll})
			}
			f.Recorded++
			if r.Rate > f.Rate {
				f.Rate, f.Scope = r.Rate, r.Scope
			}
			continue
		}
		if field, ok := strings.CutSuffix(r.Name, " DESCENDING"); ok && slices.ContainsFunc(rows, func(a Row) bool {
			return a.Name == field+" ASCENDING" && a.Over() && a.Rate == r.Rate
		}) {
			continue
		}
		if field, ok := strings.CutSuffix(r.Name, " ASCENDING"); ok && slices.ContainsFunc(rows, func(a Row) bool {
			return a.Name == field+" DESCENDING" && a.Over() && a.Rate == r.Rate
		}) {
			r.Name = field + " (asc + desc)"
		}
		shown = append(shown, r)
	}
	for _, r := range shown {
		if r.Section == "folded" {
			f := folded[r.Name]
			fmt.Fprintf(w, "| index | %s: %d other single-field indexes under their limits | | %s | | ≤ %s | — | |\n", r.Name, f.Recorded, f.Scope, human(f.Rate, f.Unit))
			continue
		}
		limit, verdict := "—", ""
		if r.Limit != nil {
			limit = fmt.Sprintf("%s (%s)", human(r.Limit.PerSecond, r.Unit), r.Limit.Name)
			verdict = "ok"
			if r.Over() {
				verdict = "**OVER**"
			}
		}
		name := r.Name
		if r.Monotonic {
			name += " (monotonic)"
		}
		ex := r.Example
		if len(ex) > 48 {
			ex = ex[:45] + "…"
		}
		rate := human(r.Rate, r.Unit)
		var notes []string
		if r.Mean > 0 && r.Rate > r.Mean*1.0001 && r.Steady == 0 {
			notes = append(notes, human(r.Mean, "mean"))
		}
		if r.Steady > 0 {
			notes = append(notes, human(r.Steady, "steady"))
		}
		if len(notes) > 0 {
			rate += " (" + strings.Join(notes, ", ") + ")"
		}
		recorded := fmt.Sprint(r.Recorded)
		if r.Deleted > 0 {
			recorded += fmt.Sprintf(" (%d deletes)", r.Deleted)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Section, md(name), md(printable(ex)), r.Scope, recorded, rate, limit, verdict)
	}
}

func md(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// printable replaces the bytes of encoded values that do not print.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0xfffd {
			return '·'
		}
		return r
	}, strings.ToValidUTF8(s, "·"))
}

func human(v float64, unit string) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f %s", v, unit)
	case v >= 1:
		return fmt.Sprintf("%.1f %s", v, unit)
	}
	return fmt.Sprintf("%.3f %s", v, unit)
}
