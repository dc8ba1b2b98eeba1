package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/store"
)

// TestDueShardsInUse: 0 on an empty database; then one more than the
// highest shard the created tasks (and their outbox entries) were given.
func TestDueShardsInUse(t *testing.T) {
	ctx := context.Background()
	s, err := store.New(ctx, emulatortest.ProjectID(t), store.WithDueShards(8))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, err := s.DueShardsInUse(ctx); err != nil || n != 0 {
		t.Fatalf("empty database: %d, %v; want 0", n, err)
	}
	now := time.Now().UTC()
	for i, want := 0, 0; i < 12; i++ {
		tk := mustCreate(t, s, submitted(now, ""), now)
		want = max(want, store.DueShardOf(tk.ID, 8)+1)
		if n, err := s.DueShardsInUse(ctx); err != nil || n != want {
			t.Fatalf("after %d tasks: %d, %v; want %d", i+1, n, err, want)
		}
	}
}
