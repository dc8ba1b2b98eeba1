// Command scale runs a representative workload on the local stack (the
// emulators and Servo's handlers, internal/devstack), records every
// Firestore write with the index entries it makes in production, every
// Cloud Tasks dispatch and every Pub/Sub publish, extrapolates them to a
// target load (internal/scale) and prints, per document, index range,
// collection, queue, ordering key and topic, the peak sustained rate at
// the target beside the published limit. It exits 1 when any row is over
// its limit, 2 when the workload could not run. docs/scale.md has its
// output and explains the model.
//
//	go run ./bench/scale                       # default target, 60 tasks recorded
//	go run ./bench/scale -submits 20000 -running 2000000 -tasks 200
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/scale"
	"github.com/servo-dev/servo/internal/store"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tg := scale.DefaultTarget
	fs.Float64Var(&tg.Submits, "submits", tg.Submits, "target: tasks submitted a second")
	fs.Float64Var(&tg.Completions, "completions", tg.Completions, "target: tasks completed a second")
	fs.IntVar(&tg.Tenants, "tenants", tg.Tenants, "target: tenants")
	fs.Float64Var(&tg.HotShare, "hot-share", tg.HotShare, "target: the hot tenant's share of submits")
	fs.IntVar(&tg.Limited, "limited", tg.Limited, "target: tenants at their quota limits")
	fs.Float64Var(&tg.LimitedRate, "limited-rate", tg.LimitedRate, "target: submits a second of each limited tenant (0: an ordinary tenant's)")
	fs.Float64Var(&tg.Running, "running", tg.Running, "target: tasks running at once")
	fs.DurationVar(&tg.HeartbeatEvery, "heartbeat-every", tg.HeartbeatEvery, "target: heartbeat interval")
	dueShards := fs.Int("due-shards", store.DefaultDueShards, "target: due shards (SERVO_DUE_SHARDS, Terraform due_shards)")
	fs.IntVar(&tg.Workers, "workers", tg.Workers, "target: workers")
	fs.Float64Var(&tg.BigWorkerShare, "big-worker-share", tg.BigWorkerShare, "target: the biggest worker's share of tasks")
	fs.DurationVar(&tg.SweepEvery, "sweep-every", tg.SweepEvery, "target: the sweeper's cadence (SERVO_SWEEP_EVERY)")
	fs.StringVar(&tg.Region, "region", tg.Region, "target: the deployment's region (Terraform's region): Pub/Sub's publisher throughput quota is a large region's (europe-west1, us-central1, us-east1: 200 MB/s) or a small one's (50 MB/s)")
	fs.Float64Var(&tg.Peak, "peak", tg.Peak, "target: peaks over the mean; every rate is checked at it, and tenants and workers declare it (quota peakRate, maxDispatchesPerSecond)")
	fs.IntVar(&tg.Schedules, "schedules", tg.Schedules, "target: schedules")
	fs.Float64Var(&tg.SameMinute, "same-minute", tg.SameMinute, "target: the share of schedules firing on the same minute")
	fs.DurationVar(&tg.ScheduleEvery, "schedule-every", tg.ScheduleEvery, "target: each schedule's period")
	fs.DurationVar(&tg.FireWithin, "fire-within", tg.FireWithin, "target: how soon the same minute's fires are all made")
	tasks := fs.Int("tasks", 60, "recorded workload: tasks")
	heartbeats := fs.Int("heartbeats", -1, "recorded workload: heartbeats a task (-1: the target's, lifetime / interval)")
	parallel := fs.Int("parallel", 8, "recorded workload: tasks played at once")
	schedules := fs.Int("recorded-schedules", 40, "recorded workload: schedules, each firing twice (0: no schedules workload)")
	project := fs.String("project", fmt.Sprintf("servo-scale-%d", time.Now().UnixNano()), "emulator project id")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if tg.Peak < 1 {
		fmt.Fprintln(stderr, "scale: -peak must be at least 1")
		return 2
	}
	if *dueShards < 1 {
		fmt.Fprintln(stderr, "scale: -due-shards must be at least 1")
		return 2
	}
	if tg.SameMinute < 0 || tg.SameMinute > 1 || tg.FireWithin <= 0 || tg.ScheduleEvery <= time.Minute {
		fmt.Fprintln(stderr, "scale: -same-minute must be in [0, 1], -fire-within above 0 and -schedule-every above 1m")
		return 2
	}
	if *heartbeats < 0 {
		*heartbeats = tg.HeartbeatsPerTask()
	}
	// Emulators already running (tests, a `servo dev` shell) are reused;
	// else both recordings share one of each.
	hosts, stop, err := emulators(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "scale:", err)
		return 2
	}
	defer stop()
	p := newPlan(*tasks, *heartbeats, tg)
	p.dueShards = *dueShards
	tr, err := record(ctx, *project, hosts, p, *parallel, tg)
	if err != nil {
		fmt.Fprintln(stderr, "scale:", err)
		return 2
	}
	rows := scale.New(tr).Extrapolate(tg)
	fmt.Fprintf(stdout, "Recorded: %d tasks (%d heartbeats each) in %s, %d events. Target: %.0f submits/s, %.0f completions/s, %d tenants (one at %.0f %%, %d at their quota limits), %.0f running tasks heartbeating every %s (a task lives %.0f s), %d workers (one with %.0f %% of tasks), a sweep every %s, in %s; every rate at a peak of %g × its mean (the sweeper's own records at their cadence).\n\n",
		len(tr.Tasks), *heartbeats, tr.Duration.Round(time.Second), len(tr.Events), tg.Submits, tg.Completions, tg.Tenants, tg.HotShare*100, tg.Limited,
		tg.Running, tg.HeartbeatEvery, tg.Lifetime(), tg.Workers, tg.BigWorkerShare*100, tg.SweepEvery, tg.Region, tg.PeakFactor())
	scale.Print(stdout, rows)
	over := scale.Over(rows)
	if *schedules > 0 {
		str, err := recordSchedules(ctx, *project+"-s", hosts, p, *schedules, tg)
		if err != nil {
			fmt.Fprintln(stderr, "scale: schedules:", err)
			return 2
		}
		srows := scale.Combine(scale.New(str).Extrapolate(tg.Fires()), rows)
		fmt.Fprintf(stdout, "\n## Schedules at the top of the minute\n\nRecorded: %d schedules, %d fires each, in %s, %d events. Target: %d schedules firing once every %s, %.0f %% on the same minute: %.0f fires made within %s (%.0f fires/s), on top of the load above (its rate in brackets); the others %.1f fires/s over the other minutes. A schedule's own record is priced at a fire every sweep (%s), the shortest period there is.\n\n",
			len(str.Fires), schedFires, str.Duration.Round(time.Second), len(str.Events), tg.Schedules, tg.ScheduleEvery, tg.SameMinute*100,
			float64(tg.Schedules)*tg.SameMinute, tg.FireWithin, tg.FireBurst(), tg.SteadyFires(), tg.SweepEvery)
		scale.Print(stdout, srows)
		over = append(over, scale.Over(srows)...)
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "| limit | per second | source | read |")
	fmt.Fprintln(stdout, "|---|---|---|---|")
	for _, l := range scale.Limits {
		fmt.Fprintf(stdout, "| %s | %.0f | %s | %s |\n", l.Name, l.PerSecond, l.Source, l.Read)
	}
	fmt.Fprintf(stdout, "\n%d rows over their limits.\n", len(over))
	writes, dispatches := perTask(tr, tg)
	fmt.Fprintf(stdout, "Per task, recorded: counter writes %s (quota.WritesPerTask %d); dispatches %s (DispatchesPerTask %g).\n",
		perTaskText(writes), quota.WritesPerTask, perTaskText(dispatches), DispatchesPerTask)
	costly := overPerTask(writes, dispatches)
	for _, line := range costly {
		fmt.Fprintln(stdout, line)
	}
	capped := overCap(tg, p.tenants)
	for _, name := range capped {
		rate := tg.TenantRate(p.tenants[name])
		fmt.Fprintf(stdout, "The %s tenant's declared peak (%.0f tasks/s: %.0f × its %.0f) is over the quota's cap of %d tasks/s (quota.MaxPeakRate): its counters are sized at the cap, which it outruns.\n",
			name, tg.PeakFactor()*rate, tg.PeakFactor(), rate, quota.MaxPeakRate)
	}
	if len(over) > 0 || len(capped) > 0 || len(costly) > 0 {
		return 1
	}
	return 0
}

// perTaskText lists per-task figures by name.
func perTaskText(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// record plays p on a fresh local stack and returns what it recorded.
func record(ctx context.Context, project string, hosts emulatorHosts, p plan, parallel int, tg scale.Target) (scale.Traffic, error) {
	hotShare := tg.HotShare
	rec := newRecorder()
	box := newMailbox()
	defer box.srv.Close()
	stack, queues, err := recordingStack(ctx, project, hosts, p, rec, box.srv.URL, tg)
	if err != nil {
		return scale.Traffic{}, err
	}
	defer stack.Close()
	d := &driver{base: stack.URL, box: box, rec: rec, ids: map[string]scale.TaskInfo{}}
	start := time.Now()
	if err := d.run(ctx, p, parallel, hotShare); err != nil {
		return scale.Traffic{}, err
	}
	if err := stack.Events.Flush(ctx); err != nil {
		return scale.Traffic{}, err
	}
	events, err := rec.events()
	if err != nil {
		return scale.Traffic{}, fmt.Errorf("the model cannot attribute every write: %w", err)
	}
	spread := families(events, tg, p.dueShards, p.tenants, p.workers, queues)
	return scale.Traffic{Events: events, Tasks: d.ids, Tenants: p.tenants, Workers: p.workers,
		Duration: time.Since(start), SweepEvery: recordedSweep, Spread: spread}, nil
}

// recordingStack starts a local stack on hosts whose Firestore, Cloud
// Tasks and Pub/Sub clients rec records, with p's quotas and workers (all
// at url); it returns the stack and each worker's base queue (relQueue
// form).
func recordingStack(ctx context.Context, project string, hosts emulatorHosts, p plan, rec *recorder, url string, tg scale.Target) (*devstack.Stack, map[string]string, error) {
	// Each worker declares its rate at the target, so that the stack gives
	// it the queues production would (enqueue.QueueCount).
	workers, rates, queues := map[string]string{}, map[string]float64{}, map[string]string{}
	for name, role := range p.workers {
		workers[name] = url
		rates[name] = workerRate(tg, role)
		queues[name] = "queues/" + name
	}
	o := devstack.Options{
		Addr: "127.0.0.1:0", Project: project, Workers: workers, SweepEvery: recordedSweep, Quotas: p.quotas,
		DueShards:           p.dueShards, // production's (-due-shards), not the local default
		WorkerRates:         rates,
		StoreOptions:        []store.Option{store.WithClientOptions(rec.writes.ClientOptions()...)},
		TasksClientOptions:  rec.tasksOptions(),
		PubSubClientOptions: rec.pubsubOptions(),
		FirestoreHost:       hosts.firestore, PubSubHost: hosts.pubsub,
	}
	stack, err := devstack.Start(ctx, o)
	return stack, queues, err
}

// recordedSweep is the recordings' sweeper cadence.
const recordedSweep = time.Second

// emulatorHosts are the emulators the recordings run on (HOST:PORT).
type emulatorHosts struct{ firestore, pubsub string }

// emulators returns the emulators named by FIRESTORE_EMULATOR_HOST and
// PUBSUB_EMULATOR_HOST, starting those not named; stop stops what it
// started.
func emulators(ctx context.Context) (emulatorHosts, func(), error) {
	var started []*emulator.Process
	stop := func() {
		for _, p := range started {
			_ = p.Stop()
		}
	}
	host := func(k emulator.Kind) (string, error) {
		if h := os.Getenv(k.EnvVar()); h != "" {
			return h, nil
		}
		p, err := emulator.Start(ctx, k)
		if err != nil {
			return "", err
		}
		started = append(started, p)
		return p.Host, nil
	}
	var h emulatorHosts
	var err error
	if h.firestore, err = host(emulator.Firestore); err == nil {
		h.pubsub, err = host(emulator.PubSub)
	}
	if err != nil {
		stop()
		return h, nil, err
	}
	return h, stop, nil
}
