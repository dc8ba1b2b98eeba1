package store

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestKeyedMutex(t *testing.T) {
	var k keyedMutex
	unlock, err := k.lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	// Another key is independent.
	ub, err := k.lock(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	ub()
	// The same key waits, and gives up with its context.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := k.lock(ctx, "a"); err == nil {
		t.Fatal("a held key must not be locked twice")
	}
	unlock()
	// Many goroutines: mutual exclusion holds and the map empties.
	var wg sync.WaitGroup
	inside := 0
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u, err := k.lock(context.Background(), "a")
			if err != nil {
				t.Error(err)
				return
			}
			inside++
			if inside != 1 {
				t.Error("two holders at once")
			}
			inside--
			u()
		}()
	}
	wg.Wait()
	if len(k.m) != 0 {
		t.Fatalf("entries left: %d", len(k.m))
	}
}
