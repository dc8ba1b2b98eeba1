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

// rerunOf naming another tenant's task, or a task of a tenant the caller
// only views, is answered as a task that does not exist, whatever its
// state: nothing of it is learnt and no rerun link to it is stored.
func TestSubmitRerunOfOtherTenant(t *testing.T) {
	t.Parallel()
	e, key := accessEnv(t)
	admin := devToken(t, key, "admin@example.com")
	operator := devToken(t, key, "operator-a@example.com")
	var queuedB, doneB, doneA api.SubmitResponse
	for _, c := range []struct {
		tenant string
		out    *api.SubmitResponse
	}{{"tenant-b", &queuedB}, {"tenant-b", &doneB}, {"tenant-a", &doneA}} {
		r := e.as(admin, "POST", "/v1/tasks", validSubmit(c.tenant))
		if r.status != http.StatusCreated {
			t.Fatalf("submit %s: %d %s", c.tenant, r.status, r.body)
		}
		r.decode(t, c.out)
	}
	for _, id := range []string{doneB.TaskID, doneA.TaskID} {
		e.start(id, 1)
		e.complete(id, 1, api.OutcomeSucceeded)
	}
	missing := validSubmit("tenant-a")
	missing["rerunOf"] = "task_01HGW5N7XHJM4GX29KZRXQP6N9"
	want := e.as(operator, "POST", "/v1/tasks", missing)
	if want.status != http.StatusBadRequest || want.err(t).Field != "rerunOf" {
		t.Fatalf("rerun of a missing task: %d %s", want.status, want.body)
	}
	for _, id := range []string{queuedB.TaskID, doneB.TaskID} {
		for _, c := range []struct {
			name, path string
			body       any
			field      string
		}{
			{"submit", "/v1/tasks", nil, "rerunOf"},
			{"batch", "/v1/tasks:batch", nil, "tasks[0].rerunOf"},
		} {
			rerun := validSubmit("tenant-a")
			rerun["rerunOf"] = id
			c.body = rerun
			if c.name == "batch" {
				c.body = map[string]any{"tasks": []any{rerun}}
			}
			r := e.as(operator, "POST", c.path, c.body)
			eb := r.err(t)
			if r.status != want.status || eb.Code != want.err(t).Code || eb.Field != c.field || eb.State != "" || eb.Message != want.err(t).Message {
				t.Fatalf("%s: rerunOf another tenant's task: %d %s, want the answer of a missing task %s", c.name, r.status, r.body, want.body)
			}
		}
	}
	rerun := validSubmit("tenant-a")
	rerun["rerunOf"] = doneA.TaskID
	if r := e.as(operator, "POST", "/v1/tasks", rerun); r.status != http.StatusCreated {
		t.Fatalf("rerun of own tenant's task: %d %s", r.status, r.body)
	}
	if n := len(e.tenantTasks("tenant-a")); n != 2 {
		t.Fatalf("tenant-a has %d tasks, want 2 (the refused reruns stored none)", n)
	}
}
