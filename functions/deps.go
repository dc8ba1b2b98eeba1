// Package functions registers Servo's Cloud Functions with
// functions-framework-go: ServoAPI (HTTP, the control API), ServoCallbacks
// (HTTP, worker callbacks), ServoSweeper (CloudEvent from Pub/Sub) and
// ServoClaim (HTTP, pull-pool claims).
// ServoJobs (HTTP, the jobs dispatch endpoint, called by Cloud Tasks).
// It is thin wiring: each function builds its dependencies from the
// environment on its first request and serves the same handler the local
// stack serves. A build that fails is retried by a later request once a
// backoff has passed (1 s, doubling up to 30 s); meanwhile requests are
// answered at once with 503 unavailable and a Retry-After, and concurrent
// requests share one build in flight.
//
// Environment:
//
//	SERVO_PROJECT              Google Cloud project (default: GOOGLE_CLOUD_PROJECT)
//	SERVO_FIRESTORE_DATABASE   Firestore database id (default "(default)")
//	SERVO_TOKEN_KEYS           signing key ring JSON (or SERVO_TOKEN_KEYS_FILE, re-read)
//	SERVO_TOKEN_KEYS_SECRET    projects/P/secrets/S: re-read the ring from its latest
//	                           version on an unknown kid and every 5 min (token.OpenKeyRing)
//	SERVO_CALLBACK_BASE_URL    base URL of ServoCallbacks, put in envelopes
//	SERVO_WORKERS              worker configuration JSON (see package enqueue)
//	SERVO_EVENTS_TOPIC         transition events topic (default servo-task-events)
//	SERVO_DEAD_LETTER_TOPIC    dead-letter topic (default servo-dead-letter)
//	SERVO_SWEEP_EVERY          sweep cadence within one invocation (default 15s)
//	SERVO_START_TIMEOUT        default start timeout for new tasks (default 10m)
//	SERVO_DUE_SHARDS           due-index shards (default 16; may grow, never shrink)
//	SERVO_MAX_BODY_BYTES       request body cap (default 1 MiB)
//	SERVO_CLAIM_AUDIENCE       ServoClaim: the audience of callers' ID tokens (its URL)
//	SERVO_JOBS_DISPATCH_URL    URL of ServoJobs, which job workers' Cloud Tasks call (required with a job worker)
//	SERVO_JOBS_CONTAINER       the jobs' container the per-execution overrides apply to (default: the only one)
//	SERVO_ACCESS               control API access policy JSON (or SERVO_ACCESS_FILE; see package access; unset: open, IAM only)
//	SERVO_API_AUDIENCE         the audience the callers' ID tokens must have (the ServoAPI URL; unset: not checked)
//	SERVO_QUOTAS               per-tenant and per-worker limits JSON (or SERVO_QUOTAS_FILE; see package quota)
package functions

import (
	"context"

	"cloud.google.com/go/pubsub/v2"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/servo-dev/servo/emulator/cloudtasks"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/jobs"
	"github.com/servo-dev/servo/internal/keysecret"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/pull"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/token"
)

// Deps are the dependencies shared by the functions of one instance.
type Deps struct {
	Project  string
	Store    *store.Store
	Keys     *token.KeyRing
	Enqueuer *enqueue.Enqueuer
	// Publisher delivers transition events after each commit and re-drives
	// the outbox from the sweeper.
	Publisher *events.Publisher
	Logger    *slog.Logger
	// Pools is the pull pools' transport (package pull).
	Pools *pull.Transport
	// Jobs runs and cancels Cloud Run Job executions (Admin API); nil when
	// no worker is a job worker.
	Jobs *jobs.CloudRun
}

// depsInit builds the instance's Deps. A failed build (a Secret Manager or
// Firestore hiccup, a bad variable) is retried by a later request after a
// backoff (1 s doubling to 30 s), not kept for the instance's life.
var depsInit = newLazy(loadDeps)

// dependencies returns the instance's Deps, built from the environment on
// first use.
func dependencies(ctx context.Context) (*Deps, error) { return depsInit.get(ctx) }

// Env returns the variable's value or def.
func Env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// EnvDuration returns the variable parsed as a duration, or def.
func EnvDuration(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}

// EnvInt returns the variable parsed as an integer, or def.
func EnvInt(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return n, nil
}

func loadDeps(ctx context.Context) (_ *Deps, err error) {
	// What a failed build opened is closed: the next build opens afresh.
	var closers []func() error
	defer func() {
		if err != nil {
			for _, c := range closers {
				_ = c()
			}
		}
	}()
	log := logs.Default()
	began := time.Now()
	project := Env("SERVO_PROJECT", os.Getenv("GOOGLE_CLOUD_PROJECT"))
	if project == "" {
		return nil, fmt.Errorf("functions: set SERVO_PROJECT (or GOOGLE_CLOUD_PROJECT)")
	}
	setupTelemetry(ctx, project)
	// The ring from SERVO_TOKEN_KEYS (no read); re-read from the secret
	// named by SERVO_TOKEN_KEYS_SECRET on a kid miss and every 5 minutes.
	keys, err := token.OpenKeyRing(ctx, token.KeyConfig{JSON: []byte(os.Getenv(token.EnvKeys)), File: os.Getenv(token.EnvKeysFile), Secret: os.Getenv(token.EnvKeysSecret)},
		func(name string) token.Source { return keysecret.Source(name) })
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	workers := enqueue.Workers{}
	if v := os.Getenv(enqueue.WorkersEnv); v != "" {
		workers, err = enqueue.ParseWorkers([]byte(v), false)
	}
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	shards, err := strconv.Atoi(Env("SERVO_DUE_SHARDS", strconv.Itoa(store.DefaultDueShards)))
	if err != nil || shards < 1 {
		return nil, fmt.Errorf("functions: SERVO_DUE_SHARDS must be a whole number ≥ 1 (got %q)", os.Getenv("SERVO_DUE_SHARDS"))
	}
	quotas, err := quota.Load(os.Getenv, "SERVO_QUOTAS", "SERVO_QUOTAS_FILE")
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	st, err := store.New(ctx, project, store.WithDatabase(Env("SERVO_FIRESTORE_DATABASE", "(default)")), store.WithDueShards(shards), store.WithQuotas(quotas))
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	closers = append(closers, st.Close)
	tasks, err := cloudtasks.NewClient(ctx)
	if err != nil {
		return nil, fmt.Errorf("functions: cloud tasks client: %w", err)
	}
	closers = append(closers, tasks.Close)
	callbackBase := os.Getenv("SERVO_CALLBACK_BASE_URL")
	if callbackBase == "" {
		return nil, fmt.Errorf("functions: set SERVO_CALLBACK_BASE_URL to the ServoCallbacks URL")
	}
	var runner *jobs.CloudRun
	if hasJobWorker(workers) {
		if runner, err = jobs.NewCloudRun(ctx, os.Getenv("SERVO_JOBS_CONTAINER")); err != nil {
			return nil, fmt.Errorf("functions: %w", err)
		}
		closers = append(closers, runner.Close)
	}
	enqCfg := enqueue.Config{Store: st, Tasks: tasks, Keys: keys, Workers: workers, CallbackBaseURL: callbackBase, Logger: log,
		JobDispatchURL: os.Getenv("SERVO_JOBS_DISPATCH_URL")}
	if runner != nil {
		enqCfg.Executions = runner
	}
	enq, err := enqueue.New(enqCfg)
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	ps, err := pubsub.NewClient(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("functions: pubsub client: %w", err)
	}
	closers = append(closers, ps.Close)
	pub, err := events.New(ctx, events.Config{
		Store: st, Client: ps, Logger: log,
		EventsTopic:     Env("SERVO_EVENTS_TOPIC", events.DefaultEventsTopic),
		DeadLetterTopic: Env("SERVO_DEAD_LETTER_TOPIC", events.DefaultDeadLetterTopic),
	})
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	st.OnCommit(pub.Hook())
	pools := pull.NewTransport(ps)
	enq = enq.WithPools(pools)
	// A cold start's own cost, in the instance's logs (docs/operations.md,
	// "Sizing and cold starts").
	log.InfoContext(ctx, "dependencies built", "ms", float64(time.Since(began).Microseconds())/1000)
	return &Deps{Project: project, Store: st, Keys: keys, Enqueuer: enq, Publisher: pub, Logger: log, Pools: pools, Jobs: runner}, nil
}

func hasJobWorker(ws enqueue.Workers) bool {
	for _, w := range ws {
		if w.Job != "" {
			return true
		}
	}
	return false
}
