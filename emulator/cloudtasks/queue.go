package cloudtasks

import (
	"container/heap"
	"context"
	"math"
	"sync"
	"time"

	pb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// queue is one Cloud Tasks queue: its configuration, its tasks and the
// dispatcher goroutine that pushes them.
type queue struct {
	s    *Server
	name queueName
	full string

	ctx    context.Context // cancelled when the queue is deleted or the server stops
	cancel context.CancelFunc
	wake   chan struct{} // capacity 1: pokes the dispatcher

	mu        sync.Mutex
	cfg       *pb.Queue // normalized; includes state and purge_time
	deleted   bool
	tasks     map[string]*task // by task id
	ready     taskHeap         // tasks waiting for dispatch, by schedule time
	inflight  int
	tokens    float64
	refilled  time.Time
	tombs     map[string]time.Time // task id → when it was deleted or executed
	tombAdds  int
	seq       uint64
	iamPolicy *iampb.Policy
}

// task is a task and the bookkeeping the API does not show.
type task struct {
	id      string
	pb      *pb.Task
	seq     uint64 // creation order, breaks schedule-time ties
	index   int    // position in queue.ready, -1 when not waiting
	running int    // attempts in flight

	firstDispatch time.Time
	executions    int32  // responses other than 5xx
	prevStatus    int    // HTTP status of the previous attempt, 0 for none
	prevReason    string // why the previous attempt failed
}

func newQueue(s *Server, name queueName, cfg *pb.Queue) *queue {
	q := &queue{
		s:     s,
		name:  name,
		full:  name.String(),
		wake:  make(chan struct{}, 1),
		cfg:   cfg,
		tasks: make(map[string]*task),
		tombs: make(map[string]time.Time),
	}
	q.ctx, q.cancel = context.WithCancel(s.ctx)
	return q
}

// snapshotLocked returns a copy of the queue's public state.
func (q *queue) snapshotLocked() *pb.Queue { return proto.Clone(q.cfg).(*pb.Queue) }

// poke wakes the dispatcher without blocking.
func (q *queue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// run is the queue's dispatcher: it starts every due task the rate limits
// allow, then sleeps until the next task is due, a token is refilled, or
// something changes.
func (q *queue) run() {
	for {
		q.mu.Lock()
		next, ok := q.dispatchLocked()
		q.mu.Unlock()
		var t Timer
		if ok {
			t = q.s.clock.AfterFunc(next.Sub(q.s.clock.Now()), q.poke)
		}
		select {
		case <-q.wake:
		case <-q.ctx.Done():
			if t != nil {
				t.Stop()
			}
			return
		}
		if t != nil {
			t.Stop()
		}
	}
}

// dispatchLocked starts the due tasks that the queue's state and rate limits
// allow and returns when it should run again (ok false: only when poked).
func (q *queue) dispatchLocked() (next time.Time, ok bool) {
	if q.deleted || q.cfg.State != pb.Queue_RUNNING {
		return time.Time{}, false
	}
	now := q.s.clock.Now()
	q.refillLocked(now)
	rl := q.cfg.RateLimits
	for q.ready.Len() > 0 {
		t := q.ready[0]
		due := t.pb.ScheduleTime.AsTime()
		if due.After(now) {
			return due, true
		}
		if q.inflight >= int(rl.MaxConcurrentDispatches) {
			return time.Time{}, false // an attempt's completion pokes us
		}
		if q.tokens < 1-1e-9 {
			wait := time.Duration(math.Ceil((1 - q.tokens) / rl.MaxDispatchesPerSecond * float64(time.Second)))
			return now.Add(wait), true
		}
		q.tokens--
		q.startLocked(t, now)
	}
	return time.Time{}, false
}

// refillLocked adds the tokens earned since the last refill to the bucket.
func (q *queue) refillLocked(now time.Time) {
	rl := q.cfg.RateLimits
	burst := float64(rl.MaxBurstSize)
	if q.refilled.IsZero() {
		q.tokens, q.refilled = burst, now
		return
	}
	if el := now.Sub(q.refilled); el > 0 {
		q.tokens = math.Min(burst, q.tokens+el.Seconds()*rl.MaxDispatchesPerSecond)
		q.refilled = now
	}
	if q.tokens > burst {
		q.tokens = burst
	}
}

// addLocked makes t wait for dispatch and wakes the dispatcher if t is next.
func (q *queue) addLocked(t *task) {
	heap.Push(&q.ready, t)
	if t.index == 0 {
		q.poke()
	}
}

// unreadyLocked takes t out of the ready heap if it is there.
func (q *queue) unreadyLocked(t *task) {
	if t.index >= 0 {
		heap.Remove(&q.ready, t.index)
	}
}

// removeLocked deletes t from the queue and tombstones its name.
func (q *queue) removeLocked(t *task, now time.Time) {
	q.unreadyLocked(t)
	delete(q.tasks, t.id)
	q.tombs[t.id] = now
	q.tombAdds++
	if q.tombAdds >= 1024 {
		q.tombAdds = 0
		q.pruneTombsLocked(now)
	}
}

// pruneTombsLocked forgets tombstones older than the window.
func (q *queue) pruneTombsLocked(now time.Time) {
	for id, at := range q.tombs {
		if now.Sub(at) >= q.s.tombstone {
			delete(q.tombs, id)
		}
	}
}

// tombstonedLocked reports whether id was deleted or executed within the
// tombstone window.
func (q *queue) tombstonedLocked(id string, now time.Time) bool {
	at, ok := q.tombs[id]
	if !ok {
		return false
	}
	if now.Sub(at) < q.s.tombstone {
		return true
	}
	delete(q.tombs, id)
	return false
}

// purgeLocked deletes every task.
func (q *queue) purgeLocked(now time.Time) {
	for _, t := range q.tasks {
		q.removeLocked(t, now)
	}
	q.cfg.PurgeTime = timestamppb.New(now.Truncate(time.Microsecond))
}

// taskHeap orders waiting tasks by schedule time, then creation order.
type taskHeap []*task

func (h taskHeap) Len() int { return len(h) }

func (h taskHeap) Less(i, j int) bool {
	a, b := h[i].pb.ScheduleTime.AsTime(), h[j].pb.ScheduleTime.AsTime()
	if !a.Equal(b) {
		return a.Before(b)
	}
	return h[i].seq < h[j].seq
}

func (h taskHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *taskHeap) Push(x any) {
	t := x.(*task)
	t.index = len(*h)
	*h = append(*h, t)
}

func (h *taskHeap) Pop() any {
	old := *h
	n := len(old)
	t := old[n-1]
	old[n-1] = nil
	t.index = -1
	*h = old[:n-1]
	return t
}
