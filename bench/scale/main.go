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
//	go run ./bench/scale -var-file terraform/examples/staging.tfvars -batch 100 -run-size 1000000
//
// The deployment's Terraform variables the model reads (due_shards,
// region, sweep_every, the api's max_instances, quota_shards, and the
// hot tenant's and big worker's declarations) come from the root
// module's defaults, then -var-file; a flag given explicitly wins, and
// the report says where each came from.
package main

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/scale"
	"github.com/servo-dev/servo/internal/store"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command's flags, read (parse).
type options struct {
	tg                                     scale.Target
	dueShards, quotaShards                 int
	dep                                    deployment
	tasks, heartbeats, parallel, schedules int
	project                                string
}

// parse reads the flags and the deployment's Terraform variables; a
// target the model cannot take is an error (usage: flag's own, already
// printed to stderr).
func parse(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tg := scale.DefaultTarget
	fs.Float64Var(&tg.Submits, "submits", tg.Submits, "target: tasks submitted a second")
	fs.Float64Var(&tg.Completions, "completions", tg.Completions, "target: tasks completed a second")
	fs.IntVar(&tg.Tenants, "tenants", tg.Tenants, "target: tenants")
	fs.Float64Var(&tg.HotShare, "hot-share", tg.HotShare, "target: the hot tenant's share of submits (any share: over the quota's peak cap, its rows and the cap are reported, exit 1)")
	fs.IntVar(&tg.Limited, "limited", tg.Limited, "target: tenants at their quota limits")
	fs.Float64Var(&tg.LimitedRate, "limited-rate", tg.LimitedRate, "target: submits a second of each limited tenant (0: an ordinary tenant's)")
	fs.Float64Var(&tg.Running, "running", tg.Running, "target: tasks running at once")
	fs.DurationVar(&tg.HeartbeatEvery, "heartbeat-every", tg.HeartbeatEvery, "target: heartbeat interval")
	dueShards := fs.Int("due-shards", store.DefaultDueShards, "target: due shards (SERVO_DUE_SHARDS); unset: Terraform's due_shards (-var-file's, else its default)")
	fs.IntVar(&tg.Workers, "workers", tg.Workers, "target: workers")
	fs.Float64Var(&tg.BigWorkerShare, "big-worker-share", tg.BigWorkerShare, "target: the biggest worker's share of tasks")
	fs.DurationVar(&tg.SweepEvery, "sweep-every", tg.SweepEvery, "target: the sweeper's cadence (SERVO_SWEEP_EVERY); unset: Terraform's sweep_every")
	fs.StringVar(&tg.Region, "region", tg.Region, "target: the deployment's region: Pub/Sub's publisher throughput quota is a large region's (europe-west1, us-central1, us-east1: 200 MB/s) or a small one's (50 MB/s); unset: Terraform's region")
	fs.Float64Var(&tg.Peak, "peak", tg.Peak, "target: peaks over the mean; every rate is checked at it, and tenants and workers declare it (quota peakRate, maxDispatchesPerSecond)")
	fs.IntVar(&tg.Schedules, "schedules", tg.Schedules, "target: schedules")
	fs.Float64Var(&tg.SameMinute, "same-minute", tg.SameMinute, "target: the share of schedules firing on the same minute")
	fs.DurationVar(&tg.ScheduleEvery, "schedule-every", tg.ScheduleEvery, "target: each schedule's period")
	fs.DurationVar(&tg.FireWithin, "fire-within", tg.FireWithin, "target: how soon the same minute's fires are all made")
	fs.IntVar(&tg.RunSize, "run-size", tg.RunSize, "target: tasks of one run, submitted at its tenant's rate (1: each task its own run, no run document); the recorded tenants submit into runs of up to this size")
	fs.IntVar(&tg.Batch, "batch", tg.Batch, fmt.Sprintf("target and recorded workload: tasks of one submit request (1: POST /v1/tasks; up to %d: POST /v1/tasks:batch, one run a batch)", api.MaxBatchTasks))
	publishMB := fs.Float64("publish-quota-mb", 0, "target: the Pub/Sub publisher throughput quota (MB/s) the project was granted in -region on request (the default quota is soft: 200 MB/s in a large region, 50 in a small one); 0: the region's default")
	fs.IntVar(&tg.APIInstances, "api-instances", tg.APIInstances, "target: the most API processes serving submits, each writing a run's document at most once every SERVO_RUN_DOCUMENT_EVERY (store.RunDocumentEveryFor: 2 s a process, at least a minute); unset: Terraform's functions.api.max_instances")
	quotaShards := fs.Int("quota-shards", quota.DefaultShards, "target: counter shards of a limited scope with no peak rate (a tenant's share of a worker); unset: Terraform's quota_shards")
	var varFiles []string
	fs.Func("var-file", "a Terraform var file (.tfvars) of the deployment: due_shards, region, sweep_every, functions.api.max_instances and quota_shards replace the defaults above, tenant_quotas' highest peak_rate is the hot tenant's and workers' highest queue.max_dispatches_per_second the big worker's; repeatable, the last setting a variable winning; a flag given explicitly wins over it", func(f string) error {
		varFiles = append(varFiles, f)
		return nil
	})
	tfDir := fs.String("terraform", "", "the Terraform root module whose variables' defaults the target takes (default: terraform/ of the module the command runs in)")
	tasks := fs.Int("tasks", 60, "recorded workload: tasks")
	heartbeats := fs.Int("heartbeats", -1, "recorded workload: heartbeats a task (-1: the target's, lifetime / interval)")
	parallel := fs.Int("parallel", 8, "recorded workload: tasks played at once (at least a batch)")
	schedules := fs.Int("recorded-schedules", 40, "recorded workload: schedules, each firing twice (0: no schedules workload)")
	project := fs.String("project", fmt.Sprintf("servo-scale-%d", time.Now().UnixNano()), "emulator project id")
	if err := fs.Parse(args); err != nil {
		return options{}, usageError{err}
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	dep, err := readDeployment(*tfDir, varFiles, explicit, &tg, dueShards, quotaShards)
	if err != nil {
		return options{}, err
	}
	if err := checkTarget(tg, *dueShards, *quotaShards); err != nil {
		return options{}, err
	}
	if *publishMB < 0 {
		return options{}, errors.New("-publish-quota-mb must be at least 0")
	}
	tg.PublishQuota = *publishMB * 1e6
	// Terraform's SERVO_RUN_DOCUMENT_EVERY for this many api processes.
	tg.RunEvery = store.RunDocumentEveryFor(tg.APIInstances)
	if *heartbeats < 0 {
		*heartbeats = tg.HeartbeatsPerTask()
	}
	return options{tg: tg, dueShards: *dueShards, quotaShards: *quotaShards, dep: dep, tasks: *tasks, heartbeats: *heartbeats,
		parallel: *parallel, schedules: *schedules, project: *project}, nil
}

// usageError is a flag the flag package refused (and reported).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// run is the command; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if err != nil {
		if !errors.As(err, new(usageError)) { // the flag package printed its own
			fmt.Fprintln(stderr, "scale:", err)
		}
		return 2
	}
	tg, dep := o.tg, o.dep
	dueShards, quotaShards, heartbeats, parallel, schedules, project := &o.dueShards, &o.quotaShards, &o.heartbeats, &o.parallel, &o.schedules, &o.project
	tasks := &o.tasks
	// Emulators already running (tests, a `servo dev` shell) are reused;
	// else both recordings share one of each.
	hosts, stop, err := emulators(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "scale:", err)
		return 2
	}
	defer stop()
	p := newPlan(*tasks, *heartbeats, tg, dep.decl)
	p.dueShards = *dueShards
	tr, err := record(ctx, *project, hosts, p, *parallel, tg)
	if err != nil {
		fmt.Fprintln(stderr, "scale:", err)
		return 2
	}
	model := scale.New(tr)
	rows := model.Extrapolate(tg)
	fmt.Fprintf(stdout, "Recorded: %d tasks (%d heartbeats each) in %s, %d events. Target: %.0f submits/s, %.0f completions/s, %d tenants (one at %.0f %%, %d at their quota limits), %.0f running tasks heartbeating every %s (a task lives %.0f s), %d workers (one with %.0f %% of tasks), a sweep every %s, in %s; every rate at a peak of %g × its mean (the sweeper's own records at their cadence).\n\n",
		len(tr.Tasks), *heartbeats, tr.Duration.Round(time.Second), len(tr.Events), tg.Submits, tg.Completions, tg.Tenants, tg.HotShare*100, tg.Limited,
		tg.Running, tg.HeartbeatEvery, tg.Lifetime(), tg.Workers, tg.BigWorkerShare*100, tg.SweepEvery, tg.Region, tg.PeakFactor())
	fmt.Fprintf(stdout, "%s\n\n", dep.describe(tg, *dueShards, *quotaShards))
	fmt.Fprintf(stdout, "%s\n\n", describeRuns(tg, tr))
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
	for _, r := range over {
		fmt.Fprintf(stdout, "Over: %s\n", rowText(r))
	}
	writes, dispatches := perTask(tr, tg)
	fmt.Fprintf(stdout, "Per task, recorded: counter writes %s (quota.WritesPerTask %d); dispatches %s (DispatchesPerTask %g).\n",
		perTaskText(writes), quota.WritesPerTask, perTaskText(dispatches), DispatchesPerTask)
	costly := overPerTask(writes, dispatches)
	for _, line := range costly {
		fmt.Fprintln(stdout, line)
	}
	capped := overCap(tg, p.tenants)
	for _, line := range hotReport(model, tg, p, capped) {
		fmt.Fprintln(stdout, line)
	}
	if len(over) > 0 || len(capped) > 0 || len(costly) > 0 {
		return 1
	}
	return 0
}

// hotReport says which tenants' counters are sized below their peak at
// tg: those over the quota's cap (capped: sized at the cap), and the hot
// tenant when the deployment declares it a lower peak_rate; each with
// its counter shards' row (one a tenant: its family's).
func hotReport(model *scale.Model, tg scale.Target, p plan, capped []string) []string {
	var out []string
	named := map[string]bool{}
	for _, name := range capped {
		rate := tg.TenantRate(p.tenants[name])
		out = append(out, fmt.Sprintf("The %s tenant's declared peak (%.0f tasks/s: %.0f × its %.0f) is over the quota's cap of %d tasks/s (quota.MaxPeakRate): its counters are sized at the cap, which it outruns.",
			name, tg.PeakFactor()*rate, tg.PeakFactor(), rate, quota.MaxPeakRate))
		named[name] = true
	}
	if h, need := p.decl.hot, tg.PeakFactor()*tg.TenantRate(scale.Hot); h != nil && h.PeakRate < min(need, quota.MaxPeakRate) {
		out = append(out, fmt.Sprintf("The %s tenant declares peak_rate %g tasks/s (tenant_quotas[%q]), below its peak at the target (%.0f tasks/s): its counters are sized for %g.",
			hotTenant, h.PeakRate, p.decl.hotName, need, h.PeakRate))
		named[hotTenant] = true
	}
	for _, name := range slices.Sorted(maps.Keys(named)) {
		for _, r := range model.DocumentRows(tg, "quotas/t_"+base64.RawURLEncoding.EncodeToString([]byte(name))+"-") {
			out = append(out, "Its row: "+rowText(r))
		}
	}
	return out
}

// checkTarget refuses a target the model cannot take.
func checkTarget(tg scale.Target, dueShards, quotaShards int) error {
	switch {
	case tg.Peak < 1:
		return errors.New("-peak must be at least 1")
	case dueShards < 1:
		return errors.New("-due-shards (due_shards) must be at least 1")
	case tg.SameMinute < 0 || tg.SameMinute > 1 || tg.FireWithin <= 0 || tg.ScheduleEvery <= time.Minute:
		return errors.New("-same-minute must be in [0, 1], -fire-within above 0 and -schedule-every above 1m")
	case tg.RunSize < 1:
		return errors.New("-run-size must be at least 1")
	case tg.Batch < 1 || tg.Batch > api.MaxBatchTasks:
		return fmt.Errorf("-batch must be from 1 to %d (api.MaxBatchTasks)", api.MaxBatchTasks)
	case tg.Batch > tg.RunSize:
		return fmt.Errorf("-batch %d is above -run-size %d: a batch's tasks join one run", tg.Batch, tg.RunSize)
	case tg.APIInstances < 1:
		return errors.New("-api-instances (functions.api.max_instances) must be at least 1")
	case quotaShards < 1:
		return errors.New("-quota-shards (quota_shards) must be at least 1")
	case tg.SweepEvery <= 0:
		return errors.New("-sweep-every (sweep_every) must be above 0")
	}
	return nil
}

// rowText is a row in a line: what, the instance, its rate and limit.
func rowText(r scale.Row) string {
	limit := "no limit"
	if r.Limit != nil {
		limit = fmt.Sprintf("limit %.4g %s (%s)", r.Limit.PerSecond, r.Unit, r.Limit.Name)
	}
	verdict := ""
	if r.Over() {
		verdict = ": OVER"
	}
	return fmt.Sprintf("%s %s (%s, per %s) at %.4g %s, %s%s", r.Section, r.Name, r.Example, r.Scope, r.Rate, r.Unit, limit, verdict)
}

// describeRuns says how the target submits (runs, batches, requests) and
// what the recording's runs were.
func describeRuns(tg scale.Target, tr scale.Traffic) string {
	runs := "each task its own run (no run document)"
	if tg.RunSize > 1 {
		runs = fmt.Sprintf("runs of %d tasks, each at its tenant's rate (the hot tenant's lasts %.0f s at its peak), their documents written at most once every %s by each of %d API processes",
			tg.RunSize, float64(tg.RunSize)/(tg.PeakFactor()*tg.TenantRate(scale.Hot)), cmp.Or(tg.RunEvery, tr.RunEvery), tg.APIInstances)
	}
	requests := 0
	for _, ri := range tr.Runs {
		requests += ri.Requests
	}
	return fmt.Sprintf("Submits: %s; %d tasks a request (%.0f requests/s). Recorded: %d run documents, %d requests into them.",
		runs, tg.Batch, tg.SubmitRequests(), len(tr.Runs), requests)
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
	d := &driver{base: stack.URL, box: box, rec: rec, ids: map[string]scale.TaskInfo{}, requests: map[string]int{}}
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
	runs, err := d.runs(rec.writes.Writes())
	if err != nil {
		return scale.Traffic{}, err
	}
	spread, pairs := families(events, tg, p, p.tenants, queues)
	return scale.Traffic{Events: events, Tasks: d.ids, Tenants: p.tenants, Workers: p.workers,
		Duration: time.Since(start), SweepEvery: recordedSweep, Spread: spread, Pairs: pairs,
		Runs: runs, RunEvery: store.RunDocumentEvery}, nil
}

// recordingStack starts a local stack on hosts whose Firestore, Cloud
// Tasks and Pub/Sub clients rec records, with p's quotas and workers (all
// at url); it returns the stack and each worker's base queue (relQueue
// form).
// maxRecordedShards bounds the recording stack's due shards.
const maxRecordedShards = 384

func recordingStack(ctx context.Context, project string, hosts emulatorHosts, p plan, rec *recorder, url string, tg scale.Target) (*devstack.Stack, map[string]string, error) {
	// Each worker declares its rate at the target, so that the stack gives
	// it the queues production would (enqueue.QueueCount).
	workers, rates, queues := map[string]string{}, map[string]float64{}, map[string]string{}
	for name, role := range p.workers {
		workers[name] = url
		rates[name] = p.decl.workerRate(tg, role)
		queues[name] = "queues/" + name
	}
	o := devstack.Options{
		Addr: "127.0.0.1:0", Project: project, Workers: workers, SweepEvery: recordedSweep, Quotas: p.quotas,
		// Production's (-due-shards), not the local default, up to
		// maxRecordedShards: a task's shard is a hash, so its writes are
		// the same in any number of shards, and the model spreads the due
		// ranges over the target's (families); the emulator takes seconds
		// for a sweep pass's 700-odd grouped queries over 2048, which
		// made the recorded schedules miss their fires.
		DueShards:           min(p.dueShards, maxRecordedShards),
		WorkerRates:         rates,
		StoreOptions:        []store.Option{store.WithClientOptions(rec.storeOptions()...)},
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
