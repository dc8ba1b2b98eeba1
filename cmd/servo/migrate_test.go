package main

import (
	"fmt"
	"time"

	"strings"
	"testing"

	"cloud.google.com/go/firestore"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// servo migrate against the emulator: a dry run writes nothing, a run
// records the schema, a rerun has nothing to do.
func TestMigrateCommand(t *testing.T) {
	project := emulatortest.ProjectID(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dry-run"}, fmt.Sprintf("schema 0 → %d (dry run: nothing written)", store.SchemaVersion)},
		{nil, fmt.Sprintf("schema 0 → %d\n", store.SchemaVersion)},
		{nil, fmt.Sprintf("schema %d: up to date", store.SchemaVersion)},
	} {
		out, errOut, code := runCLI(t, append([]string{"migrate", "--project", project}, tc.args...)...)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Fatalf("servo migrate %v: exit %d\n%s%s\nwant %q", tc.args, code, out, errOut, tc.want)
		}
	}
	if _, errOut, code := runCLI(t, "migrate", "--project", ""); code != exitUsage || !strings.Contains(errOut, "--project") {
		t.Fatalf("no project: exit %d %s", code, errOut)
	}
}

// servo migrate takes the project from $SERVO_PROJECT, and refuses a
// database that holds data of another application (no schema, none of
// Servo's collections), writing nothing.
func TestMigrateRefusesAForeignDatabase(t *testing.T) {
	project := emulatortest.ProjectID(t)
	st, err := store.New(t.Context(), project)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fs, err := firestore.NewClient(t.Context(), project)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	if _, err := fs.Collection("orders").Doc("o1").Set(t.Context(), map[string]any{"total": 12}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SERVO_PROJECT", project)
	out, errOut, code := runCLI(t, "migrate")
	if code == 0 || !strings.Contains(errOut, "holds no Servo data") || !strings.Contains(errOut, "orders") || !strings.Contains(errOut, "nothing was written") {
		t.Fatalf("servo migrate on a foreign database: exit %d\n%s%s", code, out, errOut)
	}
	if sc, err := st.ReadSchema(t.Context()); err != nil || sc.Version != 0 {
		t.Fatalf("schema after the refusal: %+v, %v", sc, err)
	}
	// Once Servo's data is there (a task), the same command migrates.
	if _, err := fs.Collection(store.TasksCollection).Doc("x").Set(t.Context(), map[string]any{"state": "QUEUED"}); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runCLI(t, "migrate", "--dry-run"); code != 0 || !strings.Contains(out, "dry run") {
		t.Fatalf("servo migrate with Servo's data: exit %d\n%s%s", code, out, errOut)
	}
}

// servo migrate --due-shards N moves data written at more due shards into
// N (what the functions' refusal to start names), a dry run first; a
// rerun has nothing to move.
func TestMigrateDueShards(t *testing.T) {
	project := emulatortest.ProjectID(t)
	wide, err := store.New(t.Context(), project, store.WithDueShards(64))
	if err != nil {
		t.Fatal(err)
	}
	defer wide.Close()
	now := time.Now().UTC()
	for i := 0; i < 12; i++ {
		tk := task.Task{ID: task.NewTaskID(now), RunID: task.NewRunID(now), TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "w",
			Timing: api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 3000}}
		if _, _, err := wide.Create(t.Context(), tk, now); err != nil {
			t.Fatal(err)
		}
	}
	inUse, err := wide.DueShardsInUse(t.Context())
	if err != nil || inUse <= 4 {
		t.Fatalf("due shards in use %d, %v: want above 4", inUse, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dry-run"}, fmt.Sprintf("due shards %d → 4 (dry run: nothing written)", inUse)},
		{nil, fmt.Sprintf("due shards %d → 4\n", inUse)},
		{nil, "within 4: nothing to move"},
	} {
		out, errOut, code := runCLI(t, append([]string{"migrate", "--project", project, "--due-shards", "4"}, tc.args...)...)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Fatalf("servo migrate --due-shards 4 %v: exit %d\n%s%s\nwant %q", tc.args, code, out, errOut, tc.want)
		}
	}
	if n, err := wide.DueShardsInUse(t.Context()); err != nil || n > 4 {
		t.Fatalf("after servo migrate --due-shards 4: %d shards in use, %v", n, err)
	}
}
