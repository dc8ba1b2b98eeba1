package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/worker"
)

// Pull's stop (docs/contract.md §10, §14): the claim open when the context
// ends is abandoned at once; an attempt whose claim answer had begun to
// arrive is handed back (FAILED/INFRASTRUCTURE, retryable) without running
// the Func.

// claimServer is a scripted claim endpoint: serve answers each claim (n
// from 1).
func claimServer(t *testing.T, serve func(w http.ResponseWriter, r *http.Request, n int)) *httptest.Server {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/pools/gpu/claim" {
			http.Error(w, "bad claim path "+r.URL.Path, http.StatusNotFound)
			return
		}
		var req api.ClaimRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.WorkerID != "w-1" {
			t.Errorf("claim body %+v, %v", req, err)
		}
		serve(w, r, int(n.Add(1)))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func claimedBody(t *testing.T, env api.Envelope) []byte {
	t.Helper()
	b, err := json.Marshal(api.ClaimResponse{Claimed: true, Envelope: &env, Disposition: api.Continue, ServerTime: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func emptyClaim(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(api.ClaimResponse{Disposition: api.Continue, ServerTime: time.Now().UTC()})
}

func pullOptions(logs *logRecorder) []worker.Option {
	return []worker.Option{worker.WithWorkerID("w-1"), worker.WithLogger(slog.New(logs)),
		worker.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond), worker.WithRequestTimeout(2 * time.Second)}
}

// waitPull waits (generously) for Pull to return.
func waitPull(t *testing.T, done <-chan error, within time.Duration, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Pull: %v", err)
		}
	case <-time.After(within):
		t.Fatalf("Pull did not return within %s of the stop: %s", within, what)
	}
}

func TestPullStopAbandonsOpenClaim(t *testing.T) {
	f := newFake(t, nil)
	open := make(chan struct{}, 8)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var left atomic.Bool
	cs := claimServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		open <- struct{}{}
		// A long-poll that finds a task only after the worker was told
		// to stop (if it is still there).
		select {
		case <-r.Context().Done():
			left.Store(true)
			return
		case <-release:
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(claimedBody(t, f.envelope()))
	})
	logs := newLogRecorder(t)
	var ran atomic.Int32
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- worker.Pull(ctx, worker.PullConfig{API: cs.URL, Pool: "gpu", Concurrency: 2, MaxWait: time.Minute, Options: pullOptions(logs)},
			func(context.Context, *worker.Task) (any, error) { ran.Add(1); return nil, nil })
	}()
	select {
	case <-open:
	case <-time.After(20 * time.Second):
		t.Fatal("no claim was made")
	}
	stop()
	// The long-poll has a minute to go: Pull returns long before.
	waitPull(t, done, 20*time.Second, "the open claim was not abandoned")
	for deadline := time.Now().Add(20 * time.Second); !left.Load() && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	if !left.Load() {
		t.Fatal("the claim's request was not cancelled: Servo cannot hand its message back")
	}
	logs.waitFor(t, "claim abandoned")
	if n := ran.Load(); n != 0 {
		t.Fatalf("the Func ran %d times", n)
	}
	if calls := f.ops(""); len(calls) != 0 {
		t.Fatalf("callbacks for an attempt the worker never got: %d", len(calls))
	}
	if len(open) != 0 {
		t.Fatalf("%d more claims after the stop", len(open))
	}
}

// roundTripper is an http.RoundTripper from a function.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestPullAttemptClaimedWhileStoppingHandedBack(t *testing.T) {
	f := newFake(t, nil)
	release := make(chan struct{})
	var claims atomic.Int32
	cs := claimServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		claims.Add(1)
		if n > 1 {
			emptyClaim(w)
			return
		}
		// The answer begins (status and headers) before the stop; its
		// envelope comes after.
		b := claimedBody(t, f.envelope())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			t.Error("the claim was abandoned although its answer had begun: the attempt would wait for its lease")
			return
		}
		w.Write(b)
	})
	// The claim's headers are in once RoundTrip returns.
	headers := make(chan struct{})
	var once sync.Once
	hc := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		res, err := http.DefaultTransport.RoundTrip(r)
		if err == nil && strings.HasSuffix(r.URL.Path, "/claim") {
			once.Do(func() { close(headers) })
		}
		return res, err
	})}
	logs := newLogRecorder(t)
	var ran atomic.Int32
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- worker.Pull(ctx, worker.PullConfig{API: cs.URL, Pool: "gpu", MaxWait: time.Minute, Client: hc, Options: pullOptions(logs)},
			func(context.Context, *worker.Task) (any, error) { ran.Add(1); return nil, nil })
	}()
	select {
	case <-headers:
	case <-time.After(20 * time.Second):
		t.Fatal("no claim answer began")
	}
	stop()
	close(release)
	waitPull(t, done, 20*time.Second, "the attempt claimed while stopping was not settled")
	if n := ran.Load(); n != 0 {
		t.Fatalf("the Func ran %d times for an attempt claimed after the stop", n)
	}
	if n := claims.Load(); n != 1 {
		t.Fatalf("%d claims, want 1 (none after the stop)", n)
	}
	if n := len(f.ops("started")); n != 0 {
		t.Fatalf("%d `started` (the claim is the start)", n)
	}
	cs2 := f.ops("completed")
	if len(cs2) != 1 {
		t.Fatalf("%d `completed` reports, want 1", len(cs2))
	}
	c := decode[api.CompletedRequest](t, cs2[0].body)
	if c.Outcome != api.OutcomeFailed || c.Error == nil || c.Error.Category != api.CategoryInfrastructure ||
		c.Error.Retryable == nil || !*c.Error.Retryable || !strings.Contains(c.Error.Message, "not started") || c.WorkerID != "w-1" {
		t.Fatalf("completed %s, want FAILED/INFRASTRUCTURE retryable, not started", cs2[0].body)
	}
	logs.waitFor(t, "attempt not started")
}
