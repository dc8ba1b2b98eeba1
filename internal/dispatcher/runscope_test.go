package dispatcher

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// Run ids are scoped per tenant: a submit into another tenant's runId
// neither re-owns the run (it stays in its owner's GET /v1/runs) nor
// reaches its tasks (run events, run cancel, list by runId), and a run
// document written before the scoping (runs/{runId}) is still listed.
func TestRunScopedPerTenant(t *testing.T) {
	e, key := accessEnv(t)
	admin := devToken(t, key, "admin@example.com")
	operator := devToken(t, key, "operator-a@example.com")
	viewer := devToken(t, key, "viewer-a@example.com")

	victim := e.as(admin, "POST", "/v1/tasks", validSubmit("tenant-b"))
	var vr api.SubmitResponse
	victim.decode(t, &vr)
	// tenant-a's operator submits into tenant-b's run, through another
	// instance of the API (whose store writes the run's document now).
	st2, err := store.New(e.ctx, e.project)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	cfg2 := e.h.cfg
	cfg2.Store = st2
	h2, err := newHandler(cfg2)
	if err != nil {
		t.Fatal(err)
	}
	api2 := httptest.NewServer(h2)
	defer api2.Close()
	api1 := e.api
	e.api = api2
	attack := validSubmit("tenant-a")
	attack["runId"] = vr.RunID
	r := e.as(operator, "POST", "/v1/tasks", attack)
	e.api = api1
	if r.status != http.StatusCreated {
		t.Fatalf("submit into another tenant's run id: %d %s", r.status, r.body)
	}

	runsOf := func(tok, tenant string) []api.Run {
		t.Helper()
		r := e.as(tok, "GET", "/v1/runs?tenantId="+tenant, nil)
		var rr api.RunsResponse
		r.decode(t, &rr)
		return rr.Runs
	}
	has := func(runs []api.Run, run, tenant string) bool {
		return slices.ContainsFunc(runs, func(r api.Run) bool { return r.RunID == run && r.TenantID == tenant })
	}
	if b := runsOf(admin, "tenant-b"); !has(b, vr.RunID, "tenant-b") {
		t.Errorf("tenant-b's runs after another tenant's submit into its run: %+v, want %s", b, vr.RunID)
	}
	// tenant-a sees a run of its own of that id, and reaches its own
	// task of it only.
	if a := runsOf(viewer, "tenant-a"); !has(a, vr.RunID, "tenant-a") || has(a, vr.RunID, "tenant-b") {
		t.Errorf("tenant-a's runs: %+v", a)
	}
	var ev api.EventsResponse
	e.as(viewer, "GET", "/v1/runs/"+vr.RunID+"/events", nil).decode(t, &ev)
	for _, x := range ev.Events {
		if x.TenantID != "tenant-a" {
			t.Fatalf("tenant-a's viewer reads tenant-b's event of the run: %+v", x)
		}
	}
	var lr api.ListResponse
	e.as(viewer, "GET", "/v1/tasks?runId="+vr.RunID, nil).decode(t, &lr)
	if len(lr.Tasks) != 1 || lr.Tasks[0].TenantID != "tenant-a" {
		t.Fatalf("tenant-a lists the run's tasks: %+v", lr.Tasks)
	}
	if r := e.as(operator, "POST", "/v1/runs/"+vr.RunID+"/cancel", nil); r.status != http.StatusOK {
		t.Fatalf("tenant-a's run cancel: %d %s", r.status, r.body)
	}
	if got := e.storedTask(vr.TaskID); got.State.Terminal() {
		t.Fatalf("tenant-a's run cancel ended tenant-b's task: %s", got.State)
	}

	// A run document of before the scoping stays listed, once.
	legacy := task.NewRunID(time.Now())
	fs, err := firestore.NewClient(e.ctx, e.project)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	if _, err := fs.Collection(store.RunsCollection).Doc(legacy).Set(e.ctx, map[string]any{"runId": legacy, "tenantId": "tenant-a", "lastSubmitAt": time.Now()}); err != nil {
		t.Fatal(err)
	}
	old := validSubmit("tenant-a")
	old["runId"] = legacy
	e.as(admin, "POST", "/v1/tasks", old)
	n := 0
	for _, r := range runsOf(viewer, "tenant-a") {
		if r.RunID == legacy {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the run with a legacy document is listed %d times, want 1", n)
	}
}
