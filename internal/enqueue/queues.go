package enqueue

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/servo-dev/servo/internal/task"
)

// Several queues per worker.
//
// A Cloud Tasks queue dispatches at most MaxQueueDispatchesPerSecond (its
// rate_limits.max_dispatches_per_second may not exceed 500: RateLimits in
// the Cloud Tasks v2 API reference,
// https://cloud.google.com/php/docs/reference/cloud-tasks/1.14.4/V2.RateLimits,
// read 2026-11-26). A worker that declares a peak rate above it
// ([Worker.MaxDispatchesPerSecond]) gets N = ⌈rate / 500⌉ queues
// ([QueueCount]), each dispatching rate / N ([Worker.QueueRate]), named by
// [QueueName]: the first is [Worker.Queue] itself (so a worker at N = 1,
// or one whose rate is raised, keeps the queue and the Cloud Tasks it
// already holds), the others that name with "-q1", "-q2", ….
//
// Each attempt goes to one queue chosen from (task id, attempt) by a jump
// consistent hash (Lamping and Veach, "A Fast, Minimal Memory, Consistent
// Hash Algorithm", 2014) of its SHA-256: stable, even over the N queues,
// and the same for every re-drive of the attempt, so a repeated enqueue
// lands on the same Cloud Task name in the same queue and Cloud Tasks
// deduplicates it. A retry (a new attempt) is placed afresh, as
// deterministically.
//
// N grows when the declared rate is raised. The jump hash moves as few
// attempts as possible (going from N to N+1 queues moves 1/(N+1) of them,
// all into the new queue), and for every smaller N it maps an attempt to
// one of the queues its computation visits on the way to the current one
// (about ln N + 1 of them: [queueCandidates]). Held, Dequeue and a
// re-drive's deletion of its predecessor therefore probe those queues, the
// current one first, and find an attempt enqueued under any smaller N
// without recording the queue on the task: no store field, no extra write
// per enqueue, and at N = 1 exactly the calls of a single queue. What is
// not covered: a duplicate of one enqueue made once under the old N and
// once under the new one creates two Cloud Tasks (two deliveries of one
// attempt, which the callbacks already tolerate: the attempt starts
// once), and lowering the rate so that N shrinks drops the highest queues
// with what they hold (the sweeper re-drives those attempts after their
// start timeout; Cloud Tasks keeps a deleted queue's name for about seven
// days, so the queue cannot be re-created sooner).

// MaxQueueDispatchesPerSecond is Cloud Tasks' maximum dispatch rate of one
// queue.
const MaxQueueDispatchesPerSecond = 500

// MaxQueuesPerWorker bounds the queues of one worker (so a declared rate
// of at most 50 000 dispatches a second).
const MaxQueuesPerWorker = 100

// QueueCount is the number of queues that carry rate dispatches a second
// at no more than MaxQueueDispatchesPerSecond each: at least one.
func QueueCount(rate float64) int {
	if !(rate > MaxQueueDispatchesPerSecond) { // NaN and undeclared included
		return 1
	}
	return int(math.Ceil(rate / MaxQueueDispatchesPerSecond))
}

// QueueName is the i-th queue (from 0) of a worker whose first queue is
// base: base itself, then base-q1, base-q2, ….
func QueueName(base string, i int) string {
	if i == 0 {
		return base
	}
	return base + "-q" + strconv.Itoa(i)
}

// Queues returns the worker's queues, the first being w.Queue; none for a
// pull pool.
func (w Worker) Queues() []string {
	if w.Pull {
		return nil
	}
	n := QueueCount(w.MaxDispatchesPerSecond)
	out := make([]string, n)
	for i := range out {
		out[i] = QueueName(w.Queue, i)
	}
	return out
}

// QueueRate is the dispatch rate of each of the worker's queues: the
// declared rate over the number of queues; 0 when none is declared.
func (w Worker) QueueRate() float64 {
	if !(w.MaxDispatchesPerSecond > 0) {
		return 0
	}
	return w.MaxDispatchesPerSecond / float64(QueueCount(w.MaxDispatchesPerSecond))
}

// validateRate checks the declared rate and the names of the queues it
// implies.
func (w Worker) validateRate() error {
	r := w.MaxDispatchesPerSecond
	switch {
	case math.IsNaN(r) || r < 0:
		return fmt.Errorf("maxDispatchesPerSecond must be 0 (not declared: one queue) or positive, got %v", r)
	case QueueCount(r) > MaxQueuesPerWorker:
		return fmt.Errorf("maxDispatchesPerSecond %v needs %d queues of %d dispatches/s, more than the %d a worker may have (at most %d/s)",
			r, QueueCount(r), MaxQueueDispatchesPerSecond, MaxQueuesPerWorker, MaxQueueDispatchesPerSecond*MaxQueuesPerWorker)
	}
	if qs := w.Queues(); len(qs) > 1 && !queueRE.MatchString(qs[len(qs)-1]) {
		return fmt.Errorf("queue %q: with maxDispatchesPerSecond %v its last queue %q is not a valid queue name (QUEUE at most 100 characters)", w.Queue, r, qs[len(qs)-1])
	}
	return nil
}

// QueueIndex is the index, in [0, n), of the queue that t's current
// attempt goes to when its worker has n queues.
func QueueIndex(t *task.Task, n int) int {
	c := queueCandidates(attemptKey(t), n)
	return c[len(c)-1]
}

// attemptQueues returns the queue of t's current attempt among w's queues,
// first, then the queues the attempt went to when the worker had fewer
// queues (newest first): where Held, Dequeue and a re-drive look for it.
func (w Worker) attemptQueues(t *task.Task) []string {
	qs := w.Queues()
	c := queueCandidates(attemptKey(t), len(qs))
	out := make([]string, 0, len(c))
	for i := len(c) - 1; i >= 0; i-- {
		out = append(out, qs[c[i]])
	}
	return out
}

// attemptKey is the hash key of t's current attempt.
func attemptKey(t *task.Task) uint64 {
	sum := sha256.Sum256([]byte(t.ID + "/" + strconv.Itoa(t.Attempt)))
	return binary.BigEndian.Uint64(sum[:8])
}

// queueCandidates runs the jump consistent hash of key over n buckets and
// returns every bucket it visits, ascending: the last is the key's bucket
// for n, and for every m ≤ n the key's bucket is the largest visited one
// below m.
func queueCandidates(key uint64, n int) []int {
	out := []int{0}
	for b, j := int64(0), int64(0); ; b = j {
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
		if j >= int64(n) {
			return out
		}
		out = append(out, int(j))
	}
}
