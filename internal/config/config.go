// Package config is the server's configuration: one typed Config, its
// defaults (Default) and FromEnv, the only place the server reads its
// environment variables. docs/configuration.md documents every variable
// in one table; a test keeps the table and FromEnv in step.
//
// The local stack (package devstack) builds a Config itself, from
// Default, rather than from the environment.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/failpoint"
	"github.com/servo-dev/servo/internal/pull"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/telemetry"
	"github.com/servo-dev/servo/internal/zombie"
)

// The environment variables FromEnv reads (docs/configuration.md).
const (
	EnvProject            = "SERVO_PROJECT"
	EnvGoogleCloudProject = "GOOGLE_CLOUD_PROJECT"
	EnvFirestoreDatabase  = "SERVO_FIRESTORE_DATABASE"
	EnvTokenKeys          = auth.EnvKeys
	EnvTokenKeysFile      = auth.EnvKeysFile
	EnvTokenKeysSecret    = auth.EnvKeysSecret
	EnvCallbackBaseURL    = "SERVO_CALLBACK_BASE_URL"
	EnvWorkers            = enqueue.WorkersEnv
	EnvJobsDispatchURL    = "SERVO_JOBS_DISPATCH_URL"
	EnvJobsContainer      = "SERVO_JOBS_CONTAINER"
	EnvEventsTopic        = "SERVO_EVENTS_TOPIC"
	EnvDeadLetterTopic    = "SERVO_DEAD_LETTER_TOPIC"
	EnvSweepEvery         = "SERVO_SWEEP_EVERY"
	EnvSweepWindow        = "SERVO_SWEEP_WINDOW"
	EnvSweepEarlyEnd      = "SERVO_SWEEP_EARLY_END"
	EnvTraceSampleRatio   = "SERVO_TRACE_SAMPLE_RATIO"
	EnvTraceSlow          = "SERVO_TRACE_SLOW"
	EnvLogHeartbeats      = "SERVO_LOG_HEARTBEATS"
	EnvLogStarted         = "SERVO_LOG_STARTED"
	EnvMaxRedrives        = "SERVO_MAX_REDRIVES"
	EnvStartTimeout       = "SERVO_START_TIMEOUT"
	EnvStoreTimeout       = "SERVO_STORE_TIMEOUT"
	EnvNamePrefix         = "SERVO_NAME_PREFIX"
	EnvDueShards          = "SERVO_DUE_SHARDS"
	EnvMaxBodyBytes       = "SERVO_MAX_BODY_BYTES"
	EnvRetentionDays      = "SERVO_RETENTION_DAYS"
	EnvRunDocumentEvery   = "SERVO_RUN_DOCUMENT_EVERY"
	EnvClaimAudience      = "SERVO_CLAIM_AUDIENCE"
	EnvAccess             = "SERVO_ACCESS"
	EnvAccessFile         = "SERVO_ACCESS_FILE"
	EnvAPIAudience        = "SERVO_API_AUDIENCE"
	EnvIAPAudience        = "SERVO_IAP_AUDIENCE"
	EnvQuotas             = "SERVO_QUOTAS"
	EnvQuotasFile         = "SERVO_QUOTAS_FILE"
	EnvService            = "K_SERVICE"
	EnvCloudTasksEmulator = "CLOUD_TASKS_EMULATOR_HOST"
	// EnvFailpoints arms crash failpoints (package failpoint): for the
	// fault harness only, never in production.
	EnvFailpoints = "SERVO_FAILPOINTS"
)

// variables are the variables FromEnv reads, every one of them, whatever
// their values: docs/configuration.md's table lists exactly these.
var variables = []string{
	EnvProject, EnvGoogleCloudProject, EnvFirestoreDatabase,
	EnvTokenKeys, EnvTokenKeysFile, EnvTokenKeysSecret,
	EnvCallbackBaseURL, EnvWorkers, EnvJobsDispatchURL, EnvJobsContainer,
	EnvEventsTopic, EnvDeadLetterTopic,
	EnvSweepEvery, EnvSweepWindow, EnvSweepEarlyEnd, EnvTraceSampleRatio, EnvTraceSlow, EnvLogHeartbeats, EnvLogStarted, EnvMaxRedrives, EnvStartTimeout, EnvStoreTimeout, EnvDueShards, EnvNamePrefix,
	EnvMaxBodyBytes, EnvRetentionDays, EnvRunDocumentEvery, EnvClaimAudience,
	EnvAccess, EnvAccessFile, EnvAPIAudience, EnvIAPAudience, EnvQuotas, EnvQuotasFile,
	EnvService, EnvCloudTasksEmulator, EnvFailpoints,
}

// DefaultStoreTimeout is the default of Config.StoreTimeout, the
// callbacks' own default (callbacks.DefaultStoreTimeout).
const DefaultStoreTimeout = 20 * time.Second

// DefaultMaxBodyBytes is the default request body cap, the handlers' own
// (dispatcher.DefaultMaxBodyBytes, callbacks.DefaultMaxBodyBytes).
const DefaultMaxBodyBytes = 1 << 20

// Config is the server's configuration. Each field names the variable
// FromEnv reads it from; Default has the defaults.
type Config struct {
	// Project is the Google Cloud project (SERVO_PROJECT, else
	// GOOGLE_CLOUD_PROJECT). Required.
	Project string
	// FirestoreDatabase is the Firestore database id
	// (SERVO_FIRESTORE_DATABASE).
	FirestoreDatabase string
	// TokenKeys is where the task token key ring comes from
	// (SERVO_TOKEN_KEYS, SERVO_TOKEN_KEYS_FILE, SERVO_TOKEN_KEYS_SECRET).
	TokenKeys auth.KeyConfig
	// CallbackBaseURL is the callbacks' base URL put in envelopes
	// (SERVO_CALLBACK_BASE_URL). Required.
	CallbackBaseURL *url.URL
	// Workers are the workers by name (SERVO_WORKERS), validated.
	Workers enqueue.Workers
	// JobsDispatchURL is the jobs dispatch endpoint, which job workers'
	// Cloud Tasks call (SERVO_JOBS_DISPATCH_URL); required with a job
	// worker.
	JobsDispatchURL *url.URL
	// JobsContainer is the jobs' container the per-execution overrides
	// apply to (SERVO_JOBS_CONTAINER); empty: the job's only one.
	JobsContainer string
	// EventsTopic and DeadLetterTopic are the Pub/Sub topics of transition
	// events and dead letters (SERVO_EVENTS_TOPIC, SERVO_DEAD_LETTER_TOPIC).
	EventsTopic, DeadLetterTopic string
	// SweepEvery is the cadence of sweeps within one sweeper invocation
	// (SERVO_SWEEP_EVERY); SweepWindow how long one invocation sweeps, 0
	// one pass (SERVO_SWEEP_WINDOW).
	SweepEvery, SweepWindow time.Duration
	// SweepEarlyEnd ends a sweeper window after a pass that found nothing
	// due before its end (SERVO_SWEEP_EARLY_END; default true).
	SweepEarlyEnd bool
	// TraceSampling samples the exported traces (SERVO_TRACE_SAMPLE_RATIO,
	// default telemetry.DefaultSampleRatio; SERVO_TRACE_SLOW, default
	// telemetry.DefaultSlow): errors and slow requests are always kept.
	TraceSampling telemetry.Sampling
	// LogHeartbeats logs every accepted heartbeat at INFO
	// (SERVO_LOG_HEARTBEATS; default false: at DEBUG, counted in metrics).
	LogHeartbeats bool
	// LogStarted logs every accepted started callback at INFO
	// (SERVO_LOG_STARTED; default false: at DEBUG, counted in metrics).
	LogStarted bool
	// MaxRedrives bounds the re-drives of one attempt before it fails with
	// DISPATCH_TIMEOUT (SERVO_MAX_REDRIVES).
	MaxRedrives int
	// StartTimeout is the default start timeout of new tasks
	// (SERVO_START_TIMEOUT).
	StartTimeout time.Duration
	// NamePrefix is the deployment's name prefix (SERVO_NAME_PREFIX,
	// Terraform's name_prefix): its pull pools' topics and subscriptions
	// are NamePrefix-pool-NAME (pull.ResourceID).
	NamePrefix string
	// StoreTimeout bounds the store work of one callback or API request,
	// from its receipt to its answer (SERVO_STORE_TIMEOUT; default
	// DefaultStoreTimeout): past it, the answer is 503 with Retry-After.
	StoreTimeout time.Duration
	// DueShards is the number of due shards; it may grow, never shrink
	// (SERVO_DUE_SHARDS).
	DueShards int
	// MaxBodyBytes caps request bodies (SERVO_MAX_BODY_BYTES).
	MaxBodyBytes int64
	// RetentionDays is how many days ended tasks, their attempts and runs
	// are kept before Firestore's TTL deletes them; at least
	// quota.MinRetentionDays, the idempotency window; a tenant's
	// retentionDays in Quotas overrides it (SERVO_RETENTION_DAYS).
	RetentionDays int
	// RunDocumentEvery is how often one process rewrites a run's document
	// while the run's tasks keep being submitted (SERVO_RUN_DOCUMENT_EVERY;
	// default store.RunDocumentEvery; Terraform sets
	// store.RunDocumentEveryFor the api's max_instances).
	RunDocumentEvery time.Duration
	// ClaimAudience is the audience of pull workers' ID tokens, ServoClaim's
	// URL (SERVO_CLAIM_AUDIENCE).
	ClaimAudience string
	// Access is the control API's access policy, nil open
	// (SERVO_ACCESS, or the file SERVO_ACCESS_FILE).
	Access *auth.Policy
	// APIAudiences are the audiences the API's callers' Google ID tokens
	// may have: the API's URLs (SERVO_API_AUDIENCE, comma-separated;
	// Terraform sets the function's two). Empty: no Google ID token is
	// accepted (an open policy serves callers as anonymous; servo doctor
	// reports it).
	APIAudiences []string
	// IAPAudience, when set, is the audience of IAP's signed header
	// (x-goog-iap-jwt-assertion): the API and the dashboard deployed
	// behind IAP accept it as the caller's identity (SERVO_IAP_AUDIENCE).
	IAPAudience string
	// Quotas are the per-tenant and per-worker limits (SERVO_QUOTAS, or
	// the file SERVO_QUOTAS_FILE); never nil from FromEnv.
	Quotas *quota.Policy
	// ServiceName names the service in telemetry (K_SERVICE, which Cloud
	// Run sets).
	ServiceName string
	// CloudTasksEmulatorHost, when set, points the Cloud Tasks client at
	// an emulator, HOST:PORT, without credentials
	// (CLOUD_TASKS_EMULATOR_HOST), as FIRESTORE_EMULATOR_HOST and
	// PUBSUB_EMULATOR_HOST do for their clients.
	CloudTasksEmulatorHost string
}

// Default returns the defaults: the configuration of an empty environment,
// less what is required.
func Default() Config {
	return Config{
		FirestoreDatabase: "(default)",
		Workers:           enqueue.Workers{},
		EventsTopic:       events.DefaultEventsTopic,
		DeadLetterTopic:   events.DefaultDeadLetterTopic,
		SweepEvery:        zombie.DefaultEvery,
		SweepWindow:       zombie.DefaultWindow,
		SweepEarlyEnd:     true,
		TraceSampling:     telemetry.Sampling{Ratio: telemetry.DefaultSampleRatio, Slow: telemetry.DefaultSlow},
		MaxRedrives:       zombie.DefaultMaxRedrives,
		StartTimeout:      api.DefaultStartTimeout,
		StoreTimeout:      DefaultStoreTimeout,
		RetentionDays:     int(task.DefaultRetention / (24 * time.Hour)),
		RunDocumentEvery:  store.RunDocumentEvery,
		NamePrefix:        pull.DefaultNamePrefix,
		DueShards:         store.DefaultDueShards,
		MaxBodyBytes:      DefaultMaxBodyBytes,
		Quotas:            &quota.Policy{},
		ServiceName:       "servo",
	}
}

// FromEnv returns the configuration the variables getenv returns set
// (os.Getenv in production): Default, overridden by every variable set to
// a non-empty value. It checks every variable and reports every problem,
// each naming its variable. Files named by SERVO_ACCESS_FILE and
// SERVO_QUOTAS_FILE are read now.
func FromEnv(getenv func(string) string) (Config, error) {
	env := make(map[string]string, len(variables))
	for _, name := range variables {
		env[name] = getenv(name)
	}
	get := func(name string) string {
		v, ok := env[name]
		if !ok {
			panic("config: " + name + " is read but not in variables")
		}
		return v
	}
	c := Default()
	var errs []error
	fail := func(name string, err error) { errs = append(errs, fmt.Errorf("%s: %w", name, err)) }
	str := func(dst *string, name string) {
		if v := get(name); v != "" {
			*dst = v
		}
	}
	duration := func(dst *time.Duration, name string, zero bool) {
		v := get(name)
		if v == "" {
			return
		}
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			fail(name, err)
		case d < 0 || d == 0 && !zero:
			fail(name, fmt.Errorf("%v: want a positive duration", d))
		default:
			*dst = d
		}
	}
	boolean := func(dst *bool, name string) {
		v := get(name)
		if v == "" {
			return
		}
		if b, err := strconv.ParseBool(v); err != nil {
			fail(name, fmt.Errorf("%q: want true or false", v))
		} else {
			*dst = b
		}
	}
	integer := func(name string, min int64) (int64, bool) {
		v := get(name)
		if v == "" {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil:
			fail(name, fmt.Errorf("%q is not a whole number", v))
		case n < min:
			fail(name, fmt.Errorf("%d: want at least %d", n, min))
		default:
			return n, true
		}
		return 0, false
	}
	absURL := func(name string) *url.URL {
		v := get(name)
		if v == "" {
			return nil
		}
		u, err := url.Parse(v)
		if err == nil && ((u.Scheme != "https" && u.Scheme != "http") || u.Host == "") {
			err = errors.New("want an absolute http(s) URL")
		}
		if err != nil {
			fail(name, err)
			return nil
		}
		return u
	}

	str(&c.Project, EnvGoogleCloudProject)
	str(&c.Project, EnvProject)
	if c.Project == "" {
		errs = append(errs, fmt.Errorf("set %s (or %s) to the Google Cloud project", EnvProject, EnvGoogleCloudProject))
	}
	str(&c.FirestoreDatabase, EnvFirestoreDatabase)
	if err := armFailpoints(get(EnvFailpoints)); err != nil {
		fail(EnvFailpoints, err)
	}

	if err := c.loadTokenKeys(get); err != nil {
		errs = append(errs, err)
	}

	if c.CallbackBaseURL = absURL(EnvCallbackBaseURL); c.CallbackBaseURL == nil && get(EnvCallbackBaseURL) == "" {
		errs = append(errs, fmt.Errorf("set %s to the ServoCallbacks URL", EnvCallbackBaseURL))
	}
	if v := get(EnvWorkers); v != "" {
		var ws enqueue.Workers
		if err := json.Unmarshal([]byte(v), &ws); err != nil {
			fail(EnvWorkers, err)
		} else if err := ws.Validate(false); err != nil {
			fail(EnvWorkers, err)
		} else {
			c.Workers = ws
		}
	}
	c.JobsDispatchURL = absURL(EnvJobsDispatchURL)
	if c.JobsDispatchURL == nil && get(EnvJobsDispatchURL) == "" {
		for _, name := range c.Workers.Names() {
			if c.Workers[name].Job != "" {
				errs = append(errs, fmt.Errorf("worker %q runs a Cloud Run Job: set %s to the ServoJobs URL", name, EnvJobsDispatchURL))
				break
			}
		}
	}
	str(&c.JobsContainer, EnvJobsContainer)
	str(&c.NamePrefix, EnvNamePrefix)
	str(&c.EventsTopic, EnvEventsTopic)
	str(&c.DeadLetterTopic, EnvDeadLetterTopic)

	duration(&c.SweepEvery, EnvSweepEvery, false)
	duration(&c.SweepWindow, EnvSweepWindow, true) // 0: one pass a tick
	boolean(&c.SweepEarlyEnd, EnvSweepEarlyEnd)
	boolean(&c.LogHeartbeats, EnvLogHeartbeats)
	boolean(&c.LogStarted, EnvLogStarted)
	if v := get(EnvTraceSampleRatio); v != "" {
		if r, err := strconv.ParseFloat(v, 64); err != nil || r < 0 || r > 1 {
			fail(EnvTraceSampleRatio, fmt.Errorf("%q: want a number from 0 to 1", v))
		} else {
			c.TraceSampling.Ratio = r
		}
	}
	duration(&c.TraceSampling.Slow, EnvTraceSlow, false)
	duration(&c.StartTimeout, EnvStartTimeout, false)
	duration(&c.StoreTimeout, EnvStoreTimeout, false)
	duration(&c.RunDocumentEvery, EnvRunDocumentEvery, false)
	if n, ok := integer(EnvMaxRedrives, 1); ok {
		c.MaxRedrives = int(n)
	}
	if n, ok := integer(EnvDueShards, 1); ok {
		c.DueShards = int(n)
	}
	if n, ok := integer(EnvMaxBodyBytes, 1); ok {
		c.MaxBodyBytes = n
	}
	if n, ok := integer(EnvRetentionDays, quota.MinRetentionDays); ok {
		c.RetentionDays = int(n)
	}

	str(&c.ClaimAudience, EnvClaimAudience)
	for _, a := range strings.Split(get(EnvAPIAudience), ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.APIAudiences = append(c.APIAudiences, a)
		}
	}
	str(&c.IAPAudience, EnvIAPAudience)
	var err error
	if c.Access, err = auth.LoadPolicy(get, EnvAccess, EnvAccessFile); err != nil {
		errs = append(errs, err)
	}
	if q, err := quota.Load(get, EnvQuotas, EnvQuotasFile); err != nil {
		errs = append(errs, err)
	} else {
		c.Quotas = q
	}
	str(&c.ServiceName, EnvService)
	str(&c.CloudTasksEmulatorHost, EnvCloudTasksEmulator)

	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

// loadTokenKeys sets c.TokenKeys: one of the ring's JSON and its file,
// and the secret or not; the JSON must parse. Errors never quote a key.
func (c *Config) loadTokenKeys(get func(string) string) error {
	k := auth.KeyConfig{File: get(EnvTokenKeysFile), Secret: get(EnvTokenKeysSecret)}
	if v := get(EnvTokenKeys); v != "" {
		k.JSON = []byte(v)
	}
	switch {
	case len(k.JSON) > 0 && k.File != "":
		return fmt.Errorf("both %s and %s are set; set one", EnvTokenKeys, EnvTokenKeysFile)
	case k.Secret != "" && k.File != "":
		return fmt.Errorf("both %s and %s are set; set one", EnvTokenKeysSecret, EnvTokenKeysFile)
	case len(k.JSON) == 0 && k.File == "" && k.Secret == "":
		return fmt.Errorf("%w (or %s)", auth.ErrNoKeys, EnvTokenKeysSecret)
	case len(k.JSON) > 0:
		if _, err := auth.ParseKeyRing(k.JSON); err != nil {
			return fmt.Errorf("%s: %w", EnvTokenKeys, err)
		}
	}
	c.TokenKeys = k
	return nil
}

// ArmFailpoints arms the failpoints SERVO_FAILPOINTS names (package
// failpoint; the fault harness's crashes at commit boundaries), for
// servo dev, which builds its Config without FromEnv. FromEnv arms them
// too. Unset, nothing is armed.
func ArmFailpoints(getenv func(string) string) error {
	if err := armFailpoints(getenv(EnvFailpoints)); err != nil {
		return fmt.Errorf("%s: %w", EnvFailpoints, err)
	}
	return nil
}

func armFailpoints(spec string) error {
	if spec == "" {
		return nil
	}
	return failpoint.Arm(spec)
}
