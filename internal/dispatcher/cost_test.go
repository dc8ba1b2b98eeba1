package dispatcher

import (
	"fmt"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// A submit is one Firestore commit (the task, its idempotency record and
// both of its events, in one outbox document) and one CreateTask; a batch
// is as few commits as Firestore's limits allow.
func TestSubmitRoundTrips(t *testing.T) {
	t.Parallel()
	rc := store.NewRPCCounter()
	e := newEnv(t, envOptions{store: []store.Option{store.WithRPCCounter(rc)}})
	commit := map[string]int{"Commit": 1}

	keyed := validSubmit("acme")
	keyed["idempotencyKey"] = "cost-1"
	for _, c := range []struct {
		name   string
		body   map[string]any
		status int
		want   map[string]int
	}{
		{"submit", validSubmit("acme"), http.StatusCreated, commit},
		{"submit with an idempotency key", keyed, http.StatusCreated, commit},
		// The refused commit, the idempotency record, the task.
		{"repeat", keyed, http.StatusOK, map[string]int{"Commit": 1, "BatchGetDocuments": 2}},
	} {
		rc.Reset()
		sr := e.submit(c.body, c.status)
		if got := rc.Counts(); !maps.Equal(got, c.want) {
			t.Errorf("%s: Firestore RPCs %v, want %v", c.name, got, c.want)
		}
		if sr.State != api.Queued {
			t.Errorf("%s: state %s, want QUEUED", c.name, sr.State)
		}
		// Both transitions are recorded, in order, by that one commit.
		entries, err := e.st.OutboxEntries(e.ctx, sr.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 2 || entries[0].To != api.Pending || entries[1].From != api.Pending || entries[1].To != api.Queued || entries[1].Seq != 2 {
			t.Errorf("%s: outbox %+v, want →PENDING then PENDING→QUEUED", c.name, entries)
		}
	}

	// 250 tasks with idempotency keys are 3 writes each (the task, its two
	// events' one outbox document, its idempotency record), two commits
	// of at most store.MaxCommitWrites, and the run's document, created in
	// a commit of its own unless it exists (store.Store.createRun): 751
	// writes in three commits.
	var items []any
	for i := range 250 {
		b := validSubmit("acme")
		b["taskKey"] = fmt.Sprintf("p-%d", i)
		b["idempotencyKey"] = fmt.Sprintf("cost-batch-%d", i)
		items = append(items, b)
	}
	rc.Reset()
	r := e.do("POST", "/v1/tasks:batch", map[string]any{"tasks": items}, "")
	if r.status != http.StatusCreated {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	if n := rc.Usage().DocsWritten; n != 751 {
		t.Errorf("batch of 250: %d documents written, want 751", n)
	}
	if got, want := rc.Counts(), map[string]int{"Commit": 3}; !maps.Equal(got, want) {
		t.Errorf("batch of 250: Firestore RPCs %v, want %v", got, want)
	}
	if n := len(e.tenantTasks("acme")); n != 252 {
		t.Errorf("%d tasks stored, want 252", n)
	}

	// A batch that repeats one key among new ones: the shared commit is
	// refused, and its tasks are committed one by one; nothing is doubled.
	mixed := []any{items[0]}
	for i := range 3 {
		b := validSubmit("acme")
		b["taskKey"] = fmt.Sprintf("m-%d", i)
		b["idempotencyKey"] = fmt.Sprintf("cost-mixed-%d", i)
		mixed = append(mixed, b)
	}
	r = e.do("POST", "/v1/tasks:batch", map[string]any{"tasks": mixed}, "")
	var br api.BatchResponse
	r.decode(t, &br)
	if r.status != http.StatusCreated || br.Created != 3 || br.Existing != 1 || br.Tasks[0].Status != http.StatusOK {
		t.Fatalf("mixed batch: %d %+v", r.status, br)
	}
	if n := len(e.tenantTasks("acme")); n != 255 {
		t.Errorf("%d tasks stored, want 255", n)
	}
}

// TestRunDocumentWrittenOncePerWindow: a run's tasks share its document
// (runs/{runId}); submits of the same run within store.RunDocumentEvery
// do not write it again, so a run submitted task by task at any rate
// costs that document one write a minute per instance.
func TestRunDocumentWrittenOncePerWindow(t *testing.T) {
	t.Parallel()
	rc := store.NewRPCCounter()
	e := newEnv(t, envOptions{store: []store.Option{store.WithRPCCounter(rc)}})
	run := task.NewRunID(time.Now())
	var written []int
	for range 3 {
		body := validSubmit("acme")
		body["runId"] = run
		rc.Reset()
		e.submit(body, http.StatusCreated)
		written = append(written, rc.Usage().DocsWritten)
	}
	// task, the two events' one outbox document (+ the run's document the
	// first time); the first attempt's record is written later
	// (store.firstAttempt).
	if written[0] != 3 || written[1] != 2 || written[2] != 2 {
		t.Fatalf("documents written per submit %v, want [3 2 2]", written)
	}
}

// TestOwnRunHasNoDocument: a submit without a runId gets a run of its own
// (task.Task.OwnRun), for which no run document is written: the task and
// its events' outbox document only. GET /v1/runs lists that run from the
// task; a later submit into it writes the run's document, and the run is
// still listed once. A batch without a runId shares one run, which has its
// document.
func TestOwnRunHasNoDocument(t *testing.T) {
	t.Parallel()
	rc := store.NewRPCCounter()
	e := newEnv(t, envOptions{store: []store.Option{store.WithRPCCounter(rc)}})
	listed := func(run string) int {
		t.Helper()
		r := e.do("GET", "/v1/runs?tenantId=acme&pageSize=100", nil, "")
		var rr api.RunsResponse
		r.decode(t, &rr)
		n := 0
		for _, x := range rr.Runs {
			if x.RunID == run {
				n++
			}
		}
		return n
	}
	rc.Reset()
	own := e.submit(validSubmit("acme"), http.StatusCreated)
	if n := rc.DocsWrittenIn(store.RunsCollection); n != 0 || rc.Usage().DocsWritten != 2 {
		t.Errorf("a submit without a runId wrote %d documents, %d of them runs; want 2 (the task, its outbox document), no run", rc.Usage().DocsWritten, n)
	}
	if n := listed(own.RunID); n != 1 {
		t.Errorf("its run listed %d times, want once", n)
	}
	into := validSubmit("acme")
	into["runId"] = own.RunID
	rc.Reset()
	e.submit(into, http.StatusCreated)
	if n := rc.DocsWrittenIn(store.RunsCollection); n != 1 {
		t.Errorf("a submit into that run wrote %d run documents, want 1", n)
	}
	if n := listed(own.RunID); n != 1 {
		t.Errorf("after a submit into it, the run is listed %d times, want once", n)
	}
	rc.Reset()
	r := e.do("POST", "/v1/tasks:batch", map[string]any{"tasks": []any{validSubmit("acme"), validSubmit("acme")}}, "")
	var br api.BatchResponse
	r.decode(t, &br)
	if n := rc.DocsWrittenIn(store.RunsCollection); n != 1 || br.RunID == "" {
		t.Errorf("a batch without a runId wrote %d run documents (run %q), want its shared run's 1", n, br.RunID)
	}
	if n := listed(br.RunID); n != 1 {
		t.Errorf("the batch's run listed %d times, want once", n)
	}
}
