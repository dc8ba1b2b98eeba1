package functions

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/dispatcher"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/server"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// A deployment configured with fewer due shards than the database's tasks
// use refuses to start, naming the variable and the least value; with
// that value it starts.
func TestRefusesFewerDueShards(t *testing.T) {
	ctx := t.Context()
	instanceEnv(t)
	_, ring, err := auth.GenerateKeyRing("k1")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(auth.EnvKeys, string(ring))
	st, err := store.New(ctx, os.Getenv("SERVO_PROJECT"), store.WithDueShards(16))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CheckSchema(ctx); err != nil { // a deployment's database
		t.Fatal(err)
	}
	// A task in a high shard, as a deployment with 16 shards wrote it.
	var tk task.Task
	for {
		tk = task.Task{ID: task.NewTaskID(time.Now()), RunID: task.NewRunID(time.Now()), TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "w",
			Timing: api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 3000}}
		if store.DueShardOf(tk.ID, 16) >= 8 {
			break
		}
	}
	if res := st.CreateMany(ctx, []task.Task{tk}, time.Now(), false); len(res) != 1 || res[0].Err != nil {
		t.Fatalf("create: %+v", res)
	}
	want := store.DueShardOf(tk.ID, 16) + 1
	if n, err := st.DueShardsInUse(ctx); err != nil || n != want {
		t.Fatalf("DueShardsInUse = %d, %v; want %d", n, err, want)
	}
	t.Setenv("SERVO_DUE_SHARDS", "4")
	_, err = dispatcher.New(ctx)
	if !errors.Is(err, server.ErrDueShardsShrunk) || !strings.Contains(err.Error(), "SERVO_DUE_SHARDS") || !strings.Contains(err.Error(), "at least "+strconv.Itoa(want)) ||
		!strings.Contains(err.Error(), "servo migrate --project ") || !strings.Contains(err.Error(), "--due-shards 4") {
		t.Fatalf("4 shards against a task in shard %d: %v", want-1, err)
	}
	t.Setenv("SERVO_DUE_SHARDS", strconv.Itoa(want))
	h, err := dispatcher.New(ctx)
	if err != nil {
		t.Fatalf("%d shards: %v", want, err)
	}
	h.Close()
}
