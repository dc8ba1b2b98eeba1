package store

import (
	"context"
	"sync"
)

// keyedMutex serialises work per key within one process. Store.Apply uses
// it per task: transactions on one task from one process would only
// contend inside Firestore (whose emulator handles contention poorly);
// across processes, Firestore's transactions decide.
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	held chan struct{} // a one-slot semaphore
	refs int
}

// lock locks key, or gives up when ctx ends; on success it returns the
// unlock function.
func (k *keyedMutex) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyedEntry{}
	}
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{held: make(chan struct{}, 1)}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
	select {
	case e.held <- struct{}{}:
		return func() { <-e.held; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}

// lockAll locks keys in order, or none of them when ctx ends first, and
// returns the function that unlocks them (in reverse order).
func (k *keyedMutex) lockAll(ctx context.Context, keys []string) (func(), error) {
	var unlocks []func()
	release := func() {
		for i := len(unlocks) - 1; i >= 0; i-- {
			unlocks[i]()
		}
	}
	for _, key := range keys {
		u, err := k.lock(ctx, key)
		if err != nil {
			release()
			return nil, err
		}
		unlocks = append(unlocks, u)
	}
	return release, nil
}
