package devstack

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/zombie"
)

// The local sweeper rests while nothing is due. Production's sweeper is
// woken by Cloud Scheduler once a minute; the local stack's ticker instead
// publishes a tick (through Pub/Sub, as in production) only when a pass
// has work:
//
//   - A tick starts an invocation that sweeps every SweepEvery while
//     anything is due or upcoming before its window's end, and ends early
//     after a pass that found nothing (zombie's SweepEarlyEnd, as in
//     production).
//   - When the invocation has ended, the ticker asks the sweeper when a
//     pass would next find work the store holds (zombie.Sweeper.NextDue:
//     one document of each duty's own due query, the due schedules' and
//     the outbox's), promises the pulse that time (so that the sleep is no
//     outage, store.PromisePulse; while an attempt holds a lease or a
//     cancel grace, a second ahead, renewed every second, so that a
//     servo dev that dies meanwhile is still an outage its successor
//     credits them with), and sleeps until then, RestFallback at most.
//   - Any Firestore commit the stack makes other than the sweeper's own
//     (a submit, a callback, a cancel, a schedule's change, an event's
//     delivery: whatever may set or move a due time) wakes it; the tick
//     then goes out at once, no sooner than SweepEvery after the end of
//     the previous invocation.
//
// So an idle stack sends Firestore nothing between two ticks, a timer the
// store holds is swept at its due time, and what no query shows (the quota
// counters' repair, the leftover event-stream subscriptions' cleaning, a
// write made by another process on the same emulator) waits RestFallback
// at most.

// RestFallback is the longest the local sweeper sleeps (or SweepEvery
// when longer): the due times no store query shows, such as the quota
// counters' repair (a minute) or a write by another process, wait this
// long at most. Under a minute, so that an idle stack still makes a pass
// in every minute, as production's once-a-minute Scheduler tick does (the
// sweeper-silence alert counts passes a minute; the dashboard calls a
// sweeper stale after 90 s).
const RestFallback = 50 * time.Second

// restState is what the resting ticker waits on.
type restState struct {
	// wake has a value when the stack committed a write since it was
	// last drained.
	wake chan struct{}
	// done receives the tick (tickAttr) of each invocation of the
	// stack's that ended.
	done chan string
	// wakes counts the writes that woke (or would have woken) the
	// ticker; sleeps counts its sleeps (tests).
	wakes, sleeps atomic.Int64
	// sleeping is the time the ticker sleeps until, in Unix nanoseconds,
	// while it sleeps; 0 otherwise.
	sleeping atomic.Int64
}

func newRestState() *restState {
	return &restState{wake: make(chan struct{}, 1), done: make(chan string, 8)}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func drain(ch chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// storeOption wakes the ticker after every Firestore commit of the
// stack's store that is not the sweeper's own (store.WithCause): a unary
// client interceptor, whatever the commit's outcome (a commit that timed
// out may still have been applied).
func (r *restState) storeOption() store.Option {
	return store.WithClientOptions(option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if strings.HasSuffix(method, "/Commit") && store.CauseOf(ctx) != "sweeper" {
				r.wakes.Add(1)
				signal(r.wake)
			}
			return err
		})))
}

// invocationDone is the sweep router's callback after each invocation,
// with its tick's tickAttr.
func (r *restState) invocationDone(tick string) {
	select {
	case r.done <- tick:
	default: // the ticker waits for another tick's
	}
}

// runResting drives the sweeper: tick publishes one tick, named by its
// tickAttr, and reports whether it went out; tickEvery bounds the wait for
// its invocation; every is the sweeper's cadence (SweepEvery). It returns
// when ctx ends.
func (s *Stack) runResting(ctx context.Context, sw *zombie.Sweeper, tick func(name string) bool, tickEvery, every time.Duration) {
	r := s.rest
	fallback := max(RestFallback, every)
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for seq := 1; ; seq++ {
		name := strconv.Itoa(seq)
		if !tick(name) {
			// Not published (Pub/Sub down): try again soon.
			if ctx.Err() != nil || !wait(every) {
				return
			}
			continue
		}
		// The invocation the tick started sweeps while anything is due
		// before its window's end. A push that never comes (Pub/Sub lost
		// or froze it) is waited for one scheduler period at most; an
		// earlier tick's invocation (late, or pushed again) is not this
		// one.
		t := time.NewTimer(tickEvery + every)
	invocation:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case done := <-r.done:
				if done == name {
					break invocation
				}
			case <-t.C:
				break invocation
			}
		}
		t.Stop()
		ended := time.Now()
		// Writes from here on wake the ticker: those before are in what
		// NextDue reads.
		drain(r.wake)
		at, leased := s.nextPass(ctx, sw, ended, every, fallback)
		if !at.After(time.Now()) {
			continue
		}
		r.sleeping.Store(at.UnixNano())
		r.sleeps.Add(1)
		woken := false
		for !woken {
			// While an attempt holds a lease or a cancel grace, the
			// promise runs a second or so ahead, renewed while the
			// ticker sleeps, so that a servo dev that dies meanwhile is
			// an outage its successor credits them with, as when it
			// swept every SweepEvery; with none, nothing is credited,
			// and one promise covers the whole sleep.
			until := at
			if leased {
				until = earlier(at, time.Now().Add(promiseEvery))
			}
			s.promise(ctx, until, every)
			t = time.NewTimer(time.Until(until))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			case <-r.wake:
				t.Stop()
				woken = true
			}
			if !until.Before(at) {
				break
			}
		}
		r.sleeping.Store(0)
		// No sooner than every after the last invocation ended.
		if d := time.Until(ended.Add(every)); woken && d > 0 && !wait(d) {
			return
		}
	}
}

// promiseEvery is how often the sleeping ticker renews the pulse's
// promise while an attempt holds a lease or a cancel grace.
const promiseEvery = time.Second

// nextPass returns when the next tick should go out after an invocation
// that ended at ended: the earliest due time the store holds (NextDue),
// fallback after ended at most, every after it at least; every after ended
// when the store cannot say. leased says whether any task holds a lease
// or a cancel grace (RUNNING or CANCELLING: one document of the lease
// duty's query, however far its lease; true when the store cannot say).
func (s *Stack) nextPass(ctx context.Context, sw *zombie.Sweeper, ended time.Time, every, fallback time.Duration) (at time.Time, leased bool) {
	ctx, cancel := context.WithTimeout(store.WithCause(ctx, "sweeper"), 30*time.Second)
	defer cancel()
	at = ended.Add(fallback)
	next, found, err := sw.NextDue(ctx, at)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.log.Warn("sweeper: could not read the next due time; sweeping again soon", "error", err)
		}
		at = ended.Add(every)
	case found:
		at = next
	}
	leased = true
	if err == nil {
		leased = false
		for _, group := range s.Store.DueGroups(store.DueLease) {
			ts, err := s.Store.DueTasks(ctx, store.DueLease, group, farFuture, 1, nil)
			if err != nil || len(ts) > 0 {
				leased = true
				break
			}
		}
	}
	return later(at, ended.Add(every)), leased
}

// farFuture bounds the query of every lease.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// promise records that the next pass comes before next plus every (best
// effort), so that a sleep until next is not taken for an outage of the
// sweeper; a promise within every needs no write (each pass promises that
// much).
func (s *Stack) promise(ctx context.Context, next time.Time, every time.Duration) {
	if !next.After(time.Now().Add(every)) {
		return
	}
	ctx, cancel := context.WithTimeout(store.WithCause(ctx, "sweeper"), 10*time.Second)
	defer cancel()
	if err := s.Store.PromisePulse(ctx, next.Add(every)); err != nil && ctx.Err() == nil {
		s.log.Warn("sweeper: recording the next pass's promise failed", "error", err)
	}
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// RestStatus is the local sweeper's rest (Stack.SweeperRest).
type RestStatus struct {
	// Until is when the sleeping ticker wakes at the latest (the next
	// due time, or RestFallback after the last invocation); zero while
	// the sweeper is awake.
	Until time.Time
	// Sleeps counts the ticker's sleeps, Wakes the commits that woke it
	// (or would have, had it slept).
	Sleeps, Wakes int64
}

// SweeperRest says whether the local sweeper sleeps, until when, and how
// often it slept and was woken by a write.
func (s *Stack) SweeperRest() RestStatus {
	st := RestStatus{Sleeps: s.rest.sleeps.Load(), Wakes: s.rest.wakes.Load()}
	if ns := s.rest.sleeping.Load(); ns != 0 {
		st.Until = time.Unix(0, ns)
	}
	return st
}
