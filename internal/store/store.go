package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	firestoreapi "cloud.google.com/go/firestore/apiv1"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/telemetry"
)

// Sentinel errors.
var (
	// ErrNotFound: no such task.
	ErrNotFound = errors.New("store: task not found")
	// ErrUnavailable: Firestore failed or contention outlasted the retries;
	// the caller may retry the same request.
	ErrUnavailable = errors.New("store: firestore unavailable")
	// ErrRejected: Firestore refused the write as invalid (for example a
	// document over its size limit); retrying the same request cannot help.
	ErrRejected = errors.New("store: firestore rejected the write")
	// ErrInvalidPageToken: a list page token that this store did not issue.
	ErrInvalidPageToken = errors.New("store: invalid page token")
)

// EmulatorHostEnv is the variable the Firestore emulator's address is read from.
const EmulatorHostEnv = "FIRESTORE_EMULATOR_HOST"

// IdempotencyRetention is how long an idempotency key maps to its task
// before Firestore's TTL policy may delete the mapping.
const IdempotencyRetention = 30 * 24 * time.Hour

// Store is Servo's Firestore state. It is safe for concurrent use.
type Store struct {
	client     *firestoreapi.Client
	db         string // projects/P/databases/D
	docs       string // db + "/documents"
	maxRetries int
	shards     int
	perTask    keyedMutex
	recentRuns recentRuns
	counters   *quota.Counters
	perScope   keyedMutex
	onCommit   atomic.Pointer[func(context.Context, []task.Transition)]
	outages    *outageLog
	retention  time.Duration // WithRetention
	strict     bool          // WithStrict: production's rules enforced here (strict.go)
	runEvery   time.Duration // WithRunDocumentEvery
	taskCache  *docCache     // WithTaskCache (doccache.go)
}

// OnCommit registers fn to run after every commit that wrote transitions
// (Create and Apply), with those transitions in order: the events publisher
// delivers them at once; what it misses stays in the outbox for re-drive.
// fn must not block for long; it runs on the caller's goroutine.
func (s *Store) OnCommit(fn func(context.Context, []task.Transition)) { s.onCommit.Store(&fn) }

func (s *Store) committed(ctx context.Context, trs []task.Transition) {
	telemetry.RecordTransitions(ctx, trs)
	if fn := s.onCommit.Load(); fn != nil && *fn != nil && len(trs) > 0 {
		(*fn)(ctx, trs)
	}
}

type config struct {
	shards     int
	database   string
	counter    *RPCCounter
	clientOpts []option.ClientOption
	maxRetries int
	quotas     *quota.Policy
	retention  time.Duration
	strict     *bool
	runEvery   time.Duration
	taskCache  *int
}

// Option configures New.
type Option func(*config)

// WithDatabase selects a database other than "(default)".
func WithDatabase(id string) Option { return func(c *config) { c.database = id } }

// WithRPCCounter counts every Firestore RPC the store makes.
func WithRPCCounter(rc *RPCCounter) Option { return func(c *config) { c.counter = rc } }

// WithClientOptions passes options to the Firestore client.
func WithClientOptions(opts ...option.ClientOption) Option {
	return func(c *config) { c.clientOpts = append(c.clientOpts, opts...) }
}

// WithMaxRetries bounds transaction retries on contention (default 25).
func WithMaxRetries(n int) Option { return func(c *config) { c.maxRetries = n } }

// New connects to Firestore for project; it honours FIRESTORE_EMULATOR_HOST.
func New(ctx context.Context, project string, opts ...Option) (*Store, error) {
	if project == "" {
		return nil, errors.New("store: project id is required")
	}
	cfg := config{database: "(default)", maxRetries: 25, shards: DefaultDueShards, runEvery: RunDocumentEvery}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.shards < 1 {
		return nil, fmt.Errorf("store: %d due shards: want at least 1", cfg.shards)
	}
	var copts []option.ClientOption
	if host := os.Getenv(EmulatorHostEnv); host != "" {
		copts = append(copts, option.WithEndpoint(host), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
			option.WithGRPCDialOption(grpc.WithPerRPCCredentials(emulatorCreds{})))
	}
	strict := strictDefault()
	if cfg.strict != nil {
		strict = *cfg.strict
	}
	if strict {
		// Production's rules, enforced before a request leaves (strict.go).
		rules := DeclaredRules()
		copts = append(copts,
			option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(rules.unary)),
			option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(rules.stream)))
	}
	if cfg.counter != nil {
		copts = append(copts,
			option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(cfg.counter.unary)),
			option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(cfg.counter.stream)))
	}
	// Per-request RPC tallies (telemetry.CountRPCs): a counter in the
	// context, no call of its own.
	copts = append(copts, option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(telemetry.UnaryRPCTally)),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(telemetry.StreamRPCTally)))
	copts = append(copts, cfg.clientOpts...)
	client, err := firestoreapi.NewClient(ctx, copts...)
	if err != nil {
		return nil, fmt.Errorf("store: connect to firestore: %w", err)
	}
	db := "projects/" + project + "/databases/" + cfg.database
	counters, err := quota.NewCounters(cfg.quotas, db+"/documents")
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	s := &Store{client: client, db: db, docs: db + "/documents", maxRetries: cfg.maxRetries, shards: cfg.shards, counters: counters,
		outages: &outageLog{}, retention: cfg.retention, strict: strict, runEvery: cfg.runEvery}
	if cfg.taskCache != nil {
		s.taskCache = newDocCache(*cfg.taskCache)
	}
	s.outages.persist = func(o task.Outage) {
		// Best effort: this process counts the outage already; a failed
		// write only keeps it from the others.
		ctx, cancel := context.WithTimeout(WithCause(context.Background(), "outage record"), 10*time.Second)
		defer cancel()
		_ = s.RecordOutage(ctx, o)
	}
	return s, nil
}

// Close releases the connection.
func (s *Store) Close() error { return s.client.Close() }

// emulatorCreds authenticates to the emulator as its owner, as the official
// client does.
type emulatorCreds struct{}

func (emulatorCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer owner"}, nil
}
func (emulatorCreds) RequireTransportSecurity() bool { return false }

// wrap maps a Firestore error to the store's sentinels.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnavailable) {
		return err
	}
	switch status.Code(err) {
	case codes.NotFound:
		return fmt.Errorf("store: %s: %w", op, ErrNotFound)
	case codes.Canceled:
		return fmt.Errorf("store: %s: %w", op, err)
	case codes.InvalidArgument:
		return fmt.Errorf("store: %s: %w: %w", op, ErrRejected, err)
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("store: %s: %w", op, err)
	}
	return fmt.Errorf("store: %s: %w: %w", op, ErrUnavailable, err)
}

// Project returns the project id of the store's database.
func (s *Store) Project() string {
	p := strings.TrimPrefix(s.db, "projects/")
	p, _, _ = strings.Cut(p, "/")
	return p
}
