package cloudtasks

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc"
)

// Documented limits and defaults of Cloud Tasks that the emulator applies.
const (
	// defaultTombstoneWindow is how long a deleted or executed task's name
	// stays reserved ("~1 hour" in the Cloud Tasks limits).
	defaultTombstoneWindow = time.Hour
	// defaultDispatchDeadline is the dispatch deadline of an HTTP task that
	// sets none.
	defaultDispatchDeadline = 10 * time.Minute
	// minDispatchDeadline and maxDispatchDeadline bound an HTTP task's
	// dispatch_deadline.
	minDispatchDeadline = 15 * time.Second
	maxDispatchDeadline = 30 * time.Minute
	// maxTaskSize is the largest task CreateTask accepts, in bytes.
	maxTaskSize = 1 << 20
	// maxScheduleAhead is how far in the future a task may be scheduled.
	maxScheduleAhead = 30 * 24 * time.Hour
	// maxTaskRetention is how long a task may live in a queue; a task that
	// fails after that is dropped instead of retried.
	maxTaskRetention = 31 * 24 * time.Hour
)

// Sentinel errors.
var (
	// errStopped is returned by Serve and Start once Stop has been called.
	errStopped = errors.New("cloudtasks emulator: server stopped")
	// errInvalidName reports a malformed project, location, queue or task
	// resource name. Over gRPC it is INVALID_ARGUMENT.
	errInvalidName = errors.New("invalid resource name")
	// errInvalidArgument reports a request the real service rejects with
	// INVALID_ARGUMENT.
	errInvalidArgument = errors.New("invalid argument")
	// errNotFound reports a missing queue, task or operation (NOT_FOUND).
	errNotFound = errors.New("not found")
	// errAlreadyExists reports a duplicate queue, or a task name that is in
	// use or tombstoned (ALREADY_EXISTS).
	errAlreadyExists = errors.New("already exists")
	// errFailedPrecondition reports a request that cannot be served in the
	// resource's current state (FAILED_PRECONDITION).
	errFailedPrecondition = errors.New("failed precondition")
)

// Options configure a [Server]. The zero value is ready to use.
type Options struct {
	// Clock is the source of time; nil means the wall clock.
	Clock Clock
	// TombstoneWindow is how long the name of a deleted or executed task
	// cannot be reused; 0 means defaultTombstoneWindow (1h).
	TombstoneWindow time.Duration
	// QueueTombstoneWindow is how long the name of a deleted queue cannot be
	// reused. The real service documents 7 days; the emulator's default, 0,
	// allows immediate re-creation, which is what local runs and tests want.
	QueueTombstoneWindow time.Duration
	// HTTPClient sends the task requests; nil means a client with a pooled
	// transport and no timeout of its own (each attempt is bounded by the
	// task's dispatch deadline). Redirects are followed, as documented.
	HTTPClient *http.Client
	// Logger receives the emulator's logs; nil discards them.
	Logger *slog.Logger
	// SigningKey signs the OIDC and OAuth bearer tokens the emulator attaches
	// to requests; nil means a key generated once per process. See
	// [Server.PublicKey].
	SigningKey *rsa.PrivateKey
	// TokenIssuer is the "iss" claim of those tokens; "" means
	// "https://accounts.google.com".
	TokenIssuer string
}

// Server is an in-memory Cloud Tasks service (google.cloud.tasks.v2) that
// dispatches HTTP tasks for real. Create it with [NewServer], serve it with
// [Server.Serve] or [Server.Start], and release it with [Server.Stop].
type Server struct {
	clock     Clock
	log       *slog.Logger
	client    *http.Client
	ownClient bool
	signer    *signer
	tombstone time.Duration
	queueTomb time.Duration

	ctx    context.Context // cancelled by Stop
	cancel context.CancelFunc

	lifeMu  sync.Mutex // guards stopped, grpc and the Add side of wg
	stopped bool
	wg      sync.WaitGroup
	grpc    *grpc.Server

	mu         sync.RWMutex // guards the maps below; never held while taking a queue's mu
	queues     map[string]*queue
	queueTombs map[string]time.Time
	ops        map[string]*longrunningpb.Operation
}

// NewServer returns a Server configured by opts. It starts no goroutine until
// a queue is created or the server is served.
func NewServer(opts Options) *Server {
	s := &Server{
		clock:      opts.Clock,
		log:        opts.Logger,
		client:     opts.HTTPClient,
		tombstone:  opts.TombstoneWindow,
		queueTomb:  opts.QueueTombstoneWindow,
		queues:     make(map[string]*queue),
		queueTombs: make(map[string]time.Time),
		ops:        make(map[string]*longrunningpb.Operation),
	}
	if s.clock == nil {
		s.clock = realClock{}
	}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if s.client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 1024
		tr.MaxIdleConnsPerHost = 256
		s.client = &http.Client{Transport: tr}
		s.ownClient = true
	}
	if s.tombstone <= 0 {
		s.tombstone = defaultTombstoneWindow
	}
	s.signer = newSigner(opts.SigningKey, opts.TokenIssuer)
	s.ctx, s.cancel = context.WithCancel(context.Background())

	svc := &service{s: s}
	s.grpc = grpc.NewServer()
	cloudtaskspb.RegisterCloudTasksServer(s.grpc, svc)
	longrunningpb.RegisterOperationsServer(s.grpc, &operations{s: s})
	return s
}

// PublicKey returns the RSA public key that verifies the OIDC and OAuth
// tokens the emulator attaches to task requests. The tokens are signed
// locally, not by Google: a worker that verifies tokens against Google's
// published keys must be configured to use this key when run locally.
func (s *Server) PublicKey() *rsa.PublicKey {
	key, _ := s.signer.signingKey()
	return &key.PublicKey
}

// Serve serves the Cloud Tasks and long-running Operations gRPC services on
// lis until Stop is called. It returns nil after Stop, errStopped if Stop was
// called before, or the listener's error.
func (s *Server) Serve(lis net.Listener) error {
	s.lifeMu.Lock()
	if s.stopped {
		s.lifeMu.Unlock()
		_ = lis.Close()
		return errStopped
	}
	s.lifeMu.Unlock()
	switch err := s.grpc.Serve(lis); {
	case err == nil:
		return nil
	case errors.Is(err, grpc.ErrServerStopped):
		return errStopped // Stop won the race with this call
	default:
		return fmt.Errorf("cloudtasks emulator: serve: %w", err)
	}
}

// Start listens on addr ("127.0.0.1:0" picks a free port), serves in the
// background and returns the host:port it listens on.
func (s *Server) Start(addr string) (hostPort string, err error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("cloudtasks emulator: listen on %s: %w", addr, err)
	}
	if !s.goTracked(func() {
		if err := s.Serve(lis); err != nil {
			s.log.Error("cloudtasks emulator: serve failed", "err", err)
		}
	}) {
		_ = lis.Close()
		return "", errStopped
	}
	return lis.Addr().String(), nil
}

// Stop stops the gRPC server, cancels in-flight task requests, stops every
// queue's dispatcher and waits for all of the emulator's goroutines. It is
// safe to call more than once.
func (s *Server) Stop() {
	s.lifeMu.Lock()
	already := s.stopped
	s.stopped = true
	s.lifeMu.Unlock()
	if !already {
		s.cancel()
		done := make(chan struct{})
		go func() {
			s.grpc.GracefulStop()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			s.grpc.Stop()
			<-done
		}
	}
	s.wg.Wait()
	if s.ownClient {
		s.client.CloseIdleConnections()
	}
}

// goTracked runs f in a goroutine that Stop waits for. It reports false, and
// does not run f, once the server is stopping.
func (s *Server) goTracked(f func()) bool {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.stopped {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

// lookupQueue returns the live queue called name.
func (s *Server) lookupQueue(name string) (*queue, error) {
	s.mu.RLock()
	q := s.queues[name]
	s.mu.RUnlock()
	if q == nil {
		return nil, fmt.Errorf("%w: queue %s", errNotFound, name)
	}
	return q, nil
}
