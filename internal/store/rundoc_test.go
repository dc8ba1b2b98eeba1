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

	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/store"
)

// runDocWrites counts the writes of run documents that committed.
type runDocWrites struct {
	mu sync.Mutex
	n  int
}

func (c *runDocWrites) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if r, ok := req.(*pb.CommitRequest); ok && err == nil {
		c.mu.Lock()
		for _, w := range r.GetWrites() {
			if strings.Contains(w.GetUpdate().GetName(), "/"+store.RunsCollection+"/") {
				c.n++
			}
		}
		c.mu.Unlock()
	}
	return err
}

// TestRunDocumentOncePerInterval: submits into one run that a process has
// in flight at once write the run's document once, not one each (the
// store claims the write before its commit), and a store with a longer
// interval (WithRunDocumentEvery, sized to the api's processes) writes it
// again only after it. With the claim made after the commit, the 24
// concurrent submits below wrote it 24 times.
func TestRunDocumentOncePerInterval(t *testing.T) {
	ctx := context.Background()
	rec := &runDocWrites{}
	s, err := store.New(ctx, emulatortest.ProjectID(t), store.WithRunDocumentEvery(store.RunDocumentEveryFor(840)),
		store.WithClientOptions(option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(rec.unary))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if got := store.RunDocumentEveryFor(840); got != 28*time.Minute {
		t.Fatalf("RunDocumentEveryFor(840) = %v, want 28m", got)
	}
	if got := store.RunDocumentEveryFor(3); got != store.RunDocumentEvery {
		t.Fatalf("RunDocumentEveryFor(3) = %v, want %v", got, store.RunDocumentEvery)
	}
	now := time.Now().UTC()
	submit := func(n int, at time.Time) {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				tk := submitted(at, "")
				tk.RunID, tk.TaskKey = "run_busy", fmt.Sprintf("k-%d", i)
				if _, _, err := s.Create(ctx, tk, at); err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
	}
	submit(24, now)
	if rec.n != 1 {
		t.Fatalf("24 concurrent submits into one run wrote its document %d times, want 1", rec.n)
	}
	submit(4, now.Add(27*time.Minute))
	if rec.n != 1 {
		t.Fatalf("submits within the interval wrote the run's document again (%d writes)", rec.n)
	}
	submit(4, now.Add(29*time.Minute))
	if rec.n != 2 {
		t.Fatalf("submits after the interval: %d writes of the run's document, want 2", rec.n)
	}
}

// TestRunDocumentCreatedOnceAcrossProcesses: a run submitted into from
// many processes at once (8 stores here; 610 api instances at 50 000
// tasks/s) has its document created once: each process creates it unless
// it exists, in a commit of its own, and the others write nothing. When
// each wrote it with its first submit's commit, this wrote it 8 times.
func TestRunDocumentCreatedOnceAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	rec := &runDocWrites{}
	project := emulatortest.ProjectID(t)
	var stores []*store.Store
	for range 8 {
		s, err := store.New(ctx, project, store.WithClientOptions(option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(rec.unary))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	now := time.Now().UTC()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, s := range stores {
		for j := range 3 {
			wg.Go(func() {
				<-start
				tk := submitted(now, "")
				tk.RunID, tk.TaskKey = "run_fanout", fmt.Sprintf("k-%d-%d", i, j)
				if _, _, err := s.Create(ctx, tk, now); err != nil {
					t.Error(err)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if rec.n != 1 {
		t.Fatalf("8 processes submitting into one new run wrote its document %d times, want 1", rec.n)
	}
	runs, _, err := stores[0].ListRuns(ctx, store.RunFilter{TenantID: "acme"})
	if err != nil || len(runs) != 1 || runs[0].RunID != "run_fanout" {
		t.Fatalf("runs listed %+v (%v), want run_fanout", runs, err)
	}
}
