package store_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// lossy is a Firestore connection that loses the answers to reads while
// armed: the request reaches Firestore and is served, then the caller is
// told the deadline passed, as when a network partition or a frozen
// Firestore cuts the answer off.
type lossy struct{ armed atomic.Bool }

type lostAnswer struct {
	grpc.ClientStream
	l *lossy
}

func (s lostAnswer) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	if s.l.armed.Load() {
		return status.Error(codes.DeadlineExceeded, "the answer was lost")
	}
	return nil
}

func (l *lossy) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return lostAnswer{cs, l}, nil
}

func lossyStore(t *testing.T, project string) (*store.Store, *lossy) {
	t.Helper()
	l := &lossy{}
	s, err := store.New(context.Background(), project,
		store.WithClientOptions(option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(l.stream))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, l
}

// No lock outlives an outage (issue 33): a callback whose read was served
// by Firestore but whose answer never came back leaves nothing locked, so
// the worker's retried report commits at once. With a transaction begun by
// that read, Servo would never learn its id, could not roll it back, and
// the task would stay locked until Firestore expired the transaction.
func TestLostAnswerLeavesNoLock(t *testing.T) {
	s, _ := newStore(t)
	ls, l := lossyStore(t, s.Project())
	now := time.Now().UTC()
	tk := mustCreate(t, s, submitted(now, ""), now)
	mustApply(t, s, tk.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1, Now: now})
	mustApply(t, s, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: time.Now().UTC()})
	done := task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1",
		Completed: &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: api.OutcomeSucceeded}}

	l.armed.Store(true)
	done.Now = time.Now().UTC()
	if _, err := ls.Apply(context.Background(), tk.ID, done); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("apply with its answer lost: %v, want ErrUnavailable", err)
	}
	l.armed.Store(false)

	// The retry, from this process or another, within a bound far below
	// Firestore's transaction expiry.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	done.Now = time.Now().UTC()
	r, err := s.Apply(ctx, tk.ID, done)
	if err != nil {
		t.Fatalf("the retried completion did not commit: %v", err)
	}
	if r.Task.State != api.Succeeded {
		t.Fatalf("state %s, want SUCCEEDED", r.Task.State)
	}
}

// Concurrent writers of one task never both win: each commit is
// conditional on the version it read, and the loser applies its event
// again to the winner's version (here: two workers start the same attempt
// through two processes; exactly one is accepted).
func TestConcurrentStartsOneWins(t *testing.T) {
	s, _ := newStore(t)
	o := sameProject(t, s)
	now := time.Now().UTC()
	for i := range 5 {
		tk := mustCreate(t, s, submitted(now, ""), now)
		mustApply(t, s, tk.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1, Now: now})
		results := make(chan task.Result, 2)
		for j, st := range []*store.Store{s, o} {
			go func() {
				r, err := st.Apply(context.Background(), tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1,
					WorkerID: []string{"wa", "wb"}[j], Now: time.Now().UTC()})
				if err != nil {
					t.Errorf("round %d: %v", i, err)
				}
				results <- r
			}()
		}
		accepted := 0
		for range 2 {
			if r := <-results; r.Rejection == nil && r.Write {
				accepted++
			}
		}
		if accepted != 1 {
			t.Fatalf("round %d: %d starts accepted, want 1", i, accepted)
		}
	}
}

// An outage seen by the store's own calls credits the leases it
// overlapped: after Firestore comes back, a heartbeat that finds its lease
// run out by wall time, but not counting the outage, is accepted, and the
// sweeper's expiry does nothing; without the outage the same heartbeat
// ends the attempt.
func TestOutageCreditsLeases(t *testing.T) {
	s, _ := newStore(t)
	ls, l := lossyStore(t, s.Project())
	ctx := context.Background()
	start := func() task.Task {
		now := time.Now().UTC()
		tk := submitted(now, "")
		tk.Timing = api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 2000}
		tk = mustCreate(t, s, tk, now)
		mustApply(t, s, tk.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1, Now: now})
		mustApply(t, s, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: time.Now().UTC()})
		return tk
	}
	hb := func(st *store.Store, id string) task.Result {
		r, err := st.Apply(ctx, id, task.Event{Kind: task.EventHeartbeat, Attempt: 1, WorkerID: "w1",
			Heartbeat: &api.HeartbeatRequest{}, Now: time.Now().UTC()})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// Control: a store that saw no outage expires a lease 2.5 s old.
	ctrl := start()
	time.Sleep(2500 * time.Millisecond)
	if r := hb(s, ctrl.ID); r.Rejection == nil || r.Rejection.Code != api.CodeTaskExpired {
		t.Fatalf("control heartbeat: %+v, want task_expired", r.Rejection)
	}

	tk := start()
	l.armed.Store(true)
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) { // the worker keeps trying; every try fails
		if _, err := ls.Apply(ctx, tk.ID, task.Event{Kind: task.EventHeartbeat, Attempt: 1, WorkerID: "w1",
			Heartbeat: &api.HeartbeatRequest{}, Now: time.Now().UTC()}); err == nil {
			t.Fatal("a heartbeat went through the outage")
		}
		time.Sleep(200 * time.Millisecond)
	}
	l.armed.Store(false)
	r := hb(ls, tk.ID)
	if r.Rejection != nil {
		t.Fatalf("heartbeat after the outage: %+v, want accepted", r.Rejection)
	}
	if !r.Task.LeaseExpiresAt.After(time.Now()) {
		t.Fatalf("lease %v not renewed", r.Task.LeaseExpiresAt)
	}

	// Another process learns of the outage from Firestore.
	time.Sleep(300 * time.Millisecond) // the outage's write is in the background
	outs, err := s.Outages(ctx)
	if err != nil || len(outs) == 0 {
		t.Fatalf("recorded outages: %v %v", outs, err)
	}
}

// The sweeper's pulse records a gap between passes longer than their
// cadence as an outage, and nothing for passes on time.
func TestPulseRecordsGap(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	for i, tc := range []struct {
		at      time.Duration
		wantGap bool
	}{{0, false}, {time.Second, false}, {2 * time.Second, false}, {20 * time.Second, true}, {21 * time.Second, false}} {
		gap, err := s.Pulse(ctx, t0.Add(tc.at), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if (gap != nil) != tc.wantGap {
			t.Fatalf("pass %d at +%v: gap %v, want gap=%v", i, tc.at, gap, tc.wantGap)
		}
		if gap != nil && gap.To.Sub(gap.From) != 17*time.Second {
			t.Fatalf("gap %v, want 17s (from the pass at +2s, due again at +3s, to +20s)", gap.To.Sub(gap.From))
		}
	}
	// A starting process checks without recording a pass: twice the same
	// gap, from the last pass (+21s, due again at +22s).
	for range 2 {
		gap, err := s.CheckPulse(ctx, t0.Add(40*time.Second), time.Second)
		if err != nil || gap == nil || !gap.From.Equal(t0.Add(22*time.Second)) {
			t.Fatalf("CheckPulse: %+v %v, want a gap from +22s", gap, err)
		}
	}
}

// A promise of the next pass (PromisePulse, a sweeper window that ended
// early) moves the pulse's expectation: a pass within it is no gap, one
// past it is a gap from the promise; a pass promises its start plus its
// cadence again.
func TestPulsePromise(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	for i, tc := range []struct {
		at       time.Duration
		promise  time.Duration // after the pass, 0: none
		wantFrom time.Duration // the gap's start, -1: no gap
	}{
		{at: 0, promise: 70 * time.Second, wantFrom: -1},
		{at: 60 * time.Second, wantFrom: -1},                             // within the promise (a 1 s cadence would say 59 s late)
		{at: 61 * time.Second, promise: 131 * time.Second, wantFrom: -1}, // 1 s after the previous pass
		{at: 200 * time.Second, wantFrom: 131 * time.Second},             // a tick missed: a gap from the promise
	} {
		gap, err := s.Pulse(ctx, t0.Add(tc.at), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case tc.wantFrom < 0 && gap != nil:
			t.Fatalf("pass %d at +%v: gap %+v, want none", i, tc.at, gap)
		case tc.wantFrom >= 0 && (gap == nil || !gap.From.Equal(t0.Add(tc.wantFrom)) || !gap.To.Equal(t0.Add(tc.at))):
			t.Fatalf("pass %d at +%v: gap %+v, want from +%v", i, tc.at, gap, tc.wantFrom)
		}
		if tc.promise > 0 {
			if err := s.PromisePulse(ctx, t0.Add(tc.promise)); err != nil {
				t.Fatal(err)
			}
		}
	}
}
