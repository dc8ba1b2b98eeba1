package dispatcher

import (
	"net/http"
	"testing"

	"github.com/servo-dev/servo/api"
)

func TestCountsListFiltersAndEvents(t *testing.T) {
	e := newEnv(t, envOptions{})
	tenant := "hist-" + e.project
	run := ""
	var ids []string
	for i, worker := range []string{"render", "render", "ingest"} {
		body := validSubmit(tenant)
		body["worker"] = worker
		body["taskKey"] = "k" + string(rune('a'+i))
		if run != "" {
			body["runId"] = run
		}
		sr := e.submit(body, http.StatusCreated)
		run = sr.RunID
		ids = append(ids, sr.TaskID)
	}
	e.start(ids[0], 1)
	e.complete(ids[0], 1, api.OutcomeSucceeded)

	t.Run("counts", func(t *testing.T) {
		r := e.do("GET", "/v1/tasks:counts?tenantId="+tenant, nil, "")
		var c api.CountsResponse
		r.decode(t, &c)
		if r.status != http.StatusOK || c.Total != 3 || c.Counts[api.Succeeded] != 1 || c.Counts[api.Queued] != 2 || len(c.Counts) != 7 {
			t.Fatalf("counts = %d %+v", r.status, c)
		}
		r = e.do("GET", "/v1/tasks:counts?tenantId="+tenant+"&worker=ingest", nil, "")
		r.decode(t, &c)
		if c.Total != 1 || c.Counts[api.Queued] != 1 {
			t.Fatalf("counts for worker ingest = %+v", c)
		}
	})
	t.Run("list worker and order", func(t *testing.T) {
		var l api.ListResponse
		e.do("GET", "/v1/tasks?tenantId="+tenant+"&worker=render&order=newest", nil, "").decode(t, &l)
		if len(l.Tasks) != 2 || l.Tasks[0].TaskID != ids[1] || l.Tasks[1].TaskID != ids[0] {
			t.Fatalf("newest-first render tasks = %+v, want %s then %s", l.Tasks, ids[1], ids[0])
		}
		e.do("GET", "/v1/tasks?tenantId="+tenant+"&order=oldest&pageSize=1", nil, "").decode(t, &l)
		if len(l.Tasks) != 1 || l.Tasks[0].TaskID != ids[0] || l.NextPageToken == "" {
			t.Fatalf("oldest-first page = %+v", l)
		}
	})
	t.Run("task events", func(t *testing.T) {
		var ev api.EventsResponse
		r := e.do("GET", "/v1/tasks/"+ids[0]+"/events", nil, "")
		r.decode(t, &ev)
		want := []api.State{api.Pending, api.Queued, api.Running, api.Succeeded}
		if r.status != http.StatusOK || len(ev.Events) != len(want) {
			t.Fatalf("events = %d %s", r.status, r.body)
		}
		for i, e := range ev.Events {
			if e.To != want[i] || e.Seq != int64(i+1) || e.TaskID != ids[0] {
				t.Fatalf("event %d = %+v, want to=%s seq=%d", i, e, want[i], i+1)
			}
		}
	})
	t.Run("run events", func(t *testing.T) {
		var ev api.EventsResponse
		e.do("GET", "/v1/runs/"+run+"/events", nil, "").decode(t, &ev)
		if len(ev.Events) != 4+2+2 {
			t.Fatalf("run events = %d: %+v", len(ev.Events), ev.Events)
		}
		for i := 1; i < len(ev.Events); i++ {
			a, b := ev.Events[i-1], ev.Events[i]
			if a.TaskID > b.TaskID || (a.TaskID == b.TaskID && a.Seq >= b.Seq) {
				t.Fatalf("run events out of order at %d: %+v then %+v", i, a, b)
			}
		}
	})
	t.Run("bad input", func(t *testing.T) {
		for _, c := range []struct{ path, field string }{
			{"/v1/tasks?order=sideways", "order"},
			{"/v1/tasks:counts?state=RUNNING", "state"},
			{"/v1/tasks:counts?pageSize=3", "pageSize"},
			{"/v1/runs/nope/events", "runId"},
		} {
			r := e.do("GET", c.path, nil, "")
			if r.status != http.StatusBadRequest || r.err(t).Field != c.field {
				t.Errorf("GET %s = %d %s, want 400 field %s", c.path, r.status, r.body, c.field)
			}
		}
		if r := e.do("GET", "/v1/tasks/task_01HZZZZZZZZZZZZZZZZZZZZZZZ/events", nil, ""); r.status != http.StatusNotFound {
			t.Errorf("events of unknown task = %d %s", r.status, r.body)
		}
		if r := e.do("POST", "/v1/tasks:counts", nil, ""); r.status != http.StatusMethodNotAllowed {
			t.Errorf("POST counts = %d", r.status)
		}
	})
}
