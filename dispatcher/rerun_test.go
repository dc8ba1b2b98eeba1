package dispatcher

import (
	"net/http"
	"testing"

	"github.com/servo-dev/servo/api"
)

// A submit with rerunOf is refused with 409 task_not_terminal while the
// task it names has not finished (batch included), and is stored with
// rerunOf, shown by GET, once it has.
func TestSubmitRerunOf(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{paused: true})
	orig := e.submit(validSubmit("acme"), http.StatusCreated)
	rerun := validSubmit("acme")
	rerun["rerunOf"] = orig.TaskID

	for _, c := range []struct {
		name, path string
		body       any
		field      string
	}{
		{"submit", "/v1/tasks", rerun, "rerunOf"},
		{"batch", "/v1/tasks:batch", map[string]any{"tasks": []any{validSubmit("acme"), rerun}}, "tasks[1].rerunOf"},
	} {
		r := e.do("POST", c.path, c.body, "")
		eb := r.err(t)
		if r.status != http.StatusConflict || eb.Code != api.CodeTaskNotTerminal || eb.Field != c.field || eb.State != api.Queued {
			t.Fatalf("%s with rerunOf of a QUEUED task: %d %+v", c.name, r.status, eb)
		}
	}
	if n := len(e.tenantTasks("acme")); n != 1 {
		t.Fatalf("refused reruns stored tasks: %d, want 1", n)
	}

	e.start(orig.TaskID, 1)
	e.complete(orig.TaskID, 1, api.OutcomeSucceeded)
	sr := e.submit(rerun, http.StatusCreated)
	if sr.TaskID == orig.TaskID {
		t.Fatal("the rerun is the original task")
	}
	if v := e.getTask(sr.TaskID); v.RerunOf != orig.TaskID {
		t.Fatalf("GET of the rerun: rerunOf %q, want %q", v.RerunOf, orig.TaskID)
	}
	if v := e.getTask(orig.TaskID); v.RerunOf != "" {
		t.Fatalf("the original shows rerunOf %q", v.RerunOf)
	}
}
