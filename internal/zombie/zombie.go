package zombie

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/schedule"
	"github.com/servo-dev/servo/internal/service"
	"github.com/servo-dev/servo/internal/spanattr"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/telemetry"
)

// Defaults of Config.
const (
	DefaultPageSize    = 200
	DefaultConcurrency = 8
	// DefaultShardConcurrency bounds the groups of due shards queried at
	// once.
	DefaultShardConcurrency = 4
	DefaultMaxRedrives      = 5
	DefaultEvery            = 15 * time.Second
	// DefaultWindow keeps one invocation sweeping until just before the next
	// once-a-minute Scheduler tick. Config's zero Window means one pass; the
	// function sets this default.
	DefaultWindow = 55 * time.Second
)

// Store is what the sweeper needs from the store, every method required
// (*store.Store has them all): no duty depends on discovering a feature
// at run time, so a store cannot silently give a sweeper without outage
// credit, outbox checks or quota duties.
//
// DueTasks may return tasks with only their id, tenant, state, attempt and
// due time set (the store projects its due queries to those, so that a page
// costs the same whatever the payloads): the sweeper acts on the task that
// Apply's transaction reads and returns.
type Store interface {
	// DueGroups splits the due shards into the groups DueTasks takes for
	// duty d (one query a group and page).
	DueGroups(d store.Due) [][]int
	DueTasks(ctx context.Context, d store.Due, shards []int, now time.Time, limit int, after *store.DueCursor) ([]task.Task, error)
	Apply(ctx context.Context, id string, ev task.Event) (task.Result, error)
	Pulser
	Promiser
	OutboxStore
	quota.DutyStore
}

var _ Store = (*store.Store)(nil)

// Enqueuer performs what a committed result asks for (enqueue a retry or
// re-drive, dequeue a cancelled attempt); *enqueue.Enqueuer is one.
type Enqueuer interface {
	FollowUp(ctx context.Context, r task.Result) error
}

// Recorder keeps the latest pass's figures where operators can read them
// (*store.Store writes the document meta/sweeper).
type Recorder interface {
	RecordSweep(ctx context.Context, st api.SweepStatus) error
}

// Holder tells whether Cloud Tasks still holds a task's current dispatch
// and, when it does, what it says of its deliveries (nil for a pull
// worker's attempt).
type Holder interface {
	Delivery(ctx context.Context, t task.Task) (held bool, d *api.Delivery, err error)
}

// Pulser records the start of every pass, and an outage when passes
// stopped for longer than their cadence (part of Store): Servo itself was
// down, and leases are credited with the gap (store.Pulse).
type Pulser interface {
	Pulse(ctx context.Context, now time.Time, every time.Duration) (*task.Outage, error)
}

// Promiser moves the pulse's promise of the next pass (part of Store): a
// window that ends early promises the next Scheduler tick, so that the gap
// until then is not taken for an outage.
type Promiser interface {
	PromisePulse(ctx context.Context, next time.Time) error
}

// OutboxStore tells whether outbox entries wait for the re-drive (part of
// Store): a window does not end early while one is due before its end.
type OutboxStore interface {
	// OutboxGroups splits the due shards into the groups Undelivered takes.
	OutboxGroups() [][]int
	Undelivered(ctx context.Context, shards []int, dueBy time.Time, limit int) ([]store.OutboxEntry, error)
}

// Redriver re-delivers transition events left undelivered in the outbox
// (the events publisher). The sweeper calls it once per pass.
type Redriver interface {
	Redrive(ctx context.Context) error
}

// Cleaner deletes the subscriptions of event streams whose process died
// mid-stream (*events.Publisher is one: events.DeleteLeftoverStreams).
type Cleaner interface {
	DeleteLeftoverStreams(ctx context.Context, now time.Time) (int, error)
}

// Schedules makes the fires of schedules due by now, and counts those
// due later but before until (*dispatcher.Scheduler is one).
type Schedules interface {
	FireDue(ctx context.Context, now, until time.Time, pageSize int, stop func() bool) (schedule.PassStats, error)
}

// DefaultCleanEvery is how often a Sweeper looks for leftover stream
// subscriptions (Config.CleanEvery); cleanTimeout bounds one look.
const (
	DefaultCleanEvery = 10 * time.Minute
	cleanTimeout      = 10 * time.Second
)

// Config configures a Sweeper.
type Config struct {
	// Store is required.
	Store Store
	// Enqueuer is required: retries and re-drives go through it.
	Enqueuer Enqueuer
	// Holder, when set, is asked before a stuck dispatch is re-driven
	// whether Cloud Tasks still holds it (*enqueue.Enqueuer is one): a
	// dispatch waiting in a backlog is left there, and its start timeout
	// stretched, instead of being re-driven to the back of the queue.
	Holder Holder
	// Redriver, when set, re-drives the outbox once per pass.
	Redriver Redriver
	// Recorder, when set, records every pass (best effort: a failed
	// write is logged, not an error of the pass).
	Recorder Recorder
	// Now is the server clock given to the state machine; default time.Now.
	Now func() time.Time
	// Jitter draws the full-jitter retry delay in [0, 1); default rand.Float64.
	Jitter func() float64
	// Logger defaults to logs.Default().
	Logger *slog.Logger
	// PageSize is the number of due tasks read per query page (default 200).
	PageSize int
	// Concurrency bounds the transactions in flight (default 8).
	Concurrency int
	// ShardConcurrency bounds the groups of due shards (Store.DueGroups) a
	// duty queries at once (default 4); each group is read page by page.
	ShardConcurrency int
	// MaxRedrives bounds the re-drives of one attempt before it fails with
	// DISPATCH_TIMEOUT (default 5).
	MaxRedrives int
	// Every is the cadence of passes within one Run (default 15 s). Use
	// the shortest heartbeat interval of your tasks / 2 or less
	// (docs/contract.md §5.6).
	Every time.Duration
	// Window is how long one Run keeps sweeping at most, e.g. 55 s to
	// stop just before the next once-a-minute Scheduler tick. Zero means
	// one pass. A window ends early after a pass that found nothing due
	// before the window's end (see Run); the next tick sweeps again.
	Window time.Duration
	// KeepWindow disables the early end: every window sweeps until its
	// end, as before it existed (SERVO_SWEEP_EARLY_END=false).
	KeepWindow bool
	// QuotaRepairEvery is how often the quota counters are recounted
	// (0: quota.DefaultRepairEvery, applied by quota.NewDuty); see quota.go.
	QuotaRepairEvery time.Duration
	// Cleaner, when set, deletes leftover event-stream subscriptions, at
	// most every CleanEvery (default DefaultCleanEvery) per Sweeper.
	Cleaner    Cleaner
	CleanEvery time.Duration
	// Schedules, when set, fires the schedules due at each pass (the
	// server always sets it; docs/contract.md §16).
	Schedules Schedules
}

// Duty is one of the sweeper's checks: a due query and the event it applies.
type Duty struct {
	// Name is the duty's name in logs and Stats.
	Name string
	// Due selects the indexed query.
	Due store.Due
	// Event is the state machine event applied to each due task.
	Event task.EventKind
}

// Duties are run in this order in every pass. Deadline comes first so that
// a task past both its deadline and its lease ends DEADLINE_EXCEEDED rather
// than being retried; cancel timeouts come before leases so that a
// CANCELLING task whose grace period ran out ends with outcome
// CANCEL_TIMEOUT.
var Duties = []Duty{
	{Name: "deadline", Due: store.DueDeadline, Event: task.EventDeadlineExceeded},
	{Name: "cancel", Due: store.DueCancel, Event: task.EventCancelTimeout},
	{Name: "lease", Due: store.DueLease, Event: task.EventLeaseExpired},
	{Name: "dispatch", Due: store.DueDispatch, Event: task.EventRedrive},
}

// DutyStats counts one duty's work.
type DutyStats struct {
	// Due is the number of tasks the due query returned.
	Due int `json:"due"`
	// Applied is the number of committed results (transitions, re-drives).
	Applied int `json:"applied"`
	// NoOp is the number of due tasks whose condition no longer held inside
	// the transaction (a heartbeat arrived, another sweeper was first).
	NoOp int `json:"noOp"`
	// Errors is the number of transactions that failed.
	Errors int `json:"errors"`
	// FollowUpErrors is the number of committed results whose follow-up
	// (enqueue) failed; the dispatch duty recovers them.
	FollowUpErrors int `json:"followUpErrors"`
	// QueryErrors is the number of due queries that failed.
	QueryErrors int `json:"queryErrors"`
	// MaxLagMs is the longest time from an applied task's due time to its
	// transaction (the sweeper's lag).
	MaxLagMs int64 `json:"maxLagMs"`
	// Upcoming is the number of tasks the due query read that are not due
	// yet but will be before the window ends (the window goes on).
	Upcoming int `json:"upcoming,omitempty"`
}

func (d *DutyStats) add(o DutyStats) {
	d.Due += o.Due
	d.Applied += o.Applied
	d.NoOp += o.NoOp
	d.Errors += o.Errors
	d.FollowUpErrors += o.FollowUpErrors
	d.QueryErrors += o.QueryErrors
	d.MaxLagMs = max(d.MaxLagMs, o.MaxLagMs)
	d.Upcoming += o.Upcoming
}

// Stats counts the work of one or more passes.
type Stats struct {
	// Passes is the number of passes counted.
	Passes   int       `json:"passes"`
	Deadline DutyStats `json:"deadline"`
	Cancel   DutyStats `json:"cancel"`
	Lease    DutyStats `json:"lease"`
	Dispatch DutyStats `json:"dispatch"`
	// RedriveErrors counts failed outbox re-drives.
	RedriveErrors int `json:"redriveErrors"`
	// Skipped counts passes not run because the same Sweeper was still
	// running one (ticks that come faster than a pass ends).
	Skipped int `json:"skipped,omitempty"`
	// Admit counts the quota admit duty (tasks waiting for a run slot).
	Admit DutyStats `json:"admit"`
	// QuotaRepairs counts quota counter shards found drifted and rewritten.
	QuotaRepairs int `json:"quotaRepairs,omitempty"`
	// EndedEarly counts windows ended before their end because nothing
	// was due before it.
	EndedEarly int `json:"endedEarly,omitempty"`
	// StreamsDeleted counts leftover event-stream subscriptions deleted
	// (Config.Cleaner).
	StreamsDeleted int `json:"streamsDeleted,omitempty"`
	// Schedules counts the schedule duty (Config.Schedules).
	Schedules schedule.PassStats `json:"schedules"`
}

// Duty returns the counters of the duty whose query is d (nil if unknown).
func (s *Stats) Duty(d store.Due) *DutyStats {
	switch d {
	case store.DueDeadline:
		return &s.Deadline
	case store.DueCancel:
		return &s.Cancel
	case store.DueLease:
		return &s.Lease
	case store.DueDispatch:
		return &s.Dispatch
	}
	return nil
}

// Total sums the duties' counters.
func (s Stats) Total() DutyStats {
	var t DutyStats
	for _, d := range []DutyStats{s.Deadline, s.Cancel, s.Lease, s.Dispatch, s.Admit} {
		t.add(d)
	}
	return t
}

// Add adds o's counters to s.
func (s *Stats) Add(o Stats) {
	s.Passes += o.Passes
	s.Deadline.add(o.Deadline)
	s.Cancel.add(o.Cancel)
	s.Lease.add(o.Lease)
	s.Dispatch.add(o.Dispatch)
	s.RedriveErrors += o.RedriveErrors
	s.Skipped += o.Skipped
	s.Admit.add(o.Admit)
	s.QuotaRepairs += o.QuotaRepairs
	s.EndedEarly += o.EndedEarly
	s.StreamsDeleted += o.StreamsDeleted
	s.Schedules.Add(o.Schedules)
}

// Sweeper runs the duties. It holds no state between passes, so any number
// of sweepers may run at once: every transition is its own transaction.
// One Sweeper runs one pass at a time: a pass asked for while another runs
// is skipped (counted in Stats.Skipped), so ticks that arrive faster than a
// loaded pass ends never pile passes onto Firestore.
type Sweeper struct {
	cfg     Config
	log     *slog.Logger
	passing sync.Mutex
	// quota is the quota duty (package quota).
	quota *quota.Duty
	// lastClean is when the Cleaner last ran (guarded by passing).
	lastClean time.Time
	// failing gathers, during a pass, the workers whose deliveries the
	// dispatch duty found failing; the pass logs a line for each.
	failingMu sync.Mutex
	failing   map[string]failingWorker
	// queued gathers, during a pass, the longest wait to start of each
	// worker's PENDING/QUEUED attempts the pass handled (0 for a worker
	// seen without one), for servo.queued.oldest_age; queuedHeld is what
	// the gauge shows of every worker ever seen (takeQueued).
	queuedMu   sync.Mutex
	queued     map[string]time.Duration
	queuedHeld map[string]heldAge
}

// heldAge is a servo.queued.oldest_age figure and when a pass saw it.
type heldAge struct {
	age time.Duration
	at  time.Time
}

// QueuedHold is how long the sweeper's servo.queued.oldest_age shows the
// largest age a pass saw of a worker before a later pass's smaller one
// (0 included) replaces it: longer than the metric export interval (60
// s), so that an export sees every peak although the sweeper looks at a
// waiting attempt only at some passes (its delivery probes and start
// timeouts) and records every pass.
const QueuedHold = 2 * time.Minute

// failingWorker is what a pass saw of one worker's failing deliveries.
type failingWorker struct {
	tasks  int
	taskID string
	last   api.Delivery
}

// noteFailing records that t's delivery, d, is failing.
func (s *Sweeper) noteFailing(t *task.Task, d *api.Delivery) {
	s.failingMu.Lock()
	defer s.failingMu.Unlock()
	f := s.failing[t.Worker]
	f.tasks++
	if f.taskID == "" || (d.LastAttemptAt != nil && (f.last.LastAttemptAt == nil || d.LastAttemptAt.After(*f.last.LastAttemptAt))) {
		f.taskID, f.last = t.ID, *d
	}
	s.failing[t.Worker] = f
}

// logFailing logs a line per worker whose deliveries the pass found
// failing, and forgets them.
func (s *Sweeper) logFailing(ctx context.Context) {
	s.failingMu.Lock()
	defer s.failingMu.Unlock()
	for _, w := range slices.Sorted(maps.Keys(s.failing)) {
		f := s.failing[w]
		attrs := []any{"worker", w, "tasks", f.tasks, "taskId", f.taskID, "deliveries", f.last.Attempts, "lastStatus", f.last.LastStatus, "lastError", f.last.LastError}
		if f.last.NextTryAt != nil {
			attrs = append(attrs, "nextTryAt", f.last.NextTryAt.Format(time.RFC3339))
		}
		s.log.WarnContext(ctx, "deliveries to worker "+w+" are failing; its QUEUED tasks wait for Cloud Tasks' next try", attrs...)
	}
	clear(s.failing)
}

// noteQueued records what a pass saw of t, handled by duty d (r and err
// are its transaction's): for the dispatch duty, how long t has waited to
// start (now − its creation or its attempt's schedule time, whichever is
// later; the projected task's, the due query reads them) when it still
// waits, PENDING or QUEUED, after the transaction (or, the transaction
// failed, before it); its worker in every case.
func (s *Sweeper) noteQueued(d Duty, t *task.Task, r task.Result, err error, now time.Time) {
	if t.Worker == "" || errors.Is(err, store.ErrNotFound) {
		return
	}
	var age time.Duration
	state := t.State
	if err == nil && r.Task.ID != "" {
		state = r.Task.State
	}
	if d.Due == store.DueDispatch && (state == api.Pending || state == api.Queued) {
		since := t.CreatedAt
		if t.NotBefore != nil && t.NotBefore.After(since) {
			since = *t.NotBefore
		}
		if !since.IsZero() {
			age = max(0, now.Sub(since))
		}
	}
	s.queuedMu.Lock()
	defer s.queuedMu.Unlock()
	s.queued[t.Worker] = max(s.queued[t.Worker], age)
}

// takeQueued returns the servo.queued.oldest_age figures of a pass that
// ends at now, one for every worker ever seen: the pass's, unless an
// earlier pass saw a larger one less than QueuedHold ago (0 when no pass
// of that time saw a waiting attempt of it). It forgets the pass's.
func (s *Sweeper) takeQueued(now time.Time) map[string]time.Duration {
	s.queuedMu.Lock()
	defer s.queuedMu.Unlock()
	out := make(map[string]time.Duration, max(len(s.queuedHeld), len(s.queued)))
	for w, age := range s.queued {
		if h, ok := s.queuedHeld[w]; !ok || age >= h.age || now.Sub(h.at) >= QueuedHold {
			s.queuedHeld[w] = heldAge{age: age, at: now}
		}
	}
	for w, h := range s.queuedHeld {
		if now.Sub(h.at) >= QueuedHold {
			h = heldAge{at: now} // not seen waiting since
			s.queuedHeld[w] = h
		}
		out[w] = h.age
	}
	clear(s.queued)
	return out
}

// New returns a Sweeper; Store and Enqueuer are required: without one, it
// returns an error naming it (a missing dependency, see internal/service).
func New(cfg Config) (*Sweeper, error) {
	switch {
	case cfg.Store == nil:
		return nil, service.Missing("zombie", "Config.Store")
	case cfg.Enqueuer == nil:
		return nil, service.Missing("zombie", "Config.Enqueuer")
	}
	service.Defaults(&cfg.Now, &cfg.Logger)
	if cfg.Jitter == nil {
		cfg.Jitter = rand.Float64
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.ShardConcurrency <= 0 {
		cfg.ShardConcurrency = DefaultShardConcurrency
	}
	if cfg.MaxRedrives <= 0 {
		cfg.MaxRedrives = DefaultMaxRedrives
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Window < 0 {
		cfg.Window = 0
	}
	if cfg.CleanEvery <= 0 {
		cfg.CleanEvery = DefaultCleanEvery
	}
	log := cfg.Logger.With("component", "sweeper")
	return &Sweeper{cfg: cfg, log: log, failing: map[string]failingWorker{}, queued: map[string]time.Duration{}, queuedHeld: map[string]heldAge{}, quota: quota.NewDuty(cfg.Store, cfg.QuotaRepairEvery, log.With("duty", "quota"))}, nil
}

// Config returns the sweeper's configuration with defaults applied.
func (s *Sweeper) Config() Config { return s.cfg }

// Sweep runs one pass of every duty and the outbox re-drive (or skips it
// when this Sweeper is already running one). A failed
// transaction does not stop the pass; the error reports every failure and
// Stats counts them.
func (s *Sweeper) Sweep(ctx context.Context) (Stats, error) {
	return s.sweep(ctx, time.Time{})
}

// sweep runs one pass; past stop (when set) it starts no new transaction.
func (s *Sweeper) sweep(ctx context.Context, stop time.Time) (st Stats, err error) {
	if !s.passing.TryLock() {
		s.log.DebugContext(ctx, "sweep pass skipped: the previous one is still running")
		return Stats{Skipped: 1}, nil
	}
	defer s.passing.Unlock()
	// The scale model scales what a pass writes by passes (store.WithCause).
	ctx = store.WithCause(ctx, "sweeper")
	ctx, span := telemetry.Tracer().Start(ctx, telemetry.SweepPassSpan, trace.WithSpanKind(trace.SpanKindInternal))
	defer span.End()
	st = Stats{Passes: 1}
	start := time.Now()
	defer func() { s.record(ctx, st, time.Since(start), err) }()
	defer s.logFailing(ctx)
	var errs []error
	{
		// Wall time, as the store's own outage records: a test's clock
		// that jumps ahead is not an outage.
		gap, err := s.cfg.Store.Pulse(ctx, time.Now().UTC(), s.cadence())
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("zombie: pulse: %w", err))
		case gap != nil:
			s.log.WarnContext(ctx, "the sweeper did not run for longer than its cadence; leases are credited with the gap",
				"from", gap.From, "to", gap.To, "gap", gap.To.Sub(gap.From).String())
		}
	}
	for _, d := range Duties {
		if ctx.Err() != nil || past(stop) {
			break
		}
		ds, err := s.duty(ctx, d, stop)
		*st.Duty(d.Due) = ds
		if err != nil {
			errs = append(errs, err)
		}
	}
	if ctx.Err() == nil && !past(stop) {
		if err := s.quotaDuty(ctx, &st, stop); err != nil {
			errs = append(errs, err)
		}
	}
	if s.cfg.Schedules != nil && ctx.Err() == nil && !past(stop) {
		now := s.cfg.Now().UTC()
		until := now
		if !stop.IsZero() {
			until = now.Add(time.Until(stop))
		}
		ss, err := s.cfg.Schedules.FireDue(ctx, now, until, s.cfg.PageSize, func() bool { return ctx.Err() != nil || past(stop) })
		st.Schedules = ss
		if err != nil {
			errs = append(errs, fmt.Errorf("zombie: schedules: %w", err))
		}
	}
	if s.cfg.Cleaner != nil && ctx.Err() == nil && !past(stop) {
		if now := time.Now(); s.lastClean.IsZero() || now.Sub(s.lastClean) >= s.cfg.CleanEvery {
			s.lastClean = now
			// Bounded: a Pub/Sub that does not answer must not hold the
			// pass (the next attempt is CleanEvery later).
			cctx, cancel := context.WithTimeout(ctx, cleanTimeout)
			n, err := s.cfg.Cleaner.DeleteLeftoverStreams(cctx, now)
			cancel()
			st.StreamsDeleted = n
			if n > 0 {
				s.log.InfoContext(ctx, "deleted the subscriptions of event streams whose process ended mid-stream", "deleted", n)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("zombie: leftover stream subscriptions: %w", err))
			}
		}
	}
	if s.cfg.Redriver != nil && ctx.Err() == nil {
		if err := s.cfg.Redriver.Redrive(ctx); err != nil {
			st.RedriveErrors++
			errs = append(errs, fmt.Errorf("zombie: outbox re-drive: %w", err))
		}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return st, errors.Join(errs...)
}

// cadence is the expected time between the starts of two passes: Every
// within a window; a Scheduler tick (at least a minute) when each
// invocation sweeps once.
func (s *Sweeper) cadence() time.Duration {
	if s.cfg.Window > 0 {
		return s.cfg.Every
	}
	return max(s.cfg.Every, time.Minute)
}

// record hands a pass's figures to the Recorder, after the pass and
// whatever its outcome (a cut-short pass is recorded too).
func (s *Sweeper) record(ctx context.Context, st Stats, took time.Duration, passErr error) {
	result, duties := telemetry.PassOK, make([]telemetry.PassDuty, 0, len(Duties))
	if passErr != nil {
		result = telemetry.PassError
	}
	for _, d := range Duties {
		ds := st.Duty(d.Due)
		duties = append(duties, telemetry.PassDuty{Name: d.Name, Due: ds.Due, MaxLag: time.Duration(ds.MaxLagMs) * time.Millisecond})
	}
	telemetry.RecordPass(ctx, result, time.Now(), duties)
	telemetry.RecordQueued(ctx, s.takeQueued(s.cfg.Now()))
	if s.cfg.Recorder == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	rec := api.SweepStatus{
		LastPassAt:    time.Now(),
		PassMs:        took.Milliseconds(),
		Duties:        make(map[string]api.SweepDuty, len(Duties)),
		RedriveErrors: st.RedriveErrors,
	}
	for _, d := range Duties {
		ds := st.Duty(d.Due)
		rec.Duties[d.Name] = api.SweepDuty{Due: ds.Due, Applied: ds.Applied, Errors: ds.Errors + ds.QueryErrors, MaxLagMs: ds.MaxLagMs}
	}
	if s.cfg.Schedules != nil {
		sch := st.Schedules
		rec.Duties["schedules"] = api.SweepDuty{Due: sch.Due, Applied: sch.Started, Errors: sch.Errors + sch.QueryErrors}
	}
	if err := s.cfg.Recorder.RecordSweep(ctx, rec); err != nil {
		s.log.WarnContext(ctx, "recording the sweep pass failed", "error", err)
	}
}

func past(stop time.Time) bool { return !stop.IsZero() && !time.Now().Before(stop) }

// duty reads the duty's due tasks, every group of due shards page by page
// and ShardConcurrency groups at a time, and applies its event to each, at most
// Concurrency transactions at a time in all.
func (s *Sweeper) duty(ctx context.Context, d Duty, stop time.Time) (_ DutyStats, err error) {
	ctx, span := telemetry.Tracer().Start(ctx, "servo.sweeper.duty "+d.Name, trace.WithAttributes(spanattr.DutyKey.String(d.Name)))
	defer func() { spanattr.EndSpan(span, err) }()
	var (
		mu   sync.Mutex
		ds   DutyStats
		errs []error
		wg   sync.WaitGroup
	)
	now := s.cfg.Now().UTC()
	// Within a window the query reaches to its end: the tasks due by now
	// are swept, the later ones only tell that the window must go on.
	until := now
	if !stop.IsZero() && !s.cfg.KeepWindow {
		until = now.Add(max(0, time.Until(stop))) // stop is wall time
	}
	tx := make(chan struct{}, s.cfg.Concurrency)
	shards := make(chan struct{}, s.cfg.ShardConcurrency)
	for _, group := range s.cfg.Store.DueGroups(d.Due) {
		shards <- struct{}{}
		wg.Go(func() {
			defer func() { <-shards }()
			sd, err := s.dutyShard(ctx, d, group, now, until, stop, tx)
			mu.Lock()
			defer mu.Unlock()
			ds.add(sd)
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		if ds.Errors > 0 {
			return ds, fmt.Errorf("zombie: %s: %d of %d transactions failed, first: %w", d.Name, ds.Errors, ds.Due, errors.Join(errs...))
		}
		return ds, errors.Join(errs...)
	}
	return ds, nil
}

// dutyShard is duty for one group of due shards: the tasks due by now
// are applied, and those due after now but by until (read by the same
// query, due order) are counted as Upcoming.
func (s *Sweeper) dutyShard(ctx context.Context, d Duty, shard []int, now, until, stop time.Time, tx chan struct{}) (DutyStats, error) {
	var (
		ds       DutyStats
		firstErr error
		cursor   *store.DueCursor
	)
	for ctx.Err() == nil && !past(stop) {
		page, err := s.cfg.Store.DueTasks(ctx, d.Due, shard, until, s.cfg.PageSize, cursor)
		if err != nil {
			s.log.ErrorContext(ctx, "due query failed", "duty", d.Name, "shard", shard, "error", err)
			ds.QueryErrors++
			return ds, fmt.Errorf("zombie: %s query (shards %v): %w", d.Name, shard, err)
		}
		due := page
		for i := range page {
			if at := store.DueTime(d.Due, &page[i]); at != nil && at.After(now) {
				due = page[:i]
				ds.Upcoming += len(page) - i
				break
			}
		}
		ds.Due += len(due)
		if d.Due == store.DueDispatch {
			// Enqueues and re-drives by priority within the page, so that
			// a pass cut short by its stop time leaves the lowest behind.
			// A copy: the page's last task is the query's cursor.
			due = slices.Clone(due)
			slices.SortStableFunc(due, func(a, b task.Task) int { return task.PriorityOf(a.Priority) - task.PriorityOf(b.Priority) })
		}
		ps, err := s.applyPage(ctx, d, due, stop, tx)
		ds.add(ps)
		if firstErr == nil {
			firstErr = err
		}
		if len(page) < s.cfg.PageSize || len(due) < len(page) {
			break
		}
		last := page[len(page)-1]
		at := store.DueTime(d.Due, &last)
		if at == nil {
			// The query only returns tasks with the due time set.
			return ds, fmt.Errorf("zombie: %s query returned task %s without %s", d.Name, last.ID, d.Due)
		}
		cursor = &store.DueCursor{At: *at, ID: last.ID}
	}
	return ds, firstErr
}

// applyPage applies d's event to every task of page with bounded
// concurrency and returns the counts and the first error.
func (s *Sweeper) applyPage(ctx context.Context, d Duty, page []task.Task, stop time.Time, sem chan struct{}) (DutyStats, error) {
	var (
		mu       sync.Mutex
		ds       DutyStats
		firstErr error
		wg       sync.WaitGroup
	)
	for i := range page {
		if ctx.Err() != nil || past(stop) {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out, err := s.apply(ctx, d, &page[i])
			mu.Lock()
			defer mu.Unlock()
			ds.add(out)
			if err != nil && firstErr == nil {
				firstErr = err
			}
		})
	}
	wg.Wait()
	return ds, firstErr
}

// apply runs one transaction for t and the follow-up of its result.
func (s *Sweeper) apply(ctx context.Context, d Duty, t *task.Task) (ds DutyStats, err error) {
	// A span per due task, in the pass's trace and linked to the task's
	// own (the submit's trace context, stored on the task).
	opts := []trace.SpanStartOption{trace.WithAttributes(append(spanattr.TaskAttrs(t.ID, t.Attempt, t.TenantID, ""), spanattr.DutyKey.String(d.Name))...)}
	if l, ok := telemetry.LinkTo(t.Trace); ok {
		opts = append(opts, trace.WithLinks(l))
	}
	ctx, span := telemetry.Tracer().Start(ctx, "servo.sweeper.apply "+string(d.Event), opts...)
	defer func() {
		result := telemetry.SweepApplied
		switch {
		case ds.Errors > 0:
			result = telemetry.SweepError
		case ds.NoOp > 0:
			result = telemetry.SweepNoOp
		}
		span.SetAttributes(attribute.String("servo.result", result))
		spanattr.EndSpan(span, err)
		telemetry.RecordSweep(ctx, d.Name, result, store.DueTime(d.Due, t), s.cfg.Now())
	}()
	log := s.log.With("taskId", t.ID, "attempt", t.Attempt, "tenantId", t.TenantID, "duty", d.Name)
	ev := task.Event{
		Kind:        d.Event,
		Attempt:     t.Attempt,
		Now:         s.cfg.Now().UTC(),
		Jitter:      s.cfg.Jitter(),
		MaxRedrives: s.cfg.MaxRedrives,
	}
	if d.Event == task.EventRedrive && t.State == api.Queued && s.cfg.Holder != nil {
		held, dl, err := s.cfg.Holder.Delivery(ctx, *t)
		if err != nil {
			s.noteQueued(d, t, task.Result{}, err, ev.Now)
			// Cloud Tasks cannot say: a re-drive would fail the same way.
			log.WarnContext(ctx, "could not tell whether Cloud Tasks still holds the dispatch; next pass", "error", err)
			return DutyStats{Errors: 1}, fmt.Errorf("task %s: %w", t.ID, err)
		}
		ev.Held, ev.Delivery = held, dl
		if held && dl != nil && dl.LastStatus != "" && dl.LastStatus != "OK" {
			s.noteFailing(t, dl)
		}
	}
	r, err := s.cfg.Store.Apply(ctx, t.ID, ev)
	s.noteQueued(d, t, r, err, ev.Now)
	switch {
	case errors.Is(err, store.ErrNotFound):
		log.DebugContext(ctx, "due task is gone")
		return DutyStats{NoOp: 1}, nil
	case err != nil:
		log.ErrorContext(ctx, "sweep transaction failed", "event", d.Event, "error", err)
		return DutyStats{Errors: 1}, fmt.Errorf("task %s: %w", t.ID, err)
	case !r.Write:
		log.DebugContext(ctx, "no longer due", "state", r.Task.State)
		return DutyStats{NoOp: 1}, nil
	}
	out := DutyStats{Applied: 1}
	if at := store.DueTime(d.Due, t); at != nil {
		out.MaxLagMs = max(0, ev.Now.Sub(*at).Milliseconds())
	}
	attrs := []any{"event", d.Event, "from", t.State, "to", r.Task.State}
	if r.Task.State.Terminal() {
		attrs = append(attrs, "reason", r.Task.Reason)
	}
	if r.Attempt != nil && r.Attempt.Outcome != "" {
		attrs = append(attrs, "outcome", r.Attempt.Outcome)
	}
	if r.RetryScheduled {
		attrs = append(attrs, "nextAttempt", r.NextAttempt)
	}
	if d.Event == task.EventRedrive && r.Enqueue {
		attrs = append(attrs, "redrives", r.Task.Redrives)
	}
	log.InfoContext(ctx, "sweeper applied "+string(d.Event), attrs...)
	if r.Enqueue || r.Dequeue || r.CancelExecution != "" {
		if err := s.cfg.Enqueuer.FollowUp(ctx, r); err != nil {
			// Not an error of the sweep: the transition is committed and the
			// dispatch duty re-drives the attempt after its start timeout.
			log.WarnContext(ctx, "follow-up failed; the dispatch duty will re-drive", "error", err)
			out.FollowUpErrors++
		}
	}
	return out, nil
}

// Run sweeps at once and then every Every until Window has elapsed (one
// pass when Window is zero) or ctx ends. It returns the summed Stats and
// the last pass's error, or ctx's error when ctx ended first.
func (s *Sweeper) Run(ctx context.Context) (Stats, error) {
	if s.cfg.Window <= 0 {
		return s.runUntil(ctx, time.Time{})
	}
	return s.runUntil(ctx, time.Now().Add(s.cfg.Window))
}

// runUntil sweeps every Every; it starts no pass at or after end, and no
// transaction after end. A zero end means one pass.
func (s *Sweeper) runUntil(ctx context.Context, end time.Time) (Stats, error) {
	ctx = store.WithCause(ctx, "sweeper")
	var (
		total Stats
		err   error
	)
	for {
		start := time.Now()
		var st Stats
		st, err = s.sweep(ctx, end)
		total.Add(st)
		s.logPass(ctx, st, err)
		if ctx.Err() != nil {
			return total, ctx.Err()
		}
		next := start.Add(s.cfg.Every)
		if end.IsZero() || !next.Before(end) {
			return total, err
		}
		if s.idle(ctx, st, err, end) {
			total.EndedEarly++
			s.promise(ctx, end.Add(s.cfg.Every))
			s.log.DebugContext(ctx, "sweeper window ended early: nothing due before its end", "passes", total.Passes)
			return total, nil
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return total, ctx.Err()
		case <-t.C:
		}
	}
}

// idle reports whether the window ending at end may end after the pass
// st: the pass had no error and swept nothing (what it changed may be due
// again soon), no due query read a task due before end, and no outbox
// entry is due for the re-drive before end (one query per due shard, limit
// 1).
// Tasks that become due before end but are created after this pass are
// swept by the next Scheduler tick.
func (s *Sweeper) idle(ctx context.Context, st Stats, passErr error, end time.Time) bool {
	tot := st.Total()
	sch := st.Schedules
	if s.cfg.KeepWindow || passErr != nil || st.Skipped > 0 || st.RedriveErrors > 0 || tot.Due > 0 || tot.Upcoming > 0 ||
		sch.Due > 0 || sch.Upcoming > 0 {
		return false
	}
	ob := s.cfg.Store
	if s.cfg.Redriver == nil {
		return true
	}
	// ShardConcurrency groups of shards at a time: the window's billed time.
	var (
		busy atomic.Bool
		wg   sync.WaitGroup
	)
	shards := make(chan struct{}, s.cfg.ShardConcurrency)
	for _, group := range ob.OutboxGroups() {
		shards <- struct{}{}
		if busy.Load() {
			<-shards
			break
		}
		wg.Go(func() {
			defer func() { <-shards }()
			if es, err := ob.Undelivered(ctx, group, end, 1); err != nil || len(es) > 0 {
				busy.Store(true)
			}
		})
	}
	wg.Wait()
	return !busy.Load()
}

// promise records that the next pass comes with the next Scheduler tick,
// before next (best effort: without it the gap reads as an outage, which
// only credits leases).
func (s *Sweeper) promise(ctx context.Context, next time.Time) {
	if err := s.cfg.Store.PromisePulse(ctx, next); err != nil {
		s.log.WarnContext(ctx, "recording the next pass's promise failed", "error", err)
	}
}

func (s *Sweeper) logPass(ctx context.Context, st Stats, err error) {
	tot := st.Total()
	switch {
	case err != nil:
		s.log.ErrorContext(ctx, "sweep pass had errors", "stats", st, "error", err)
	case tot.Due > 0:
		s.log.InfoContext(ctx, "sweep pass", "stats", st)
	default:
		s.log.DebugContext(ctx, "sweep pass: nothing due")
	}
}

// HandleEvent is the body of the ServoSweeper CloudEvent function: one
// Scheduler tick (a Pub/Sub message) starts a Run whose window is measured
// from the tick's time, so that a tick delivered late does one pass instead
// of overlapping the next tick's window. Failed queries and transactions
// are logged and counted, not returned: the tick is not work to retry (a
// redelivered tick would only add an overlapping invocation), and the next
// tick sweeps again. It returns an error only when ctx ended before the
// window did (the invocation was cut short).
func (s *Sweeper) HandleEvent(ctx context.Context, e cloudevents.Event) error {
	log := s.log.With("eventId", e.ID(), "eventType", e.Type(), "eventSource", e.Source())
	now := time.Now()
	var end time.Time
	if s.cfg.Window > 0 {
		end = now.Add(s.cfg.Window)
		if at := e.Time(); !at.IsZero() && at.Before(now) {
			if tickEnd := at.Add(s.cfg.Window); tickEnd.Before(end) {
				end = tickEnd
			}
			if !end.After(now) {
				log.InfoContext(ctx, "late tick: sweeping once", "eventTime", at)
				end = time.Time{}
			}
		}
	}
	st, err := s.runUntil(ctx, end)
	if cerr := ctx.Err(); cerr != nil {
		log.WarnContext(ctx, "sweeper invocation cut short", "stats", st, "error", cerr)
		return fmt.Errorf("zombie: sweep: %w", cerr)
	}
	if err != nil {
		log.WarnContext(ctx, "sweeper invocation done; its last pass had errors", "stats", st, "error", err)
		return nil
	}
	log.InfoContext(ctx, "sweeper invocation done", "stats", st)
	return nil
}
