package devstack_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	firestoreapi "cloud.google.com/go/firestore/apiv1"
	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/config"
	"github.com/servo-dev/servo/internal/cost"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/zombie"
)

// lineCounter counts the lines and bytes of the stack's JSON logs.
type lineCounter struct {
	mu           sync.Mutex
	lines, bytes int64
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.lines += int64(bytes.Count(p, []byte("\n")))
	c.bytes += int64(len(p))
	c.mu.Unlock()
	return len(p), nil
}

func (c *lineCounter) take() (int64, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, b := c.lines, c.bytes
	c.lines, c.bytes = 0, 0
	return l, b
}

// invocationCounter is the test client's transport: it counts the
// requests that invoke Servo's functions, by function, and their time,
// and the api's submits.
type invocationCounter struct {
	mu      sync.Mutex
	n       map[string]int64
	submits int64
	ms      map[string][]int64
	cpu     map[string][]int64
	rt      http.RoundTripper
	url     string
}

func (c *invocationCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	fn := ""
	if strings.HasPrefix(r.URL.String(), c.url) && r.Method != http.MethodGet {
		fn = "api"
		for _, k := range []string{"/started", "/heartbeat", "/completed"} {
			if strings.HasSuffix(r.URL.Path, k) {
				fn = "callbacks"
			}
		}
	}
	start, cpu0 := time.Now(), processCPU()
	res, err := c.rt.RoundTrip(r)
	if fn != "" {
		cpu := processCPU() - cpu0
		c.mu.Lock()
		c.n[fn]++
		if fn == "api" && r.Method == http.MethodPost && (r.URL.Path == "/v1/tasks" || r.URL.Path == "/v1/tasks:batch") {
			c.submits++
		}
		c.ms[fn] = append(c.ms[fn], time.Since(start).Milliseconds())
		c.cpu[fn] = append(c.cpu[fn], cpu.Microseconds())
		c.mu.Unlock()
	}
	return res, err
}

// processCPU is the CPU time (user and system) the process has used: the
// handlers run in it, the emulators do not.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (c *invocationCounter) take() (n map[string]int64, submits int64, ms, cpu map[string][]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, submits, ms, cpu = c.n, c.submits, c.ms, c.cpu
	c.n, c.submits, c.ms, c.cpu = map[string]int64{}, 0, map[string][]int64{}, map[string][]int64{}
	return n, submits, ms, cpu
}

// createSizes records the size of each CreateTask request, and counts
// the DeleteTask calls (a cancel deletes its attempt's Cloud Task).
type createSizes struct {
	mu      sync.Mutex
	sizes   []int64
	deletes int64
}

func (c *createSizes) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if strings.HasSuffix(method, "/CreateTask") {
		c.mu.Lock()
		c.sizes = append(c.sizes, int64(proto.Size(req.(proto.Message))))
		c.mu.Unlock()
	}
	if strings.HasSuffix(method, "/DeleteTask") {
		c.mu.Lock()
		c.deletes++
		c.mu.Unlock()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *createSizes) take() ([]int64, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, d := c.sizes, c.deletes
	c.sizes, c.deletes = nil, 0
	return s, d
}

// storedDoc is a document as the database keeps it.
type storedDoc struct {
	bytes, entries int64
	ttl            bool
	days           float64 // until its TTL deletes it
}

// snapshot lists every document of the project's database.
func snapshot(t testing.TB, fs *firestoreapi.Client, project string) map[string]storedDoc {
	t.Helper()
	ctx := context.Background()
	out := map[string]storedDoc{}
	ttl := map[string]bool{}
	for _, f := range store.TTLFields {
		ttl[f.Collection+"/"+f.Path] = true
	}
	var walk func(parent string)
	walk = func(parent string) {
		ids := fs.ListCollectionIds(ctx, &pb.ListCollectionIdsRequest{Parent: parent})
		for {
			id, err := ids.Next()
			if errors.Is(err, iterator.Done) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			docs := fs.ListDocuments(ctx, &pb.ListDocumentsRequest{Parent: parent, CollectionId: id})
			for {
				d, err := docs.Next()
				if errors.Is(err, iterator.Done) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				sd := storedDoc{bytes: int64(proto.Size(&pb.Document{Name: d.Name, Fields: d.Fields})) + 32,
					entries: int64(store.IndexEntries(&pb.Write{Operation: &pb.Write_Update{Update: d}}))}
				for k, v := range d.Fields {
					if ttl[id+"/"+k] && v.GetTimestampValue() != nil {
						sd.ttl, sd.days = true, max(0, time.Until(v.GetTimestampValue().AsTime()).Hours()/24)
					}
				}
				out[d.Name] = sd
				walk(d.Name)
			}
		}
	}
	walk("projects/" + project + "/databases/(default)/documents")
	return out
}

// recorder measures one lifecycle at a time on a whole local stack.
type recorder struct {
	*env
	rpc   *store.RPCCounter
	ct    *createSizes
	logs  *lineCounter
	inv   *invocationCounter
	fs    *firestoreapi.Client
	spans func() int
	sub   string
	// beatEvery is the pause between an attempt's heartbeats.
	beatEvery time.Duration
}

func (r *recorder) settle() {
	r.T.Helper()
	last := -1
	for range 100 {
		if err := r.stack.Events.Flush(context.Background()); err != nil {
			r.T.Fatal(err)
		}
		if n := r.rpc.Total(); n == last {
			return
		} else {
			last = n
		}
		time.Sleep(300 * time.Millisecond)
	}
	r.T.Fatal("the stack never went idle")
}

// messages drains the events subscription and returns the sizes.
func (r *recorder) messages() []int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var mu sync.Mutex
	var sizes []int64
	err := r.stack.PubSub.Subscriber(r.sub).Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		n := len(m.Data) + len(m.OrderingKey)
		for k, v := range m.Attributes {
			n += len(k) + len(v)
		}
		mu.Lock()
		sizes = append(sizes, int64(n))
		mu.Unlock()
	})
	if err != nil && ctx.Err() == nil {
		r.T.Fatal(err)
	}
	return sizes
}

// lifecycle records what op causes.
func (r *recorder) lifecycle(shape string, op func()) cost.Traffic {
	r.T.Helper()
	r.settle()
	r.messages()
	before := snapshot(r.T, r.fs, r.stack.Project)
	r.rpc.Reset()
	r.ct.take()
	r.logs.take()
	r.inv.take()
	spans0 := r.spans()
	op()
	r.settle()
	u := r.rpc.Usage()
	tr := cost.Traffic{Shape: shape, FirestoreReads: int64(u.DocsRead), FirestoreMissing: int64(u.DocsMissing), FirestoreWrites: int64(u.DocsWritten),
		FirestoreDeletes: int64(u.DocsDeleted), IndexEntries: int64(u.IndexEntries),
		PubSubMessages: r.messages()}
	tr.CloudTasksCreates, tr.CloudTasksDeletes = r.ct.take()
	tr.LogLines, tr.LogBytes = r.logs.take()
	tr.Invocations, tr.SubmitRequests, tr.RequestMs, tr.CPUUs = r.inv.take()
	tr.Spans = int64(r.spans() - spans0)
	for name, d := range snapshot(r.T, r.fs, r.stack.Project) {
		if _, ok := before[name]; ok {
			continue
		}
		if d.ttl {
			tr.FirestoreDeletes++
			tr.TTLDocByteDays += float64(d.bytes) * d.days
			tr.TTLIndexEntryDays += float64(d.entries) * d.days
		} else {
			tr.StoredDocBytes += d.bytes
			tr.StoredIndexEntries += d.entries
		}
	}
	return tr
}

// timingRuns is how many times each shape is recorded for its request and
// CPU times (timedLifecycle).
const timingRuns = 3

// timedLifecycle records shape timingRuns times (timed).
func (r *recorder) timedLifecycle(shape string, op func(run int)) cost.Traffic {
	r.T.Helper()
	return r.timed(func(run int) cost.Traffic { return r.lifecycle(shape, func() { op(run) }) })
}

// timed records a shape timingRuns times: the first run's counts, and
// for each function the median, by position, of the request and CPU
// times of the runs that made the same invocations (and the median of the
// sweeper's time). The CPU time is the whole test process's during a
// request, so a sweep pass or a garbage collection meanwhile only adds to
// it: one run's is noisy.
func (r *recorder) timed(record func(run int) cost.Traffic) cost.Traffic {
	r.T.Helper()
	first := record(0)
	runs := []cost.Traffic{first}
	for i := 1; i < timingRuns; i++ {
		if tr := record(i); sameInvocations(tr, first) {
			runs = append(runs, tr)
		}
	}
	for name := range first.RequestMs {
		first.RequestMs[name] = medians(runs, func(t cost.Traffic) []int64 { return t.RequestMs[name] })
		first.CPUUs[name] = medians(runs, func(t cost.Traffic) []int64 { return t.CPUUs[name] })
	}
	first.SweeperMs = medians(runs, func(t cost.Traffic) []int64 { return []int64{t.SweeperMs} })[0]
	return first
}

// passCost is what one explicit sweep pass cost.
type passCost struct {
	usage store.Usage
	spans int
	ms    int64
	stats zombie.Stats
}

// pass runs one explicit pass of sw after its pulse's promise is renewed,
// as a window that ended early renews it (so that no pass counts the time
// since the one before as an outage), and returns what it cost.
func (r *recorder) pass(sw *zombie.Sweeper) passCost {
	r.T.Helper()
	ctx := context.Background()
	if err := r.stack.Store.PromisePulse(ctx, time.Now().Add(time.Minute)); err != nil {
		r.T.Fatal(err)
	}
	r.settle()
	r.rpc.Reset()
	spans0 := r.spans()
	began := time.Now()
	st, err := sw.Sweep(ctx)
	if err != nil {
		r.T.Fatal(err)
	}
	pc := passCost{ms: time.Since(began).Milliseconds(), stats: st}
	r.settle()
	pc.usage, pc.spans = r.rpc.Usage(), r.spans()-spans0
	return pc
}

// sameInvocations reports whether a and b timed the same requests.
func sameInvocations(a, b cost.Traffic) bool {
	if len(a.RequestMs) != len(b.RequestMs) {
		return false
	}
	for name, ms := range a.RequestMs {
		if len(b.RequestMs[name]) != len(ms) || len(b.CPUUs[name]) != len(a.CPUUs[name]) {
			return false
		}
	}
	return true
}

// medians is, by position, the median of of(run) over runs.
func medians(runs []cost.Traffic, of func(cost.Traffic) []int64) []int64 {
	out := make([]int64, len(of(runs[0])))
	for i := range out {
		xs := make([]int64, len(runs))
		for j, tr := range runs {
			xs[j] = of(tr)[i]
		}
		slices.Sort(xs)
		out[i] = xs[len(xs)/2]
	}
	return out
}

func (r *recorder) attempt(beats int, outcome api.Outcome) {
	r.T.Helper()
	d := r.worker.next(r.T)
	st, res := r.callback(d.env, "started", api.StartedRequest{Attempt: d.env.Attempt, WorkerID: "w"})
	expect(r.T, "started", st, res, 200, "", api.Continue)
	for i := range beats {
		// Liveness heartbeats at the task's interval (beatEvery), as a
		// worker sends them: whether the store writes one depends on how
		// much of the lease is left (half the lease and 1.5 intervals).
		// The recorded shapes run the defaults' ratio (30 s interval, 90 s
		// timeout) 30 times faster.
		if i > 0 && r.beatEvery > 0 {
			time.Sleep(r.beatEvery)
		}
		st, res := r.callback(d.env, "heartbeat", api.HeartbeatRequest{Attempt: d.env.Attempt, WorkerID: "w"})
		expect(r.T, "heartbeat", st, res, 200, "", api.Continue)
	}
	body := api.CompletedRequest{Attempt: d.env.Attempt, WorkerID: "w", Outcome: outcome}
	if outcome == api.OutcomeFailed {
		body.Error = &api.ErrorInfo{Category: api.CategoryInfrastructure, Message: "flaky"}
	}
	st, res = r.callback(d.env, "completed", body)
	expect(r.T, "completed", st, res, 200, "", api.Committed)
}

// BenchmarkCostRecord records the traffic internal/cost prices: one lifecycle
// of each workload shape (a schedule's fire among them), one idle sweeper
// invocation and one whose first pass fires, run the production way, and
// an idle schedule, and writes it to the file SERVO_COST_RECORD names
// (`go run ./bench/cost -record`; without it, it reports the figures
// only). A benchmark, not a test: the invocation that fires sweeps on to
// its next pass (15 s), so `go test ./...` does not run it.
//
//	go test -run '^$' -bench '^BenchmarkCostRecord$' -benchtime 1x ./internal/devstack/
func BenchmarkCostRecord(b *testing.B) {
	out := os.Getenv("SERVO_COST_RECORD")
	var t testing.TB = b
	rec, _ := tracing(t)
	rc, ct, logw := store.NewRPCCounter(), &createSizes{}, &lineCounter{}
	e := start(t, func(o *devstack.Options) {
		o.SweepEvery = time.Hour // one tick at start, none while measuring
		o.DueShards = store.DefaultDueShards
		// Without servo dev's task cache, as the deployed functions run
		// (store/doc.go, "The task cache").
		o.StoreOptions = []store.Option{store.WithRPCCounter(rc), store.WithTaskCache(0)}
		o.TasksClientOptions = []option.ClientOption{option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(ct.unary))}
		o.Log = logw
		o.Quotas = &quota.Policy{Tenants: map[string]quota.Limits{"quota-tenant": {MaxRunning: 100}}}
	})
	inv := &invocationCounter{n: map[string]int64{}, ms: map[string][]int64{}, cpu: map[string][]int64{}, rt: http.DefaultTransport, url: e.stack.URL}
	saved := http.DefaultClient.Transport
	http.DefaultClient.Transport = inv
	t.Cleanup(func() { http.DefaultClient.Transport = saved })
	// The emulator lists collections for its admin only.
	owner := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer owner")
	}
	conn, err := grpc.NewClient(e.stack.FirestoreHost, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(owner(ctx), method, req, reply, cc, opts...)
		}))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := firestoreapi.NewClient(context.Background(), option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	ctx := context.Background()
	if err := events.EnsureSubscriptions(ctx, e.stack.PubSub, events.Subscription{Name: "cost-events", Topic: events.DefaultEventsTopic, Ordered: true}); err != nil {
		t.Fatal(err)
	}
	r := &recorder{env: e, rpc: rc, ct: ct, logs: logw, inv: inv, fs: fs, spans: func() int { return len(rec.Spans()) }, sub: "cost-events"}
	// The start-up sweep pass, before anything is measured.
	servotest.WaitFor(t, "the start-up sweep", rc.Counts, func(n map[string]int) bool { return n["RunQuery"] >= idlePassQueries }, nil) // cost_test.go
	// and its pass record, written when the pass ends (not a lifecycle's).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		d, err := fs.GetDocument(ctx, &pb.GetDocumentRequest{Name: "projects/" + e.stack.Project + "/databases/(default)/documents/meta/sweeper"})
		if err == nil && d.GetFields()["lastPassAt"] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the start-up sweep recorded no pass: %v", err)
		}
	}

	retry := map[string]any{"retry": map[string]any{"maxAttempts": 3, "initialBackoffMs": 100, "maxBackoffMs": 100}}
	long := map[string]any{"heartbeatTimeoutMs": 60000, "cancelGracePeriodMs": 60000}
	// The defaults' timing (30 s interval, 90 s timeout), 30 times faster.
	r.beatEvery = time.Second
	timing := map[string]any{"heartbeatIntervalMs": 1000, "heartbeatTimeoutMs": 3000}
	var shapes []cost.Traffic
	one := func(shape string, extra map[string]any, beats int) {
		shapes = append(shapes, r.timedLifecycle(shape, func(run int) {
			body := maps.Clone(extra)
			if key, ok := body["idempotencyKey"].(string); ok {
				body["idempotencyKey"] = fmt.Sprintf("%s-%d", key, run) // a new task each run
			}
			r.submit(body)
			r.attempt(beats, api.OutcomeSucceeded)
		}))
	}
	one("1 attempt, 1 heartbeat", timing, 1)
	one("1 attempt, 10 heartbeats", timing, 10)
	shapes = append(shapes, r.timedLifecycle("a retry: 2 attempts, 1 heartbeat each", func(int) {
		r.submit(retry)
		r.attempt(1, api.OutcomeFailed)
		r.attempt(1, api.OutcomeSucceeded)
	}))
	shapes = append(shapes, r.timedLifecycle("cancelled while running, 1 heartbeat", func(int) {
		id := r.submit(long).TaskID
		d := r.worker.next(t)
		st, res := r.callback(d.env, "started", api.StartedRequest{Attempt: 1, WorkerID: "w"})
		expect(t, "started", st, res, 200, "", api.Continue)
		if status, body := r.Do("POST", "/v1/tasks/"+id+"/cancel", map[string]string{"reason": "user_requested"}); status != 200 {
			t.Fatalf("cancel: %d %s", status, body)
		}
		st, res = r.callback(d.env, "heartbeat", api.HeartbeatRequest{Attempt: 1, WorkerID: "w"})
		if st != 200 || res.ShouldCancel == nil || !*res.ShouldCancel {
			t.Fatalf("heartbeat while cancelling: %d %+v", st, res)
		}
		st, res = r.callback(d.env, "completed", api.CompletedRequest{Attempt: 1, WorkerID: "w", Outcome: api.OutcomeCancelled, CancelledDuringPhase: "processing"})
		expect(t, "completed CANCELLED", st, res, 200, "", api.Committed)
	}))
	one("idempotency key, 1 heartbeat", map[string]any{"idempotencyKey": "cost-idem-1"}, 1)
	one("tenant quota, 1 heartbeat", map[string]any{"tenantId": "quota-tenant"}, 1)
	one("payload 40 KB, 1 heartbeat", map[string]any{"payload": map[string]any{"blob": strings.Repeat("x", 40_000)}}, 1)

	// The sweeper as the function runs it: production's configuration
	// defaults, wired as internal/server wires it (its schedule duty
	// included). The passes compared below are one Sweeper's, after a
	// first pass, not recorded, that does what a Sweeper does at most
	// every few minutes (the leftover streams' clean-up, the quota
	// counters' repair: its period lengthened, so that no compared pass
	// repairs; the invocations' first passes do).
	cfg := config.Default()
	sweeper := func(opts ...func(*zombie.Config)) *zombie.Sweeper {
		return productionSweeper(t, e, cfg, logs.New(r.logs, slog.LevelInfo), opts...)
	}
	sw := sweeper(func(c *zombie.Config) { c.QuotaRepairEvery = 24 * time.Hour })
	r.pass(sw)
	// An explicit idle pass, to take from the pass that makes a fire.
	idlePass := r.pass(sw)
	ms := []int64{idlePass.ms}
	for range timingRuns - 1 {
		ms = append(ms, r.pass(sw).ms)
	}
	slices.Sort(ms)
	idlePass.ms = ms[len(ms)/2] // the median
	// A schedule's fire: the sweep pass that makes it, beyond an idle
	// pass, and its task's lifecycle. The schedule is created through the
	// API (not recorded) and its first fire waited for.
	const fireShape = "a schedule's fire, 1 attempt, 1 heartbeat"
	shapes = append(shapes, r.timed(func(run int) cost.Traffic {
		untilPast(r.createSchedule(fmt.Sprintf("cost-fire-%d", run), time.Now().Add(time.Second), timing))
		if err := e.stack.Store.PromisePulse(ctx, time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		var took time.Duration
		tr := r.lifecycle(fireShape, func() {
			began := time.Now()
			st, err := sw.Sweep(ctx)
			took = time.Since(began)
			if err != nil || st.Schedules.Started != 1 {
				t.Fatalf("the fire's pass: %+v, %v", st.Schedules, err)
			}
			r.attempt(1, api.OutcomeSucceeded)
		})
		u := idlePass.usage
		// The due query that found the schedule is billed one read, as it
		// is when it finds nothing: its row is no read more.
		tr.FirestoreReads -= int64(u.DocsRead) + 1
		tr.FirestoreMissing -= int64(u.DocsMissing)
		tr.FirestoreWrites -= int64(u.DocsWritten)
		tr.FirestoreDeletes -= int64(u.DocsDeleted)
		tr.IndexEntries -= int64(u.IndexEntries)
		tr.Spans -= int64(idlePass.spans)
		tr.Fires, tr.SweeperMs = 1, max(0, took.Milliseconds()-idlePass.ms)
		return tr
	}))

	// A sweeper invocation as the function runs one (Sweeper.Run), by a
	// Sweeper of its own: its first pass does all a tick's may (the quota
	// repair, due every minute; the streams' clean-up, every tenth tick,
	// an upper bound).
	invocation := func(sw *zombie.Sweeper) (cost.Idle, zombie.Stats) {
		if err := e.stack.Store.PromisePulse(ctx, time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		r.settle()
		rc.Reset()
		logw.take()
		spans0 := r.spans()
		began := time.Now()
		st, err := sw.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		inv := cost.Idle{InvocationMs: time.Since(began).Milliseconds(), Passes: int64(st.Passes)}
		u := rc.Usage()
		inv.FirestoreWrites, inv.FirestoreQueries = int64(u.DocsWritten), int64(rc.Counts()["RunQuery"])
		// Nothing is due: each query is empty, and an empty query is
		// billed as one document read.
		inv.FirestoreReads = int64(u.DocsRead) + inv.FirestoreQueries
		inv.LogLines, inv.LogBytes = logw.take()
		inv.Spans = int64(r.spans() - spans0)
		return inv, st
	}
	idle, _ := invocation(sweeper()) // at zero traffic
	for name, d := range snapshot(t, fs, e.stack.Project) {
		if strings.Contains(name, "/documents/meta/") {
			idle.StoredDocBytes += d.bytes
		}
	}
	// Schedules at rest, hours from their next fire: what a pass with them
	// reads and writes beyond the idle pass, and what one keeps.
	for i := range idleSchedules {
		r.createSchedule(fmt.Sprintf("cost-idle-%d", i), time.Now().Add(3*time.Hour), timing)
	}
	withSchedules := r.pass(sw)
	if sch := withSchedules.stats.Schedules; sch.Due != 0 || sch.Upcoming != 0 {
		t.Errorf("a pass with idle schedules: %+v, want nothing due or upcoming", sch)
	}
	rest := cost.IdleSchedule{Schedules: idleSchedules + timingRuns, // the fire shape's too
		PassReads:  int64(withSchedules.usage.DocsRead - idlePass.usage.DocsRead),
		PassWrites: int64(withSchedules.usage.DocsWritten - idlePass.usage.DocsWritten)}
	fired := snapshot(t, fs, e.stack.Project)["projects/"+e.stack.Project+"/databases/(default)/documents/"+store.SchedulesCollection+"/"+store.ScheduleDocID("acme", "cost-fire-0")]
	rest.DocBytes, rest.IndexEntries = fired.bytes, fired.entries
	// One invocation whose first pass makes a fire: not idle, it sweeps on.
	untilPast(r.createSchedule("cost-tick", time.Now().Add(time.Second), timing))
	fireTick, st := invocation(sweeper())
	if st.Schedules.Started != 1 {
		t.Errorf("the invocation that fires: %+v", st.Schedules)
	}
	r.attempt(0, api.OutcomeSucceeded) // its task, to its end

	for _, tr := range shapes {
		if tr.FirestoreWrites == 0 || len(tr.PubSubMessages) == 0 || tr.Invocations["callbacks"] == 0 || len(tr.CloudTasksCreates) == 0 ||
			tr.SubmitRequests+tr.Fires != 1 || (tr.Fires > 0 && tr.Invocations["api"] > 0) {
			t.Errorf("%s: recorded nothing, or not its one submit or fire (a fire without an api request): %+v", tr.Shape, tr)
		}
	}
	// A fire writes what a submit does (the task and its outbox entry)
	// and the schedule twice (decide, settle), and reads the schedule, and
	// perhaps its outbox entry too (the pass's re-drive may query it before
	// its delivery deletes it); the rest is its task's lifecycle.
	if i, j := slices.IndexFunc(shapes, func(t cost.Traffic) bool { return t.Shape == fireShape }), slices.IndexFunc(shapes, func(t cost.Traffic) bool { return t.Shape == "1 attempt, 1 heartbeat" }); i >= 0 && j >= 0 {
		f, s := shapes[i], shapes[j]
		if f.FirestoreWrites != s.FirestoreWrites+2 || f.FirestoreReads < s.FirestoreReads+1 || f.FirestoreReads > s.FirestoreReads+2 || f.FirestoreDeletes != s.FirestoreDeletes {
			t.Errorf("%s: %d reads, %d writes, %d deletes; want the submitted lifecycle's %d (+1, perhaps +2), %d (+2), %d", fireShape,
				f.FirestoreReads, f.FirestoreWrites, f.FirestoreDeletes, s.FirestoreReads, s.FirestoreWrites, s.FirestoreDeletes)
		}
	}
	if rest.PassReads != 0 || rest.PassWrites != 0 || rest.DocBytes == 0 {
		t.Errorf("idle schedules: %+v, want no reads or writes per pass, and a document", rest)
	}
	for _, tr := range shapes {
		if tr.Shape == "1 attempt, 10 heartbeats" {
			b.ReportMetric(float64(tr.FirestoreWrites), "writes/lifecycle")
			b.ReportMetric(float64(tr.FirestoreReads), "reads/lifecycle")
		}
	}
	if out == "" {
		return
	}
	if err := cost.WriteRecording(out, cost.Recording{Recorded: time.Now().UTC().Format(time.DateOnly), Shapes: shapes, Idle: idle,
		FireTick: fireTick, IdleSchedule: rest}); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", out)
}
