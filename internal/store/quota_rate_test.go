package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// counterWrites counts, per counter document, the writes of the commits
// that succeeded (a gRPC interceptor on the real client).
type counterWrites struct {
	mu  sync.Mutex
	per map[string]int
}

func (c *counterWrites) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if r, ok := req.(*pb.CommitRequest); ok && err == nil {
		c.mu.Lock()
		for _, w := range r.GetWrites() {
			if name := w.GetUpdate().GetName(); strings.Contains(name, "/"+quota.Collection+"/") {
				c.per[name]++
			}
		}
		c.mu.Unlock()
	}
	return err
}

// snapshot returns the documents written, the most writes to one of them
// and the writes in all.
func (c *counterWrites) snapshot() (docs, most, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.per {
		most, total = max(most, n), total+n
	}
	return len(c.per), most, total
}

// A tenant whose policy declares a peak rate has its counters sharded to
// it: 200 concurrent submits through three independent clients (as three
// function instances) against maxRunning 40 never give more than 40 run
// slots, nor more than its share to any shard; their counter writes spread
// over the computed shard count, no document taking more than three times
// the mean; and when the slot holders end, admit events give their slots
// to waiting tasks, still within the limit, with counters exact (the
// repair finds nothing to fix).
func TestQuotaShardedToRateHoldsLimitAndSpreadsWrites(t *testing.T) {
	ctx := context.Background()
	const tasks, maxRunning = 200, 40
	lim := quota.Limits{MaxRunning: maxRunning, PeakRate: 10}
	p := &quota.Policy{Tenants: map[string]quota.Limits{"hot": lim}}
	n := p.ShardsFor(lim)
	if n <= quota.DefaultShards {
		t.Fatalf("ShardsFor = %d: the peak rate did not size the shards", n)
	}
	rec := &counterWrites{per: map[string]int{}}
	first, _ := newStore(t)
	var stores []*store.Store
	for range 3 {
		s, err := store.New(ctx, first.Project(), store.WithQuotas(p),
			store.WithClientOptions(option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(rec.unary))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	now := time.Now().UTC()
	ids := make([]string, tasks)
	batches := make([][]task.Task, len(stores))
	for i := range tasks {
		tk := submitted(now, "")
		tk.TenantID, tk.TaskKey = "hot", fmt.Sprintf("k-%d", i)
		ids[i] = tk.ID
		batches[i%len(stores)] = append(batches[i%len(stores)], tk)
	}
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			for _, r := range s.CreateMany(ctx, batches[i], now, true) {
				if r.Err != nil {
					t.Errorf("create: %v", r.Err)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// slots reads every task and checks the limit, in all and per shard.
	slots := func(when string) (slotted, waiting []string) {
		t.Helper()
		perShard := map[int]int{}
		for _, id := range ids {
			tk, err := first.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tk.Quota == nil:
				t.Fatalf("%s: task %s has no quota hold", when, id)
			case tk.Quota.Slot && !tk.State.Terminal():
				slotted = append(slotted, id)
				perShard[tk.Quota.TenantSlotShard]++
			case tk.State == api.Queued && tk.WaitingSince != nil:
				waiting = append(waiting, id)
			}
		}
		if len(slotted) > maxRunning {
			t.Fatalf("%s: %d tasks hold a run slot, limit %d", when, len(slotted), maxRunning)
		}
		for k, c := range perShard {
			if k >= n || c > quota.Share(maxRunning, n, k) {
				t.Fatalf("%s: shard %d holds %d slots, its share is %d of %d shards", when, k, c, quota.Share(maxRunning, n, k), n)
			}
		}
		// Every free slot is found: once one is free, each of the many
		// submits or admits that follow reads it with probability
		// (1+MaxProbes)/n.
		if len(slotted) != maxRunning {
			t.Fatalf("%s: %d tasks hold a slot, want all %d taken (%d waiting)", when, len(slotted), maxRunning, len(waiting))
		}
		return slotted, waiting
	}
	// spread checks that the counter writes went to n documents, none
	// taking more than three times the mean.
	spread := func(when string) {
		t.Helper()
		docs, most, total := rec.snapshot()
		if docs != n || most > 3*total/n {
			t.Fatalf("%s: %d counter writes over %d documents, at most %d to one; want %d documents, none over %d", when, total, docs, most, n, 3*total/n)
		}
		t.Logf("%s: %d counter writes over %d documents, at most %d to one", when, total, docs, most)
	}
	slotted, waiting := slots("after the submits")
	spread("after the submits")
	if len(waiting) != tasks-maxRunning {
		t.Fatalf("%d tasks wait, want %d", len(waiting), tasks-maxRunning)
	}

	// The slot holders start and end, through the three clients.
	for i, id := range slotted {
		s := stores[i%len(stores)]
		mustApply(t, s, id, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: time.Now().UTC()})
		mustApply(t, s, id, task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1", Now: time.Now().UTC(),
			Completed: &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: api.OutcomeSucceeded}})
	}
	// Admit events (the sweeper's admit duty), in submit order, from the
	// three clients at once, until a pass admits nothing.
	admitted := 0
	for pass := 0; pass < 3; pass++ {
		var mu sync.Mutex
		took := 0
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Go(func() {
				for j := i; j < len(waiting); j += len(stores) {
					r, err := s.Apply(ctx, waiting[j], task.Event{Kind: task.EventAdmit, Now: time.Now().UTC()})
					if err != nil {
						t.Errorf("admit %s: %v", waiting[j], err)
						return
					}
					if r.Write {
						mu.Lock()
						took++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if admitted += took; took == 0 {
			break
		}
		_, waiting = slots(fmt.Sprintf("admit pass %d", pass))
	}
	if admitted != maxRunning {
		t.Fatalf("%d waiting tasks admitted after %d slots freed, want %d", admitted, len(slotted), maxRunning)
	}
	slots("after the admits")
	spread("after the admits")
	u, err := first.QuotaUsage(ctx, quota.KindTenant, "hot")
	if err != nil || u.Shards != n || u.Running != maxRunning || u.Queued != tasks-maxRunning {
		t.Fatalf("usage %+v (%v), want %d shards, %d running, %d queued", u, err, n, maxRunning, tasks-maxRunning)
	}
	// The usage is three aggregations (a count and two sums, each a read
	// per 1 000 shards), not a read of every shard: a scope sized for
	// 30 000 tasks/s has 150 000.
	rc := store.NewRPCCounter()
	counted, err := store.New(ctx, first.Project(), store.WithQuotas(p), store.WithRPCCounter(rc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { counted.Close() })
	rc.Reset()
	if again, err := counted.QuotaUsage(ctx, quota.KindTenant, "hot"); err != nil || again != u {
		t.Fatalf("usage through the counted store %+v (%v), want %+v", again, err, u)
	}
	if c := rc.Counts(); c["RunAggregationQuery"] != 3 || len(c) != 1 || rc.Usage().DocsRead != 0 {
		t.Fatalf("usage RPCs %v, %d documents read: want three RunAggregationQuery and no document", c, rc.Usage().DocsRead)
	}
	reps, err := stores[0].RepairQuotaCounters(ctx)
	if err != nil || len(reps) != 0 {
		t.Fatalf("repair: %+v %v, want the counters exact", reps, err)
	}
}
