package dispatcher

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/enqueue"
)

const testPolicy = `{"principals": {
	"viewer-a@example.com":    {"tenant-a": "viewer"},
	"submitter-a@example.com": {"tenant-a": "submitter"},
	"operator-a@example.com":  {"tenant-a": "operator"},
	"admin@example.com":       {"*": "operator"}
}}`

// accessEnv is an env whose API enforces testPolicy and accepts dev
// identity tokens signed with key.
func accessEnv(t *testing.T) (*env, []byte) {
	t.Helper()
	p, err := auth.ParsePolicy([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	key := auth.NewDevKey()
	e := newEnv(t, envOptions{config: func(c *Config) {
		c.Access, c.Identity = p, auth.Verifiers{Bearer: []auth.IdentityVerifier{auth.DevVerifier{Key: key}}}
	}})
	return e, key
}

// as sends a request with the identity token tok ("" for none).
func (e *env) as(tok, method, path string, body any) response {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.api.URL+path, rd)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: data}
}

func devToken(t *testing.T, key []byte, email string) string {
	t.Helper()
	tok, err := auth.SignDev(key, email, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestAccessPerRoute(t *testing.T) {
	e, key := accessEnv(t)
	admin := devToken(t, key, "admin@example.com")
	viewer := devToken(t, key, "viewer-a@example.com")
	submitter := devToken(t, key, "submitter-a@example.com")
	operator := devToken(t, key, "operator-a@example.com")
	stranger := devToken(t, key, "stranger@example.com")

	submitAs := func(tok, tenant string, want int) api.SubmitResponse {
		t.Helper()
		r := e.as(tok, "POST", "/v1/tasks", validSubmit(tenant))
		if r.status != want {
			t.Fatalf("submit %s: %d %s, want %d", tenant, r.status, r.body, want)
		}
		var sr api.SubmitResponse
		if want < 300 {
			r.decode(t, &sr)
		}
		return sr
	}
	a1 := submitAs(admin, "tenant-a", http.StatusCreated)
	a2 := submitAs(submitter, "tenant-a", http.StatusCreated)
	b1 := submitAs(admin, "tenant-b", http.StatusCreated)
	b2 := submitAs(admin, "tenant-b", http.StatusCreated)
	for _, id := range []string{a1.TaskID, b1.TaskID} {
		e.start(id, 1)
		e.complete(id, 1, api.OutcomeSucceeded)
	}

	cases := []struct {
		name   string
		tok    string
		method string
		path   string
		body   any
		want   int
	}{
		{"viewer gets own tenant's task", viewer, "GET", "/v1/tasks/" + a1.TaskID, nil, 200},
		{"viewer gets other tenant's task", viewer, "GET", "/v1/tasks/" + b1.TaskID, nil, 403},
		{"viewer reads own task's events", viewer, "GET", "/v1/tasks/" + a1.TaskID + "/events", nil, 200},
		{"viewer reads other tenant's task events", viewer, "GET", "/v1/tasks/" + b1.TaskID + "/events", nil, 403},
		{"viewer lists other tenant by name", viewer, "GET", "/v1/tasks?tenantId=tenant-b", nil, 403},
		{"viewer counts other tenant by name", viewer, "GET", "/v1/tasks:counts?tenantId=tenant-b", nil, 403},
		{"viewer lists runs of other tenant", viewer, "GET", "/v1/runs?tenantId=tenant-b", nil, 403},
		{"viewer reads other tenant's usage", viewer, "GET", "/v1/tenants/tenant-b/usage", nil, 403},
		{"viewer reads own usage", viewer, "GET", "/v1/tenants/tenant-a/usage", nil, 200},
		{"viewer cannot submit", viewer, "POST", "/v1/tasks", validSubmit("tenant-a"), 403},
		{"viewer cannot cancel", viewer, "POST", "/v1/tasks/" + a2.TaskID + "/cancel", nil, 403},
		{"submitter cannot cancel", submitter, "POST", "/v1/tasks/" + a2.TaskID + "/cancel", nil, 403},
		{"submitter cannot rerun", submitter, "POST", "/v1/tasks", func() map[string]any {
			m := validSubmit("tenant-a")
			m["rerunOf"] = a1.TaskID
			return m
		}(), 403},
		{"submitter cannot submit to another tenant", submitter, "POST", "/v1/tasks", validSubmit("tenant-b"), 403},
		{"submitter cannot batch into another tenant", submitter, "POST", "/v1/tasks:batch",
			map[string]any{"tasks": []any{validSubmit("tenant-a"), validSubmit("tenant-b")}}, 403},
		{"operator cannot cancel another tenant's task", operator, "POST", "/v1/tasks/" + b2.TaskID + "/cancel", nil, 403},
		{"operator cannot cancel another tenant's run", operator, "POST", "/v1/runs/" + b2.RunID + "/cancel", nil, 404},
		{"stranger lists nothing", stranger, "GET", "/v1/tasks", nil, 403},
		{"stranger gets nothing", stranger, "GET", "/v1/tasks/" + a1.TaskID, nil, 403},
		{"operator reruns", operator, "POST", "/v1/tasks", func() map[string]any {
			m := validSubmit("tenant-a")
			m["rerunOf"] = a1.TaskID
			return m
		}(), 201},
		{"operator cancels", operator, "POST", "/v1/tasks/" + a2.TaskID + "/cancel", nil, 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.as(c.tok, c.method, c.path, c.body)
			if r.status != c.want {
				t.Fatalf("%s %s: %d %s, want %d", c.method, c.path, r.status, r.body, c.want)
			}
			if c.want == 403 && r.err(t).Code != api.CodePermissionDenied {
				t.Fatalf("error %s, want %s", r.body, api.CodePermissionDenied)
			}
		})
	}
	if st := e.storedTask(b2.TaskID).State; st.Terminal() {
		t.Fatalf("tenant-b's task was cancelled by tenant-a's operator: %s", st)
	}

	// Lists: a viewer of tenant-a sees tenant-a's tasks and none of
	// tenant-b's, without naming a tenant; an operator of every tenant sees
	// both.
	listed := func(tok, path string) (tenants []string, n int) {
		t.Helper()
		r := e.as(tok, "GET", path, nil)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
		var lr api.ListResponse
		r.decode(t, &lr)
		for _, v := range lr.Tasks {
			if !slices.Contains(tenants, v.TenantID) {
				tenants = append(tenants, v.TenantID)
			}
		}
		slices.Sort(tenants)
		return tenants, len(lr.Tasks)
	}
	if got, n := listed(viewer, "/v1/tasks"); !slices.Equal(got, []string{"tenant-a"}) || n != 3 {
		t.Fatalf("viewer of tenant-a lists tenants %v (%d tasks), want only tenant-a's 3", got, n)
	}
	if got, _ := listed(viewer, "/v1/tasks?pageSize=1&order=newest"); !slices.Equal(got, []string{"tenant-a"}) {
		t.Fatalf("viewer of tenant-a's newest task is of %v", got)
	}
	if got, n := listed(admin, "/v1/tasks"); !slices.Equal(got, []string{"tenant-a", "tenant-b"}) || n != 5 {
		t.Fatalf("admin lists %v (%d tasks), want both tenants' 5", got, n)
	}
	var counts api.CountsResponse
	r := e.as(viewer, "GET", "/v1/tasks:counts", nil)
	r.decode(t, &counts)
	if r.status != 200 || counts.Total != 3 {
		t.Fatalf("viewer counts: %d %s, want 3 tasks", r.status, r.body)
	}
	var runs api.RunsResponse
	r = e.as(viewer, "GET", "/v1/runs", nil)
	r.decode(t, &runs)
	for _, run := range runs.Runs {
		if run.TenantID != "tenant-a" {
			t.Fatalf("viewer of tenant-a lists run %s of %s", run.RunID, run.TenantID)
		}
	}
	if r.status != 200 || len(runs.Runs) != 3 {
		t.Fatalf("viewer runs: %d %s, want tenant-a's 3 runs", r.status, r.body)
	}
	var evs api.EventsResponse
	r = e.as(viewer, "GET", "/v1/runs/"+b1.RunID+"/events", nil)
	r.decode(t, &evs)
	if r.status != 200 || len(evs.Events) != 0 {
		t.Fatalf("viewer of tenant-a reads tenant-b's run events: %d %s", r.status, r.body)
	}
}

func TestIdentityTokens(t *testing.T) {
	e, key := accessEnv(t)
	forged, _ := auth.SignDev(auth.NewDevKey(), "admin@example.com", time.Now(), time.Hour)
	expired, _ := auth.SignDev(key, "admin@example.com", time.Now().Add(-2*time.Hour), time.Hour)
	noEmail, _ := auth.SignDev(key, "", time.Now(), time.Hour)
	for _, c := range []struct {
		name, header string
		want         int
		msg          string
	}{
		{"none", "", 401, "required"},
		{"forged", "Bearer " + forged, 401, "not valid"},
		{"expired", "Bearer " + expired, 401, "expired"},
		{"no email", "Bearer " + noEmail, 401, "not valid"},
		{"garbage", "Bearer not.a.jwt", 401, "not valid"},
		{"not bearer", "Basic YWRtaW46YWRtaW4=", 401, "Bearer"},
		{"valid", "Bearer " + devToken(t, key, "admin@example.com"), 200, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.api.URL+"/v1/tasks", nil)
			if c.header != "" {
				req.Header.Set("Authorization", c.header)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			data, _ := io.ReadAll(res.Body)
			r := response{status: res.StatusCode, header: res.Header, body: data}
			if r.status != c.want {
				t.Fatalf("%d %s, want %d", r.status, r.body, c.want)
			}
			if c.want == 401 {
				if er := r.err(t); er.Code != api.CodeUnauthenticated || !bytes.Contains([]byte(er.Message), []byte(c.msg)) {
					t.Fatalf("answer %s, want %s mentioning %q", r.body, api.CodeUnauthenticated, c.msg)
				}
				if res.Header.Get("WWW-Authenticate") != "Bearer" {
					t.Fatalf("no WWW-Authenticate: Bearer")
				}
			}
		})
	}
}

// TestOpenPolicyStillChecksTokens: the open policy (servo dev's default)
// lets callers without a token in, but a token that is sent must be valid.
func TestOpenPolicyStillChecksTokens(t *testing.T) {
	key := auth.NewDevKey()
	e := newEnv(t, envOptions{config: func(c *Config) {
		c.Identity = auth.Verifiers{Bearer: []auth.IdentityVerifier{auth.DevVerifier{Key: key}}}
	}})
	if r := e.as("", "GET", "/v1/tasks", nil); r.status != 200 {
		t.Fatalf("no token under the open policy: %d %s", r.status, r.body)
	}
	forged, _ := auth.SignDev(auth.NewDevKey(), "x@example.com", time.Now(), time.Hour)
	if r := e.as(forged, "GET", "/v1/tasks", nil); r.status != 401 {
		t.Fatalf("forged token under the open policy: %d %s", r.status, r.body)
	}
}

// TestIAPHeaderIgnoredWithoutIAP: an API not behind IAP ignores IAP's
// header, whoever adds it: a caller with its own token plus a header
// carrying another principal's token acts as itself (before, the header
// won and the caller read the other principal's tenant). Behind IAP, the
// header is checked by IAP's verifier alone: a dev token there is no
// identity.
func TestIAPHeaderIgnoredWithoutIAP(t *testing.T) {
	e, key := accessEnv(t)
	viewerA := devToken(t, key, "viewer-a@example.com")
	stranger := devToken(t, key, "stranger@example.com")
	withIAP := func(authz, iap string) response {
		t.Helper()
		req, _ := http.NewRequest("GET", e.api.URL+"/v1/tasks?tenantId=tenant-a", nil)
		if authz != "" {
			req.Header.Set("Authorization", "Bearer "+authz)
		}
		req.Header.Set(auth.IAPHeader, iap)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		data, _ := io.ReadAll(res.Body)
		return response{status: res.StatusCode, header: res.Header, body: data}
	}
	if r := e.as(viewerA, "GET", "/v1/tasks?tenantId=tenant-a", nil); r.status != 200 {
		t.Fatalf("viewer-a itself: %d %s", r.status, r.body)
	}
	if r := withIAP(stranger, viewerA); r.status != http.StatusForbidden {
		t.Fatalf("a stranger's token plus viewer-a's in IAP's header: %d %s, want 403 (the header is not read without IAP)", r.status, r.body)
	}
	if r := withIAP("", viewerA); r.status != http.StatusUnauthorized {
		t.Fatalf("viewer-a's token in IAP's header alone: %d %s, want 401", r.status, r.body)
	}

	// Behind IAP (an audience configured), the header is IAP's verifier's
	// alone: a dev token in it is refused even though the bearer
	// verifiers accept dev tokens.
	p, _ := auth.ParsePolicy([]byte(testPolicy))
	iap := newEnv(t, envOptions{config: func(c *Config) {
		c.Access = p
		c.Identity = auth.Verifiers{Bearer: []auth.IdentityVerifier{auth.DevVerifier{Key: key}},
			IAP: &auth.IAPVerifier{Audience: "/projects/1/global/backendServices/2"}}
	}})
	req, _ := http.NewRequest("GET", iap.api.URL+"/v1/tasks?tenantId=tenant-a", nil)
	req.Header.Set("Authorization", "Bearer "+stranger)
	req.Header.Set(auth.IAPHeader, viewerA)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("behind IAP, a dev token in IAP's header: %d, want 401", res.StatusCode)
	}
}

// TestDeepJSONRefused: a payload or resources nested deeper than
// api.MaxJSONDepth is a 400 naming the field (in a batch, the task's) and
// stores nothing; one nested exactly that deep is accepted. An SDK's
// parser (Python's recursion limit) never meets the deeper ones.
func TestDeepJSONRefused(t *testing.T) {
	e := newEnv(t, envOptions{})
	deep := func(n int) json.RawMessage {
		return json.RawMessage(strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n))
	}
	for _, c := range []struct {
		name, path string
		body       func() any
		field      string
	}{
		{"payload 1 000 deep", "/v1/tasks", func() any { m := validSubmit("t"); m["payload"] = deep(1000); return m }, "payload"},
		{"payload 65 deep", "/v1/tasks", func() any { m := validSubmit("t"); m["payload"] = deep(api.MaxJSONDepth + 1); return m }, "payload"},
		{"resources 65 deep", "/v1/tasks", func() any { m := validSubmit("t"); m["resources"] = deep(api.MaxJSONDepth + 1); return m }, "resources"},
		{"a batch's second payload", "/v1/tasks:batch", func() any {
			bad := validSubmit("t")
			bad["taskKey"], bad["payload"] = "second", deep(1000)
			return map[string]any{"tasks": []any{validSubmit("t"), bad}}
		}, "tasks[1].payload"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do("POST", c.path, c.body(), "")
			if er := r.err(t); r.status != http.StatusBadRequest || er.Code != api.CodeInvalidRequest || er.Field != c.field || !strings.Contains(er.Message, "nests more than") {
				t.Fatalf("%d %s, want 400 invalid_request on %s", r.status, r.body, c.field)
			}
		})
	}
	if l := e.do("GET", "/v1/tasks?tenantId=t", nil, ""); l.status != 200 || strings.Contains(string(l.body), "taskId") {
		t.Fatalf("a refused submit stored a task: %s", l.body)
	}
	m := validSubmit("t")
	m["payload"] = deep(api.MaxJSONDepth)
	e.submit(m, http.StatusCreated)
}

// TestWorkerBoundToTenants: a worker (a pull pool, typically) bound to
// tenants takes only their tasks: another tenant's submit, single or in a
// batch, is 403 on the field worker, naming none of the bound tenants, and
// stores nothing; an unbound worker takes every tenant's.
func TestWorkerBoundToTenants(t *testing.T) {
	e := newEnv(t, envOptions{workers: func(ws enqueue.Workers) {
		w := ws["render"]
		w.Tenants = []string{"tenant-a", "secret-tenant"}
		ws["render"] = w
	}})
	e.submit(validSubmit("tenant-a"), http.StatusCreated)
	for _, c := range []struct {
		path  string
		body  any
		field string
	}{
		{"/v1/tasks", validSubmit("tenant-b"), "worker"},
		{"/v1/tasks:batch", map[string]any{"tasks": []any{validSubmit("tenant-a"), validSubmit("tenant-b")}}, "tasks[1].worker"},
	} {
		r := e.do("POST", c.path, c.body, "")
		er := r.err(t)
		if r.status != http.StatusForbidden || er.Code != api.CodePermissionDenied || er.Field != c.field || strings.Contains(er.Message, "secret-tenant") {
			t.Fatalf("%s for tenant-b: %d %s, want 403 permission_denied on %s naming no bound tenant", c.path, r.status, r.body, c.field)
		}
	}
	if l := e.do("GET", "/v1/tasks?tenantId=tenant-b", nil, ""); l.status != 200 || strings.Contains(string(l.body), "taskId") {
		t.Fatalf("a refused submit stored a task: %s", l.body)
	}
	m := validSubmit("tenant-b")
	m["worker"] = "ingest"
	e.submit(m, http.StatusCreated)
	// A binding names tenants: "*" or "" is refused when the workers load.
	if err := (enqueue.Workers{"p": {Pull: true, Tenants: []string{"*"}}}).Validate(true); err == nil || !strings.Contains(err.Error(), "tenants") {
		t.Fatalf("tenants [*]: %v", err)
	}
}
