package callbacks_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	firestoreapi "cloud.google.com/go/firestore/apiv1"
	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// latencies collects per-operation latencies from concurrent goroutines
// and reports throughput and percentiles.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B, unit string, elapsed time.Duration) {
	slices.Sort(l.d)
	pct := func(p float64) float64 {
		if len(l.d) == 0 {
			return 0
		}
		return float64(l.d[min(len(l.d)-1, int(p*float64(len(l.d))))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(len(l.d))/elapsed.Seconds(), unit)
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkCallbacks measures accepted heartbeats (one transaction: a
// masked BatchGetDocuments and a masked Commit of the task's document)
// through the HTTP handler, next to a bare Firestore read+commit
// transaction on a one-field document through the same low-level API, on
// the same emulator in the same run: the difference is what the handler
// adds (HTTP, token, JSON, the state machine, a larger document). Two floors are measured
// beside them: the same bare transaction on copies of a running task's
// document with the heartbeat's masks (what the emulator alone costs for
// the document a heartbeat touches), and the HTTP hop to a handler that
// only answers.
//
//	go test -run '^$' -bench BenchmarkCallbacks -benchtime 300x ./callbacks/
func BenchmarkCallbacks(b *testing.B) {
	e := newEnv(b, func(c *callbacks.Config) {
		c.Logger = logs.New(io.Discard, nil)
		c.Now = func() time.Time { return time.Now().UTC() }
	})
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	const parallel = 8
	client := newClient(parallel)
	longLease := func(tk *task.Task) { tk.Timing = api.Timing{HeartbeatIntervalMs: 30000, HeartbeatTimeoutMs: 3600000} }
	newRunning := func() (task.Task, string) {
		tk := e.create(longLease)
		e.apply(tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: time.Now().UTC()})
		return tk, e.tokenFor(scopeOf(tk, 1), time.Hour, time.Now())
	}
	heartbeat := func(b *testing.B, tk task.Task, tok string, lat *latencies) {
		start := time.Now()
		rp, err := httpPost(client, srv.URL, callbacks.KindHeartbeat, tk.ID, tok, heartbeatReq(1, "w1"))
		lat.add(time.Since(start))
		if err != nil || rp.status != 200 {
			b.Errorf("heartbeat: %v %d %s", err, rp.status, rp.raw)
		}
	}

	// The bare transaction: the same client stack and emulator, no Servo.
	host := emulatortest.FirestoreHost(b)
	fs, err := servotest.FirestoreClient(e.ctx, host)
	if err != nil {
		b.Fatal(err)
	}
	defer fs.Close()
	db := "projects/" + e.project + "/databases/(default)"
	bare := func(b *testing.B, doc string, n int, lat *latencies) {
		start := time.Now()
		err := bareReadCommit(e.ctx, fs, db, doc, n)
		lat.add(time.Since(start))
		if err != nil {
			b.Error(err)
		}
	}
	docName := func(i int) string { return db + "/documents/bench/doc" + strconv.Itoa(i) }

	// Warm the emulator's JVM up first, both paths in turn, so that the
	// order of the sub-benchmarks does not decide their figures (the JIT
	// keeps speeding the emulator up for some thousands of transactions).
	{
		tk, tok := newRunning()
		for i := range 1500 {
			heartbeat(b, tk, tok, &latencies{})
			bare(b, docName(0), i, &latencies{})
		}
	}

	b.Run("callback=heartbeat/serial", func(b *testing.B) {
		tk, tok := newRunning()
		heartbeat(b, tk, tok, &latencies{}) // warm the connection
		var lat latencies
		e.rpc.Reset()
		b.ResetTimer()
		start := time.Now()
		for b.Loop() {
			heartbeat(b, tk, tok, &lat)
		}
		lat.report(b, "callbacks/s", time.Since(start))
		b.ReportMetric(float64(e.rpc.Total())/float64(b.N), "rpcs/callback")
	})
	// The same transaction without HTTP, token and JSON: store.Apply alone.
	b.Run("store.Apply=heartbeat/serial", func(b *testing.B) {
		tk, _ := newRunning()
		hb := heartbeatReq(1, "w1")
		var lat latencies
		b.ResetTimer()
		start := time.Now()
		for b.Loop() {
			t0 := time.Now()
			_, err := e.st.Apply(e.ctx, tk.ID, task.Event{Kind: task.EventHeartbeat, Attempt: 1, WorkerID: "w1", Heartbeat: &hb, Now: time.Now().UTC()})
			lat.add(time.Since(t0))
			if err != nil {
				b.Fatal(err)
			}
		}
		lat.report(b, "tx/s", time.Since(start))
	})
	b.Run("callback=heartbeat/parallel=8-tasks", func(b *testing.B) {
		tasks := make([]task.Task, parallel)
		toks := make([]string, parallel)
		for i := range tasks {
			tasks[i], toks[i] = newRunning()
		}
		var lat latencies
		b.ResetTimer()
		start := time.Now()
		runParallel(b.N, parallel, func(w int) { heartbeat(b, tasks[w], toks[w], &lat) })
		lat.report(b, "callbacks/s", time.Since(start))
	})

	// The floor for the heartbeat's own document: the bare transaction on
	// copies of a running task's document, reading through the heartbeat's
	// field mask and writing, through an update mask, the fields one
	// heartbeat changed. What the emulator alone costs for that document.
	mask, replayOn := heartbeatReplay(b, e, fs, db, newRunning, func(tk task.Task, tok string) {
		heartbeat(b, tk, tok, &latencies{})
	})
	copies := make([]*pb.Write, parallel)
	for i := range copies {
		copies[i] = replayOn(db + "/documents/bench/task-copy-" + strconv.Itoa(i))
	}
	replay := func(w *pb.Write, lat *latencies) {
		t0 := time.Now()
		err := servotest.ReadCommit(e.ctx, fs, db, w.GetUpdate().GetName(), mask, withNow(w))
		lat.add(time.Since(t0))
		if err != nil {
			b.Error(err)
		}
	}
	b.Run("bare=read+commit/serial/task-document", func(b *testing.B) {
		replay(copies[0], &latencies{})
		var lat latencies
		b.ResetTimer()
		start := time.Now()
		for b.Loop() {
			replay(copies[0], &lat)
		}
		lat.report(b, "tx/s", time.Since(start))
	})
	b.Run("bare=read+commit/parallel=8-docs/task-document", func(b *testing.B) {
		var lat latencies
		b.ResetTimer()
		start := time.Now()
		runParallel(b.N, parallel, func(w int) { replay(copies[w], &lat) })
		lat.report(b, "tx/s", time.Since(start))
	})
	// The floor for the HTTP hop: the same client posting the same
	// heartbeat to a handler that reads the body and answers 200 with the
	// reply a real heartbeat got, no token check, no Firestore.
	b.Run("http=no-op/serial", func(b *testing.B) {
		tk, tok := newRunning()
		answered, err := httpPost(client, srv.URL, callbacks.KindHeartbeat, tk.ID, tok, heartbeatReq(1, "w1"))
		if err != nil || answered.status != 200 {
			b.Fatalf("heartbeat: %v %d %s", err, answered.status, answered.raw)
		}
		reply := []byte(answered.raw)
		noop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(reply)
		}))
		defer noop.Close()
		post := func() error {
			_, err := httpPost(client, noop.URL, callbacks.KindHeartbeat, tk.ID, tok, heartbeatReq(1, "w1"))
			return err
		}
		_ = post()
		var lat latencies
		b.ResetTimer()
		start := time.Now()
		for b.Loop() {
			t0 := time.Now()
			err := post()
			lat.add(time.Since(t0))
			if err != nil {
				b.Fatal(err)
			}
		}
		lat.report(b, "requests/s", time.Since(start))
	})

	b.Run("bare=read+commit/serial", func(b *testing.B) {
		bare(b, docName(0), 0, &latencies{})
		var lat latencies
		b.ResetTimer()
		start := time.Now()
		i := 0
		for b.Loop() {
			i++
			bare(b, docName(0), i, &lat)
		}
		lat.report(b, "tx/s", time.Since(start))
	})
	b.Run("bare=read+commit/parallel=8-docs", func(b *testing.B) {
		var lat latencies
		b.ResetTimer()
		start := time.Now()
		runParallel(b.N, parallel, func(w int) { bare(b, docName(w+1), w, &lat) })
		lat.report(b, "tx/s", time.Since(start))
	})
}

// runParallel runs n calls of f over workers goroutines; f gets the
// worker's index (each worker owns one task or document).
func runParallel(n, workers int, f func(worker int)) {
	jobs := make(chan struct{}, n)
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range jobs {
				f(w)
			}
		})
	}
	wg.Wait()
}

// bareReadCommit is one bare transaction: read doc in a new read-write
// transaction (BatchGetDocuments), then commit a write of it.
func bareReadCommit(ctx context.Context, fs *firestoreapi.Client, db, doc string, n int) error {
	return servotest.ReadCommit(ctx, fs, db, doc, nil, &pb.Write{
		Operation: &pb.Write_Update{Update: &pb.Document{Name: doc, Fields: map[string]*pb.Value{
			"n": {ValueType: &pb.Value_IntegerValue{IntegerValue: int64(n)}}}}},
	})
}

// heartbeatReplay makes the bare transaction a heartbeat amounts to: it
// starts a task, reads its document, sends one heartbeat and reads it
// again. It returns the heartbeat's read mask and replayOn, which copies
// the task's document to name and returns the write of the fields the
// heartbeat changed (top-level fields and those of the live attempt),
// aimed at that copy.
func heartbeatReplay(b *testing.B, e *env, fs *firestoreapi.Client, db string, newRunning func() (task.Task, string), beat func(task.Task, string)) (mask []string, replayOn func(name string) *pb.Write) {
	b.Helper()
	tk, tok := newRunning()
	name := db + "/documents/" + store.TasksCollection + "/" + store.TaskDocID(tk.ID)
	get := func() *pb.Document {
		d, err := fs.GetDocument(e.ctx, &pb.GetDocumentRequest{Name: name})
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	before := get()
	beat(tk, tok)
	after := get()
	fields := map[string]*pb.Value{}
	var paths []string
	for k, v := range after.GetFields() {
		if k == "live" {
			old := before.GetFields()["live"].GetMapValue().GetFields()
			live := map[string]*pb.Value{}
			for lk, lv := range v.GetMapValue().GetFields() {
				if !proto.Equal(lv, old[lk]) {
					live[lk] = lv
					paths = append(paths, "live."+lk)
				}
			}
			fields[k] = &pb.Value{ValueType: &pb.Value_MapValue{MapValue: &pb.MapValue{Fields: live}}}
			continue
		}
		if !proto.Equal(v, before.GetFields()[k]) {
			fields[k] = v
			paths = append(paths, k)
		}
	}
	if len(paths) == 0 {
		b.Fatal("the heartbeat changed no field")
	}
	slices.Sort(paths)
	b.Logf("a heartbeat reads %d field paths and writes %v", len(store.HeartbeatReadMask()), paths)
	return store.HeartbeatReadMask(), func(copyName string) *pb.Write {
		if _, err := fs.Commit(e.ctx, &pb.CommitRequest{Database: db, Writes: []*pb.Write{{
			Operation: &pb.Write_Update{Update: &pb.Document{Name: copyName, Fields: after.GetFields()}}}}}); err != nil {
			b.Fatal(err)
		}
		return &pb.Write{
			Operation:  &pb.Write_Update{Update: &pb.Document{Name: copyName, Fields: fields}},
			UpdateMask: &pb.DocumentMask{FieldPaths: paths},
		}
	}
}

// withNow is w with every timestamp it writes set to now, as each
// heartbeat's would be.
func withNow(w *pb.Write) *pb.Write {
	w = proto.Clone(w).(*pb.Write)
	now := timestamppb.Now()
	var set func(fields map[string]*pb.Value)
	set = func(fields map[string]*pb.Value) {
		for _, v := range fields {
			switch x := v.GetValueType().(type) {
			case *pb.Value_TimestampValue:
				x.TimestampValue = now
			case *pb.Value_MapValue:
				set(x.MapValue.GetFields())
			}
		}
	}
	set(w.GetUpdate().GetFields())
	return w
}
