// Package server builds Servo's handlers, once for every way Servo runs:
// the control API (with the web dashboard), the worker callbacks, the
// sweeper, the pull pools' claim endpoint and the jobs dispatch endpoint,
// from a config.Config and the clients the caller has made. Package
// functions calls New with the configuration of the environment and
// Google's clients; package devstack with a configuration it builds and
// the emulators' clients.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/pubsub/v2"

	apitypes "github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/config"
	"github.com/servo-dev/servo/internal/dashboard"
	"github.com/servo-dev/servo/internal/dispatcher"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/jobs"
	"github.com/servo-dev/servo/internal/pull"
	"github.com/servo-dev/servo/internal/service"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/telemetry"
	"github.com/servo-dev/servo/internal/zombie"
)

// Options are what New does not make from the configuration: the clients,
// the key ring, and where the local stack differs from production. The
// zero value of each optional field is production's choice.
type Options struct {
	// Store is the Firestore store, opened with StoreOptions. Required.
	Store *store.Store
	// PubSub is the Pub/Sub client of the events. Required.
	PubSub *pubsub.Client
	// PoolPubSub is the pull pools' Pub/Sub client; default PubSub.
	PoolPubSub *pubsub.Client
	// Tasks is the Cloud Tasks client. Required.
	Tasks *cloudtasks.Client
	// Keys sign and verify task tokens. Required.
	Keys *auth.KeyRing
	// Runner runs job workers' attempts (jobs.CloudRun, jobs.Local); nil
	// runs none: the jobs dispatch endpoint refuses every dispatch.
	Runner jobs.Runner
	// Logger defaults to logs.Default().
	Logger *slog.Logger
	// Now is the handlers' clock; default time.Now.
	Now func() time.Time

	// Verifiers check the control API's callers' bearer tokens; default
	// Google ID tokens for Config.APIAudiences (none when those are
	// unset). IAP's signed header is read only when Config.IAPAudience is
	// set, and only by auth.IAPVerifier.
	Verifiers []auth.IdentityVerifier
	// ClaimIdentity names who claims from a pull pool; default a Google
	// ID token of audience Config.ClaimAudience, and no claim endpoint
	// when that is empty.
	ClaimIdentity pull.Identity
	// MinTimer is the shortest timer a task may ask for; default
	// task.MinTimerProduction.
	MinTimer time.Duration
	// StoreTimeout bounds the store work of one API request or callback
	// (then 503); default the handlers' own.
	StoreTimeout time.Duration
	// Dashboard configures the web dashboard (Traces, CloudTraceProject);
	// New sets its Store, API, Logger, Access and Verifiers: it acts as
	// its caller, under the API's policy.
	Dashboard dashboard.Config
	// Traces, when set, serves GET /v1/tasks/{id}/trace behind the API's
	// checks (servo dev's span recorder).
	Traces http.Handler
}

// Server is Servo's handlers and the parts they share.
type Server struct {
	// Config is the configuration the server was built with.
	Config config.Config
	// Enqueuer hands attempts to Cloud Tasks, pull pools and jobs.
	Enqueuer *enqueue.Enqueuer
	// Events publishes transition events after each commit (the store's
	// commit hook) and re-drives the outbox (the sweeper); Close stops it.
	Events *events.Publisher
	// Pools is the pull pools' transport.
	Pools *pull.Transport

	// API is the control API, with the dashboard under dashboard.Prefix.
	API http.Handler
	// Callbacks serves the workers' started, heartbeat and completed.
	Callbacks http.Handler
	// Sweeper is the sweeper, driven by scheduler ticks.
	Sweeper *zombie.Sweeper
	// Claim serves pull.ClaimPath; nil when there is no ClaimIdentity.
	Claim http.Handler
	// Jobs is the jobs dispatch endpoint, which job workers' Cloud Tasks
	// call (served at jobs.DispatchPath locally).
	Jobs http.Handler

	// closers close what Open opened (Close runs them).
	closers []func() error
}

// StoreOptions are the store options of cfg: its database, due shards,
// retention and quotas.
func StoreOptions(cfg config.Config) []store.Option {
	opts := []store.Option{store.WithDueShards(cfg.DueShards), store.WithRetention(time.Duration(cfg.RetentionDays) * 24 * time.Hour),
		store.WithRunDocumentEvery(cfg.RunDocumentEvery)}
	if cfg.FirestoreDatabase != "" {
		opts = append(opts, store.WithDatabase(cfg.FirestoreDatabase))
	}
	if cfg.Quotas != nil {
		opts = append(opts, store.WithQuotas(cfg.Quotas))
	}
	return opts
}

// ErrDueShardsShrunk: the deployment queries fewer due shards than the
// database's tasks use; New refuses to start.
var ErrDueShardsShrunk = errors.New("due shards lowered")

// startCheckTimeout bounds New's reads of the store (schema, due shards,
// pulse).
const startCheckTimeout = 3 * time.Second

// New builds the handlers. It starts the events publisher and registers
// its hook on o.Store; Close stops it.

func New(ctx context.Context, cfg config.Config, o Options) (*Server, error) {
	switch {
	case o.Store == nil:
		return nil, service.Missing("server", "Options.Store")
	case o.PubSub == nil:
		return nil, service.Missing("server", "Options.PubSub")
	case o.Tasks == nil:
		return nil, service.Missing("server", "Options.Tasks")
	case o.Keys == nil:
		return nil, service.Missing("server", "Options.Keys")
	case cfg.CallbackBaseURL == nil:
		return nil, service.Missing("server", "Config.CallbackBaseURL")
	}
	log := service.Logger(o.Logger)
	poolPS := o.PoolPubSub
	if poolPS == nil {
		poolPS = o.PubSub
	}
	// A database migrated by a newer build, or holding an older layout's
	// data, is one this build would misread: refuse to start, naming what
	// to do (servo migrate for an older one). (Unreadable: go on; every
	// request will say so.)
	// Both checks below are bounded: a store that does not answer at start
	// must not keep the process from serving (every request says so).
	sctx, cancelChecks := context.WithTimeout(ctx, startCheckTimeout)
	defer cancelChecks()
	switch sc, err := o.Store.CheckSchema(sctx); {
	case errors.Is(err, store.ErrSchemaTooNew), errors.Is(err, store.ErrSchemaTooOld):
		log.ErrorContext(ctx, "refusing to start: "+err.Error(), "schema", sc.Version, "want", store.SchemaVersion)
		return nil, fmt.Errorf("server: %w", err)
	case err != nil:
		log.WarnContext(ctx, "could not read the database's schema version", "error", err)
	}
	// Due shards may grow between deployments, never shrink: a task in a
	// shard no longer queried would never be swept, re-driven or listed.
	// (2 reads: the highest shard of the tasks and of the outbox.)
	if inUse, err := o.Store.DueShardsInUse(sctx); err == nil && inUse > o.Store.DueShards() {
		err := fmt.Errorf("%w: the database holds tasks or outbox entries in due shard %d, but this deployment queries %d (%s, Terraform's due_shards): "+
			"they would never be swept, re-driven or listed; set it back to at least %d, or move the data into %d shards: servo migrate --project %s --database %s --due-shards %d (this function starts once it is done)",
			ErrDueShardsShrunk, inUse-1, o.Store.DueShards(), config.EnvDueShards, inUse, o.Store.DueShards(), cfg.Project, cmp.Or(cfg.FirestoreDatabase, "(default)"), o.Store.DueShards())
		log.ErrorContext(ctx, "refusing to start: "+err.Error())
		return nil, fmt.Errorf("server: %w", err)
	}
	// Was Servo down before this process started (the sweeper's passes
	// stopped)? Then its first callbacks must not expire leases for that
	// time (store.CheckPulse; the sweeper's next pass records it too).
	cadence := cfg.SweepEvery
	if cfg.SweepWindow <= 0 {
		cadence = max(cadence, time.Minute) // a pass per Scheduler tick
	}
	if gap, err := o.Store.CheckPulse(sctx, time.Now(), cadence); err == nil && gap != nil {
		log.WarnContext(ctx, "Servo was not sweeping before this start; leases are credited with the gap", "from", gap.From, "to", gap.To)
	}
	s := &Server{Config: cfg, Pools: pull.NewTransport(poolPS, cfg.NamePrefix)}

	ecfg := enqueue.Config{
		Store: o.Store, Tasks: o.Tasks, Keys: o.Keys, Workers: cfg.Workers, CallbackBaseURL: cfg.CallbackBaseURL.String(),
		Logger: log, Now: o.Now, Pools: s.Pools,
	}
	if cfg.JobsDispatchURL != nil {
		ecfg.JobDispatchURL = cfg.JobsDispatchURL.String()
	}
	if o.Runner != nil {
		ecfg.Executions = o.Runner
	}
	var err error
	if s.Enqueuer, err = enqueue.New(ecfg); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}

	if s.Events, err = events.New(ctx, events.Config{
		Store: o.Store, Client: o.PubSub, Logger: log, Now: o.Now,
		EventsTopic: cfg.EventsTopic, DeadLetterTopic: cfg.DeadLetterTopic,
	}); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	o.Store.OnCommit(s.Events.Hook())

	callers, problems := identityOf(cfg, o.Verifiers)
	for _, p := range problems {
		log.Error("identity misconfigured: " + p)
	}
	dcfg := dispatcher.Config{
		Store: o.Store, Enqueuer: s.Enqueuer, Logger: log, Now: o.Now, Project: cfg.Project,
		MinTimer: o.MinTimer, DefaultStartTimeout: cfg.StartTimeout, MaxBodyBytes: cfg.MaxBodyBytes, SweepEvery: cadence, RequestTimeout: o.StoreTimeout,
		Access: cfg.Access, Identity: callers, IdentityProblems: problems, Traces: o.Traces,
		Events: func(ctx context.Context, opts events.StreamOptions, ready func(), each func(apitypes.Event) error) error {
			opts.Topic = cfg.EventsTopic
			return events.Stream(ctx, o.PubSub, cfg.Project, opts, ready, each)
		},
	}
	schedules, err := dispatcher.NewScheduler(dcfg)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	if s.Sweeper, err = zombie.New(zombie.Config{
		Store: o.Store, Enqueuer: s.Enqueuer, Holder: s.Enqueuer, Redriver: s.Events, Recorder: o.Store, Cleaner: s.Events, Schedules: schedules, Logger: log, Now: o.Now,
		Every: cfg.SweepEvery, Window: cfg.SweepWindow, KeepWindow: !cfg.SweepEarlyEnd, MaxRedrives: cfg.MaxRedrives,
	}); err != nil {
		s.Close()
		return nil, fmt.Errorf("server: %w", err)
	}

	api, err := dispatcher.NewHandler(dcfg)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	d := o.Dashboard
	d.Store, d.Logger, d.Access, d.Identity = o.Store, log, cfg.Access, callers
	mounted, err := dashboard.Mount(api, d)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	s.API = telemetry.APIMetrics(mounted)

	if s.Callbacks, err = callbacks.NewHandler(callbacks.Config{
		Store: o.Store, Keys: o.Keys, Enqueuer: s.Enqueuer, Logger: log, Now: o.Now, Project: cfg.Project,
		MaxBodyBytes: cfg.MaxBodyBytes, StoreTimeout: o.StoreTimeout, LogHeartbeats: cfg.LogHeartbeats, LogStarted: cfg.LogStarted,
	}); err != nil {
		s.Close()
		return nil, fmt.Errorf("server: %w", err)
	}

	identity := o.ClaimIdentity
	if identity == nil && cfg.ClaimAudience != "" {
		identity = pull.IDToken(cfg.ClaimAudience, nil)
	}
	if identity != nil {
		claim, err := pull.NewHandler(pull.Config{
			Store: o.Store, Enqueuer: s.Enqueuer, Transport: s.Pools, Identity: identity, Logger: log, Now: o.Now, Project: cfg.Project,
		})
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("server: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle(pull.ClaimPath, claim)
		s.Claim = mux
	}

	runner := o.Runner
	if runner == nil {
		// No job worker: every dispatch is refused (400) before a runner
		// is asked; one that knows no job stands in.
		runner = jobs.NewLocal(nil, nil, log)
	}
	if s.Jobs, err = jobs.NewHandler(jobs.Config{
		Store: o.Store, Keys: o.Keys, Workers: cfg.Workers, Runner: runner, Logger: log, Now: o.Now, Project: cfg.Project,
	}); err != nil {
		s.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	return s, nil
}

// Close stops the events publisher, delivering what it holds first, then
// closes the clients Open opened (none for New's).
func (s *Server) Close() {
	if s.Events != nil {
		s.Events.Close()
	}
	_ = s.closeOpened()
}

// identityOf is how the API and the dashboard identify callers: the given
// bearer verifiers, or in production Google ID tokens for
// cfg.APIAudiences; IAP's signed header only when cfg.IAPAudience is set.
// problems name what an operator must fix (GET /v1/health reports them).
func identityOf(cfg config.Config, bearer []auth.IdentityVerifier) (auth.Verifiers, []string) {
	var problems []string
	if bearer == nil {
		// Production verifies Google ID tokens only, and only for the
		// API's own audiences: a dev identity token is never accepted,
		// nor a Google ID token minted for another service.
		if len(cfg.APIAudiences) > 0 {
			bearer = []auth.IdentityVerifier{auth.GoogleVerifier{Audiences: cfg.APIAudiences}}
		} else {
			problems = append(problems, config.EnvAPIAudience+" is unset: the API accepts no Google ID token "+
				"(under an access policy every caller gets 401; under the open policy callers are anonymous). "+
				"Set it to the API's URLs (Terraform does)")
		}
	}
	v := auth.Verifiers{Bearer: bearer}
	if cfg.IAPAudience != "" {
		// Behind IAP: its signed header names the caller.
		v.IAP = &auth.IAPVerifier{Audience: cfg.IAPAudience}
	}
	return v, problems
}
