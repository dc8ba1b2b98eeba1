package cloudtasks

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cloudtasksapi "cloud.google.com/go/cloudtasks/apiv2"
	pb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	testParent = "projects/test-project/locations/us-central1"
	waitFor    = 10 * time.Second // generous bound for anything asynchronous
)

// fakeStart is where fake clocks start.
var fakeStart = time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)

// harness is an emulator served on loopback and an official client for it.
type harness struct {
	t      *testing.T
	srv    *Server
	clk    *FakeClock // nil when the server uses the wall clock
	client *cloudtasksapi.Client
	addr   string
	ctx    context.Context
}

// newHarness starts a server with opts; fake selects a FakeClock.
func newHarness(t *testing.T, fake bool, opts Options) *harness {
	t.Helper()
	h := &harness{t: t, ctx: context.Background()}
	if fake {
		h.clk = NewFakeClock(fakeStart)
		opts.Clock = h.clk
	}
	h.srv = NewServer(opts)
	addr, err := h.srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	h.addr = addr
	h.client, err = cloudtasksapi.NewClient(h.ctx, ClientOptions(addr)...)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() {
		_ = h.client.Close()
		h.srv.Stop()
	})
	return h
}

// queue creates a queue called id with cfg (nil for defaults) and returns
// its name.
func (h *harness) queue(id string, cfg *pb.Queue) string {
	h.t.Helper()
	if cfg == nil {
		cfg = &pb.Queue{}
	}
	cfg.Name = testParent + "/queues/" + id
	q, err := h.client.CreateQueue(h.ctx, &pb.CreateQueueRequest{Parent: testParent, Queue: cfg})
	if err != nil {
		h.t.Fatalf("CreateQueue(%s): %v", id, err)
	}
	return q.Name
}

// task creates an HTTP task posting body to url in queue.
func (h *harness) task(queue, url string, mutate func(*pb.Task)) *pb.Task {
	h.t.Helper()
	t := &pb.Task{MessageType: &pb.Task_HttpRequest{HttpRequest: &pb.HttpRequest{Url: url, Body: []byte("payload")}}}
	if mutate != nil {
		mutate(t)
	}
	out, err := h.client.CreateTask(h.ctx, &pb.CreateTaskRequest{Parent: queue, Task: t})
	if err != nil {
		h.t.Fatalf("CreateTask: %v", err)
	}
	return out
}

// getTask returns the task, or nil if it is gone.
func (h *harness) getTask(name string) *pb.Task {
	h.t.Helper()
	t, err := h.client.GetTask(h.ctx, &pb.GetTaskRequest{Name: name, ResponseView: pb.Task_FULL})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		h.t.Fatalf("GetTask: %v", err)
	}
	return t
}

// waitGone waits until the task no longer exists.
func (h *harness) waitGone(name string) {
	h.t.Helper()
	eventually(h.t, "task "+name+" to be gone", func() bool { return h.getTask(name) == nil })
}

// settled waits until the task has processed n responses (or is gone) and,
// if it still exists, the dispatcher has armed its timer for the task's
// schedule time. It returns the task, nil if gone.
func (h *harness) settled(name string, n int32) *pb.Task {
	h.t.Helper()
	var t *pb.Task
	eventually(h.t, fmt.Sprintf("task to settle after %d responses", n), func() bool {
		t = h.getTask(name)
		if t == nil {
			return true
		}
		if t.ResponseCount < n {
			return false
		}
		return h.armed(t.ScheduleTime.AsTime())
	})
	return t
}

// armed reports whether the fake clock has a timer due at or before at.
func (h *harness) armed(at time.Time) bool {
	for _, p := range h.clk.Pending() {
		if !p.After(at) {
			return true
		}
	}
	return false
}

// waitArmed waits until a fake timer is due at or before at.
func (h *harness) waitArmed(at time.Time) {
	h.t.Helper()
	eventually(h.t, "a timer armed for "+at.String(), func() bool { return h.armed(at) })
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// wantCode fails unless err has gRPC code want.
func wantCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("got code %v (err %v), want %v", got, err, want)
	}
}

// delivery is one request a worker received.
type delivery struct {
	method string
	uri    string
	header http.Header
	body   string
	at     time.Time
}

// worker is an httptest server that records requests and answers them with
// respond (200 if nil).
type worker struct {
	*httptest.Server
	respond func(w http.ResponseWriter, r *http.Request, n int)

	mu     sync.Mutex
	got    []delivery
	cur    atomic.Int32
	peak   atomic.Int32
	signal chan struct{}
}

func newWorker(t *testing.T, respond func(w http.ResponseWriter, r *http.Request, n int)) *worker {
	t.Helper()
	w := &worker{respond: respond, signal: make(chan struct{}, 1)}
	w.Server = httptest.NewServer(http.HandlerFunc(w.serve))
	t.Cleanup(w.Close)
	return w
}

func (w *worker) serve(rw http.ResponseWriter, r *http.Request) {
	c := w.cur.Add(1)
	defer w.cur.Add(-1)
	for {
		p := w.peak.Load()
		if c <= p || w.peak.CompareAndSwap(p, c) {
			break
		}
	}
	body, _ := io.ReadAll(r.Body)
	w.mu.Lock()
	w.got = append(w.got, delivery{method: r.Method, uri: r.RequestURI, header: r.Header.Clone(), body: string(body), at: time.Now()})
	n := len(w.got)
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
	if w.respond != nil {
		w.respond(rw, r, n)
		return
	}
	rw.WriteHeader(http.StatusOK)
}

func (w *worker) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.got)
}

func (w *worker) nth(i int) delivery {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.got[i]
}

// waitN waits until the worker has received n requests.
func (w *worker) waitN(t *testing.T, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d deliveries (have %d)", n, w.count()), func() bool { return w.count() >= n })
}

// quiet asserts that the worker's count stays n for a short while.
func (w *worker) quiet(t *testing.T, n int) {
	t.Helper()
	time.Sleep(150 * time.Millisecond)
	if got := w.count(); got != n {
		t.Fatalf("worker received %d requests, want exactly %d", got, n)
	}
}

// status responds with a fixed status code.
func statusCode(code int) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(code) }
}

func shortID(name string) string { return name[strings.LastIndex(name, "/")+1:] }
