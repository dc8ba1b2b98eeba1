package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/dashboard"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/dispatcher"
	"github.com/servo-dev/servo/internal/telemetry"
)

// tenantsPolicy: alice operates acme, bob views globex, carol views
// acme, admin operates every tenant.
const tenantsPolicy = `{"principals": {
	"alice@example.com": {"acme": "operator"},
	"bob@example.com":   {"globex": "viewer"},
	"carol@example.com": {"acme": "viewer"},
	"admin@example.com": {"*": "operator"}}}`

var (
	tenantsOnce  sync.Once
	tenantsStack *devstack.Stack
	tenantsErr   error
)

// policyStack is a second local stack, under tenantsPolicy (servo dev
// --access): its "idle" worker accepts every attempt and never reports,
// so tasks stay put.
func policyStack(t *testing.T) *devstack.Stack {
	t.Helper()
	tenantsOnce.Do(func() {
		p, err := auth.ParsePolicy([]byte(tenantsPolicy))
		if err != nil {
			tenantsErr = err
			return
		}
		idle := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
		tenantsStack, tenantsErr = devstack.Start(context.Background(), devstack.Options{
			Addr: "127.0.0.1:0", Project: "dashboard-tenants-test", ReuseEmulators: true, Access: p, Traces: telemetry.NewRecorder(0),
			Workers: map[string]string{"idle": idle.URL}, SweepEvery: 500 * time.Millisecond,
		})
	})
	if tenantsErr != nil {
		t.Fatal(tenantsErr)
	}
	return tenantsStack
}

func devTok(t *testing.T, s *devstack.Stack, email string) string {
	t.Helper()
	tok, err := auth.SignDev(s.IdentityKey, email, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// call sends a request to the stack with the identity token tok ("" for
// none) and returns the status and body.
func call(t *testing.T, s *devstack.Stack, tok, method, path string, body any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.URL+path, rd)
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&out, res.Body); close(done) }()
	select { // a live stream does not end: take what came within 3 s
	case <-done:
	case <-ctx.Done():
		res.Body.Close()
		<-done
	}
	return res.StatusCode, out.String()
}

// identityTab is a tab whose every request carries tok ("" for none).
func identityTab(t *testing.T, tok string) context.Context {
	t.Helper()
	ctx := tab(t)
	if tok != "" {
		if err := chromedp.Run(ctx, network.Enable(), network.SetExtraHTTPHeaders(network.Headers{"Authorization": "Bearer " + tok})); err != nil {
			t.Fatal(err)
		}
	}
	return ctx
}

// pageText navigates to path and returns the page's title heading and text.
func pageText(t *testing.T, ctx context.Context, s *devstack.Stack, path string) (string, string) {
	t.Helper()
	var h1, text string
	if err := chromedp.Run(ctx, chromedp.Navigate(s.URL+path), chromedp.WaitVisible("h1", chromedp.ByQuery),
		chromedp.Text("h1", &h1, chromedp.ByQuery), chromedp.Evaluate(`document.documentElement.outerHTML`, &text)); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return h1, text
}

// TestDashboardTenants: under an access policy the dashboard acts as its
// caller. Alice (operator of acme) and Bob (viewer of globex) each see
// only their own tenant's tasks on the tasks page, and another tenant's
// task and run pages are not found; Bob may not cancel; an anonymous
// visit gets the sign-in page and no task, page or live stream; signing
// in with a token shows that identity's tasks.
func TestDashboardTenants(t *testing.T) {
	s := policyStack(t)
	admin, alice, bob := devTok(t, s, "admin@example.com"), devTok(t, s, "alice@example.com"), devTok(t, s, "bob@example.com")
	submit := func(tenant, secret string) api.SubmitResponse {
		t.Helper()
		status, body := call(t, s, admin, "POST", "/v1/tasks", map[string]any{"tenantId": tenant, "workspaceId": "ws", "taskKey": "k", "worker": "idle",
			"payload": map[string]string{"secret": secret}})
		if status != http.StatusCreated {
			t.Fatalf("submit %s: %d %s", tenant, status, body)
		}
		var r api.SubmitResponse
		_ = json.Unmarshal([]byte(body), &r)
		return r
	}
	acme, globex := submit("acme", "acme-secret-1"), submit("globex", "globex-secret-1")

	for _, c := range []struct {
		who, tok    string
		own, other  api.SubmitResponse
		ownSecret   string
		otherSecret string
	}{
		{"alice", alice, acme, globex, "acme-secret-1", "globex-secret-1"},
		{"bob", bob, globex, acme, "globex-secret-1", "acme-secret-1"},
	} {
		ctx := identityTab(t, c.tok)
		_, html := pageText(t, ctx, s, "/ui/")
		if !strings.Contains(html, "row-"+c.own.TaskID) || strings.Contains(html, c.other.TaskID) {
			t.Errorf("%s's tasks page: own task shown %v, other tenant's task shown %v", c.who, strings.Contains(html, c.own.TaskID), strings.Contains(html, c.other.TaskID))
		}
		if _, html := pageText(t, ctx, s, "/ui/tasks/"+c.own.TaskID); !strings.Contains(html, c.ownSecret) {
			t.Errorf("%s's own task page has no payload", c.who)
		}
		for _, p := range []string{"/ui/tasks/" + c.other.TaskID, "/ui/runs/" + c.other.RunID, "/ui/?tenant=" + url.QueryEscape(map[string]string{"alice": "globex", "bob": "acme"}[c.who])} {
			h1, html := pageText(t, ctx, s, p)
			if !strings.HasPrefix(h1, "404") && !strings.HasPrefix(h1, "403") || strings.Contains(html, c.otherSecret) || strings.Contains(html, "row-"+c.other.TaskID) {
				t.Errorf("%s on %s: %q, want 404 or 403 and nothing of the task", c.who, p, h1)
			}
		}
		if h1, _ := pageText(t, ctx, s, "/ui/health"); !strings.HasPrefix(h1, "403") {
			t.Errorf("%s on the health page (every tenant's): %q, want 403", c.who, h1)
		}
		// The live stream of another tenant's task sends nothing of it.
		status, body := call(t, s, c.tok, "GET", "/ui/live?view="+url.QueryEscape("/ui/tasks/"+c.other.TaskID), nil)
		if strings.Contains(body, c.otherSecret) || strings.Contains(body, "event: view") {
			t.Errorf("%s's live stream of another tenant's task: %d, %d bytes with its view", c.who, status, len(body))
		}
		status, body = call(t, s, c.tok, "GET", "/ui/live?view="+url.QueryEscape("/ui/"), nil)
		if status != http.StatusOK || strings.Contains(body, c.other.TaskID) || !strings.Contains(body, c.own.TaskID) {
			t.Errorf("%s's live tasks view: %d, own task %v, other tenant's %v", c.who, status, strings.Contains(body, c.own.TaskID), strings.Contains(body, c.other.TaskID))
		}
	}

	// Actions need operator: Bob's Cancel is refused by the API; Alice's
	// is done.
	for _, c := range []struct {
		who, tok, id string
		want         api.State
	}{{"bob", bob, globex.TaskID, api.Queued}, {"alice", alice, acme.TaskID, api.Cancelled}} {
		ctx := identityTab(t, c.tok)
		pageText(t, ctx, s, "/ui/tasks/"+c.id)
		var h1 string
		if err := chromedp.Run(ctx, chromedp.Click("#cancel-task button", chromedp.ByQuery), chromedp.WaitVisible("h1", chromedp.ByQuery),
			chromedp.Sleep(300*time.Millisecond), chromedp.Text("h1", &h1, chromedp.ByQuery)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, body := call(t, s, admin, "GET", "/v1/tasks/"+c.id, nil)
			var v api.Task
			_ = json.Unmarshal([]byte(body), &v)
			if v.State == c.want {
				break
			}
			if c.want == api.Queued || time.Now().After(deadline) {
				t.Fatalf("%s's Cancel (page %q): task %s, want %s", c.who, h1, v.State, c.want)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if c.who == "bob" && !strings.HasPrefix(h1, "403") {
			t.Errorf("bob's Cancel: page %q, want 403", h1)
		}
	}

	// Anonymous: the sign-in page, never data.
	anon := identityTab(t, "")
	for _, p := range []string{"/ui/", "/ui/tasks/" + acme.TaskID, "/ui/runs/" + globex.RunID, "/ui/health", "/ui/?tenant=acme"} {
		h1, html := pageText(t, anon, s, p)
		if h1 != "Sign in" || strings.Contains(html, acme.TaskID) || strings.Contains(html, globex.TaskID) || strings.Contains(html, "secret-1") {
			t.Errorf("anonymous %s: %q, want the sign-in page and no task", p, h1)
		}
	}
	if status, body := call(t, s, "", "GET", "/ui/live?view="+url.QueryEscape("/ui/"), nil); status != http.StatusUnauthorized || strings.Contains(body, "task_") {
		t.Errorf("anonymous live stream: %d %q", status, body)
	}
	if status, _ := call(t, s, "", "GET", "/v1/tasks/"+acme.TaskID+"/trace", nil); status != http.StatusUnauthorized {
		t.Errorf("anonymous trace: %d, want 401", status)
	}
	// Signing in with Bob's token: Bob's tasks. The browser's cookies are
	// per host, not per port: the sign-in cookie goes to "localhost", which
	// no other test uses, and is deleted at the end.
	t.Cleanup(func() {
		_ = chromedp.Run(anon, network.DeleteCookies(dashboard.IdentityCookie).WithDomain("localhost"))
	})
	local := strings.Replace(s.URL, "127.0.0.1", "localhost", 1)
	var html string
	if err := chromedp.Run(anon, chromedp.Navigate(local+"/ui/signin"), chromedp.WaitVisible("#signin-form", chromedp.ByQuery),
		chromedp.SendKeys(`#signin-form input[name="token"]`, bob, chromedp.ByQuery), chromedp.Submit("#signin-form", chromedp.ByQuery),
		chromedp.WaitVisible("table.tasks", chromedp.ByQuery), chromedp.Evaluate(`document.documentElement.outerHTML`, &html)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(html, "row-"+globex.TaskID) || strings.Contains(html, acme.TaskID) {
		t.Errorf("signed in as bob: globex task shown %v, acme task shown %v", strings.Contains(html, globex.TaskID), strings.Contains(html, acme.TaskID))
	}
}

// TestIAPHeaderIgnoredWithoutIAP: servo dev is not behind IAP, so IAP's
// header is no identity there, whoever adds it: Bob's token plus a header
// carrying Alice's neither lists acme through the API nor shows acme's
// task on the dashboard (the header used to win over Authorization).
func TestIAPHeaderIgnoredWithoutIAP(t *testing.T) {
	s := policyStack(t)
	status, body := call(t, s, devTok(t, s, "admin@example.com"), "POST", "/v1/tasks",
		map[string]any{"tenantId": "acme", "workspaceId": "ws", "taskKey": "iap-header", "worker": "idle", "payload": map[string]any{}})
	var sub api.SubmitResponse
	if status != http.StatusCreated || json.Unmarshal([]byte(body), &sub) != nil {
		t.Fatalf("submit: %d %s", status, body)
	}
	get := func(path string) (int, string) {
		req, _ := http.NewRequest("GET", s.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+devTok(t, s, "bob@example.com"))
		req.Header.Set(auth.IAPHeader, devTok(t, s, "alice@example.com"))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if status, body := get("/v1/tasks?tenantId=acme"); status != http.StatusForbidden {
		t.Fatalf("API as Bob with Alice's token in IAP's header: %d %s, want 403", status, body)
	}
	if status, body := get("/ui/tasks/" + sub.TaskID); status != http.StatusNotFound || strings.Contains(body, "iap-header") {
		t.Fatalf("dashboard task page as Bob with Alice's token in IAP's header: %d, want 404 without the task", status)
	}
	if status, body := get("/ui/"); status != http.StatusOK || strings.Contains(body, sub.TaskID) {
		t.Fatalf("dashboard as Bob with Alice's token in IAP's header: %d, shows acme's task: %v", status, strings.Contains(body, sub.TaskID))
	}
}

// TestLiveViewsPerCaller: one caller cannot take every live view. Bob
// holds MaxViewsPerCaller (MaxViews/4: 16) distinct views open; his next
// distinct view is 429 with Retry-After, a second tab of a view he holds
// is not refused, and Alice still opens hers (before, one caller could
// hold all 64 and everyone else got 503).
func TestLiveViewsPerCaller(t *testing.T) {
	s := policyStack(t)
	open := func(tok, view string) (int, http.Header) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/ui/live?view="+url.QueryEscape(view), nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		if res.StatusCode != http.StatusOK {
			_, _ = io.Copy(io.Discard, res.Body)
		}
		return res.StatusCode, res.Header
	}
	bob, alice := devTok(t, s, "bob@example.com"), devTok(t, s, "alice@example.com")
	const perCaller = 64 / 4
	for i := range perCaller {
		if code, _ := open(bob, fmt.Sprintf("/ui/?worker=w%d", i)); code != http.StatusOK {
			t.Fatalf("Bob's view %d: %d, want 200", i, code)
		}
	}
	code, h := open(bob, "/ui/?worker=one-too-many")
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Fatalf("Bob's view %d: %d (Retry-After %q), want 429 with Retry-After", perCaller+1, code, h.Get("Retry-After"))
	}
	if code, _ := open(bob, "/ui/?worker=w0"); code != http.StatusOK {
		t.Fatalf("a second tab of a view Bob holds: %d, want 200", code)
	}
	if code, _ := open(alice, "/ui/?worker=w0"); code != http.StatusOK {
		t.Fatalf("Alice's view while Bob holds his share: %d, want 200", code)
	}
}

// TestSignInCookieLifecycle: the sign-in cookie lives as long as its token
// (Max-Age from exp), POST /ui/signout drops it, a cookie whose token
// expired gets the sign-in page and is dropped too, and a token over the
// form's bound is said to be too long (not "anti-forgery token missing").
func TestSignInCookieLifecycle(t *testing.T) {
	s := policyStack(t)
	// The anti-forgery token, as a browser gets it from the sign-in page.
	res, err := http.Get(s.URL + "/ui/signin")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	var csrf *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == dashboard.CSRFCookie {
			csrf = c
		}
	}
	if csrf == nil {
		t.Fatal("no anti-forgery cookie from the sign-in page")
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(path string, form url.Values, cookies ...*http.Cookie) (*http.Response, string) {
		t.Helper()
		form.Set("csrf", csrf.Value)
		req, _ := http.NewRequest("POST", s.URL+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", s.URL)
		req.AddCookie(csrf)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	identity := func(res *http.Response) *http.Cookie {
		for _, c := range res.Cookies() {
			if c.Name == dashboard.IdentityCookie {
				return c
			}
		}
		return nil
	}
	get := func(path string, c *http.Cookie) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", s.URL+path, nil)
		req.AddCookie(c)
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}

	tok := devTok(t, s, "alice@example.com") // valid for an hour
	res, body := post("/ui/signin", url.Values{"token": {tok}})
	signedIn := identity(res)
	if res.StatusCode != http.StatusSeeOther || signedIn == nil || signedIn.MaxAge <= 3500 || signedIn.MaxAge > 3600 || !signedIn.HttpOnly {
		t.Fatalf("sign-in: %d, cookie %+v: want 303 and an HttpOnly cookie living as long as the token (about 3600 s)\n%.300s", res.StatusCode, signedIn, body)
	}
	if res, body := get("/ui/", signedIn); res.StatusCode != http.StatusOK || !strings.Contains(body, "signout-form") {
		t.Fatalf("signed in: %d, sign-out offered %v", res.StatusCode, strings.Contains(body, "signout-form"))
	}
	res, _ = post("/ui/signout", url.Values{}, signedIn)
	if dropped := identity(res); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/signin" || dropped == nil || dropped.MaxAge >= 0 {
		t.Fatalf("sign-out: %d to %q, cookie %+v: want 303 to /ui/signin dropping the cookie", res.StatusCode, res.Header.Get("Location"), dropped)
	}

	expired, err := auth.SignDev(s.IdentityKey, "alice@example.com", time.Now().Add(-2*time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	res, body = get("/ui/", &http.Cookie{Name: dashboard.IdentityCookie, Value: expired})
	if dropped := identity(res); res.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "signin-form") || dropped == nil || dropped.MaxAge >= 0 {
		t.Fatalf("an expired token's cookie: %d, cookie %+v: want the sign-in page dropping the cookie", res.StatusCode, dropped)
	}

	res, body = post("/ui/signin", url.Values{"token": {strings.Repeat("x", 70<<10)}})
	if res.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "too long") || strings.Contains(body, "anti-forgery") {
		t.Fatalf("a 70 KiB token: %d, want 413 saying it is too long:\n%.400s", res.StatusCode, body)
	}
	res, body = post("/ui/signin", url.Values{"token": {strings.Repeat("x", 9<<10)}})
	if res.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "too long") {
		t.Fatalf("a 9 KiB token: %d, want 413 saying it is too long:\n%.400s", res.StatusCode, body)
	}
}

// TestStreamsEndWithTheirToken: an event stream (GET /v1/events) and a
// live view (GET /ui/live) opened with a token that expires in 3 s end
// with an "expired" event soon after it does (before, a stream outlived
// its token: an 8 s token still received events 12 s later), while a
// request with the same token is refused from then on.
func TestStreamsEndWithTheirToken(t *testing.T) {
	s := policyStack(t)
	for _, path := range []string{"/v1/events?tenantId=acme", "/ui/live?view=" + url.QueryEscape("/ui/?tenant=acme")} {
		t.Run(path, func(t *testing.T) {
			tok, err := auth.SignDev(s.IdentityKey, "alice@example.com", time.Now(), 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+path, nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			opened := time.Now()
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("open: %d", res.StatusCode)
			}
			b, err := io.ReadAll(res.Body) // until the server ends the stream
			if err != nil {
				t.Fatalf("the stream did not end by itself within 30 s of its 3 s token: %v", err)
			}
			if !strings.Contains(string(b), "event: expired") {
				t.Fatalf("the stream ended without an expired event:\n%s", b)
			}
			if took := time.Since(opened); took < 2*time.Second {
				t.Fatalf("the stream ended after %v, before its token expired", took)
			}
			if status, _ := call(t, s, tok, "GET", "/v1/tasks?tenantId=acme", nil); status != http.StatusUnauthorized {
				t.Fatalf("a request with the expired token: %d, want 401", status)
			}
		})
	}
}

// TestEventStreamsPerCaller: one caller holds at most
// DefaultMaxStreamsPerCaller event streams (each a Pub/Sub subscription);
// the next is 429 quota_exceeded with Retry-After, while another caller
// still opens one (before, one viewer opened 200 in 1.7 s).
func TestEventStreamsPerCaller(t *testing.T) {
	s := policyStack(t)
	open := func(tok string) (int, http.Header) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/events?tenantId=acme", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		return res.StatusCode, res.Header
	}
	carol, alice := devTok(t, s, "carol@example.com"), devTok(t, s, "alice@example.com")
	for i := range dispatcher.DefaultMaxStreamsPerCaller {
		if code, _ := open(carol); code != http.StatusOK {
			t.Fatalf("Carol's stream %d: %d, want 200", i+1, code)
		}
	}
	if code, h := open(carol); code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Fatalf("Carol's stream %d: %d (Retry-After %q), want 429 with Retry-After", dispatcher.DefaultMaxStreamsPerCaller+1, code, h.Get("Retry-After"))
	}
	if code, _ := open(alice); code != http.StatusOK {
		t.Fatalf("Alice's stream while Carol holds her share: %d, want 200", code)
	}
}
