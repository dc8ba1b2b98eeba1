package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/devstack"
)

// route is one pattern of the API or the dashboard and a request to it;
// want is the status each caller gets: anonymous, a viewer of another
// tenant, a viewer of the tenant, an operator of the tenant.
type route struct {
	pattern string
	method  string
	// path builds the request's path (and query) on a fresh task of acme,
	// submitted for it.
	path func(task api.SubmitResponse) string
	body string
	// form is a dashboard form post (with the anti-forgery token).
	form url.Values
	want [4]int
}

// TestEveryRouteAccess lists every route the stack's API handler serves
// (the control API and the dashboard: its Routes) with who may call it,
// under an access policy: a route without an entry fails the test, so a
// new route cannot go without its check.
func TestEveryRouteAccess(t *testing.T) {
	s := policyStack(t)
	admin := devTok(t, s, "admin@example.com")
	callers := [4]string{"", devTok(t, s, "bob@example.com"), devTok(t, s, "carol@example.com"), devTok(t, s, "alice@example.com")}
	names := [4]string{"anonymous", "viewer of globex", "viewer of acme", "operator of acme"}
	submit := `{"tenantId":"acme","workspaceId":"ws","taskKey":"k","worker":"idle"}`
	fresh := func() api.SubmitResponse {
		status, body := call(t, s, admin, "POST", "/v1/tasks", json.RawMessage(submit))
		if status != http.StatusCreated {
			t.Fatalf("submit: %d %s", status, body)
		}
		var r api.SubmitResponse
		_ = json.Unmarshal([]byte(body), &r)
		return r
	}
	fixed := func(p string) func(api.SubmitResponse) string { return func(api.SubmitResponse) string { return p } }
	// A schedule of acme, made by the admin (its id new to the emulator's
	// data), and one per task for the routes that delete it.
	newSchedule := func(id string) string {
		return `{"scheduleId":"` + id + `","tenantId":"acme","workspaceId":"ws","spec":{"cron":"0 2 * * *","timezone":"Europe/Berlin"},` +
			`"task":{"taskKey":"k","worker":"idle"}}`
	}
	createSchedule := func(id string) string {
		status, body := call(t, s, admin, "POST", "/v1/schedules", json.RawMessage(newSchedule(id)))
		if status != http.StatusCreated {
			t.Fatalf("create schedule %s: %d %s", id, status, body)
		}
		return id
	}
	sched := createSchedule("nightly-" + strconv.FormatInt(time.Now().UnixNano(), 36))
	perTask := map[string]string{}
	schedOf := func(r api.SubmitResponse) string {
		if perTask[r.TaskID] == "" {
			perTask[r.TaskID] = createSchedule("del-" + r.TaskID)
		}
		return perTask[r.TaskID]
	}
	schedAPI := func(suffix string) func(api.SubmitResponse) string {
		return fixed("/v1/schedules/" + sched + suffix + "?tenantId=acme")
	}
	schedUI := func(suffix string) func(api.SubmitResponse) string {
		return fixed("/ui/schedules/acme/" + sched + suffix)
	}
	const (
		ok, created, seeOther, unauth, forbidden, notFound, notAllowed = 200, 201, 303, 401, 403, 404, 405
	)
	routes := []route{
		// The control API: identity first (401), then the role on the tenant.
		{pattern: "POST /v1/tasks", method: "POST", path: fixed("/v1/tasks"), body: submit, want: [4]int{unauth, forbidden, forbidden, created}},
		{pattern: "GET /v1/tasks", method: "GET", path: fixed("/v1/tasks?tenantId=acme"), want: [4]int{unauth, forbidden, ok, ok}},
		{pattern: "/v1/tasks", method: "DELETE", path: fixed("/v1/tasks"), want: [4]int{unauth, notAllowed, notAllowed, notAllowed}},
		{pattern: "POST /v1/tasks:batch", method: "POST", path: fixed("/v1/tasks:batch"), body: `{"tasks":[` + submit + `]}`, want: [4]int{unauth, forbidden, forbidden, created}},
		{pattern: "/v1/tasks:batch", method: "GET", path: fixed("/v1/tasks:batch"), want: [4]int{unauth, notAllowed, notAllowed, notAllowed}},
		{pattern: "GET /v1/tasks:counts", method: "GET", path: fixed("/v1/tasks:counts?tenantId=acme"), want: [4]int{unauth, forbidden, ok, ok}},
		{pattern: "/v1/tasks:counts", method: "POST", path: fixed("/v1/tasks:counts"), want: [4]int{unauth, notAllowed, notAllowed, notAllowed}},
		{pattern: "GET /v1/tasks/{id}", method: "GET", path: func(r api.SubmitResponse) string { return "/v1/tasks/" + r.TaskID }, want: [4]int{unauth, forbidden, ok, ok}},
		{pattern: "/v1/tasks/{id}", method: "DELETE", path: func(r api.SubmitResponse) string { return "/v1/tasks/" + r.TaskID }, want: [4]int{unauth, notAllowed, notAllowed, notAllowed}},
		{pattern: "POST /v1/tasks/{id}/cancel", method: "POST", path: func(r api.SubmitResponse) string { return "/v1/tasks/" + r.TaskID + "/cancel" }, want: [4]int{unauth, forbidden, forbidden, ok}},
		{pattern: "/v1/tasks/{id}/cancel", method: "GET", path: func(r api.SubmitResponse) string { return "/v1/tasks/" + r.TaskID + "/cancel" }, want: [4]int{unauth, notAllowed, notAllowed, notAllowed}},
		// No span of the task is recorded: 404 task_trace_not_found, past the check.
		{pattern: "GET /v1/tasks/{id}/trace", method: "GET", path: func(r api.SubmitResponse) string { return "/v1/tasks/" + r.TaskID + "/trace" }, want: [4]int{unauth, forbidden, notFound, notFound}},
		{pattern: "/v1/tasks/{id}/trace", method: "POST", path: func(r api.SubmitResponse) string { return "/v1/tasks/" + r.TaskID + "/trace" }, want: [4]int{unauth, notAllowed, notAllowed, notAllowed}},
		{pattern: "GET /v1/tasks/{id}/events", method: "GET", path: func(r api.SubmitResponse) string { return "/v1/tasks/" + r.TaskID + "/events" }, want: [4]int{unauth, forbidden, ok, ok}},
		{pattern: "/v1/tasks/{id}/events", method: "POST", path: func(r api.SubmitResponse) string { return "/v1/tasks/" + r.TaskID + "/events" }, want: [4]int{unauth, notAllowed, notAllowed, notAllowed}},
		{pattern: "GET /v1/runs", method: "GET", path: fixed("/v1/runs?tenantId=acme"), want: [4]int{unauth, forbidden, ok, ok}},
		{pattern: "/v1/runs", method: "POST", path: fixed("/v1/runs"), want: [4]int{unauth, notAllowed, notAllowed, notAllowed}},
		// Another tenant's run: the answer of a run that does not exist (no event).
		{pattern: "GET /v1/runs/{runId}/events", method: "GET", path: func(r api.SubmitResponse) string { return "/v1/runs/" + r.RunID + "/events" }, want: [4]int{unauth, ok, ok, ok}},
		{pattern: "/v1/runs/{runId}/events", method: "POST", path: func(r api.SubmitResponse) string { return "/v1/runs/" + r.RunID + "/events" }, want: [4]int{unauth, notAllowed, notAllowed, notAllowed}},
		{pattern: "POST /v1/runs/{runId}/cancel", method: "POST", path: func(r api.SubmitResponse) string { return "/v1/runs/" + r.RunID + "/cancel" }, want: [4]int{unauth, forbidden, forbidden, ok}},
		{pattern: "/v1/runs/{runId}/cancel", method: "GET", path: func(r api.SubmitResponse) string { return "/v1/runs/" + r.RunID + "/cancel" }, want: [4]int{unauth, notAllowed, notAllowed, notAllowed}},
		{pattern: "GET /v1/events", method: "GET", path: fixed("/v1/events?tenantId=acme"), want: [4]int{unauth, forbidden, ok, ok}},
		{pattern: "/v1/events", method: "POST", path: fixed("/v1/events"), want: [4]int{unauth, notAllowed, notAllowed, notAllowed}},
		// The sweeper's health: no tenant's data, for every identity.
		{pattern: "GET /v1/health", method: "GET", path: fixed("/v1/health"), want: [4]int{unauth, ok, ok, ok}},
		{pattern: "/v1/health", method: "POST", path: fixed("/v1/health"), want: [4]int{unauth, notAllowed, notAllowed, notAllowed}},
		// The OpenAPI document: no tenant's data, for every identity, as the health.
		{pattern: "GET /v1/openapi.json", method: "GET", path: fixed("/v1/openapi.json"), want: [4]int{unauth, ok, ok, ok}},
		{pattern: "/v1/openapi.json", method: "POST", path: fixed("/v1/openapi.json"), want: [4]int{unauth, notAllowed, notAllowed, notAllowed}},
		{pattern: "GET /v1/tenants/{tenant}/usage", method: "GET", path: fixed("/v1/tenants/acme/usage"), want: [4]int{unauth, forbidden, ok, ok}},
		{pattern: "/v1/tenants/{tenant}/usage", method: "POST", path: fixed("/v1/tenants/acme/usage"), want: [4]int{unauth, notAllowed, notAllowed, notAllowed}},
		// Schedules: creating and triggering need submitter, changing and
		// deleting operator; another tenant's schedule is not found.
		{pattern: "POST /v1/schedules", method: "POST", path: fixed("/v1/schedules"), body: newSchedule(sched + "-new"), want: [4]int{unauth, forbidden, forbidden, created}},
		{pattern: "GET /v1/schedules", method: "GET", path: fixed("/v1/schedules?tenantId=acme"), want: [4]int{unauth, forbidden, ok, ok}},
		{pattern: "/v1/schedules", method: "DELETE", path: fixed("/v1/schedules"), want: [4]int{unauth, notAllowed, notAllowed, notAllowed}},
		{pattern: "GET /v1/schedules/{id}", method: "GET", path: schedAPI(""), want: [4]int{unauth, notFound, ok, ok}},
		{pattern: "PATCH /v1/schedules/{id}", method: "PATCH", path: schedAPI(""), body: `{"note":"from the route test"}`, want: [4]int{unauth, notFound, forbidden, ok}},
		{pattern: "DELETE /v1/schedules/{id}", method: "DELETE", path: func(r api.SubmitResponse) string { return "/v1/schedules/" + schedOf(r) + "?tenantId=acme" },
			want: [4]int{unauth, notFound, forbidden, http.StatusNoContent}},
		{pattern: "POST /v1/schedules/{id}", method: "POST", path: schedAPI(":trigger"), want: [4]int{unauth, notFound, forbidden, ok}},
		{pattern: "/v1/schedules/{id}", method: "PUT", path: schedAPI(""), want: [4]int{unauth, notAllowed, notAllowed, notAllowed}},
		{pattern: "/", method: "GET", path: fixed("/v2/nothing"), want: [4]int{unauth, notFound, notFound, notFound}},

		// The dashboard: the sign-in answer (401) without an identity;
		// another tenant's task or run is not found.
		{pattern: "GET /ui/static/", method: "GET", path: fixed("/ui/static/app.css"), want: [4]int{ok, ok, ok, ok}},
		{pattern: "GET /ui/{$}", method: "GET", path: fixed("/ui/?tenant=acme"), want: [4]int{unauth, forbidden, ok, ok}},
		{pattern: "GET /ui/runs/{id}", method: "GET", path: func(r api.SubmitResponse) string { return "/ui/runs/" + r.RunID }, want: [4]int{unauth, notFound, ok, ok}},
		{pattern: "GET /ui/tasks/{id}", method: "GET", path: func(r api.SubmitResponse) string { return "/ui/tasks/" + r.TaskID }, want: [4]int{unauth, notFound, ok, ok}},
		// Every tenant's: for a viewer of every tenant only.
		{pattern: "GET /ui/health", method: "GET", path: fixed("/ui/health"), want: [4]int{unauth, forbidden, forbidden, forbidden}},
		{pattern: "GET /ui/live", method: "GET", path: func(r api.SubmitResponse) string {
			return "/ui/live?" + url.Values{"view": {"/ui/tasks/" + r.TaskID}}.Encode()
		}, want: [4]int{unauth, notFound, ok, ok}},
		{pattern: "GET /ui/live", method: "GET", path: fixed("/ui/live?" + url.Values{"view": {"/ui/schedules/acme/" + sched}}.Encode()), want: [4]int{unauth, notFound, ok, ok}},
		// Schedules: a viewer's, as tasks; without a tenant filter, the
		// caller's tenants' only (the leak check: nothing of acme's for
		// the viewer of globex).
		{pattern: "GET /ui/schedules", method: "GET", path: fixed("/ui/schedules?tenant=acme"), want: [4]int{unauth, forbidden, ok, ok}},
		{pattern: "GET /ui/schedules", method: "GET", path: fixed("/ui/schedules"), want: [4]int{unauth, ok, ok, ok}},
		{pattern: "GET /ui/schedules/{tenant}/{id}", method: "GET", path: schedUI(""), want: [4]int{unauth, notFound, ok, ok}},
		// Pause and unpause: an operator's; another tenant's schedule is
		// not found.
		{pattern: "POST /ui/schedules/{tenant}/{id}/pause", method: "POST", path: schedUI("/pause"), form: url.Values{"note": {"route test"}},
			want: [4]int{unauth, notFound, forbidden, seeOther}},
		{pattern: "POST /ui/schedules/{tenant}/{id}/unpause", method: "POST", path: schedUI("/unpause"), form: url.Values{"note": {""}},
			want: [4]int{unauth, notFound, forbidden, seeOther}},
		{pattern: "POST /ui/tasks/{id}/cancel", method: "POST", path: func(r api.SubmitResponse) string { return "/ui/tasks/" + r.TaskID + "/cancel" },
			form: url.Values{}, want: [4]int{unauth, forbidden, forbidden, seeOther}},
		{pattern: "POST /ui/runs/{id}/cancel", method: "POST", path: func(r api.SubmitResponse) string { return "/ui/runs/" + r.RunID + "/cancel" },
			form: url.Values{}, want: [4]int{unauth, forbidden, forbidden, seeOther}},
		{pattern: "GET /ui/signin", method: "GET", path: fixed("/ui/signin"), want: [4]int{unauth, unauth, unauth, unauth}},
		// The form's token is the caller's: none for the anonymous one.
		{pattern: "POST /ui/signin", method: "POST", path: fixed("/ui/signin"), form: url.Values{}, want: [4]int{unauth, seeOther, seeOther, seeOther}},
		// Sign-out drops the sign-in cookie: no identity needed.
		{pattern: "POST /ui/signout", method: "POST", path: fixed("/ui/signout"), form: url.Values{}, want: [4]int{seeOther, seeOther, seeOther, seeOther}},
		{pattern: "/ui/", method: "GET", path: fixed("/ui/nothing"), want: [4]int{unauth, notFound, notFound, notFound}},
	}

	rs, isRouted := s.API().(interface{ Routes() []string })
	if !isRouted {
		t.Fatal("the stack's API handler does not list its routes")
	}
	registered := rs.Routes()
	for _, p := range registered {
		if !slices.ContainsFunc(routes, func(r route) bool { return r.pattern == p }) {
			t.Errorf("route %q has no entry in this table: say who may call it", p)
		}
	}
	for _, r := range routes {
		if !slices.Contains(registered, r.pattern) {
			t.Errorf("the table's route %q is not registered", r.pattern)
		}
	}

	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, r := range routes {
		task := fresh()
		var got [4]int
		var leaks []string
		for i, tok := range callers {
			got[i] = do(t, client, s, tok, r, task)
			// What the anonymous caller and another tenant's viewer are
			// answered with success names nothing of acme's task or run.
			if (i == 0 || i == 1) && got[i]/100 == 2 && (strings.Contains(lastBody, task.TaskID) || strings.Contains(lastBody, task.RunID) || strings.Contains(lastBody, sched)) {
				leaks = append(leaks, names[i])
			}
		}
		if got != r.want {
			t.Errorf("%s (%s %s): got %v, want %v (%s)", r.pattern, r.method, r.path(task), got, r.want, strings.Join(names[:], ", "))
		}
		if len(leaks) > 0 {
			t.Errorf("%s: the answer to %v names acme's task, run or schedule", r.pattern, leaks)
		}
	}
}

// lastBody is the body of do's latest answer (up to 64 KiB).
var lastBody string

// do sends r's request as tok and returns the status.
func do(t *testing.T, client *http.Client, s *devstack.Stack, tok string, r route, task api.SubmitResponse) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var body io.Reader
	ctype := "application/json"
	const csrf = "0123456789abcdef0123456789abcdef-route-test"
	if r.form != nil {
		f := url.Values{"csrf": {csrf}}
		for k, v := range r.form {
			f[k] = v
		}
		if r.pattern == "POST /ui/signin" && tok != "" {
			f.Set("token", tok)
		}
		body, ctype = strings.NewReader(f.Encode()), "application/x-www-form-urlencoded"
	} else if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, s.URL+r.path(task), body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	req.AddCookie(&http.Cookie{Name: "servo_csrf", Value: csrf})
	if tok != "" && r.pattern != "POST /ui/signin" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", r.pattern, err)
	}
	defer res.Body.Close()
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		// A stream: what comes within 3 s (a live view's first view).
		stop := time.AfterFunc(3*time.Second, func() { res.Body.Close() })
		defer stop.Stop()
		buf := make([]byte, 64<<10)
		n := 0
		for !strings.Contains(string(buf[:n]), "event: view") && n < len(buf) {
			m, err := res.Body.Read(buf[n:])
			n += m
			if err != nil {
				break
			}
		}
		lastBody = string(buf[:n])
		return res.StatusCode
	}
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	lastBody = string(b)
	return res.StatusCode
}
