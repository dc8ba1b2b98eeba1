package faults

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/failpoint"
)

// Fault kinds the schedule injects into the stack (the worker faults are
// per task, see Modes).
const (
	FaultFirestoreFreeze = "firestore-freeze" // the Firestore emulator SIGSTOPped
	FaultPubSubFreeze    = "pubsub-freeze"    // the Pub/Sub emulator SIGSTOPped past the publish timeout
	FaultServoKill       = "servo-kill"       // servo dev SIGKILLed (and its Cloud Tasks emulator with it), then started again
	// The failpoints' crashes (package failpoint): servo dev is restarted
	// with the failpoint armed to crash at its Nth hit, and again after each
	// crash, until the fault's hold ends.
	FaultCrashAfterCommit      = "crash-after-commit"       // after the Firestore commit, before the publish
	FaultCrashBeforeCreateTask = "crash-before-create-task" // before the Cloud Task of an attempt is created
	FaultCrashAfterCreateTask  = "crash-after-create-task"  // after it is created, before QUEUED is recorded
)

// FaultKinds lists the stack faults.
var FaultKinds = []string{FaultFirestoreFreeze, FaultPubSubFreeze, FaultServoKill,
	FaultCrashAfterCommit, FaultCrashBeforeCreateTask, FaultCrashAfterCreateTask}

// failpoints are the failpoint each crash fault arms.
var failpoints = map[string]string{
	FaultCrashAfterCommit:      failpoint.EventsAfterCommit,
	FaultCrashBeforeCreateTask: failpoint.EnqueueBeforeCreateTask,
	FaultCrashAfterCreateTask:  failpoint.EnqueueAfterCreateTask,
}

// Step is one fault of a schedule: At after the run starts, held For.
type Step struct {
	Kind    string
	At, For time.Duration
}

// Config configures a run.
type Config struct {
	// Firestore and PubSub are the running emulators (frozen by the
	// schedule); Binary is the servo command (see Build).
	Firestore, PubSub *emulator.Process
	Binary            string
	// Addr is where servo dev listens (127.0.0.1:PORT); Project isolates
	// the run on the emulators; LogDir keeps Servo's logs.
	Addr, Project, LogDir string
	// Seed drives the task mix and, with Duration, the schedule.
	Seed uint64
	// Tasks is how many tasks are submitted at Rate (per second) while the
	// schedule runs; with Duration > 0 submits go on until Duration.
	Tasks    int
	Rate     float64
	Duration time.Duration
	// Schedule is the faults; nil with Duration > 0: random from Seed.
	Schedule []Step
	// Modes are the worker behaviours the tasks cycle through; default
	// Modes.
	Modes []string
	// SweepEvery is the sweeper's cadence; default the package's
	// SweepEvery. A slow sweeper lets callbacks meet an expired lease or
	// grace before the sweeper applies it.
	SweepEvery time.Duration
	// Steady, when > 0, then holds SteadyRate callbacks/s for that long with
	// no fault and reports the error rate and p99 latency.
	Steady     time.Duration
	SteadyRate float64
	// Priority runs the priority workload alongside the load (see
	// PriorityWorker): servo dev gets the worker PriorityWorker with its
	// quota, and the priority invariant has tasks to judge.
	Priority bool
	// Drain bounds the wait for every task to end and every event to
	// arrive once the faults healed.
	Drain time.Duration
	// Progress receives progress lines; default io.Discard.
	Progress io.Writer
}

// Timings of the simulated tasks and of Servo, chosen so that each fault
// outlasts the bound it tests: a Firestore freeze outlasts StoreTimeout (so
// callbacks answer 503), a Pub/Sub freeze outlasts the publish timeout (5 s).
const (
	StoreTimeout   = 8 * time.Second
	StartTimeout   = 3 * time.Second
	SweepEvery     = time.Second
	heartbeatMs    = 300
	leaseMs        = 6000
	maxAttempts    = 6
	initialBackoff = 200
	// submitters is how many clients submit at once: a retry storm of
	// ever more clients would measure the machine, not Servo.
	submitters = 8
)

// Result is what a run saw and found.
type Result struct {
	Seed       uint64
	History    *History
	Violations []Violation
	Stats      Stats
	Faults     []Injected
	Modes      []string
	Worker     map[string]int64
	Steady     *SteadyStats
	Elapsed    time.Duration
}

// Injected is one fault as it happened.
type Injected struct {
	Kind          string
	Start, Healed time.Time
	Recovery      time.Duration // from heal to the first success after it; -1 if none
	// Crashes counts a failpoint fault's crashes.
	Crashes int
}

// SteadyStats are the figures of the steady-load phase.
type SteadyStats struct {
	Duration          time.Duration
	Callbacks, Errors int
	Rate              float64 // callbacks per second
	P50, P99          time.Duration
}

// RandomSchedule returns faults one after another from rng until d: first
// a Firestore freeze longer than StoreTimeout (a store outage past
// --store-timeout in every run), then a gap of 3-12 s and a fault held for
// its own range, again and again: every kind once per round of
// len(FaultKinds) faults, in a random order.
func RandomSchedule(rng *rand.Rand, d time.Duration) []Step {
	var s []Step
	var bag []string
	at := 5 * time.Second
	if first := StoreTimeout + time.Duration(2000+rng.IntN(4000))*time.Millisecond; at+first <= d {
		s = append(s, Step{Kind: FaultFirestoreFreeze, At: at, For: first})
		at += first
	}
	for {
		at += time.Duration(3000+rng.IntN(9000)) * time.Millisecond
		if len(bag) == 0 {
			// Every kind once per round, in a random order.
			bag = slices.Clone(FaultKinds)
			rng.Shuffle(len(bag), func(i, j int) { bag[i], bag[j] = bag[j], bag[i] })
		}
		kind := bag[0]
		bag = bag[1:]
		var hold time.Duration
		switch kind {
		case FaultFirestoreFreeze:
			hold = time.Duration(2000+rng.IntN(10000)) * time.Millisecond
		case FaultPubSubFreeze:
			hold = time.Duration(6000+rng.IntN(6000)) * time.Millisecond
		case FaultServoKill:
			hold = time.Duration(rng.IntN(3000)) * time.Millisecond
		default: // the failpoints' crashes
			hold = time.Duration(5000+rng.IntN(10000)) * time.Millisecond
		}
		if at+hold > d {
			return s
		}
		s = append(s, Step{Kind: kind, At: at, For: hold})
		at += hold
	}
}

// ShortSchedule is every stack fault once, for `go test ./...`. The
// Firestore freeze outlasts the store timeout.
var ShortSchedule = []Step{
	{FaultFirestoreFreeze, 4 * time.Second, 10 * time.Second},
	{FaultCrashBeforeCreateTask, 15 * time.Second, 4 * time.Second},
	{FaultPubSubFreeze, 23 * time.Second, 8 * time.Second},
	{FaultCrashAfterCreateTask, 32 * time.Second, 4 * time.Second},
	{FaultServoKill, 39 * time.Second, time.Second},
	{FaultCrashAfterCommit, 42 * time.Second, 8 * time.Second},
}

type run struct {
	cfg   Config
	rec   *Recorder
	fleet *Fleet
	servo *Servo
	api   *http.Client
	prog  io.Writer

	mu       sync.Mutex
	ids      []string // task ids submitted
	faults   []Injected
	waitCB   []int // indexes of faults waiting for a callback success
	waitEv   []int // indexes of faults waiting for an event
	steadyOn atomic.Bool
	steadyMu sync.Mutex
	steadyL  []time.Duration
	steadyE  int
	outages  []Window
	// mayCredits are the spans the sweeper may not have run in.
	mayCredits []Window
	frng       *rand.Rand // the failpoints' hits, drawn by inject only
}

// Run runs the real stack through the schedule, then checks the history.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.Progress = cmp.Or[io.Writer](cfg.Progress, io.Discard)
	cfg.Drain = cmp.Or(cfg.Drain, 3*time.Minute)
	cfg.Rate = cmp.Or(cfg.Rate, 6)
	if len(cfg.Modes) == 0 {
		cfg.Modes = Modes
	}
	cfg.SweepEvery = cmp.Or(cfg.SweepEvery, SweepEvery)
	r := &run{cfg: cfg, rec: &Recorder{}, prog: cfg.Progress, api: &http.Client{Timeout: time.Minute}}
	r.rec.OnCall = r.onCall
	start := time.Now()
	_, keysJSON, err := auth.GenerateKeyRing("faults-1")
	if err != nil {
		return nil, err
	}
	if r.fleet, err = NewFleet(r.rec); err != nil {
		return nil, err
	}
	defer r.fleet.Close()

	// The events topic and our subscription exist before Servo starts, so
	// that no event is missed.
	ps, err := pubsub.NewClient(ctx, cfg.Project)
	if err != nil {
		return nil, err
	}
	defer ps.Close()
	if err := events.EnsureLocal(ctx, ps, "", ""); err != nil {
		return nil, err
	}
	subName := events.SubscriptionName(cfg.Project, "faults-events")
	if _, err := ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: subName, Topic: events.TopicName(cfg.Project, events.DefaultEventsTopic), AckDeadlineSeconds: 60,
	}); err != nil {
		return nil, fmt.Errorf("faults: events subscription: %w", err)
	}
	rctx, stopReceive := context.WithCancel(context.Background())
	received := make(chan struct{})
	go func() {
		defer close(received)
		_ = ps.Subscriber(subName).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
			var e api.Event
			if err := json.Unmarshal(m.Data, &e); err == nil && e.TaskID != "" {
				r.rec.With(func(h *History) {
					th := h.Task(e.TaskID)
					th.Events = append(th.Events, e)
				})
				r.onEvent()
			}
			m.Ack()
		})
	}()
	defer func() { stopReceive(); <-received }()

	sc := ServoConfig{Binary: cfg.Binary, Addr: cfg.Addr, Project: cfg.Project,
		FirestoreHost: cfg.Firestore.Host, PubSub: cfg.PubSub.Host, Workers: map[string]string{"sim": r.fleet.URL()},
		SweepEvery: cfg.SweepEvery, StartTimeout: StartTimeout, StoreTimeout: StoreTimeout, KeysJSON: keysJSON, LogDir: cfg.LogDir}
	if cfg.Priority {
		// The same fleet serves the limited worker.
		sc.Workers[PriorityWorker] = r.fleet.URL()
		if sc.QuotasFile, err = priorityQuotas(cfg.LogDir); err != nil {
			return nil, err
		}
	}
	r.servo = NewServo(sc)
	if err := r.servo.Start(ctx); err != nil {
		return nil, err
	}
	defer r.servo.Stop()
	// Whatever happens, the emulators are thawed.
	defer func() { _ = cfg.Firestore.Thaw(); _ = cfg.PubSub.Thaw() }()

	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	r.frng = rand.New(rand.NewPCG(cfg.Seed+1, cfg.Seed))
	schedule := cfg.Schedule
	if schedule == nil && cfg.Duration > 0 {
		schedule = RandomSchedule(rng, cfg.Duration)
	}
	fmt.Fprintf(r.prog, "faults: seed %d, %d faults scheduled, servo at %s\n", cfg.Seed, len(schedule), r.servo.URL())

	sched, err := r.startSchedules(ctx)
	if err != nil {
		return nil, err
	}
	// Submits and faults run side by side.
	t0 := time.Now()
	pctx, stopProgress := context.WithCancel(ctx)
	defer stopProgress()
	go r.progress(pctx, t0)
	var wg sync.WaitGroup
	wg.Go(func() { r.submitLoad(ctx, rng, t0) })
	if cfg.Priority {
		wg.Go(func() { r.priorityLoad(ctx, t0) })
	}
	for _, st := range schedule {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Until(t0.Add(st.At))):
		}
		if err := r.inject(ctx, st); err != nil {
			return nil, err
		}
	}
	wg.Wait()
	recs, err := r.endSchedules(ctx, sched)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(r.prog, "faults: %d tasks submitted; waiting for them to end\n", len(r.ids))
	if err := r.drain(ctx); err != nil {
		return nil, err
	}
	var steady *SteadyStats
	if cfg.Steady > 0 {
		steady = r.steady(ctx, rng)
		if err := r.drain(ctx); err != nil {
			return nil, err
		}
	}
	r.waitEvents(ctx)
	stopReceive()
	<-received
	r.servo.Stop()

	var h *History
	r.rec.With(func(hh *History) {
		hh.Log = r.servo.Logs()
		hh.MaxLatency = StoreTimeout + 20*time.Second
		hh.Start, hh.End = start, time.Now()
		hh.Lease, hh.CancelGrace, hh.Interval = leaseMs*time.Millisecond, cancelGraceMs*time.Millisecond, heartbeatMs*time.Millisecond
		if cfg.Priority {
			hh.MaxRunning = map[string]int{PriorityWorker: PriorityMaxRunning}
		}
		r.mu.Lock()
		hh.Outages, hh.MayCredit = slices.Clone(r.outages), slices.Clone(r.mayCredits)
		hh.Schedules = recs
		r.mu.Unlock()
		h = hh
	})
	vs, st := Check(h)
	return &Result{Seed: cfg.Seed, History: h, Violations: vs, Stats: st, Faults: r.faults, Modes: cfg.Modes, Worker: r.fleet.Injected(),
		Steady: steady, Elapsed: time.Since(start)}, nil
}

// submitLoad submits tasks at the configured rate: Tasks of them, or until
// Duration when it is set.
func (r *run) submitLoad(ctx context.Context, rng *rand.Rand, t0 time.Time) {
	var wg sync.WaitGroup
	defer wg.Wait()
	clients := make(chan struct{}, submitters)
	every := time.Duration(float64(time.Second) / r.cfg.Rate)
	for i := 0; ; i++ {
		if r.cfg.Duration > 0 {
			if time.Since(t0) > r.cfg.Duration {
				return
			}
		} else if i >= r.cfg.Tasks {
			return
		}
		mode := r.cfg.Modes[i%len(r.cfg.Modes)]
		p := Payload{Mode: mode, Heartbeats: 2 + rng.IntN(4)}
		if mode == ModeSkew {
			p.SkewMs = int64(time.Hour / time.Millisecond)
			if i%12 == 5 {
				p.SkewMs = -p.SkewMs
			}
		}
		key := fmt.Sprintf("%s-%d", r.cfg.Project, i)
		clients <- struct{}{}
		wg.Go(func() { r.submit(ctx, key, p); <-clients })
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(t0.Add(time.Duration(i+1) * every))):
		}
	}
}

// submit posts one task to the worker "sim" until it is accepted, with
// the same idempotency key, as a conforming client does.
func (r *run) submit(ctx context.Context, key string, p Payload) { r.submitTo(ctx, key, p, "sim", 0) }

// submitTo is submit to worker, with priority (0: the default); it returns
// the task's id, "" if no submit was accepted.
func (r *run) submitTo(ctx context.Context, key string, p Payload, worker string, priority int) string {
	payload, _ := json.Marshal(p)
	fields := map[string]any{
		"tenantId": "faults", "workspaceId": "ws", "taskKey": key, "worker": worker, "payload": json.RawMessage(payload),
		"idempotencyKey": key, "heartbeatIntervalMs": intervalMs(p.Mode), "heartbeatTimeoutMs": leaseMs, "cancelGracePeriodMs": graceMs(p.Mode),
		"retry": map[string]any{"maxAttempts": maxAttempts, "initialBackoffMs": initialBackoff, "maxBackoffMs": 2000},
	}
	if p.Mode == ModeDelayed {
		fields["startDelayMs"] = DelayedStart.Milliseconds()
	}
	if priority != 0 {
		fields["priority"] = priority
	}
	body, _ := json.Marshal(fields)
	backoff := 200 * time.Millisecond
	giveUp := time.Now().Add(2 * time.Minute)
	for time.Now().Before(giveUp) {
		c := Call{Kind: KindSubmit, Key: key, Sent: time.Now()}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.servo.URL()+"/v1/tasks", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := r.api.Do(req)
		c.Received = time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return ""
			}
			c.TransportErr = err.Error()
		} else {
			c.Status = res.StatusCode
			c.RetryAfter = res.Header.Get("Retry-After")
			var out struct {
				TaskID string `json:"taskId"`
				Error  string `json:"error"`
			}
			_ = json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&out)
			res.Body.Close()
			c.TaskID, c.Code = out.TaskID, out.Error
		}
		r.rec.Call(c)
		if c.Status == http.StatusCreated || c.Status == http.StatusOK {
			r.mu.Lock()
			if !slices.Contains(r.ids, c.TaskID) {
				r.ids = append(r.ids, c.TaskID)
			}
			r.mu.Unlock()
			return c.TaskID
		}
		if c.Status != 0 && c.Status != http.StatusServiceUnavailable {
			return "" // a violation the checker reports
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 2*time.Second)
	}
	return ""
}

// inject applies one fault, holds it, heals it.
func (r *run) inject(ctx context.Context, st Step) error {
	f := Injected{Kind: st.Kind, Start: time.Now(), Recovery: -1}
	fmt.Fprintf(r.prog, "faults: %s for %v\n", st.Kind, st.For)
	hold := func() {
		select {
		case <-ctx.Done():
		case <-time.After(st.For):
		}
	}
	switch st.Kind {
	case FaultFirestoreFreeze, FaultPubSubFreeze:
		p := r.cfg.Firestore
		if st.Kind == FaultPubSubFreeze {
			p = r.cfg.PubSub
		}
		if err := p.Freeze(); err != nil {
			return err
		}
		hold()
		if err := p.Thaw(); err != nil {
			return err
		}
		if st.Kind == FaultPubSubFreeze {
			// A Pub/Sub freeze stops the sweeper's ticks: Servo may credit
			// leases with the gap, and need not.
			r.mayCredit(f.Start, time.Now())
		} else {
			r.storeOutage(f.Start, time.Now())
		}
	case FaultServoKill:
		r.servo.Kill()
		hold()
		if err := r.servo.Start(ctx); err != nil {
			return err
		}
		r.outage(f.Start, time.Now())
	case FaultCrashAfterCommit, FaultCrashBeforeCreateTask, FaultCrashAfterCreateTask:
		crashes, err := r.crashes(ctx, failpoints[st.Kind], f.Start.Add(st.For))
		if err != nil {
			return err
		}
		f.Crashes = crashes
		fmt.Fprintf(r.prog, "faults: %s: %d crashes\n", st.Kind, crashes)
	default:
		return fmt.Errorf("faults: unknown fault %q", st.Kind)
	}
	f.Healed = time.Now()
	r.mu.Lock()
	r.faults = append(r.faults, f)
	if st.Kind == FaultPubSubFreeze {
		r.waitEv = append(r.waitEv, len(r.faults)-1)
	} else {
		r.waitCB = append(r.waitCB, len(r.faults)-1)
	}
	r.mu.Unlock()
	return nil
}

// crashes restarts servo dev with the failpoint fp armed to crash at a
// random hit from 1 to 6, and again after each crash, until end; then it
// restarts it unarmed. Each restart kills it first (SIGKILL): a graceful
// stop would test the shutdown, not the failpoint. It returns how many
// crashes there were.
func (r *run) crashes(ctx context.Context, fp string, end time.Time) (int, error) {
	n := 0
	restart := func(env ...string) error {
		down := time.Now()
		r.servo.Kill()
		err := r.servo.StartEnv(ctx, env...)
		r.outage(down, time.Now())
		return err
	}
	for time.Now().Before(end) {
		err := restart("SERVO_FAILPOINTS=" + fp + "=crash@" + fmt.Sprint(1+r.frng.IntN(6)))
		if errors.Is(err, ErrExitedAtStart) {
			n++ // it crashed as it started (a re-drive, an outbox entry)
			continue
		}
		if err != nil {
			return n, err
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-r.servo.Exited():
			n++
			// Down from the crash (a moment ago) until the restart.
			r.outage(time.Now().Add(-time.Second), time.Now())
		case <-time.After(time.Until(end)):
		}
	}
	return n, restart()
}

// outage records a span during which callbacks could not commit.
func (r *run) outage(from, to time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outages = append(r.outages, Window{From: from, To: to})
}

// storeOutage records a span during which the store did not answer.
func (r *run) storeOutage(from, to time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outages = append(r.outages, Window{From: from, To: to, Slack: StoreSlack})
}

// mayCredit records a span during which the sweeper may not have run.
func (r *run) mayCredit(from, to time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mayCredits = append(r.mayCredits, Window{From: from, To: to})
}

// onCall sees every call: the recovery of the faults waiting for a
// callback accepted after their heal, and the steady-load figures.
func (r *run) onCall(c Call) {
	if !isCallback(c.Kind) {
		return
	}
	if c.Status == http.StatusOK {
		r.mu.Lock()
		keep := r.waitCB[:0]
		for _, i := range r.waitCB {
			if f := &r.faults[i]; c.Sent.After(f.Healed) {
				f.Recovery = c.Received.Sub(f.Healed)
			} else {
				keep = append(keep, i)
			}
		}
		r.waitCB = keep
		r.mu.Unlock()
	}
	if r.steadyOn.Load() {
		r.steadyMu.Lock()
		r.steadyL = append(r.steadyL, c.Received.Sub(c.Sent))
		if c.Status == 0 || c.Status >= 500 {
			r.steadyE++
		}
		r.steadyMu.Unlock()
	}
}

func (r *run) onEvent() {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, i := range r.waitEv {
		r.faults[i].Recovery = now.Sub(r.faults[i].Healed)
	}
	r.waitEv = nil
}

// progress prints, every 10 s, the callbacks answered so far by status.
func (r *run) progress(ctx context.Context, t0 time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Second):
		}
		by := map[int]int{}
		ended := 0
		r.rec.With(func(h *History) {
			for _, th := range h.Tasks {
				for _, c := range th.Calls {
					if isCallback(c.Kind) {
						by[c.Status]++
					}
				}
				if th.Final != nil && th.Final.State.Terminal() {
					ended++
				}
			}
		})
		fmt.Fprintf(r.prog, "faults: +%v callbacks by status %v, %d tasks seen ended\n", time.Since(t0).Round(time.Second), by, ended)
	}
}

// drain waits until every task is terminal, reading each task still
// running every second, for at most Drain: every submitted task, and every
// task a worker saw (a submit whose answer was lost names none).
func (r *run) drain(ctx context.Context) error {
	r.mu.Lock()
	open := slices.Clone(r.ids)
	r.mu.Unlock()
	r.rec.With(func(h *History) {
		for id := range h.Tasks {
			if !slices.Contains(open, id) {
				open = append(open, id)
			}
		}
	})
	deadline := time.Now().Add(r.cfg.Drain)
	for len(open) > 0 {
		var still []string
		for _, id := range open {
			v, ok := r.get(ctx, id)
			if !ok || !v.State.Terminal() {
				still = append(still, id)
			}
		}
		open = still
		if len(open) == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	if len(open) > 0 {
		fmt.Fprintf(r.prog, "faults: %d tasks did not end within %v\n", len(open), r.cfg.Drain)
	}
	return nil
}

// get reads a task and records it as the task's final state so far.
func (r *run) get(ctx context.Context, id string) (api.Task, bool) {
	c := Call{TaskID: id, Kind: KindGet, Sent: time.Now()}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.servo.URL()+"/v1/tasks/"+id, nil)
	res, err := r.api.Do(req)
	c.Received = time.Now()
	var v api.Task
	if err != nil {
		return v, false
	}
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	res.Body.Close()
	c.Status, c.RetryAfter = res.StatusCode, res.Header.Get("Retry-After")
	if c.Status != http.StatusOK {
		var e struct{ Error string }
		_ = json.Unmarshal(raw, &e)
		c.Code = e.Error
		r.rec.Call(c)
		return v, false
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, false
	}
	r.rec.With(func(h *History) { h.Task(id).Final = &v })
	return v, true
}

// waitEvents waits until every task's events reach its final state with
// no gap (the outbox re-drive backs off 30 s and more after a failed
// publish), for at most Drain.
func (r *run) waitEvents(ctx context.Context) {
	deadline := time.Now().Add(r.cfg.Drain)
	for {
		missing := 0
		r.rec.With(func(h *History) {
			for _, th := range h.Tasks {
				if th.Final == nil {
					continue
				}
				seqs := map[int64]bool{}
				var last api.Event
				for _, e := range th.Events {
					seqs[e.Seq] = true
					if e.Seq > last.Seq {
						last = e
					}
				}
				if last.To != th.Final.State || len(seqs) != int(last.Seq) {
					missing++
				}
			}
		})
		if missing == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			if missing > 0 {
				fmt.Fprintf(r.prog, "faults: %d tasks' events incomplete after %v\n", missing, r.cfg.Drain)
			}
			return
		}
		time.Sleep(time.Second)
	}
}

// steady holds SteadyRate callbacks/s for Steady with no fault: each task
// makes about 2 + heartbeats callbacks.
func (r *run) steady(ctx context.Context, rng *rand.Rand) *SteadyStats {
	const hb = 8
	perTask := float64(hb + 2)
	rate := r.cfg.SteadyRate / perTask
	fmt.Fprintf(r.prog, "faults: steady load, %.0f callbacks/s (%.1f tasks/s) for %v\n", r.cfg.SteadyRate, rate, r.cfg.Steady)
	every := time.Duration(float64(time.Second) / rate)
	// The window starts once the first tasks run.
	t0 := time.Now()
	var wg sync.WaitGroup
	clients := make(chan struct{}, submitters)
	for i := 0; time.Since(t0) < r.cfg.Steady; i++ {
		if i == int(rate*2) {
			r.steadyOn.Store(true)
		}
		key := fmt.Sprintf("%s-steady-%d", r.cfg.Project, i)
		clients <- struct{}{}
		wg.Go(func() { r.submit(ctx, key, Payload{Mode: ModeOK, Heartbeats: hb}); <-clients })
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(t0.Add(time.Duration(i+1) * every))):
		}
	}
	r.steadyOn.Store(false)
	wg.Wait()
	r.steadyMu.Lock()
	defer r.steadyMu.Unlock()
	ls := slices.Clone(r.steadyL)
	slices.Sort(ls)
	s := &SteadyStats{Duration: r.cfg.Steady - 2*time.Second, Callbacks: len(ls), Errors: r.steadyE}
	if len(ls) > 0 {
		s.P50, s.P99 = ls[len(ls)/2], ls[len(ls)*99/100]
		s.Rate = float64(len(ls)) / s.Duration.Seconds()
	}
	return s
}

// Report prints the run's figures: tasks, callbacks, faults by kind, 503
// answers, violations, recovery times and the seed.
func (res *Result) Report() string {
	var b strings.Builder
	st := res.Stats
	fmt.Fprintf(&b, "faults report (seed %d, replay with -faults.seed %d), %v\n", res.Seed, res.Seed, res.Elapsed.Round(time.Second))
	fmt.Fprintf(&b, "  tasks %d (", st.Tasks)
	for _, s := range []api.State{api.Succeeded, api.Failed, api.Cancelled, api.Running, api.Queued, api.Pending, api.Cancelling} {
		if n := st.Final[s]; n > 0 {
			fmt.Fprintf(&b, " %s %d", s, n)
		}
	}
	fmt.Fprintf(&b, " ), callbacks %d, 503 answers %d, transport errors %d, events %d (duplicates %d), delayed starts %d\n",
		st.Callbacks, st.Answers503, st.TransportErrors, st.Events, st.DuplicateEvents, st.Delayed)
	kinds := map[string][]time.Duration{}
	counts := map[string]int{}
	for _, f := range res.Faults {
		counts[f.Kind]++
		if f.Recovery >= 0 {
			kinds[f.Kind] = append(kinds[f.Kind], f.Recovery)
		}
	}
	crashes := 0
	for _, f := range res.Faults {
		crashes += f.Crashes
	}
	b.WriteString("  faults injected:")
	for _, k := range FaultKinds {
		fmt.Fprintf(&b, " %s %d", k, counts[k])
	}
	fmt.Fprintf(&b, " (failpoint crashes %d)", crashes)
	for _, m := range res.Modes {
		if m != ModeOK {
			fmt.Fprintf(&b, ", worker %s %d", m, res.Worker[m])
		}
	}
	b.WriteString("\n")
	for _, k := range FaultKinds {
		ds := kinds[k]
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		fmt.Fprintf(&b, "  recovery after %s heals: p50 %v, max %v (%d of %d measured)\n", k,
			ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), len(ds), counts[k])
	}
	if s := res.Steady; s != nil {
		errRate := 0.0
		if s.Callbacks > 0 {
			errRate = float64(s.Errors) / float64(s.Callbacks)
		}
		fmt.Fprintf(&b, "  steady load (no fault) over %v: %d callbacks, %.1f callbacks/s, error rate %.4f%%, p50 %v, p99 %v\n",
			s.Duration.Round(time.Second), s.Callbacks, s.Rate, 100*errRate, s.P50.Round(time.Millisecond), s.P99.Round(time.Millisecond))
	}
	if st.Priority > 0 {
		fmt.Fprintf(&b, "  priority: %d tasks outranking others judged, %d seen waiting for a run slot; at most %d lower-priority tasks started while one waited (bound: maxRunning %d)\n",
			st.Priority, st.PriorityWaited, st.PriorityAhead, PriorityMaxRunning)
	}
	fmt.Fprintf(&b, "  invariant violations: %d\n", len(res.Violations))
	return b.String()
}
