package dispatcher

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator/cloudtasks"
	"github.com/servo-dev/servo/internal/task"
)

// A batch stores and enqueues every task; tasks without a runId share the
// batch's run; the answer is in request order; a repeat answers 200.
func TestBatchSubmit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	own := task.NewRunID(time.Now())
	var items []any
	for i := range 6 {
		b := validSubmit("acme")
		b["taskKey"] = fmt.Sprintf("part-%d", i)
		b["idempotencyKey"] = fmt.Sprintf("batch-%d", i)
		if i == 5 {
			b["runId"] = own
			b["worker"] = "ingest"
		}
		items = append(items, b)
	}
	r := e.do("POST", "/v1/tasks:batch", map[string]any{"tasks": items}, "")
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var br api.BatchResponse
	r.decode(t, &br)
	if !task.ValidID(br.RunID, task.RunIDPrefix) || br.Created != 6 || br.Existing != 0 || br.Failed != 0 || len(br.Tasks) != 6 {
		t.Fatalf("answer = %+v", br)
	}
	ids := map[string]bool{}
	for i, res := range br.Tasks {
		wantRun := br.RunID
		if i == 5 {
			wantRun = own
		}
		if res.Status != http.StatusCreated || res.State != api.Queued || res.Attempt != 1 || res.RunID != wantRun || ids[res.TaskID] {
			t.Errorf("tasks[%d] = %+v", i, res)
		}
		ids[res.TaskID] = true
		if got := e.storedTask(res.TaskID); got.TaskKey != fmt.Sprintf("part-%d", i) {
			t.Errorf("tasks[%d] stored with key %q: results out of order", i, got.TaskKey)
		}
	}
	names := map[string]bool{}
	for _, d := range e.waitDeliveries(6) {
		names[d.header.Get(cloudtasks.HeaderTaskName)] = true
	}
	for id := range ids {
		if !names[task.DispatchName(id, 1)] {
			t.Errorf("task %s not delivered", id)
		}
	}

	// The same batch again: every task is a repeat.
	r = e.do("POST", "/v1/tasks:batch", map[string]any{"tasks": items}, "")
	if r.status != http.StatusOK {
		t.Fatalf("repeat status %d: %s", r.status, r.body)
	}
	var again api.BatchResponse
	r.decode(t, &again)
	if again.Existing != 6 || again.Created != 0 {
		t.Fatalf("repeat = %+v", again)
	}
	for i, res := range again.Tasks {
		if res.TaskID != br.Tasks[i].TaskID || res.Status != http.StatusOK {
			t.Errorf("repeat tasks[%d] = %+v, want %s", i, res, br.Tasks[i].TaskID)
		}
	}
	if n := len(e.tenantTasks("acme")); n != 6 {
		t.Errorf("%d tasks stored, want 6", n)
	}
}

// A batch with any bad task is refused whole, naming the task's field.
func TestBatchValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{paused: true})
	keyed := func(k string) map[string]any {
		b := validSubmit("acme")
		b["idempotencyKey"] = k
		return b
	}
	badWorker := validSubmit("acme")
	badWorker["worker"] = "https://attacker.example"
	many := make([]any, api.MaxBatchTasks+1)
	for i := range many {
		many[i] = validSubmit("acme")
	}
	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		{"no tasks", map[string]any{"tasks": []any{}}, "tasks"},
		{"tasks missing", map[string]any{}, "tasks"},
		{"too many tasks", map[string]any{"tasks": many}, "tasks"},
		{"tasks not an array", map[string]any{"tasks": validSubmit("acme")}, "tasks"},
		{"bad runId", map[string]any{"runId": "r1", "tasks": []any{validSubmit("acme")}}, "runId"},
		{"unknown field", map[string]any{"parallel": 4, "tasks": []any{validSubmit("acme")}}, "parallel"},
		{"bad worker in third task", map[string]any{"tasks": []any{validSubmit("acme"), validSubmit("acme"), badWorker}}, "tasks[2].worker"},
		{"task not an object", map[string]any{"tasks": []any{validSubmit("acme"), 7}}, "tasks[1]"},
		{"unknown field in a task", map[string]any{"tasks": []any{map[string]any{"tenantId": "acme", "url": "x"}}}, "tasks[0].url"},
		{"nested type error in a task", map[string]any{"tasks": []any{validSubmit("acme"), map[string]any{"retry": map[string]any{"maxAttempts": "x"}}}}, "tasks[1].retry.maxAttempts"},
		{"duplicate idempotency key", map[string]any{"tasks": []any{keyed("a"), keyed("b"), keyed("a")}}, "tasks[2].idempotencyKey"},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkInvalid(t, e.do("POST", "/v1/tasks:batch", c.body, ""), c.field)
		})
	}
	if n := len(e.tenantTasks("acme")); n != 0 {
		t.Fatalf("refused batches stored %d tasks", n)
	}
	// The same key for two tenants is fine.
	other := keyed("a")
	other["tenantId"] = "globex"
	r := e.do("POST", "/v1/tasks:batch", map[string]any{"tasks": []any{keyed("a"), other}}, "")
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
}

// With Cloud Tasks down a batch is still stored: 201, every task PENDING.
func TestBatchCloudTasksDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{ctDown: true})
	r := e.do("POST", "/v1/tasks:batch", map[string]any{"tasks": []any{validSubmit("acme"), validSubmit("acme")}}, "")
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var br api.BatchResponse
	r.decode(t, &br)
	for i, res := range br.Tasks {
		if res.State != api.Pending || res.Status != http.StatusCreated {
			t.Errorf("tasks[%d] = %+v, want 201 PENDING", i, res)
		}
	}
}
