package enqueue

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/servo-dev/servo/internal/task"
)

func TestQueueCount(t *testing.T) {
	cases := []struct {
		rate float64
		want int
	}{
		{0, 1}, {10, 1}, {499.9, 1}, {500, 1}, {500.5, 2}, {1000, 2}, {1500, 3}, {1501, 4}, {50000, 100}, {math.NaN(), 1}, {-3, 1},
	}
	for _, c := range cases {
		if got := QueueCount(c.rate); got != c.want {
			t.Errorf("QueueCount(%v) = %d, want %d", c.rate, got, c.want)
		}
	}
}

// The queues of a worker: the first is its queue (today's name at N = 1),
// the others follow it; each carries at most 500 dispatches a second and
// together they carry the declared rate.
func TestWorkerQueues(t *testing.T) {
	const base = "projects/my-project/locations/l/queues/servo-render"
	cases := []struct {
		rate float64
		want []string
	}{
		{0, []string{base}},
		{500, []string{base}},
		{1200, []string{base, base + "-q1", base + "-q2"}},
	}
	for _, c := range cases {
		w := Worker{Queue: base, MaxDispatchesPerSecond: c.rate}
		if got := w.Queues(); !slices.Equal(got, c.want) {
			t.Errorf("rate %v: queues %q, want %q", c.rate, got, c.want)
		}
		if c.rate == 0 {
			continue
		}
		if r := w.QueueRate(); r > MaxQueueDispatchesPerSecond || math.Abs(r*float64(len(c.want))-c.rate) > 1e-9 {
			t.Errorf("rate %v: each of %d queues at %v/s", c.rate, len(c.want), r)
		}
	}
}

// ids returns n task ids shaped as the dispatcher makes them (a ULID
// each), the same on every run: a fixed seed for the ULIDs' randomness,
// so the counts below are reproducible.
func ids(n int) []string {
	out := make([]string, n)
	at := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	entropy := rand.New(rand.NewPCG(32, 2))
	for i := range out {
		var r [10]byte
		binary.BigEndian.PutUint64(r[:8], entropy.Uint64())
		binary.BigEndian.PutUint16(r[8:], uint16(entropy.Uint32()))
		var u ulid.ULID
		if err := u.SetTime(ulid.Timestamp(at.Add(time.Duration(i) * time.Millisecond))); err != nil {
			panic(err)
		}
		if err := u.SetEntropy(r[:]); err != nil {
			panic(err)
		}
		out[i] = task.TaskIDPrefix + u.String()
	}
	return out
}

// The mapping of attempts to queues: stable, in range, the same for every
// re-drive of an attempt, and even over the queues: at the declared rate
// no queue takes more than 500 dispatches a second beyond the tolerance.
func TestQueueIndexSpreadsEvenly(t *testing.T) {
	const n, tolerance = 100000, 0.08
	all := ids(n)
	for _, queues := range []int{2, 3, 7, 20} {
		t.Run(strconv.Itoa(queues), func(t *testing.T) {
			rate := float64(queues * MaxQueueDispatchesPerSecond) // the most N queues carry
			if QueueCount(rate) != queues {
				t.Fatalf("QueueCount(%v) = %d", rate, QueueCount(rate))
			}
			counts := make([]int, queues)
			moved := 0
			for _, id := range all {
				tk := task.Task{ID: id, Attempt: 1}
				i := QueueIndex(&tk, queues)
				if i < 0 || i >= queues {
					t.Fatalf("%s: queue %d of %d", id, i, queues)
				}
				for redrive := 1; redrive <= 3; redrive++ {
					again := tk
					again.Redrives = redrive
					if QueueIndex(&again, queues) != i {
						t.Fatalf("%s re-drive %d: queue %d, first dispatch in %d", id, redrive, QueueIndex(&again, queues), i)
					}
				}
				retry := tk
				retry.Attempt = 2
				if QueueIndex(&retry, queues) != i {
					moved++
				}
				if QueueIndex(&retry, queues) != QueueIndex(&retry, queues) {
					t.Fatalf("%s attempt 2: not deterministic", id)
				}
				counts[i]++
			}
			mean := float64(n) / float64(queues)
			for q, c := range counts {
				if math.Abs(float64(c)-mean) > tolerance*mean {
					t.Errorf("queue %d of %d: %d attempts, mean %.0f (tolerance %.0f%%)", q, queues, c, mean, 100*tolerance)
				}
				if load := rate * float64(c) / n; load > MaxQueueDispatchesPerSecond*(1+tolerance) {
					t.Errorf("queue %d of %d: %.0f dispatches/s at the declared %v/s", q, queues, load, rate)
				}
			}
			// Retries are placed afresh: about (N-1)/N of them elsewhere.
			if want := float64(n) * float64(queues-1) / float64(queues); math.Abs(float64(moved)-want) > tolerance*want {
				t.Errorf("%d of %d retries in another queue, want about %.0f", moved, n, want)
			}
		})
	}
}

// When a worker's queues are added to, few attempts change queue (only
// into the new queues), and every attempt's earlier queue is among the
// queues Held, Dequeue and a re-drive look in.
func TestQueueGrowthFindsEarlierQueue(t *testing.T) {
	const n, tolerance = 20000, 0.1
	const base = "projects/my-project/locations/l/queues/servo-render"
	all := ids(n)
	for _, c := range []struct{ from, to int }{{1, 3}, {3, 4}, {3, 7}, {10, 20}} {
		t.Run(strconv.Itoa(c.from)+"to"+strconv.Itoa(c.to), func(t *testing.T) {
			after := Worker{Queue: base, MaxDispatchesPerSecond: float64(c.to * MaxQueueDispatchesPerSecond)}
			before := Worker{Queue: base, MaxDispatchesPerSecond: float64(c.from * MaxQueueDispatchesPerSecond)}
			moved := 0
			for _, id := range all {
				tk := task.Task{ID: id, Attempt: 1}
				old, cur := QueueIndex(&tk, c.from), QueueIndex(&tk, c.to)
				look := after.attemptQueues(&tk)
				if look[0] != after.Queues()[cur] {
					t.Fatalf("%s: looks first in %s, its queue is %s", id, look[0], after.Queues()[cur])
				}
				if !slices.Contains(look, before.Queues()[old]) {
					t.Fatalf("%s: was in queue %d of %d, looked for in %q", id, old, c.from, look)
				}
				if old != cur {
					moved++
					if cur < c.from {
						t.Fatalf("%s: moved from queue %d to the existing queue %d", id, old, cur)
					}
				}
			}
			want := float64(n) * float64(c.to-c.from) / float64(c.to)
			if math.Abs(float64(moved)-want) > tolerance*want {
				t.Errorf("%d of %d attempts changed queue, want about %.0f", moved, n, want)
			}
		})
	}
}
