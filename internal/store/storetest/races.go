package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// raceRounds is how many times each race is run, on a new task each time,
// so that more than one interleaving is tried.
const raceRounds = 4

// raceCase is two conflicting events applied at once to one task through
// two clients: exactly one of them makes its transitions.
type raceCase struct {
	name string
	// setup makes the task the events race on (through the first client).
	setup func(t *testing.T, s Store, now time.Time) task.Task
	// events builds the two events from the task as set up.
	events func(tk task.Task, now time.Time) [2]task.Event
	// lost is the rejection code of event i when it loses ("": accepted as
	// a no-op, nothing written).
	lost [2]string
	// won checks the stored task after event i won.
	won func(t *testing.T, s Store, i int, final task.Task)
}

func testRaces(t *testing.T, o Opener) {
	cases := []raceCase{
		{
			name:  "two starts by different workers",
			setup: func(t *testing.T, s Store, now time.Time) task.Task { return queuedTask(t, s, now) },
			events: func(_ task.Task, now time.Time) [2]task.Event {
				return [2]task.Event{started(1, "w1", now), started(1, "w2", now)}
			},
			lost: [2]string{api.CodeAttemptAlreadyStarted, api.CodeAttemptAlreadyStarted},
			won:  wonBy([2]string{"w1", "w2"}),
		},
		{
			name:  "two claims by different workers",
			setup: func(t *testing.T, s Store, now time.Time) task.Task { return queuedTask(t, s, now) },
			events: func(_ task.Task, now time.Time) [2]task.Event {
				return [2]task.Event{claimed(1, "p1", now), claimed(1, "p2", now)}
			},
			lost: [2]string{api.CodeAttemptAlreadyStarted, api.CodeAttemptAlreadyStarted},
			won:  wonBy([2]string{"p1", "p2"}),
		},
		{
			name:  "complete against cancel",
			setup: func(t *testing.T, s Store, now time.Time) task.Task { return queuedTask(t, s, now) },
			events: func(_ task.Task, now time.Time) [2]task.Event {
				return [2]task.Event{completed(1, "w1", api.OutcomeSucceeded, "", now), cancel(now)}
			},
			lost: [2]string{api.CodeTaskAlreadyTerminal, api.CodeTaskAlreadyTerminal},
			won:  endedIn([2]api.State{api.Succeeded, api.Cancelled}),
		},
		{
			name:  "two different completions",
			setup: func(t *testing.T, s Store, now time.Time) task.Task { return runningTask(t, s, now, "w1") },
			events: func(_ task.Task, now time.Time) [2]task.Event {
				return [2]task.Event{
					completed(1, "w1", api.OutcomeSucceeded, "", now),
					completed(1, "w1", api.OutcomeFailed, api.CategoryDataQuality, now),
				}
			},
			lost: [2]string{api.CodeCompletionConflict, api.CodeCompletionConflict},
			won:  endedIn([2]api.State{api.Succeeded, api.Failed}),
		},
		{
			name: "completion against lease expiry",
			setup: func(t *testing.T, s Store, now time.Time) task.Task {
				sub := submitted(now, "acme", "")
				sub.Retry.MaxAttempts = 1
				tk := mustCreate(t, s, sub, now)
				return mustAccept(t, s, tk.ID, started(1, "w1", now)).Task
			},
			events: func(tk task.Task, now time.Time) [2]task.Event {
				// The sweeper's event carries a time past the lease; the
				// worker's completion comes well within it.
				return [2]task.Event{
					completed(1, "w1", api.OutcomeSucceeded, "", now),
					{Kind: task.EventLeaseExpired, Attempt: 1, Now: tk.LeaseExpiresAt.Add(time.Second)},
				}
			},
			lost: [2]string{api.CodeTaskAlreadyTerminal, ""},
			won: func(t *testing.T, s Store, i int, final task.Task) {
				want := [2]string{api.ReasonSucceeded, api.ReasonHeartbeatTimeout}[i]
				if !final.State.Terminal() || final.Reason != want {
					t.Errorf("final %s/%s, want terminal with reason %s", final.State, final.Reason, want)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := o.New(t, Config{})
			b := o.Same(t, a)
			wins := [2]int{}
			for round := range raceRounds {
				t.Run(fmt.Sprint("round ", round), func(t *testing.T) {
					wins[race(t, a, b, c)]++
				})
			}
			t.Logf("wins over %d rounds: first event %d, second %d", raceRounds, wins[0], wins[1])
		})
	}
}

// race sets c up, applies its events at once (event 0 through a, event 1
// through b), checks the outcome and returns the winner.
func race(t *testing.T, a, b Store, c raceCase) int {
	t.Helper()
	now := time.Now().UTC()
	tk := c.setup(t, a, now)
	// Both clients have read the task once: no connection is set up
	// during the race.
	for _, s := range []Store{a, b} {
		if got := mustGetTask(t, s, tk.ID); got.Seq != tk.Seq {
			t.Fatalf("client sees seq %d, set up %d", got.Seq, tk.Seq)
		}
	}
	evs := c.events(tk, now.Add(time.Second))
	var results [2]task.Result
	var errs [2]error
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, s := range []Store{a, b} {
		wg.Go(func() {
			<-start
			results[i], errs[i] = s.Apply(t.Context(), tk.ID, evs[i])
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("apply %s: %v", evs[i].Kind, err)
		}
	}
	var winners []int
	for i, r := range results {
		if len(r.Transitions) > 0 {
			winners = append(winners, i)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%d events made transitions, want exactly one:\n%s: %d transitions, %v\n%s: %d transitions, %v", len(winners),
			evs[0].Kind, len(results[0].Transitions), results[0].Rejection, evs[1].Kind, len(results[1].Transitions), results[1].Rejection)
	}
	w, l := winners[0], 1-winners[0]
	win, lose := results[w], results[l]
	if win.Rejection != nil {
		t.Errorf("winner %s refused %v", evs[w].Kind, win.Rejection)
	}
	switch want := c.lost[l]; {
	case want == "" && lose.Rejection != nil:
		t.Errorf("loser %s refused %v, want a no-op", evs[l].Kind, lose.Rejection)
	case want != "" && (lose.Rejection == nil || lose.Rejection.Code != want):
		t.Errorf("loser %s: rejection %v, want %s", evs[l].Kind, lose.Rejection, want)
	}
	// Both clients read the winner's task.
	for _, s := range []Store{a, b} {
		final := mustGetTask(t, s, tk.ID)
		if final.State != win.Task.State || final.Seq != win.Task.Seq || final.Attempt != win.Task.Attempt {
			t.Fatalf("stored %s seq %d attempt %d, the winner left %s seq %d attempt %d",
				final.State, final.Seq, final.Attempt, win.Task.State, win.Task.Seq, win.Task.Attempt)
		}
	}
	// The outbox holds the set-up's transitions and the winner's, each
	// once: none lost, none duplicated.
	es := checkOutbox(t, a, tk.ID)
	var got []string
	for _, e := range es[tk.Seq:] {
		got = append(got, e.EventID)
	}
	var want []string
	for _, tr := range win.Transitions {
		want = append(want, tr.EventID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("outbox after the set-up holds %v, the winner made %v\n%s", got, want, describe(transitionsOf(es)))
	}
	c.won(t, a, w, mustGetTask(t, a, tk.ID))
	return w
}

// wonBy checks that event i's worker runs the attempt.
func wonBy(workers [2]string) func(t *testing.T, s Store, i int, final task.Task) {
	return func(t *testing.T, s Store, i int, final task.Task) {
		t.Helper()
		if final.State != api.Running {
			t.Fatalf("final %s, want RUNNING", final.State)
		}
		as, err := s.AttemptsOf(t.Context(), &final)
		if err != nil {
			t.Fatal(err)
		}
		if len(as) != 1 || as[0].WorkerID != workers[i] {
			t.Fatalf("attempts %+v, want attempt 1 run by %s", as, workers[i])
		}
	}
}

// endedIn checks that event i left the task in its state.
func endedIn(want [2]api.State) func(t *testing.T, s Store, i int, final task.Task) {
	return func(t *testing.T, s Store, i int, final task.Task) {
		t.Helper()
		if final.State != want[i] {
			t.Fatalf("final %s, want %s", final.State, want[i])
		}
	}
}
