package zombie_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"testing"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/zombie"
)

// seedRunning stores n RUNNING tasks, due of them with a lease that has
// already run out and the others with a lease an hour away. One task of
// each kind goes through the store's own Create and Apply; the others are
// byte-exact copies of its documents under new ids, committed 500 writes at
// a time (see cloneTask), so that 10 000 tasks take seconds to seed.
func seedRunning(t testing.TB, st *store.Store, project string, n, due int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	live := api.Timing{HeartbeatIntervalMs: 60_000, HeartbeatTimeoutMs: 3_600_000, CancelGracePeriodMs: 30_000, StartTimeoutMs: 600_000}
	seed := func(count int, tm api.Timing, started time.Time) {
		if count <= 0 {
			return
		}
		tk, _, err := st.Create(ctx, task.Task{
			ID: task.NewTaskID(now), RunID: "run_cost", TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "w",
			Payload: json.RawMessage(`{}`), Timing: tm, Retry: api.RetryPolicy{MaxAttempts: 1},
		}, now)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Apply(ctx, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: started}); err != nil {
			t.Fatal(err)
		}
		cloneTask(t, project, tk.ID, count-1)
	}
	seed(due, shortTiming, now.Add(-time.Hour))
	seed(n-due, live, now)
}

// cloneTask writes n copies of task id's document and its attempt 1 (if it
// has a record) under
// new task ids, straight through Firestore's API (test-only bulk seeding).
func cloneTask(t testing.TB, project, id string, n int) {
	t.Helper()
	ctx := context.Background()
	host := os.Getenv(store.EmulatorHostEnv)
	if host == "" {
		t.Fatal("cloneTask needs the Firestore emulator")
	}
	client, err := servotest.FirestoreClient(ctx, host)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	db := "projects/" + project + "/databases/(default)"
	tasks := db + "/documents/" + store.TasksCollection + "/"
	tmpl, err := client.GetDocument(ctx, &pb.GetDocumentRequest{Name: tasks + store.TaskDocID(id)})
	if err != nil {
		t.Fatal(err)
	}
	// A started attempt 1 has no record yet (it is on the task document).
	att, err := client.GetDocument(ctx, &pb.GetDocumentRequest{Name: tasks + store.TaskDocID(id) + "/attempts/1"})
	if err != nil && status.Code(err) != codes.NotFound {
		t.Fatal(err)
	}
	const perCommit = 500
	var writes []*pb.Write
	flush := func() {
		if len(writes) == 0 {
			return
		}
		if _, err := client.Commit(ctx, &pb.CommitRequest{Database: db, Writes: writes}); err != nil {
			t.Fatalf("bulk commit: %v", err)
		}
		writes = nil
	}
	now := time.Now()
	for range n {
		nid := task.NewTaskID(now)
		td := proto.Clone(tmpl).(*pb.Document)
		td.Name, td.CreateTime, td.UpdateTime = tasks+store.TaskDocID(nid), nil, nil
		td.Fields["taskId"] = &pb.Value{ValueType: &pb.Value_StringValue{StringValue: nid}}
		writes = append(writes, &pb.Write{Operation: &pb.Write_Update{Update: td}})
		if att != nil {
			ad := proto.Clone(att).(*pb.Document)
			ad.Name, ad.CreateTime, ad.UpdateTime = tasks+store.TaskDocID(nid)+"/attempts/1", nil, nil
			writes = append(writes, &pb.Write{Operation: &pb.Write_Update{Update: ad}})
		}
		if len(writes) >= perCommit {
			flush()
		}
	}
	flush()
}

// docReads is what Firestore bills for a pass: every document a due query
// returned (at least 1 per query) plus the task and attempt documents each
// transaction read.
func docReads(st zombie.Stats) int {
	n := 0
	for _, d := range []zombie.DutyStats{st.Deadline, st.Cancel, st.Lease, st.Dispatch} {
		n += max(1, d.Due) + 2*(d.Applied+d.NoOp+d.Errors)
	}
	return n
}

// costFixture seeds running RUNNING tasks of which due are due in a new
// project and returns a sweeper over them and the store's RPC counter.
func costFixture(t testing.TB, running, due int, opts ...store.Option) (*zombie.Sweeper, *store.RPCCounter) {
	t.Helper()
	rpc := store.NewRPCCounter()
	project := emulatortest.ProjectID(t)
	st, err := store.New(context.Background(), project, append([]store.Option{store.WithRPCCounter(rpc)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	seedRunning(t, st, project, running, due)
	sw, err := zombie.New(zombie.Config{Store: st, Enqueuer: &recorder{}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	rpc.Reset()
	return sw, rpc
}

// sweepOnce runs one pass and checks that it applied the due tasks.
func sweepOnce(t testing.TB, sw *zombie.Sweeper, due int) zombie.Stats {
	t.Helper()
	stats, err := sw.Sweep(context.Background())
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	if stats.Lease.Due != due || stats.Lease.Applied != due || stats.Total().Due != due {
		t.Fatalf("stats %+v", stats)
	}
	return stats
}

// TestSweepCostGrowsWithDueNotRunning checks, with the RPC-counting
// interceptor, that one pass over ten times more RUNNING tasks with the
// same number due costs exactly the same: one query per duty and group of
// due shards (store.DueGroups; the 384 default shards make 55 + 13 + 26 +
// 26 groups of at most 30 disjunctions, 120 queries, not 4 × 384: the pass
// runs over 45 shards, 7 + 2 + 3 + 3 = 15 queries, since the emulator
// takes over a second per grouped query over 2 000 tasks) plus one read
// and one commit per due task, because every duty is
// an indexed query that returns only what is due, plus the pass's pulse
// (one read and one write, store.Pulse) and, since leases run out, one
// read of Servo's recorded outages (store/outages.go). BenchmarkSweepCost gives the figures for
// 1 000 and 10 000 running tasks of which 100 are due.
func TestSweepCostGrowsWithDueNotRunning(t *testing.T) {
	const due, shards = 20, 45
	groups := func(s *store.Store) int {
		n := 0
		for _, d := range []store.Due{store.DueDeadline, store.DueCancel, store.DueLease, store.DueDispatch} {
			n += len(s.DueGroups(d))
		}
		return n
	}
	prod, err := store.New(context.Background(), emulatortest.ProjectID(t))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if n := groups(prod); n != 120 {
		t.Fatalf("an idle pass over the default %d shards makes %d due queries, want 120", prod.DueShards(), n)
	}
	few, err := store.New(context.Background(), emulatortest.ProjectID(t), store.WithDueShards(shards))
	if err != nil {
		t.Fatal(err)
	}
	defer few.Close()
	queries := groups(few)
	if queries != 15 {
		t.Fatalf("%d shards: %d due queries, want 15", shards, queries)
	}
	want := map[string]int{"RunQuery": queries + 1, "BatchGetDocuments": due + 1, "Commit": due + 1}
	for _, running := range []int{200, 2_000} {
		sw, rpc := costFixture(t, running, due, store.WithDueShards(shards))
		stats := sweepOnce(t, sw, due)
		counts := rpc.Counts()
		t.Logf("running=%d due=%d: RPCs %v, %d document reads", running, due, counts, docReads(stats))
		if !maps.Equal(counts, want) {
			t.Fatalf("running=%d: RPCs %v, want %v", running, counts, want)
		}
	}
}

// BenchmarkSweepCost reports the RPCs and the document reads of one pass
// over 1 000 and over 10 000 RUNNING tasks of which 100 are due (seeded
// afresh, untimed, for every iteration); ns/op is the Firestore emulator's
// time, which says little about Firestore's. Run it with
//
//	go test -run '^$' -bench SweepCost -benchtime 1x ./zombie/
func BenchmarkSweepCost(b *testing.B) {
	const due = 100
	for _, running := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("running=%d/due=%d", running, due), func(b *testing.B) {
			var rpcs, reads int
			for range b.N {
				b.StopTimer()
				sw, rpc := costFixture(b, running, due)
				b.StartTimer()
				stats := sweepOnce(b, sw, due)
				rpcs += rpc.Total()
				reads += docReads(stats)
			}
			b.ReportMetric(float64(rpcs)/float64(b.N), "rpcs/sweep")
			b.ReportMetric(float64(reads)/float64(b.N), "docreads/sweep")
		})
	}
}
