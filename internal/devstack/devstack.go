// Package devstack runs Servo's whole local stack in one process: the
// official Firestore and Pub/Sub emulators, Servo's Cloud Tasks emulator,
// the handlers server.New builds (the control API, the callbacks, the
// sweeper, driven the production way: a ticker publishes to a Pub/Sub
// topic whose push subscription calls the CloudEvent function through
// functions-framework-go, though only when a pass has work: see rest.go;
// the events publisher), one Cloud Tasks queue per
// worker, and the in-process workers it is given (`servo dev`: the example
// worker as worker "example"). `servo dev` and the end-to-end tests use it.
package devstack

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cloudtasksapi "cloud.google.com/go/cloudtasks/apiv2"
	ctpb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/cloudtasks"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/config"
	"github.com/servo-dev/servo/internal/dashboard"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/jobs"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/pull"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/server"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/telemetry"
	"github.com/servo-dev/servo/internal/zombie"
	"github.com/servo-dev/servo/worker"
)

// Defaults.
const (
	DefaultAddr       = "127.0.0.1:8080"
	DefaultProject    = "servo-local"
	DefaultSweepEvery = time.Second
	// KeysFileRefresh is how often a stack re-reads Options.KeysFile while
	// it signs (a local file: cheap).
	KeysFileRefresh = time.Second
	// TicksPerWindow is how many sweeper passes one scheduler tick starts
	// at most: the invocation a tick starts sweeps every SweepEvery while
	// anything is due before its window's end, TicksPerWindow × SweepEvery
	// (at most 5 minutes) less half a SweepEvery (production: a tick a
	// minute, a 55 s window). The ticker publishes when a pass has work
	// (rest.go): back to back while the sweeper is busy, none while
	// nothing is due. One tick a pass would cost the Pub/Sub emulator a
	// publish and a push every second.
	TicksPerWindow = 10
	// DefaultDueShards is the local stack's number of due shards
	// (Options.DueShards). Sharding spreads production's index writes;
	// locally it would only multiply the sweeper's queries (one per duty
	// and shard every second), which are most of the Firestore emulator's
	// work.
	DefaultDueShards = 1
	// ExampleWorker is the name `servo dev` gives the example worker
	// (Options.WorkerFuncs).
	ExampleWorker = "example"
	// SweepTopic is the topic the scheduler ticker publishes to.
	SweepTopic = "servo-sweep"
	// Location is the Cloud Tasks location of the local queues.
	Location = "local"
)

// Options configure a Stack.
type Options struct {
	// Addr is where the API, callbacks, sweeper push endpoint and
	// in-process workers listen; default DefaultAddr ("127.0.0.1:0" picks
	// a free port).
	Addr string
	// Project is the Google Cloud project id used with the emulators.
	Project string
	// Workers are external workers, name → URL (http:// on loopback is
	// accepted); each gets its own queue.
	Workers map[string]string
	// WorkerFuncs are in-process workers, name → the function that runs
	// an attempt (servo dev: the example worker's, as ExampleWorker). Each
	// is served by worker.Handler, with the stack's logger and
	// WorkerOptions, at /workers/{name} on Addr, and gets its own queue.
	WorkerFuncs map[string]worker.Func
	// SweepEvery is the sweeper's cadence while anything is due; default
	// 1 s. With nothing due it sleeps (rest.go): passes are SweepEvery
	// apart at least, and RestFallback (or SweepEvery) at most.
	SweepEvery time.Duration
	// StartTimeout is the default start timeout of new tasks (re-drive);
	// default api.DefaultStartTimeout.
	StartTimeout time.Duration
	// MaxRedrives bounds re-drives before DISPATCH_TIMEOUT; default 5.
	MaxRedrives int
	// FirestoreHost and PubSubHost (HOST:PORT) name emulators that are
	// already running: the stack uses them instead of starting its own, and
	// leaves them running when it closes. Each is used alone too: an empty
	// one is started as usual.
	FirestoreHost, PubSubHost string
	// ReuseEmulators uses the emulators named by FIRESTORE_EMULATOR_HOST and
	// PUBSUB_EMULATOR_HOST instead of starting new ones (tests).
	ReuseEmulators bool
	// Log receives the components' JSON logs; default io.Discard.
	Log io.Writer
	// WorkerOptions are passed to the handlers of WorkerFuncs.
	WorkerOptions []worker.Option
	// DueShards is the number of due shards (store.WithDueShards,
	// SERVO_DUE_SHARDS in production); default DefaultDueShards. It is
	// raised to the shards of the tasks and outbox entries already in the
	// Firestore emulator (store.DueShardsInUse), so that a stack started
	// on data written with more shards still sweeps all of it.
	DueShards int
	// StoreOptions are passed to the store (an RPC counter, in benchmarks).
	StoreOptions []store.Option
	// TasksClientOptions are passed to the Cloud Tasks client (an
	// interceptor counting calls, in benchmarks).
	TasksClientOptions []option.ClientOption
	// Keys sign and verify task tokens; default one generated at start.
	// (servo dev passes the ring of SERVO_TOKEN_KEYS or
	// SERVO_TOKEN_KEYS_FILE when set, so that tokens survive a restart.)
	Keys *auth.KeyRing
	// StoreTimeout bounds the store work of one callback and of one API
	// request (then 503 unavailable); default the handlers' own.
	StoreTimeout time.Duration
	// Metrics, when set, is served at GET /metrics (servo dev: the
	// Prometheus text of every component's metrics).
	Metrics http.Handler
	// Traces, when set, serves GET /v1/tasks/{id}/trace from the spans it
	// recorded (servo get --trace).
	Traces *telemetry.Recorder
	// PullPools are pull pools (package pull), name → the identities
	// allowed to claim (none: any caller); each gets its Pub/Sub topic and
	// pull subscription, and its workers claim at /v1/pools/{name}/claim,
	// naming themselves in the pull.DevIdentityHeader header.
	PullPools map[string][]string
	// PubSubClientOptions are passed to the stack's Pub/Sub client (the
	// events publisher's; bench/scale records its publishes).
	PubSubClientOptions []option.ClientOption
	// PoolPubSubOptions are passed to the pools' Pub/Sub client (tests put
	// a proxy in front of the emulator to take it away).
	PoolPubSubOptions []option.ClientOption
	// JobWorkers are job workers, name → command line: each attempt runs
	// as one subprocess of the command (jobs.Local), with the environment
	// contract of a Cloud Run Job execution; each gets its own queue.
	JobWorkers map[string]string
	// WorkerRates are the declared peak dispatch rates of workers among
	// Workers, WorkerFuncs and JobWorkers, name → dispatches a second
	// (enqueue.Worker.MaxDispatchesPerSecond, Terraform's
	// queue.max_dispatches_per_second): above 500 a worker gets several
	// queues, each created at its share of the rate.
	WorkerRates map[string]float64
	// Access is the control API's access policy; nil is the open policy.
	// Either way the API accepts the dev identity tokens of `servo --as`
	// signed with IdentityKey.
	Access *auth.Policy
	// IdentityKey signs dev identity tokens (auth.SignDev); nil means a
	// fresh key for this run (Stack.IdentityKey).
	IdentityKey []byte
	// Quotas are the per-tenant and per-worker limits; nil means none.
	Quotas *quota.Policy
	// KeysFile, when set, is the token key ring file (servo keys generate)
	// the stack signs and verifies with instead of a generated ring; it is
	// re-read on an unknown kid and every KeysFileRefresh, so `servo keys
	// add|activate|retire --file` rotate the running stack's keys within a
	// second or two.
	KeysFile string
	// NoSweeper starts no scheduler ticker: the sweeper never runs (a
	// stopped sweeper, for servo doctor's tests).
	NoSweeper bool
	// LaxStore turns the store's strict mode off (servo dev
	// --strict=false): queries no declared index serves and writes over
	// Firestore's limits then reach the emulator, which takes them. By
	// default the store refuses them as production does (store.WithStrict).
	LaxStore bool
}

// Stack is a running local stack.
type Stack struct {
	// URL is the base URL of the API, callbacks and in-process workers.
	URL string
	// Project is the project id used with the emulators.
	Project string
	// FirestoreHost, PubSubHost and CloudTasksHost are the emulators.
	FirestoreHost, PubSubHost, CloudTasksHost string
	// Store, Keys and Enqueuer are the stack's own, for tests.
	Store    *store.Store
	Keys     *auth.KeyRing
	Enqueuer *enqueue.Enqueuer
	// Workers is the worker configuration in force.
	Workers enqueue.Workers
	// PubSub is the Pub/Sub client.
	PubSub *pubsub.Client
	// Events is the events publisher (the store's commit hook and the
	// sweeper's outbox re-drive).
	Events *events.Publisher
	// Jobs runs the job workers' executions as subprocesses.
	Jobs *jobs.Local
	// IdentityKey is the dev identity key of this run (servo --as).
	IdentityKey []byte

	id        string
	log       *slog.Logger
	ready     atomic.Bool
	server    *http.Server
	emuMu     sync.Mutex
	emulators []*emulator.Process
	sweepSub  string // the sweep topic's push subscription; "" with NoSweeper
	tasksSrv  *cloudtasks.Server
	tasks     *cloudtasksapi.Client
	srv       *server.Server
	poolPS    *pubsub.Client
	rest      *restState
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// Start starts the stack; Close stops it and everything it started.
func Start(ctx context.Context, o Options) (s *Stack, err error) {
	o.Addr = cmp.Or(o.Addr, DefaultAddr)
	o.Project = cmp.Or(o.Project, DefaultProject)
	o.SweepEvery = cmp.Or(o.SweepEvery, DefaultSweepEvery)
	o.StartTimeout = cmp.Or(o.StartTimeout, api.DefaultStartTimeout)
	o.MaxRedrives = cmp.Or(o.MaxRedrives, zombie.DefaultMaxRedrives)
	if o.Log == nil {
		o.Log = io.Discard
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s = &Stack{Project: o.Project, id: task.NewRunID(time.Now()), log: logs.New(o.Log, slog.LevelInfo), cancel: cancel, rest: newRestState()}
	// The error returns below set s to nil: close what was started through
	// its own reference.
	partial := s
	defer func() {
		if err != nil {
			partial.Close()
		}
	}()

	// 1. Emulators, booting while the rest starts; each is waited for
	// only by what needs it.
	ready := s.startEmulators(ctx, o)
	waitFirestore := sync.OnceValue(func() error { return <-ready[emulator.Firestore] })
	waitPubSub := sync.OnceValue(func() error { return <-ready[emulator.PubSub] })
	defer func() {
		if err != nil {
			// Before Close stops what they started.
			waitFirestore()
			waitPubSub()
		}
	}()
	s.tasksSrv = cloudtasks.NewServer(cloudtasks.Options{Logger: s.log})
	if s.CloudTasksHost, err = s.tasksSrv.Start("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("devstack: cloud tasks emulator: %w", err)
	}
	if s.tasks, err = cloudtasks.NewClient(ctx, append(cloudtasks.ClientOptions(s.CloudTasksHost), o.TasksClientOptions...)...); err != nil {
		return nil, fmt.Errorf("devstack: cloud tasks client: %w", err)
	}

	// 2. The address everything is served on.
	lis, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("devstack: listen on %s: %w (pass another --addr)", o.Addr, err)
	}
	s.URL = "http://" + lis.Addr().String()

	// 3. Pub/Sub's clients and topics as soon as its emulator answers,
	// while the Firestore emulator starts and answers its first queries (a
	// new emulator's first requests are its slowest); then state and keys.
	pubsubSetUp := make(chan error, 1)
	go func() { pubsubSetUp <- s.setUpPubSub(ctx, o, waitPubSub) }()
	waitPubSubSetUp := sync.OnceValue(func() error { return <-pubsubSetUp })
	defer func() {
		if err != nil {
			waitPubSubSetUp() // before Close closes its clients
		}
	}()
	if err := waitFirestore(); err != nil {
		lis.Close()
		return nil, errors.Join(err, waitPubSub()) // both flags' mistakes at once
	}
	if s.IdentityKey = o.IdentityKey; s.IdentityKey == nil {
		s.IdentityKey = auth.NewDevKey()
	}
	// As in production (a Scheduler tick a minute, each invocation
	// sweeping every SERVO_SWEEP_EVERY for a 55 s window), each tick starts
	// an invocation that sweeps every SweepEvery for a window, ending
	// early when nothing is due.
	tickEvery, window := sweepSchedule(o.SweepEvery)
	cfg := config.Default()
	cfg.Project, cfg.CallbackBaseURL = o.Project, &url.URL{Scheme: "http", Host: lis.Addr().String()}
	cfg.JobsDispatchURL = cfg.CallbackBaseURL.JoinPath(jobs.DispatchPath)
	cfg.SweepEvery, cfg.SweepWindow, cfg.MaxRedrives, cfg.StartTimeout = o.SweepEvery, window, o.MaxRedrives, o.StartTimeout
	cfg.DueShards, cfg.Access = cmp.Or(o.DueShards, DefaultDueShards), o.Access
	// A window ends early when nothing is due before its end, as in
	// production (config.Config.SweepEarlyEnd); the local ticker then
	// sleeps until the next due time or a write (rest.go), so that the
	// short timers of demos and tests (100 ms and up) are swept on time
	// and an idle stack sends Firestore nothing.
	cfg.SweepEarlyEnd = true
	if o.Quotas != nil {
		cfg.Quotas = o.Quotas
	}
	// Every commit but the sweeper's own wakes the resting ticker.
	o.StoreOptions = append(slices.Clone(o.StoreOptions), s.rest.storeOption())
	// An emulator the stack started itself holds no data yet.
	fresh := o.FirestoreHost == "" && !o.ReuseEmulators
	if s.Store, err = openStore(ctx, o, &cfg, fresh); err != nil {
		lis.Close()
		return nil, err
	}
	if o.KeysFile != "" {
		s.Keys, err = auth.NewReloadingKeyRing(ctx, nil, auth.RingFileSource(o.KeysFile), KeysFileRefresh)
	} else {
		s.Keys, err = keyRing(o.Keys)
	}
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("devstack: %w", err)
	}
	if err := waitPubSubSetUp(); err != nil {
		lis.Close()
		return nil, err
	}

	// 4. Workers and their queues.
	s.Workers = enqueue.Workers{}
	for name := range o.WorkerFuncs {
		s.Workers[name] = s.worker(name, s.URL+"/workers/"+name)
	}
	for name, u := range o.Workers {
		s.Workers[name] = s.worker(name, u)
	}
	for name, accounts := range o.PullPools {
		s.Workers[name] = enqueue.Worker{Pull: true, ServiceAccounts: accounts}
	}
	jobCommands := map[string]string{}
	for name, command := range o.JobWorkers {
		w := s.worker(name, "")
		w.Job = fmt.Sprintf("projects/%s/locations/%s/jobs/%s", s.Project, Location, name)
		s.Workers[name], jobCommands[w.Job] = w, command
	}
	s.Jobs = jobs.NewLocal(jobCommands, o.Log, s.log)
	for name, rate := range o.WorkerRates {
		w, ok := s.Workers[name]
		if !ok || w.Pull {
			lis.Close()
			return nil, fmt.Errorf("devstack: WorkerRates: %q is not a push or job worker of the stack", name)
		}
		w.MaxDispatchesPerSecond = rate
		s.Workers[name] = w
	}
	if err := s.Workers.Validate(true); err != nil {
		lis.Close()
		return nil, fmt.Errorf("devstack: %w", err)
	}
	cfg.Workers = s.Workers
	for _, name := range s.Workers.Names() {
		if s.Workers[name].Pull {
			continue
		}
		w := s.Workers[name]
		for _, q := range w.Queues() {
			if err := s.createQueue(ctx, q, w.QueueRate()); err != nil {
				lis.Close()
				return nil, err
			}
		}
	}

	// 5. Servo's handlers, as in production but for the emulators' clients,
	// the dev identities and the local minimum timer; on one address.
	s.srv, err = server.New(ctx, cfg, server.Options{
		Store: s.Store, PubSub: s.PubSub, PoolPubSub: s.poolPS, Tasks: s.tasks, Keys: s.Keys, Runner: s.Jobs, Logger: s.log,
		Verifiers:     []auth.IdentityVerifier{auth.DevVerifier{Key: s.IdentityKey}},
		ClaimIdentity: pull.DevIdentity(),
		MinTimer:      task.MinTimerLocal, StoreTimeout: o.StoreTimeout,
		// The task page's trace timeline and GET /v1/tasks/{id}/trace,
		// under the access policy (servo dev --access) as every route.
		Dashboard: dashboardConfig(o.Traces), Traces: traceHandler(o.Traces),
	})
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("devstack: %w", err)
	}
	s.Enqueuer, s.Events = s.srv.Enqueuer, s.srv.Events
	routerURL, err := registerSweeper(runCtx, s.id, s.srv.Sweeper, s.rest.invocationDone)
	if err != nil {
		lis.Close()
		return nil, err
	}
	target, _ := url.Parse(routerURL)
	proxy := httputil.NewSingleHostReverseProxy(target)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			http.Error(w, `{"status":"starting"}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"status":"ok"}`)
	})
	for _, kind := range []string{"started", "heartbeat", "completed"} {
		mux.Handle("/v1/tasks/{taskId}/"+kind, s.srv.Callbacks)
	}
	wopts := append([]worker.Option{worker.WithLogger(s.log)}, o.WorkerOptions...)
	for name, fn := range o.WorkerFuncs {
		mux.Handle("/workers/"+name, worker.Handler(fn, wopts...))
	}
	if len(o.PullPools) > 0 {
		mux.Handle(pull.ClaimPath, s.srv.Claim)
	}
	mux.Handle("POST "+sweepPath, proxy)
	mux.Handle(jobs.DispatchPath, s.srv.Jobs)
	mux.Handle("/", s.srv.API) // and the dashboard, at dashboard.Prefix
	if o.Metrics != nil {
		mux.Handle("GET /metrics", o.Metrics)
	}
	s.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.server.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("server stopped", "error", err)
		}
	}()

	// 6. The scheduler ticker and the push subscription that drive the sweeper.
	if !o.NoSweeper {
		s.startTicker(runCtx, tickEvery, o.SweepEvery)
	}
	s.ready.Store(true)
	return s, nil
}

// openStore opens the stack's store with cfg's due shards, or more when
// the database already holds tasks or outbox entries in higher shards,
// sets cfg.DueShards to the store's, and migrates the data to this build's
// layout. A fresh database (of an emulator the stack started: it holds
// nothing) needs neither look: a new emulator's first requests are its
// slowest, and they would hold up the start.
func openStore(ctx context.Context, o Options, cfg *config.Config, fresh bool) (*store.Store, error) {
	open := func(opts ...store.Option) (*store.Store, error) {
		st, err := store.New(ctx, o.Project, opts...)
		if err != nil {
			return nil, fmt.Errorf("devstack: %w", err)
		}
		return st, nil
	}
	// Options.StoreOptions may set the shards and the task cache too
	// (tests). The one store writes every version of a task: it keeps them
	// to skip the callbacks' reads (store/doc.go, "The task cache").
	opts := append(append(server.StoreOptions(*cfg), store.WithStrict(!o.LaxStore),
		store.WithTaskCache(store.DefaultTaskCacheEntries)), o.StoreOptions...)
	st, err := open(opts...)
	if err != nil {
		return nil, err
	}
	inUse := 0
	if !fresh {
		if inUse, err = st.DueShardsInUse(ctx); err != nil {
			st.Close()
			return nil, fmt.Errorf("devstack: %w", err)
		}
	}
	if inUse > st.DueShards() {
		st.Close()
		if st, err = open(append(opts, store.WithDueShards(inUse))...); err != nil {
			return nil, err
		}
	}
	cfg.DueShards = st.DueShards()
	if fresh {
		// Nothing to migrate: server.New records the schema of an empty
		// database (store.CheckSchema).
		return st, nil
	}
	// Data an earlier build left in kept emulators is brought to this
	// build's layout (servo migrate does it for a deployment).
	if _, err := st.Migrate(ctx, store.MigrateOptions{}); err != nil {
		st.Close()
		return nil, fmt.Errorf("devstack: %w", err)
	}
	return st, nil
}

// keyRing returns given, else a new ring.
func keyRing(given *auth.KeyRing) (*auth.KeyRing, error) {
	if given != nil {
		return given, nil
	}
	r, _, err := auth.GenerateKeyRing("local-1")
	return r, err
}

func (s *Stack) worker(name, u string) enqueue.Worker {
	return enqueue.Worker{URL: u, Queue: fmt.Sprintf("projects/%s/locations/%s/queues/%s", s.Project, Location, name)}
}

// startEmulators starts the emulators o does not name (and checks those
// it does), each in the background; the channel of each kind receives nil
// once the emulator answers and its host is set, or why not.
func (s *Stack) startEmulators(ctx context.Context, o Options) map[emulator.Kind]chan error {
	given := map[emulator.Kind]string{emulator.Firestore: o.FirestoreHost, emulator.PubSub: o.PubSubHost}
	ready := map[emulator.Kind]chan error{}
	for k := range given {
		ready[k] = make(chan error, 1)
	}
	if o.ReuseEmulators {
		for k := range given {
			given[k] = cmp.Or(given[k], os.Getenv(k.EnvVar()))
			if given[k] == "" {
				for _, ch := range ready {
					ch <- errors.New("devstack: ReuseEmulators needs FIRESTORE_EMULATOR_HOST and PUBSUB_EMULATOR_HOST")
				}
				return ready
			}
		}
	}
	use := func(k emulator.Kind, host string) {
		os.Setenv(k.EnvVar(), host)
		if k == emulator.Firestore {
			s.FirestoreHost = host
		} else {
			s.PubSubHost = host
		}
	}
	for k, host := range given {
		if host != "" {
			err := checkEmulator(k, host)
			if err == nil {
				use(k, host)
			} else {
				err = fmt.Errorf("devstack: %w", err)
			}
			ready[k] <- err
			continue
		}
		go func() {
			p, err := emulator.Start(ctx, k)
			if err != nil {
				ready[k] <- fmt.Errorf("devstack: %w", err)
				return
			}
			s.emuMu.Lock()
			s.emulators = append(s.emulators, p)
			s.emuMu.Unlock()
			use(k, p.Host)
			ready[k] <- nil
		}()
	}
	return ready
}

// setUpPubSub makes, once wait says the Pub/Sub emulator answers, the
// stack's Pub/Sub client and the events topics, the pull pools' topics
// and client, and the sweep topic's push subscription to the stack's
// address (unless o.NoSweeper).
func (s *Stack) setUpPubSub(ctx context.Context, o Options, wait func() error) error {
	if err := wait(); err != nil {
		return err
	}
	var err error
	if s.PubSub, err = pubsub.NewClient(ctx, o.Project, o.PubSubClientOptions...); err != nil {
		return fmt.Errorf("devstack: pubsub client: %w", err)
	}
	if err := events.EnsureLocal(ctx, s.PubSub, "", ""); err != nil {
		return fmt.Errorf("devstack: pubsub topics: %w", err)
	}
	if err := s.startPools(ctx, o); err != nil {
		return err
	}
	if o.NoSweeper {
		return nil
	}
	_, window := sweepSchedule(o.SweepEvery)
	if err := events.EnsureTopics(ctx, s.PubSub, SweepTopic); err != nil {
		return fmt.Errorf("devstack: sweep topic: %w", err)
	}
	sub := events.SubscriptionName(s.Project, "servo-sweep-push-"+strings.ToLower(s.id[len(task.RunIDPrefix):]))
	_, err = s.PubSub.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: sub, Topic: events.TopicName(s.Project, SweepTopic), AckDeadlineSeconds: ackDeadline(window),
		PushConfig: &pubsubpb.PushConfig{PushEndpoint: s.URL + sweepPath},
	})
	if err != nil {
		return fmt.Errorf("devstack: sweep push subscription: %w", err)
	}
	s.sweepSub = sub
	return nil
}

// checkEmulator checks that host is a HOST:PORT on which something accepts
// connections, so that a wrong --firestore or --pubsub fails at start with
// its name rather than as a timeout on the first request.
func checkEmulator(k emulator.Kind, host string) error {
	if _, port, err := net.SplitHostPort(host); err != nil || port == "" {
		return fmt.Errorf("the %s emulator address %q is not HOST:PORT", k, host)
	}
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return fmt.Errorf("no %s emulator answers at %s: %w", k, host, err)
	}
	return c.Close()
}

// createQueue creates the queue name in the emulator, dispatching rate a
// second (0: the emulator's default).
func (s *Stack) createQueue(ctx context.Context, name string, rate float64) error {
	parent := name[:strings.Index(name, "/queues/")]
	q := &ctpb.Queue{
		Name: name,
		RetryConfig: &ctpb.RetryConfig{MaxAttempts: 20, MinBackoff: durationpb.New(100 * time.Millisecond),
			MaxBackoff: durationpb.New(5 * time.Second), MaxDoublings: 5},
	}
	if rate > 0 {
		q.RateLimits = &ctpb.RateLimits{MaxDispatchesPerSecond: rate}
	}
	_, err := s.tasks.CreateQueue(ctx, &ctpb.CreateQueueRequest{Parent: parent, Queue: q})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("devstack: create queue %s: %w", name, err)
	}
	return nil
}

// maxTickEvery bounds the ticker's period, so that an invocation's window
// stays well under Pub/Sub's longest ack deadline (10 minutes).
const maxTickEvery = 5 * time.Minute

// sweepSchedule returns the ticker's period and each invocation's window
// for a sweep every every: TicksPerWindow passes a tick (fewer past
// maxTickEvery; one when every is longer), the window ending half a period
// before the next tick.
func sweepSchedule(every time.Duration) (tick, window time.Duration) {
	tick = max(every, min(TicksPerWindow*every, maxTickEvery))
	return tick, tick - every/2
}

// ackDeadline is the push subscription's ack deadline for a window: the
// push is answered when the invocation ends, so the deadline outlasts the
// window (or Pub/Sub would push the tick again while it is handled).
func ackDeadline(window time.Duration) int32 {
	return int32(min(600, 60+int(window.Seconds())))
}

// startTicker publishes ticks to the sweep topic, whose push subscription
// (setUpPubSub) calls this stack's address, as Cloud Scheduler does once a
// minute in production: one at start, then whenever a pass has work
// (runResting), every period at most while the sweeper is busy. It
// deletes the subscription when runCtx ends.
func (s *Stack) startTicker(runCtx context.Context, every, retry time.Duration) {
	subName := s.sweepSub
	s.sweepSub = "" // the ticker deletes it
	pubr := s.PubSub.Publisher(SweepTopic)
	// A tick that could not be published (Pub/Sub down) is tried again
	// every retry rather than a whole period later, so that the sweeper
	// comes back as soon as Pub/Sub does. From the tick's publish: a
	// publish held up by a frozen Pub/Sub is not followed at once by
	// another tick.
	tick := func(name string) bool {
		res := pubr.Publish(runCtx, &pubsub.Message{Data: []byte(`{"tick":true}`), Attributes: map[string]string{stackAttr: s.id, tickAttr: name}})
		if _, err := res.Get(runCtx); err != nil {
			if runCtx.Err() == nil {
				s.log.Warn("sweep tick not published", "error", err)
			}
			return false
		}
		return true
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			pubr.Stop()
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = s.PubSub.SubscriptionAdminClient.DeleteSubscription(dctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: subName})
		}()
		// Ticks when a pass has work, not every period (rest.go).
		s.runResting(runCtx, s.srv.Sweeper, tick, every, retry)
	}()
}

// Ready reports whether the stack serves.
func (s *Stack) Ready() bool { return s.ready.Load() }

// API is the stack's control API handler with its dashboard (the
// handler of "/"): its Routes method lists every pattern it serves.
func (s *Stack) API() http.Handler { return s.srv.API }

// Exports are the shell lines a second shell needs.
func (s *Stack) Exports() []string {
	env := map[string]string{
		emulator.Firestore.EnvVar(): s.FirestoreHost,
		emulator.PubSub.EnvVar():    s.PubSubHost,
		cloudtasks.EnvVar:           s.CloudTasksHost,
		"SERVO_API":                 s.URL,
		"SERVO_PROJECT":             s.Project,
		auth.DevKeyEnv:              base64.RawURLEncoding.EncodeToString(s.IdentityKey),
	}
	var out []string
	for k, v := range env {
		out = append(out, "export "+k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Close stops the stack and everything it started.
func (s *Stack) Close() error {
	s.closeOnce.Do(func() {
		s.ready.Store(false)
		unregisterSweeper(s.id)
		s.cancel()
		if s.Jobs != nil {
			_ = s.Jobs.Close()
		}
		if s.server != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = s.server.Shutdown(ctx)
			cancel()
		}
		s.wg.Wait()
		if s.srv != nil {
			s.srv.Close()
		}
		if s.PubSub != nil {
			if s.sweepSub != "" { // made, but no ticker started
				dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = s.PubSub.SubscriptionAdminClient.DeleteSubscription(dctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: s.sweepSub})
				cancel()
			}
			s.PubSub.Close()
		}
		if s.poolPS != nil {
			s.poolPS.Close()
		}
		if s.Store != nil {
			s.Store.Close()
		}
		if s.tasks != nil {
			s.tasks.Close()
		}
		if s.tasksSrv != nil {
			s.tasksSrv.Stop()
		}
		s.emuMu.Lock()
		defer s.emuMu.Unlock()
		for _, p := range s.emulators {
			_ = p.Stop()
		}
	})
	return nil
}

// EmulatorGroups returns the process group of each emulator the stack
// started itself (none for those it was given), by kind: what `servo dev
// freeze` signals.
func (s *Stack) EmulatorGroups() map[emulator.Kind]int {
	s.emuMu.Lock()
	defer s.emuMu.Unlock()
	g := map[emulator.Kind]int{}
	for _, p := range s.emulators {
		g[p.Kind] = p.Group()
	}
	return g
}

// dashboardConfig gives the dashboard the recorder, if any (a nil
// *telemetry.Recorder is not a nil Traces).
func dashboardConfig(r *telemetry.Recorder) dashboard.Config {
	if r == nil {
		return dashboard.Config{}
	}
	return dashboard.Config{Traces: r}
}

// traceHandler serves a task's recorded spans; nil without a recorder.
func traceHandler(r *telemetry.Recorder) http.Handler {
	if r == nil {
		return nil
	}
	return r.Handler()
}
