package cloudtasks

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"
	"time"

	pb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestDeliveryHeadersAndBody(t *testing.T) {
	h := newHarness(t, false, Options{})
	w := newWorker(t, nil)
	q := h.queue("delivery", nil)

	tests := []struct {
		method   pb.HttpMethod
		body     string
		wantVerb string
	}{
		{pb.HttpMethod_HTTP_METHOD_UNSPECIFIED, `{"a":1}`, "POST"},
		{pb.HttpMethod_POST, "post body", "POST"},
		{pb.HttpMethod_PUT, "put body", "PUT"},
		{pb.HttpMethod_PATCH, "patch body", "PATCH"},
		{pb.HttpMethod_GET, "", "GET"},
		{pb.HttpMethod_DELETE, "", "DELETE"},
		{pb.HttpMethod_HEAD, "", "HEAD"},
		{pb.HttpMethod_OPTIONS, "", "OPTIONS"},
	}
	for i, tc := range tests {
		t.Run(tc.wantVerb+"_"+strconv.Itoa(i), func(t *testing.T) {
			created := h.task(q, w.URL+"/work/"+strconv.Itoa(i)+"?x=1&y=two", func(tk *pb.Task) {
				hr := tk.GetHttpRequest()
				hr.HttpMethod = tc.method
				hr.Body = []byte(tc.body)
				hr.Headers = map[string]string{
					"Content-Type":          "application/json",
					"X-Custom":              "custom-value",
					"User-Agent":            "spoofed",
					"X-Google-Internal":     "dropped",
					"X-AppEngine-QueueName": "dropped",
					"X-CloudTasks-TaskName": "spoofed",
				}
			})
			if !regexp.MustCompile(`^[0-9]+$`).MatchString(shortID(created.Name)) {
				t.Errorf("server-generated task id %q is not numeric", shortID(created.Name))
			}
			w.waitN(t, i+1)
			d := w.nth(i)
			if d.method != tc.wantVerb {
				t.Errorf("method = %s, want %s", d.method, tc.wantVerb)
			}
			if want := "/work/" + strconv.Itoa(i) + "?x=1&y=two"; d.uri != want {
				t.Errorf("uri = %s, want %s", d.uri, want)
			}
			if d.body != tc.body {
				t.Errorf("body = %q, want %q", d.body, tc.body)
			}
			want := map[string]string{
				"User-Agent":                        "Google-Cloud-Tasks",
				"Content-Type":                      "application/json",
				"X-Custom":                          "custom-value",
				"X-Cloudtasks-Queuename":            "delivery",
				"X-Cloudtasks-Taskname":             shortID(created.Name),
				"X-Cloudtasks-Taskretrycount":       "0",
				"X-Cloudtasks-Taskexecutioncount":   "0",
				"X-Cloudtasks-Tasketa":              formatETA(created.ScheduleTime.AsTime()),
				"X-Google-Internal":                 "",
				"X-Appengine-Queuename":             "",
				"X-Cloudtasks-Taskpreviousresponse": "",
				"X-Cloudtasks-Taskretryreason":      "",
				"Authorization":                     "",
			}
			for k, v := range want {
				if got := d.header.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			h.waitGone(created.Name) // a 2xx deletes the task
		})
	}
}

func TestCreateTaskDefaults(t *testing.T) {
	h := newHarness(t, true, Options{})
	q := h.queue("defaults", &pb.Queue{})
	_, err := h.client.PauseQueue(h.ctx, &pb.PauseQueueRequest{Name: q})
	if err != nil {
		t.Fatal(err)
	}
	past := h.task(q, "http://127.0.0.1:1/", func(tk *pb.Task) {
		tk.ScheduleTime = timestamppb.New(fakeStart.Add(-time.Hour))
	})
	if got := past.ScheduleTime.AsTime(); !got.Equal(fakeStart) {
		t.Errorf("past schedule_time became %v, want now (%v)", got, fakeStart)
	}
	if got := past.DispatchDeadline.AsDuration(); got != defaultDispatchDeadline {
		t.Errorf("dispatch_deadline = %v, want the 10m default", got)
	}
	if got := past.CreateTime.AsTime(); !got.Equal(fakeStart) {
		t.Errorf("create_time = %v, want %v", got, fakeStart)
	}
	if past.View != pb.Task_BASIC || past.GetHttpRequest().GetBody() != nil {
		t.Errorf("default view = %v with body %q; want BASIC without body", past.View, past.GetHttpRequest().GetBody())
	}
	full := h.getTask(past.Name)
	if full.View != pb.Task_FULL || string(full.GetHttpRequest().GetBody()) != "payload" {
		t.Errorf("FULL view = %v with body %q", full.View, full.GetHttpRequest().GetBody())
	}
	qs, err := h.client.GetQueue(h.ctx, &pb.GetQueueRequest{Name: q})
	if err != nil {
		t.Fatal(err)
	}
	rl, rc := qs.RateLimits, qs.RetryConfig
	if rl.MaxDispatchesPerSecond != 500 || rl.MaxConcurrentDispatches != 1000 || rl.MaxBurstSize != 100 {
		t.Errorf("default rate limits = %v", rl)
	}
	if rc.MaxAttempts != 100 || rc.MinBackoff.AsDuration() != 100*time.Millisecond ||
		rc.MaxBackoff.AsDuration() != time.Hour || rc.MaxDoublings != 16 || rc.MaxRetryDuration.AsDuration() != 0 {
		t.Errorf("default retry config = %v", rc)
	}
}

func TestOIDCAndOAuthTokens(t *testing.T) {
	h := newHarness(t, false, Options{})
	w := newWorker(t, nil)
	q := h.queue("auth", nil)
	const sa = "invoker@test-project.iam.gserviceaccount.com"
	target := w.URL + "/secure"

	tests := []struct {
		name      string
		auth      func(*pb.HttpRequest)
		wantAud   string
		wantScope string
	}{
		{"oidc explicit audience", func(hr *pb.HttpRequest) {
			hr.AuthorizationHeader = &pb.HttpRequest_OidcToken{OidcToken: &pb.OidcToken{ServiceAccountEmail: sa, Audience: "https://worker.example"}}
		}, "https://worker.example", ""},
		{"oidc audience defaults to url", func(hr *pb.HttpRequest) {
			hr.AuthorizationHeader = &pb.HttpRequest_OidcToken{OidcToken: &pb.OidcToken{ServiceAccountEmail: sa}}
		}, target, ""},
		{"oauth default scope", func(hr *pb.HttpRequest) {
			hr.AuthorizationHeader = &pb.HttpRequest_OauthToken{OauthToken: &pb.OAuthToken{ServiceAccountEmail: sa}}
		}, target, defaultOAuthScope},
		{"oauth explicit scope", func(hr *pb.HttpRequest) {
			hr.AuthorizationHeader = &pb.HttpRequest_OauthToken{OauthToken: &pb.OAuthToken{ServiceAccountEmail: sa, Scope: "https://www.googleapis.com/auth/userinfo.email"}}
		}, target, "https://www.googleapis.com/auth/userinfo.email"},
	}
	keyFunc := func(tok *jwt.Token) (any, error) { return h.srv.PublicKey(), nil }
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h.task(q, target, func(tk *pb.Task) {
				tk.GetHttpRequest().Headers = map[string]string{"Authorization": "Bearer user-supplied"}
				tc.auth(tk.GetHttpRequest())
			})
			w.waitN(t, i+1)
			authz := w.nth(i).header.Get("Authorization")
			raw, ok := stringsCut(authz, "Bearer ")
			if !ok {
				t.Fatalf("Authorization = %q, want a bearer token", authz)
			}
			parser := []jwt.ParserOption{jwt.WithValidMethods([]string{"RS256"}), jwt.WithAudience(tc.wantAud), jwt.WithIssuer("https://accounts.google.com"), jwt.WithExpirationRequired()}
			if tc.wantScope == "" {
				var c OIDCClaims
				tok, err := jwt.ParseWithClaims(raw, &c, keyFunc, parser...)
				if err != nil {
					t.Fatalf("parse OIDC token: %v", err)
				}
				if c.Email != sa || !c.EmailVerified || c.Subject == "" || c.AuthorizedParty != c.Subject {
					t.Errorf("claims = %+v", c)
				}
				if tok.Header["kid"] == "" {
					t.Error("token has no kid")
				}
				if life := c.ExpiresAt.Sub(c.IssuedAt.Time); life != time.Hour {
					t.Errorf("token lifetime %v, want 1h", life)
				}
				return
			}
			var c oAuthClaims
			if _, err := jwt.ParseWithClaims(raw, &c, keyFunc, parser...); err != nil {
				t.Fatalf("parse OAuth token: %v", err)
			}
			if c.Email != sa || c.Scope != tc.wantScope {
				t.Errorf("claims = %+v", c)
			}
		})
	}
}

func stringsCut(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || s[:len(prefix)] != prefix {
		return "", false
	}
	return s[len(prefix):], true
}

func TestQueueHTTPTargetOverrides(t *testing.T) {
	h := newHarness(t, false, Options{})
	w := newWorker(t, nil)
	u, _ := url.Parse(w.URL)
	port, _ := strconv.ParseInt(u.Port(), 10, 64)
	host := u.Hostname()
	scheme := pb.UriOverride_HTTP
	q := h.queue("overrides", &pb.Queue{HttpTarget: &pb.HttpTarget{
		UriOverride: &pb.UriOverride{
			Scheme:        &scheme,
			Host:          &host,
			Port:          &port,
			PathOverride:  &pb.PathOverride{Path: "/override"},
			QueryOverride: &pb.QueryOverride{QueryParams: "q=1"},
		},
		HttpMethod:      pb.HttpMethod_PUT,
		HeaderOverrides: []*pb.HttpTarget_HeaderOverride{{Header: &pb.HttpTarget_Header{Key: "X-Env", Value: "local"}}},
		AuthorizationHeader: &pb.HttpTarget_OidcToken{OidcToken: &pb.OidcToken{
			ServiceAccountEmail: "queue@test-project.iam.gserviceaccount.com", Audience: "queue-aud",
		}},
	}})
	h.task(q, "https://unreachable.invalid/original?z=9", func(tk *pb.Task) {
		tk.GetHttpRequest().Headers = map[string]string{"X-Env": "task"}
	})
	w.waitN(t, 1)
	d := w.nth(0)
	if d.method != "PUT" || d.uri != "/override?q=1" || d.header.Get("X-Env") != "local" || d.body != "payload" {
		t.Errorf("got %s %s X-Env=%q body=%q", d.method, d.uri, d.header.Get("X-Env"), d.body)
	}
	var c OIDCClaims
	raw, _ := stringsCut(d.header.Get("Authorization"), "Bearer ")
	if _, err := jwt.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return h.srv.PublicKey(), nil }, jwt.WithAudience("queue-aud")); err != nil {
		t.Fatalf("queue-level OIDC token: %v", err)
	}
}

func TestScheduleTimeHonoured(t *testing.T) {
	h := newHarness(t, true, Options{})
	w := newWorker(t, nil)
	q := h.queue("scheduled", nil)
	at := fakeStart.Add(time.Hour)
	created := h.task(q, w.URL, func(tk *pb.Task) { tk.ScheduleTime = timestamppb.New(at) })
	if !created.ScheduleTime.AsTime().Equal(at) {
		t.Fatalf("schedule_time = %v, want %v", created.ScheduleTime.AsTime(), at)
	}
	h.waitArmed(at)
	h.clk.Advance(time.Hour - time.Second)
	w.quiet(t, 0)
	h.clk.AdvanceTo(at)
	w.waitN(t, 1)
	if got := w.nth(0).header.Get(HeaderETA); got != formatETA(at) {
		t.Errorf("ETA = %s, want %s", got, formatETA(at))
	}
	h.waitGone(created.Name)
}

func TestRetryBackoffSequence(t *testing.T) {
	h := newHarness(t, true, Options{})
	w := newWorker(t, statusCode(http.StatusInternalServerError))
	q := h.queue("backoff", &pb.Queue{RetryConfig: &pb.RetryConfig{
		MaxAttempts:  7,
		MinBackoff:   durationpb.New(time.Second),
		MaxBackoff:   durationpb.New(10 * time.Second),
		MaxDoublings: 2,
	}})
	created := h.task(q, w.URL, nil)
	// Retries double twice (1s, 2s, 4s), then grow by 4s (8s), capped at 10s.
	wantDelays := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	now := fakeStart
	for i, delay := range wantDelays {
		w.waitN(t, i+1)
		d := w.nth(i)
		if got := d.header.Get(HeaderRetryCount); got != strconv.Itoa(i) {
			t.Errorf("attempt %d: retry count %s", i+1, got)
		}
		if got := d.header.Get(HeaderExecutionCount); got != "0" {
			t.Errorf("attempt %d: execution count %s, want 0 (5xx do not count)", i+1, got)
		}
		if got := d.header.Get(HeaderETA); got != formatETA(now) {
			t.Errorf("attempt %d: ETA %s, want %s", i+1, got, formatETA(now))
		}
		if i > 0 {
			if got := d.header.Get(headerPreviousResponse); got != "500" {
				t.Errorf("attempt %d: previous response %q, want 500", i+1, got)
			}
			if got := d.header.Get(headerRetryReason); got != "INTERNAL" {
				t.Errorf("attempt %d: retry reason %q", i+1, got)
			}
		}
		tk := h.settled(created.Name, int32(i+1))
		if tk == nil {
			t.Fatalf("task dropped after %d attempts", i+1)
		}
		if got := tk.ScheduleTime.AsTime().Sub(now); got != delay {
			t.Errorf("after attempt %d: next retry in %v, want %v", i+1, got, delay)
		}
		if tk.DispatchCount != int32(i+1) || tk.ResponseCount != int32(i+1) {
			t.Errorf("dispatch/response count = %d/%d", tk.DispatchCount, tk.ResponseCount)
		}
		if c := codes.Code(tk.LastAttempt.GetResponseStatus().GetCode()); c != codes.Internal {
			t.Errorf("last attempt status %v", c)
		}
		if !tk.FirstAttempt.DispatchTime.AsTime().Equal(fakeStart) {
			t.Errorf("first attempt dispatched at %v", tk.FirstAttempt.DispatchTime.AsTime())
		}
		now = now.Add(delay)
		h.clk.AdvanceTo(now)
	}
	// The 7th attempt is the last one: the task is dropped and tombstoned.
	w.waitN(t, 7)
	h.waitGone(created.Name)
	w.quiet(t, 7)
	_, err := h.client.CreateTask(h.ctx, &pb.CreateTaskRequest{Parent: q, Task: &pb.Task{Name: created.Name,
		MessageType: &pb.Task_HttpRequest{HttpRequest: &pb.HttpRequest{Url: w.URL}}}})
	wantCode(t, err, codes.AlreadyExists)
}

func TestBackoffFormula(t *testing.T) {
	rc := &pb.RetryConfig{MinBackoff: durationpb.New(10 * time.Second), MaxBackoff: durationpb.New(300 * time.Second), MaxDoublings: 3}
	// The example in the RetryConfig.max_doublings reference.
	want := []int{10, 20, 40, 80, 160, 240, 300, 300, 300}
	for i, w := range want {
		if got := backoff(rc, int32(i+1)); got != time.Duration(w)*time.Second {
			t.Errorf("retry after attempt %d: %v, want %ds", i+1, got, w)
		}
	}
	if got := backoff(defaultRetryConfig(), 10000); got != time.Hour {
		t.Errorf("huge attempt count: %v, want max_backoff", got)
	}
}

func TestRetryAllowed(t *testing.T) {
	d := durationpb.New
	tests := []struct {
		name       string
		attempts   int32
		mrd        time.Duration
		n          int32
		sinceFirst time.Duration
		want       bool
	}{
		{"attempts left", 3, 0, 2, time.Hour, true},
		{"attempts used up", 3, 0, 3, 0, false},
		{"unlimited attempts", -1, 0, 1000, 1000 * time.Hour, true},
		{"attempts used, duration not", 3, time.Minute, 3, 30 * time.Second, true},
		{"duration used, attempts not", 3, time.Minute, 2, 2 * time.Minute, true},
		{"both used", 3, time.Minute, 3, time.Minute, false},
		{"unlimited attempts, duration used", -1, time.Minute, 50, time.Minute, false},
		{"unlimited attempts, duration left", -1, time.Minute, 50, time.Second, true},
	}
	for _, tc := range tests {
		rc := &pb.RetryConfig{MaxAttempts: tc.attempts, MaxRetryDuration: d(tc.mrd)}
		if got := retryAllowed(rc, tc.n, tc.sinceFirst); got != tc.want {
			t.Errorf("%s: retryAllowed = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMaxAttemptsAndRetryDuration(t *testing.T) {
	tests := []struct {
		name         string
		rc           *pb.RetryConfig
		succeedOn    int // the attempt that gets a 200; 0 never
		wantAttempts int
	}{
		{"max_attempts 3 drops after 3", &pb.RetryConfig{MaxAttempts: 3}, 0, 3},
		{"max_attempts 1 never retries", &pb.RetryConfig{MaxAttempts: 1}, 0, 1},
		{"unlimited attempts until success", &pb.RetryConfig{MaxAttempts: -1}, 9, 9},
		{"attempts and duration both must be used", &pb.RetryConfig{MaxAttempts: 2, MaxRetryDuration: durationpb.New(10 * time.Second)}, 0, 4},
		{"unlimited attempts bounded by duration", &pb.RetryConfig{MaxAttempts: -1, MaxRetryDuration: durationpb.New(10 * time.Second)}, 0, 4},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, true, Options{})
			w := newWorker(t, func(rw http.ResponseWriter, _ *http.Request, n int) {
				if n == tc.succeedOn {
					rw.WriteHeader(http.StatusNoContent)
					return
				}
				rw.WriteHeader(http.StatusServiceUnavailable)
			})
			tc.rc.MinBackoff, tc.rc.MaxBackoff = durationpb.New(4*time.Second), durationpb.New(4*time.Second)
			q := h.queue(fmt.Sprintf("attempts-%d", i), &pb.Queue{RetryConfig: tc.rc})
			created := h.task(q, w.URL, nil)
			for n := int32(1); ; n++ {
				w.waitN(t, int(n))
				tk := h.settled(created.Name, n)
				if tk == nil {
					break
				}
				if int(n) > tc.wantAttempts {
					t.Fatalf("still retrying after %d attempts", n)
				}
				h.clk.AdvanceTo(tk.ScheduleTime.AsTime())
			}
			w.quiet(t, tc.wantAttempts)
		})
	}
}

func TestTaskLevelRetryConfigOverridesQueue(t *testing.T) {
	h := newHarness(t, true, Options{})
	w := newWorker(t, statusCode(http.StatusBadGateway))
	q := h.queue("task-retry", &pb.Queue{RetryConfig: &pb.RetryConfig{MaxAttempts: 50, MinBackoff: durationpb.New(time.Second)}})
	created := h.task(q, w.URL, func(tk *pb.Task) {
		tk.RetryConfig = &pb.RetryConfig{MaxAttempts: 2, MinBackoff: durationpb.New(7 * time.Second)}
	})
	w.waitN(t, 1)
	tk := h.settled(created.Name, 1)
	if got := tk.ScheduleTime.AsTime().Sub(fakeStart); got != 7*time.Second {
		t.Errorf("task-level min_backoff ignored: next retry in %v", got)
	}
	h.clk.AdvanceTo(tk.ScheduleTime.AsTime())
	w.waitN(t, 2)
	h.waitGone(created.Name)
}

func TestExecutionCountAndPreviousResponse(t *testing.T) {
	h := newHarness(t, true, Options{})
	codesSeq := []int{http.StatusNotFound, http.StatusInternalServerError, http.StatusConflict, http.StatusOK}
	w := newWorker(t, func(rw http.ResponseWriter, _ *http.Request, n int) { rw.WriteHeader(codesSeq[n-1]) })
	q := h.queue("exec-count", &pb.Queue{RetryConfig: &pb.RetryConfig{MinBackoff: durationpb.New(time.Second)}})
	created := h.task(q, w.URL, nil)
	want := []struct{ retry, exec, prev, reason string }{
		{"0", "0", "", ""},
		{"1", "1", "404", "NOT_FOUND"},
		{"2", "1", "500", "INTERNAL"},
		{"3", "2", "409", "ABORTED"},
	}
	for i, wnt := range want {
		w.waitN(t, i+1)
		d := w.nth(i)
		got := []string{d.header.Get(HeaderRetryCount), d.header.Get(HeaderExecutionCount), d.header.Get(headerPreviousResponse), d.header.Get(headerRetryReason)}
		if fmt.Sprint(got) != fmt.Sprint([]string{wnt.retry, wnt.exec, wnt.prev, wnt.reason}) {
			t.Errorf("attempt %d: retry/exec/prev/reason = %q, want %+v", i+1, got, wnt)
		}
		if i < len(want)-1 {
			tk := h.settled(created.Name, int32(i+1))
			h.clk.AdvanceTo(tk.ScheduleTime.AsTime())
		}
	}
	h.waitGone(created.Name)
}

func TestRetryAfter(t *testing.T) {
	h := newHarness(t, true, Options{})
	tests := []struct {
		name  string
		code  int
		after string
		want  time.Duration
	}{
		{"429 with delay-seconds", http.StatusTooManyRequests, "30", 30 * time.Second},
		{"503 with HTTP-date", http.StatusServiceUnavailable, fakeStart.Add(20 * time.Second).Format(http.TimeFormat), 20 * time.Second},
		{"429 without Retry-After", http.StatusTooManyRequests, "", time.Second},
		{"Retry-After shorter than backoff", http.StatusServiceUnavailable, "0", time.Second},
		{"500 ignores Retry-After", http.StatusInternalServerError, "30", time.Second},
		{"malformed Retry-After", http.StatusTooManyRequests, "soon", time.Second},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorker(t, func(rw http.ResponseWriter, _ *http.Request, _ int) {
				if tc.after != "" {
					rw.Header().Set("Retry-After", tc.after)
				}
				rw.WriteHeader(tc.code)
			})
			q := h.queue(fmt.Sprintf("retry-after-%d", i), &pb.Queue{RetryConfig: &pb.RetryConfig{MinBackoff: durationpb.New(time.Second)}})
			created := h.task(q, w.URL, nil)
			w.waitN(t, 1)
			tk := h.settled(created.Name, 1)
			if got := tk.ScheduleTime.AsTime().Sub(fakeStart); got != tc.want {
				t.Errorf("next attempt in %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDispatchDeadlineTimeoutRetries(t *testing.T) {
	h := newHarness(t, true, Options{})
	w := newWorker(t, func(rw http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			<-r.Context().Done() // hang until the emulator gives up
			return
		}
		rw.WriteHeader(http.StatusOK)
	})
	q := h.queue("deadline", &pb.Queue{RetryConfig: &pb.RetryConfig{MinBackoff: durationpb.New(2 * time.Second)}})
	created := h.task(q, w.URL, func(tk *pb.Task) { tk.DispatchDeadline = durationpb.New(15 * time.Second) })
	if got := created.DispatchDeadline.AsDuration(); got != 15*time.Second {
		t.Fatalf("dispatch_deadline = %v", got)
	}
	w.waitN(t, 1)
	deadline := fakeStart.Add(15 * time.Second)
	h.waitArmed(deadline)
	h.clk.Advance(15*time.Second - time.Millisecond)
	if tk := h.getTask(created.Name); tk.LastAttempt.ResponseTime != nil {
		t.Fatal("attempt ended before its dispatch deadline")
	}
	h.clk.AdvanceTo(deadline)
	var tk *pb.Task
	eventually(t, "the timed-out attempt to be recorded", func() bool {
		tk = h.getTask(created.Name)
		return tk.LastAttempt.GetResponseTime() != nil
	})
	if c := codes.Code(tk.LastAttempt.GetResponseStatus().GetCode()); c != codes.DeadlineExceeded {
		t.Errorf("attempt status %v, want DeadlineExceeded", c)
	}
	if tk.ResponseCount != 0 || tk.DispatchCount != 1 {
		t.Errorf("response/dispatch count %d/%d, want 0/1", tk.ResponseCount, tk.DispatchCount)
	}
	if got := tk.ScheduleTime.AsTime().Sub(deadline); got != 2*time.Second {
		t.Errorf("retry scheduled %v after the timeout, want min_backoff 2s", got)
	}
	h.waitArmed(tk.ScheduleTime.AsTime())
	h.clk.AdvanceTo(tk.ScheduleTime.AsTime())
	w.waitN(t, 2)
	d := w.nth(1)
	if d.header.Get(headerPreviousResponse) != "0" || d.header.Get(headerRetryReason) != "DEADLINE_EXCEEDED" || d.header.Get(HeaderRetryCount) != "1" {
		t.Errorf("retry headers: prev=%q reason=%q retry=%q", d.header.Get(headerPreviousResponse), d.header.Get(headerRetryReason), d.header.Get(HeaderRetryCount))
	}
	h.waitGone(created.Name)
}

func TestConnectionErrorRetries(t *testing.T) {
	h := newHarness(t, true, Options{})
	w := newWorker(t, nil)
	dead := w.URL
	w.Close() // nothing listens there any more
	q := h.queue("conn-error", &pb.Queue{RetryConfig: &pb.RetryConfig{MaxAttempts: 2, MinBackoff: durationpb.New(time.Second)}})
	created := h.task(q, dead, nil)
	var tk *pb.Task
	eventually(t, "the failed attempt", func() bool {
		tk = h.getTask(created.Name)
		return tk != nil && tk.LastAttempt.GetResponseTime() != nil
	})
	if c := codes.Code(tk.LastAttempt.GetResponseStatus().GetCode()); c != codes.Unavailable {
		t.Errorf("attempt status %v, want Unavailable", c)
	}
	h.waitArmed(tk.ScheduleTime.AsTime())
	h.clk.AdvanceTo(tk.ScheduleTime.AsTime())
	h.waitGone(created.Name)
}

func TestRateLimitTokenBucket(t *testing.T) {
	h := newHarness(t, true, Options{})
	w := newWorker(t, nil)
	q := h.queue("rate", &pb.Queue{RateLimits: &pb.RateLimits{MaxDispatchesPerSecond: 2}})
	qs, err := h.client.GetQueue(h.ctx, &pb.GetQueueRequest{Name: q})
	if err != nil {
		t.Fatal(err)
	}
	if qs.RateLimits.MaxBurstSize != 2 {
		t.Fatalf("max_burst_size = %d, want 2", qs.RateLimits.MaxBurstSize)
	}
	for range 7 {
		h.task(q, w.URL, nil)
	}
	// A full bucket of 2 goes at once, then 2 tokens a second.
	for _, want := range []int{2, 4, 6, 7} {
		w.waitN(t, want)
		w.quiet(t, want)
		if want < 7 {
			h.waitArmed(h.clk.Now().Add(time.Second))
			h.clk.Advance(time.Second)
		}
	}
}

func TestMaxConcurrentDispatches(t *testing.T) {
	h := newHarness(t, false, Options{})
	release := make(chan struct{})
	w := newWorker(t, func(rw http.ResponseWriter, _ *http.Request, _ int) {
		<-release
		rw.WriteHeader(http.StatusOK)
	})
	q := h.queue("concurrency", &pb.Queue{RateLimits: &pb.RateLimits{MaxConcurrentDispatches: 3}})
	for range 10 {
		h.task(q, w.URL, nil)
	}
	w.waitN(t, 3)
	w.quiet(t, 3)
	if p := w.peak.Load(); p != 3 {
		t.Fatalf("peak concurrency %d, want 3", p)
	}
	close(release)
	w.waitN(t, 10)
	if p := w.peak.Load(); p > 3 {
		t.Errorf("peak concurrency %d exceeds max_concurrent_dispatches 3", p)
	}
}
