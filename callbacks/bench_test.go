package callbacks_test

import (
	"context"
	"io"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	firestoreapi "cloud.google.com/go/firestore/apiv1"
	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/servo-dev/servo/callbacks"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/logs"
	"github.com/servo-dev/servo/task"
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

// BenchmarkCallbacks measures accepted heartbeats (one transaction:
// BatchGetDocuments + Commit of the task and attempt documents) through
// the HTTP handler, next to a bare Firestore read+commit transaction on one
// document through the same low-level API, on the same emulator in the
// same run: the difference is what the handler adds (HTTP, token, JSON,
// state machine, two documents instead of one).
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
	longLease := func(tk *task.Task) { tk.Timing = task.Timing{HeartbeatIntervalMs: 30000, HeartbeatTimeoutMs: 3600000} }
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
	fs, err := firestoreapi.NewClient(e.ctx, option.WithEndpoint(host), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithGRPCDialOption(grpc.WithPerRPCCredentials(ownerCreds{})))
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
	stream, err := fs.BatchGetDocuments(ctx, &pb.BatchGetDocumentsRequest{
		Database: db, Documents: []string{doc},
		ConsistencySelector: &pb.BatchGetDocumentsRequest_NewTransaction{NewTransaction: &pb.TransactionOptions{
			Mode: &pb.TransactionOptions_ReadWrite_{ReadWrite: &pb.TransactionOptions_ReadWrite{}}}},
	})
	if err != nil {
		return err
	}
	var tx []byte
	for {
		res, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if t := res.GetTransaction(); len(t) > 0 {
			tx = t
		}
	}
	_, err = fs.Commit(ctx, &pb.CommitRequest{Database: db, Transaction: tx, Writes: []*pb.Write{{
		Operation: &pb.Write_Update{Update: &pb.Document{Name: doc, Fields: map[string]*pb.Value{
			"n": {ValueType: &pb.Value_IntegerValue{IntegerValue: int64(n)}}}}},
	}}})
	return err
}

// ownerCreds authenticates to the emulator as its owner, as the store does.
type ownerCreds struct{}

func (ownerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer owner"}, nil
}
func (ownerCreds) RequireTransportSecurity() bool { return false }
