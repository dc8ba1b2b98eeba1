package zombie_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/zombie"
)

// memStore is an in-memory zombie.Store for unit tests of the sweeper's
// mechanics (pagination, concurrency, counting). It applies the real state
// machine, like the Firestore store does inside its transactions.
type memStore struct {
	mu       sync.Mutex
	tasks    map[string]task.Task
	attempts map[string]map[int]task.Attempt
	events   []task.Event
	queries  []memQuery
	fail     map[string]error // Apply errors by task id
	queryErr map[store.Due]error
	// shards is the number of due shards (DueShards; 0 means 1).
	shards int

	inFlight, maxInFlight atomic.Int32
	applyDelay            time.Duration
	onQuery               func(store.Due)
	beforeApply           func(id string)
}

type memQuery struct {
	Due    store.Due
	Shard  int
	Cursor *store.DueCursor
	Got    int
}

func newMemStore() *memStore {
	return &memStore{tasks: map[string]task.Task{}, attempts: map[string]map[int]task.Attempt{}, fail: map[string]error{}, queryErr: map[store.Due]error{}}
}

// put stores t (already in the wanted state) and an open attempt record.
func (m *memStore) put(t task.Task) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tasks[t.ID] = t
	m.attempts[t.ID] = map[int]task.Attempt{t.Attempt: {Attempt: t.Attempt, WorkerID: "w1", CreatedAt: t.CreatedAt}}
}

func (m *memStore) get(id string) task.Task {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tasks[id]
}

// DueGroups is one group per shard of m.shards (at least 1).
func (m *memStore) DueGroups(store.Due) [][]int {
	groups := make([][]int, max(1, m.shards))
	for i := range groups {
		groups[i] = []int{i}
	}
	return groups
}

func (m *memStore) DueTasks(ctx context.Context, d store.Due, shards []int, now time.Time, limit int, after *store.DueCursor) ([]task.Task, error) {
	shard := shards[0]
	if m.onQuery != nil {
		m.onQuery(d)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.queryErr[d]; err != nil {
		return nil, err
	}
	var due []task.Task
	for _, t := range m.tasks {
		at := store.DueTime(d, &t)
		if t.DueShard != shard || at == nil || at.After(now) || !slices.Contains(store.DueStates[d], t.State) {
			continue
		}
		if after != nil && (at.Before(after.At) || at.Equal(after.At) && t.ID <= after.ID) {
			continue
		}
		due = append(due, t)
	}
	slices.SortFunc(due, func(a, b task.Task) int {
		return cmp.Or(store.DueTime(d, &a).Compare(*store.DueTime(d, &b)), cmp.Compare(a.ID, b.ID))
	})
	if len(due) > limit {
		due = due[:limit]
	}
	m.queries = append(m.queries, memQuery{Due: d, Shard: shard, Cursor: after, Got: len(due)})
	return due, nil
}

func (m *memStore) Apply(ctx context.Context, id string, ev task.Event) (task.Result, error) {
	n := m.inFlight.Add(1)
	defer m.inFlight.Add(-1)
	for {
		cur := m.maxInFlight.Load()
		if n <= cur || m.maxInFlight.CompareAndSwap(cur, n) {
			break
		}
	}
	if m.beforeApply != nil {
		m.beforeApply(id)
	}
	if m.applyDelay > 0 {
		time.Sleep(m.applyDelay)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, ev)
	if err := m.fail[id]; err != nil {
		return task.Result{}, err
	}
	t, ok := m.tasks[id]
	if !ok {
		return task.Result{}, store.ErrNotFound
	}
	var cur *task.Attempt
	if a, ok := m.attempts[id][ev.Attempt]; ok {
		cur = &a
	}
	r := task.Apply(t, cur, ev)
	if r.Write {
		m.tasks[id] = r.Task
		if r.Attempt != nil {
			m.attempts[id][r.Attempt.Attempt] = *r.Attempt
		}
		if r.Next != nil {
			m.attempts[id][r.Next.Attempt] = *r.Next
		}
	}
	return r, nil
}

func (m *memStore) eventsOf(kind task.EventKind) []task.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []task.Event
	for _, e := range m.events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func (m *memStore) queriesOf(d store.Due) []memQuery {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []memQuery
	for _, q := range m.queries {
		if q.Due == d {
			out = append(out, q)
		}
	}
	return out
}

// recorder is a zombie.Enqueuer (and zombie.Redriver) that records calls.
type recorder struct {
	mu        sync.Mutex
	followUps []task.Result
	fail      error
	redrives  atomic.Int32
	next      zombie.Enqueuer // optional: forwards FollowUp
}

func (r *recorder) FollowUp(ctx context.Context, res task.Result) error {
	r.mu.Lock()
	r.followUps = append(r.followUps, res)
	fail := r.fail
	r.mu.Unlock()
	if fail != nil {
		return fail
	}
	if r.next != nil {
		return r.next.FollowUp(ctx, res)
	}
	return nil
}

func (r *recorder) Redrive(ctx context.Context) error {
	r.redrives.Add(1)
	return nil
}

// calls returns the recorded follow-ups by task id.
func (r *recorder) calls() map[string][]task.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]task.Result{}
	for _, f := range r.followUps {
		out[f.Task.ID] = append(out[f.Task.ID], f)
	}
	return out
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.followUps)
}

var errBoom = errors.New("boom")

// The rest of zombie.Store: a memStore keeps no pulse (no outage is ever
// found), no outbox and no quotas.

func (m *memStore) Pulse(context.Context, time.Time, time.Duration) (*task.Outage, error) {
	return nil, nil
}

func (m *memStore) PromisePulse(context.Context, time.Time) error { return nil }

func (m *memStore) OutboxGroups() [][]int { return nil }

func (m *memStore) Undelivered(context.Context, []int, time.Time, int) ([]store.OutboxEntry, error) {
	return nil, nil
}

func (m *memStore) QuotasEnabled() bool { return false }

func (m *memStore) RepairQuotaCounters(context.Context) ([]quota.Repair, error) { return nil, nil }

func (m *memStore) WaitingForSlot(context.Context, time.Time, int, bool) ([]task.Task, int, error) {
	return nil, 0, nil
}
