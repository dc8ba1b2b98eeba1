package dispatcher

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// list pages through GET /v1/tasks with q, returning every task and the
// number of pages.
func (e *env) list(q url.Values, pageSize int, during func(page int)) ([]api.Task, int) {
	e.t.Helper()
	var all []api.Task
	pages := 0
	q.Set("pageSize", itoa(pageSize))
	for {
		r := e.do("GET", "/v1/tasks?"+q.Encode(), nil, "")
		if r.status != http.StatusOK {
			e.t.Fatalf("list: %d %s", r.status, r.body)
		}
		var lr api.ListResponse
		r.decode(e.t, &lr)
		if len(lr.Tasks) > pageSize {
			e.t.Fatalf("page of %d tasks, size %d", len(lr.Tasks), pageSize)
		}
		pages++
		all = append(all, lr.Tasks...)
		if during != nil {
			during(pages)
		}
		if lr.NextPageToken == "" {
			return all, pages
		}
		q.Set("pageToken", lr.NextPageToken)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// Listing pages are stable (creation order, no duplicates, nothing
// skipped, a task created during the listing comes after the ones already
// seen) and the filters combine.
func TestList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{paused: true})
	run := task.NewRunID(time.Now())
	var acme []string
	for i := range 7 {
		b := validSubmit("acme")
		if i < 4 {
			b["runId"] = run
		}
		acme = append(acme, e.submit(b, http.StatusCreated).TaskID)
	}
	for range 3 {
		e.submit(validSubmit("globex"), http.StatusCreated)
	}
	e.cancelTask(acme[1], "", http.StatusOK)
	e.cancelTask(acme[5], "", http.StatusOK)

	var late string
	got, pages := e.list(url.Values{"tenantId": {"acme"}}, 3, func(page int) {
		if page == 1 {
			late = e.submit(validSubmit("acme"), http.StatusCreated).TaskID
		}
	})
	ids := make([]string, len(got))
	for i, v := range got {
		ids[i] = v.TaskID
		if v.TenantID != "acme" || len(v.Attempts) != 0 {
			t.Errorf("listed %+v", v)
		}
	}
	want := append(slices.Clone(acme), late)
	if !slices.Equal(ids, want) || pages != 3 {
		t.Fatalf("listing = %v in %d pages, want %v in 3", ids, pages, want)
	}

	for _, c := range []struct {
		name string
		q    url.Values
		want []string
	}{
		{"run", url.Values{"runId": {run}}, acme[:4]},
		{"run and state", url.Values{"runId": {run}, "state": {"CANCELLED"}}, []string{acme[1]}},
		{"tenant and state", url.Values{"tenantId": {"acme"}, "state": {"CANCELLED"}}, []string{acme[1], acme[5]}},
		{"tenant, run and state", url.Values{"tenantId": {"acme"}, "runId": {run}, "state": {"QUEUED"}}, []string{acme[0], acme[2], acme[3]}},
		{"other tenant's run", url.Values{"tenantId": {"globex"}, "runId": {run}}, nil},
		{"state only", url.Values{"state": {"CANCELLED"}}, []string{acme[1], acme[5]}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, _ := e.list(c.q, 2, nil)
			var ids []string
			for _, v := range got {
				ids = append(ids, v.TaskID)
			}
			if !slices.Equal(ids, c.want) {
				t.Fatalf("got %v, want %v", ids, c.want)
			}
		})
	}

	// No filter: everything, with the default page size.
	r := e.do("GET", "/v1/tasks", nil, "")
	var lr api.ListResponse
	r.decode(t, &lr)
	if r.status != http.StatusOK || len(lr.Tasks) != 11 || lr.NextPageToken != "" {
		t.Fatalf("unfiltered: %d, %d tasks, token %q", r.status, len(lr.Tasks), lr.NextPageToken)
	}
	// An empty result is an empty array.
	r = e.do("GET", "/v1/tasks?tenantId=nobody", nil, "")
	if string(r.body) != "{\"tasks\":[]}\n" {
		t.Fatalf("empty listing = %s", r.body)
	}
}

// GET /v1/tasks/{id} is the task as a top-level object with attempts[],
// without internal bookkeeping.
func TestGetShape(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{paused: true})
	b := validSubmit("acme")
	b["assetId"] = "asset-1"
	b["idempotencyKey"] = "k"
	sr := e.submit(b, http.StatusCreated)
	e.start(sr.TaskID, 1)
	r := e.do("GET", "/v1/tasks/"+sr.TaskID, nil, "")
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var m map[string]json.RawMessage
	r.decode(t, &m)
	for _, k := range []string{"taskId", "runId", "tenantId", "workspaceId", "taskKey", "assetId", "worker", "state", "attempt",
		"payload", "idempotencyKey", "heartbeatIntervalMs", "heartbeatTimeoutMs", "cancelGracePeriodMs", "retry",
		"createdAt", "updatedAt", "attempts"} {
		if _, ok := m[k]; !ok {
			t.Errorf("GET lacks %q: %s", k, r.body)
		}
	}
	for _, k := range []string{"seq", "leaseExpiresAt", "dispatchCheckAt", "redrives", "notBefore", "resumeFrom", "timing", "completionDigest"} {
		if _, ok := m[k]; ok {
			t.Errorf("GET leaks internal field %q", k)
		}
	}
	var attempts []map[string]json.RawMessage
	if err := json.Unmarshal(m["attempts"], &attempts); err != nil || len(attempts) != 1 {
		t.Fatalf("attempts = %s", m["attempts"])
	}
	for _, k := range []string{"attempt", "workerId", "startedAt", "createdAt"} {
		if _, ok := attempts[0][k]; !ok {
			t.Errorf("attempt lacks %q: %s", k, m["attempts"])
		}
	}
	if _, ok := attempts[0]["completionDigest"]; ok {
		t.Error("attempt leaks completionDigest")
	}
	var v api.Task
	r.decode(t, &v)
	if v.State != api.Running || string(v.Payload) != `{"partition":5}` || v.Attempts[0].WorkerID != "worker-1" {
		t.Errorf("view = %+v", v)
	}
}
