package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/examples/worker/partitions"
	"github.com/servo-dev/servo/functions"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/servotest/stacktest"
	"github.com/servo-dev/servo/worker"
)

// servo doctor against the real local stack: every check passes; with the
// sweeper stopped that row fails and the exit code is 1.
func TestDoctor(t *testing.T) {
	tests := []struct {
		name      string
		noSweeper bool
		code      int
		failed    map[string]bool
	}{
		{"healthy stack", false, exitOK, map[string]bool{}},
		{"sweeper stopped", true, exitFailure, map[string]bool{"sweeper": true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			project := emulatortest.ProjectID(t)
			s := stacktest.Start(t, devstack.Options{
				Project:     project,
				WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process},
				SweepEvery:  200 * time.Millisecond, NoSweeper: tc.noSweeper,
			})
			if !tc.noSweeper {
				// The first pass is recorded within a tick or two.
				waitSweep(t, s.URL)
			}
			out, errOut, code := runCLI(t, "doctor", "--api", s.URL, "--project", project, "--json", "--timeout", "90s")
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, out, errOut)
			}
			var checks []doctorCheck
			if err := json.Unmarshal([]byte(out), &checks); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			want := []string{"api", "sweeper", "identity", "canary", "events", "topic", "cleanup", "deliveries"}
			if len(checks) != len(want) {
				t.Fatalf("checks %+v, want %v", checks, want)
			}
			for i, ch := range checks {
				result := checkPass
				if tc.failed[ch.Name] {
					result = checkFail
				}
				if ch.Name != want[i] || ch.Result != result {
					t.Errorf("row %d: %+v, want %s %s", i, ch, want[i], result)
				}
			}
			// The canary cleaned up after itself: its task is gone.
			id := strings.Fields(checks[3].Detail)[0]
			c, err := client.New(s.URL)
			if err != nil {
				t.Fatal(err)
			}
			var gone *api.Error
			if v, _, err := c.Get(context.Background(), id); !errors.As(err, &gone) || gone.Status != http.StatusNotFound {
				t.Errorf("canary %s after doctor: %s %v, want 404 (deleted)", id, v.State, err)
			}
			// The table form: one header and one line per check.
			out, _, _ = runCLI(t, "doctor", "--api", s.URL, "--no-pubsub", "--timeout", "90s")
			t.Logf("servo doctor:\n%s", out)
			if n := len(strings.Split(strings.TrimRight(out, "\n"), "\n")); n != 9 {
				t.Errorf("table has %d lines, want 9:\n%s", n, out)
			}
		})
	}
	t.Run("API down", func(t *testing.T) {
		out, _, code := runCLI(t, "doctor", "--api", "http://"+freeAddr(t), "--no-pubsub", "--json")
		var checks []doctorCheck
		_ = json.Unmarshal([]byte(out), &checks)
		if code != exitFailure || len(checks) != 8 || checks[0].Result != checkFail {
			t.Fatalf("exit %d, %+v", code, checks)
		}
	})
}

// A push worker that is not running: doctor's deliveries row fails,
// naming the worker, its QUEUED tasks and Cloud Tasks' last error.
func TestDoctorNamesFailingDeliveries(t *testing.T) {
	project := emulatortest.ProjectID(t)
	down := "http://" + freeAddr(t)
	s := stacktest.Start(t, devstack.Options{
		Project:     project,
		WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process},
		Workers:     map[string]string{"etl": down},
		SweepEvery:  200 * time.Millisecond, StartTimeout: 8 * time.Second, // the first probe 2 s after the enqueue
	})
	c := stacktest.NewAPI(t, s)
	id := c.Submit(map[string]any{"tenantId": "acme", "workspaceId": "ws", "taskKey": "k", "worker": "etl"}).TaskID
	c.WaitFor(id, "a failing delivery", func(v api.Task) bool { return v.Delivery != nil })
	out, errOut, code := runCLI(t, "doctor", "--api", s.URL, "--no-pubsub", "--json", "--timeout", "90s")
	if code != exitFailure {
		t.Fatalf("exit %d, want %d\n%s%s", code, exitFailure, out, errOut)
	}
	var checks []doctorCheck
	if err := json.Unmarshal([]byte(out), &checks); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, ch := range checks {
		switch ch.Name {
		case "deliveries":
			if ch.Result != checkFail || !strings.Contains(ch.Detail, "worker etl: 1 QUEUED task(s)") || !strings.Contains(ch.Detail, "connection refused") {
				t.Errorf("deliveries row %+v, want a failure naming worker etl and the refused connection", ch)
			}
		case "canary", "api":
			if ch.Result != checkPass {
				t.Errorf("%+v, want pass", ch)
			}
		}
	}
}

// waitSweep waits until GET /v1/health shows a sweeper pass.
func waitSweep(t *testing.T, base string) {
	t.Helper()
	servotest.Until(t, "a sweeper pass recorded", func() bool {
		var h api.HealthResponse
		if resp, err := http.Get(base + "/v1/health"); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
		}
		return h.Sweeper != nil
	})
}

// freezer is a TCP proxy to an emulator that can stop forwarding: the
// connections stay open and nothing answers, as with a Firestore that
// hangs.
type freezer struct {
	l      net.Listener
	target string
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{l: l, target: target}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
	})
	return f
}

func (f *freezer) serve(c net.Conn) {
	up, err := net.Dial("tcp", f.target)
	if err != nil {
		c.Close()
		return
	}
	f.mu.Lock()
	f.conns = append(f.conns, c, up)
	f.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			for f.frozen.Load() {
				time.Sleep(50 * time.Millisecond) // hold the bytes: no answer
			}
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				dst.Close()
				return
			}
		}
	}
	go pipe(up, c)
	go pipe(c, up)
}

// TestDoctorNamesFirestore: with Firestore hanging, servo doctor's api row
// says Firestore is unavailable (the API's 503 within its bounded health
// read), not a deadline of its own; the rows after it say why they did not
// run.
func TestDoctorNamesFirestore(t *testing.T) {
	project := emulatortest.ProjectID(t)
	// devstack points the process's emulator variables at the hosts it is
	// given (the proxy): they are restored when the test ends.
	t.Setenv("FIRESTORE_EMULATOR_HOST", emulatortest.FirestoreHost(t))
	t.Setenv("PUBSUB_EMULATOR_HOST", emulatortest.PubSubHost(t))
	fz := newFreezer(t, emulatortest.FirestoreHost(t))
	s := stacktest.Start(t, devstack.Options{
		Project: project, FirestoreHost: fz.l.Addr().String(), PubSubHost: emulatortest.PubSubHost(t),
		WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process}, NoSweeper: true,
	})
	t.Cleanup(func() { fz.frozen.Store(false) }) // runs first: the stack can stop
	fz.frozen.Store(true)
	out, errOut, code := runCLI(t, "doctor", "--api", s.URL, "--no-pubsub", "--json")
	var checks []doctorCheck
	if err := json.Unmarshal([]byte(out), &checks); err != nil {
		t.Fatalf("%v\n%s%s", err, out, errOut)
	}
	t.Logf("servo doctor: %+v", checks)
	if code != exitFailure || len(checks) != 8 {
		t.Fatalf("exit %d, %+v", code, checks)
	}
	if api := checks[0]; api.Result != checkFail || !strings.Contains(api.Detail, "Firestore unavailable") || strings.Contains(api.Detail, "deadline exceeded") {
		t.Errorf("api row %+v, want a FAIL naming Firestore", api)
	}
	for _, ch := range checks[1:6] {
		if ch.Result != checkFail || !strings.Contains(ch.Detail, "Firestore is unavailable") {
			t.Errorf("row %+v, want a FAIL saying Firestore is unavailable", ch)
		}
	}
}

// TestDoctorUnderAccessPolicy: under an access policy, doctor's identity
// needs the submitter role on its canary tenant; without it the canary
// row says so, with it every row passes.
func TestDoctorUnderAccessPolicy(t *testing.T) {
	for _, tc := range []struct {
		name, policy string
		code         int // exitFailure: the canary fails
	}{
		{"viewer only", `{"principals": {"oncall@example.com": {"*": "viewer"}}}`, exitFailure},
		{"submitter on servo-doctor", `{"principals": {"oncall@example.com": {"servo-doctor": "submitter"}}}`, exitOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := auth.ParsePolicy([]byte(tc.policy))
			if err != nil {
				t.Fatal(err)
			}
			project := emulatortest.ProjectID(t)
			s := stacktest.Start(t, devstack.Options{
				Project: project, SweepEvery: 200 * time.Millisecond,
				WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process}, Access: p,
			})
			t.Setenv(auth.DevKeyEnv, base64.RawURLEncoding.EncodeToString(s.IdentityKey))
			out, errOut, code := runCLI(t, "--as", "oncall@example.com", "doctor", "--api", s.URL, "--project", project, "--no-pubsub", "--json", "--timeout", "90s")
			var checks []doctorCheck
			if err := json.Unmarshal([]byte(out), &checks); err != nil || len(checks) != 8 {
				t.Fatalf("%v\n%s%s", err, out, errOut)
			}
			t.Logf("%+v", checks)
			if tc.code == exitFailure {
				if canary := checks[3]; code != exitFailure || !strings.Contains(canary.Detail, `submitter role on tenant "servo-doctor"`) {
					t.Errorf("exit %d, canary row %+v: want a failure naming the role the caller lacks", code, canary)
				}
				return
			}
			// The sweeper row may not have a pass yet: the rest must pass.
			for _, i := range []int{0, 2, 3, 4, 6} {
				if checks[i].Result != checkPass {
					t.Errorf("row %+v, want pass", checks[i])
				}
			}
		})
	}
}

// TestDoctorReportsUnsetAudience: doctor against the production API entry
// point (functions.ServoAPI, built once per process from the environment)
// fails its identity row while SERVO_API_AUDIENCE is unset (the API then
// accepts no Google ID token), naming the variable. functions'
// TestHealthReportsIdentity covers the audience set.
func TestDoctorReportsUnsetAudience(t *testing.T) {
	_, ring, err := auth.GenerateKeyRing("k1")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(auth.EnvKeys, string(ring))
	t.Setenv("SERVO_PROJECT", emulatortest.ProjectID(t))
	t.Setenv("SERVO_CALLBACK_BASE_URL", "https://callbacks.example.com")
	t.Setenv("SERVO_WORKERS", "")
	t.Setenv("SERVO_API_AUDIENCE", "")
	t.Setenv("FIRESTORE_EMULATOR_HOST", emulatortest.FirestoreHost(t))
	t.Setenv("PUBSUB_EMULATOR_HOST", emulatortest.PubSubHost(t))
	t.Setenv("CLOUD_TASKS_EMULATOR_HOST", "127.0.0.1:1")
	api := httptest.NewServer(http.HandlerFunc(functions.ServoAPI))
	t.Cleanup(api.Close)
	out, errOut, code := runCLI(t, "doctor", "--api", api.URL, "--no-pubsub", "--json", "--timeout", "1s")
	var checks []doctorCheck
	if err := json.Unmarshal([]byte(out), &checks); err != nil || len(checks) != 8 {
		t.Fatalf("%v\n%s%s", err, out, errOut)
	}
	if id := checks[2]; code != exitFailure || id.Name != "identity" || id.Result != checkFail || !strings.Contains(id.Detail, "SERVO_API_AUDIENCE is unset") {
		t.Fatalf("exit %d, identity row %+v, want a FAIL naming SERVO_API_AUDIENCE", code, id)
	}
	if checks[0].Result != checkPass {
		t.Fatalf("api row %+v, want pass (the open policy lets doctor in)", checks[0])
	}
}

// TestDoctorNamesUnreachableWorker: a push worker that refuses connections.
// Once the sweeper's delivery probe records Cloud Tasks' failing
// deliveries, doctor's canary row says the worker is unreachable, well
// within --timeout; the canary is cancelled (no DISPATCH_TIMEOUT, no dead
// letter later) and deleted, and the rows after it pass: its events end
// CANCELLED, and that event arrives on the topic.
func TestDoctorNamesUnreachableWorker(t *testing.T) {
	project := emulatortest.ProjectID(t)
	s := stacktest.Start(t, devstack.Options{
		Project:     project,
		WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process},
		Workers:     map[string]string{"etl": "http://" + freeAddr(t)},     // nothing listens: refused
		SweepEvery:  200 * time.Millisecond, StartTimeout: 8 * time.Second, // the first probe 2 s after the enqueue
	})
	// The bound, with a margin for a loaded machine: without the delivery
	// probe's answer the canary and the topic would each wait --timeout.
	checks := failingDoctorWithin(t, 40*time.Second, 15*time.Second, "--api", s.URL, "--project", project, "--worker", "etl")
	row := map[string]doctorCheck{}
	for _, ch := range checks {
		row[ch.Name] = ch
	}
	canary := row["canary"]
	if canary.Result != checkFail || !strings.HasPrefix(canary.Detail, `worker "etl" unreachable: UNAVAILABLE`) || !strings.Contains(canary.Detail, "connection refused") {
		t.Errorf("canary row %+v, want worker \"etl\" unreachable: UNAVAILABLE … connection refused", canary)
	}
	if ev := row["events"]; ev.Result != checkPass || !strings.HasSuffix(ev.Detail, "QUEUED → CANCELLED") {
		t.Errorf("events row %+v, want the canary's transitions ending CANCELLED", ev)
	}
	if tp := row["topic"]; tp.Result != checkPass || !strings.HasPrefix(tp.Detail, "CANCELLED event received") {
		t.Errorf("topic row %+v, want its CANCELLED event received", tp)
	}
	cleanup := row["cleanup"]
	id, _, _ := strings.Cut(cleanup.Detail, " ")
	if cleanup.Result != checkPass || !strings.Contains(cleanup.Detail, "cancelled and deleted") {
		t.Errorf("cleanup row %+v, want the canary cancelled and deleted", cleanup)
	}
	// Nothing is left to end FAILED DISPATCH_TIMEOUT: the canary is gone.
	c, err := client.New(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	var gone *api.Error
	if v, _, err := c.Get(context.Background(), id); !errors.As(err, &gone) || gone.Status != http.StatusNotFound {
		t.Errorf("canary %q after doctor: %s %v, want 404 (cancelled, then deleted)", id, v.State, err)
	}
}

// TestDoctorBoundedByTimeout: a canary still QUEUED when --timeout comes
// (its worker is down, but the sweeper's first delivery probe, 30 s after
// the enqueue for the default start timeout, is later): the whole run ends
// within --timeout, not after the canary's and the topic's waits each took
// it; the row says no failing delivery was reported yet, and the canary is
// cancelled, so that it never ends FAILED (a dead letter), and kept.
func TestDoctorBoundedByTimeout(t *testing.T) {
	project := emulatortest.ProjectID(t)
	s := stacktest.Start(t, devstack.Options{
		Project:     project,
		WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process},
		Workers:     map[string]string{"etl": "http://" + freeAddr(t)},
		SweepEvery:  200 * time.Millisecond,
	})
	checks := failingDoctorWithin(t, 15*time.Second, 10*time.Second, "--api", s.URL, "--project", project, "--worker", "etl")
	canary, cleanup := checks[3], checks[6]
	if canary.Result != checkFail || !strings.Contains(canary.Detail, "still QUEUED after") || !strings.Contains(canary.Detail, "no failing delivery reported") {
		t.Errorf("canary row %+v, want still QUEUED, no failing delivery reported", canary)
	}
	id, _, _ := strings.Cut(canary.Detail, ":")
	if cleanup.Result != checkSkip || cleanup.Detail != id+" cancelled and kept for inspection: a check of it failed" {
		t.Errorf("cleanup row %+v, want %s cancelled and kept", cleanup, id)
	}
	c, err := client.New(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	if v, _, err := c.Get(context.Background(), id); err != nil || v.State != api.Cancelled || v.Reason != doctorCancelReason {
		t.Errorf("canary %s after doctor: %s %s %v, want CANCELLED %s", id, v.State, v.Reason, err, doctorCancelReason)
	}
}

// TestDoctorNamesUnreachablePubSub: with Pub/Sub refusing connections, or
// accepting them and never answering (a frozen emulator), the topic row
// says Pub/Sub is unreachable, within doctorPubSubTimeout (the client's
// own bound is 60 s), not that the topic may not exist.
func TestDoctorNamesUnreachablePubSub(t *testing.T) {
	project := emulatortest.ProjectID(t)
	s := stacktest.Start(t, devstack.Options{
		Project:     project,
		WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process},
		SweepEvery:  200 * time.Millisecond,
	})
	fz := newFreezer(t, emulatortest.PubSubHost(t))
	fz.frozen.Store(true)
	t.Cleanup(func() { fz.frozen.Store(false) })
	for _, tc := range []struct{ name, host, want string }{
		{"refused", freeAddr(t), "connection refused"},
		{"frozen", fz.l.Addr().String(), "no answer within 10s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Doctor's Pub/Sub alone: the stack's clients are made.
			t.Setenv("PUBSUB_EMULATOR_HOST", tc.host)
			began := time.Now()
			out, errOut, code := runCLI(t, "doctor", "--api", s.URL, "--project", project, "--json", "--timeout", "90s")
			took := time.Since(began)
			t.Logf("servo doctor took %s:\n%s%s", took, out, errOut)
			var checks []doctorCheck
			if err := json.Unmarshal([]byte(out), &checks); err != nil || len(checks) != 8 {
				t.Fatalf("%v\n%s", err, out)
			}
			if code != exitFailure {
				t.Errorf("exit %d, want %d", code, exitFailure)
			}
			topic := checks[5]
			if topic.Name != "topic" || topic.Result != checkFail || !strings.HasPrefix(topic.Detail, "Pub/Sub unreachable: ") ||
				!strings.Contains(topic.Detail, tc.want) || strings.Contains(topic.Detail, "does it exist") {
				t.Errorf("topic row %+v, want Pub/Sub unreachable … %s", topic, tc.want)
			}
			if checks[3].Result != checkPass {
				t.Errorf("canary row %+v, want pass", checks[3])
			}
			// 10 s for the subscription, the canary's 300 ms, a margin.
			if took > 40*time.Second {
				t.Errorf("doctor took %s, want the topic's failure within %s", took, doctorPubSubTimeout)
			}
		})
	}
}

// TestDoctorCannotCancelAsSubmitter: under an access policy that gives
// doctor's caller the submitter role only, a canary whose worker is
// unreachable cannot be cancelled (cancelling needs operator): the cleanup
// row says so, names the command, and leaves the canary in place.
func TestDoctorCannotCancelAsSubmitter(t *testing.T) {
	p, err := auth.ParsePolicy([]byte(`{"principals": {"oncall@example.com": {"servo-doctor": "submitter"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	project := emulatortest.ProjectID(t)
	s := stacktest.Start(t, devstack.Options{
		Project: project, SweepEvery: 200 * time.Millisecond, StartTimeout: 8 * time.Second, Access: p,
		WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process},
		Workers:     map[string]string{"etl": "http://" + freeAddr(t)},
	})
	t.Setenv(auth.DevKeyEnv, base64.RawURLEncoding.EncodeToString(s.IdentityKey))
	out, errOut, code := runCLI(t, "--as", "oncall@example.com", "doctor", "--api", s.URL, "--project", project, "--worker", "etl",
		"--no-pubsub", "--json", "--timeout", "40s")
	var checks []doctorCheck
	if err := json.Unmarshal([]byte(out), &checks); err != nil || len(checks) != 8 {
		t.Fatalf("%v\n%s%s", err, out, errOut)
	}
	t.Logf("%+v", checks)
	canary, cleanup := checks[3], checks[6]
	if code != exitFailure || !strings.HasPrefix(canary.Detail, `worker "etl" unreachable:`) {
		t.Fatalf("exit %d, canary row %+v, want worker \"etl\" unreachable", code, canary)
	}
	if cleanup.Result != checkSkip || !strings.Contains(cleanup.Detail, "left QUEUED: could not cancel it") ||
		!strings.Contains(cleanup.Detail, `operator role on tenant "servo-doctor"`) || !strings.Contains(cleanup.Detail, "servo cancel task_") {
		t.Errorf("cleanup row %+v, want the canary left QUEUED, naming the operator role and servo cancel", cleanup)
	}
}

// TestDoctorRoutesAStartFailure: an API that cannot start answers 503
// with the code of what to fix (functions' TestEntryPointsNameTheCause
// pins those answers); doctor's api row names it and the runbook section
// for it, not Firestore's.
func TestDoctorRoutesAStartFailure(t *testing.T) {
	for _, code := range []string{api.CodeSecretUnavailable, api.CodeMisconfigured} {
		t.Run(code, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json; charset=utf-8")
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
				json.NewEncoder(w).Encode(api.Error{Code: code, Message: "the Servo control API is not configured: functions: server: " + code})
			}))
			t.Cleanup(srv.Close)
			out, errOut, exit := runCLI(t, "doctor", "--api", srv.URL, "--no-pubsub", "--json", "--timeout", "5s")
			var checks []doctorCheck
			if err := json.Unmarshal([]byte(out), &checks); err != nil || len(checks) != 8 {
				t.Fatalf("%v\n%s%s", err, out, errOut)
			}
			a := checks[0]
			if exit != exitFailure || a.Result != checkFail || !strings.Contains(a.Detail, code) ||
				!strings.Contains(a.Detail, "runbook: A configuration or secret error") || strings.Contains(a.Detail, "Firestore") {
				t.Fatalf("exit %d, api row %+v: want a FAIL naming %s and its runbook section", exit, a, code)
			}
			if s := checks[1]; s.Result != checkFail || !strings.Contains(s.Detail, "cannot start") {
				t.Errorf("sweeper row %+v, want unknown: the API cannot start", s)
			}
		})
	}
}

// failingDoctorWithin runs servo doctor --json --timeout timeout with
// args, wants it to fail (exit 1) within timeout plus margin (a loaded
// machine's), and returns its eight rows.
func failingDoctorWithin(t *testing.T, timeout, margin time.Duration, args ...string) []doctorCheck {
	t.Helper()
	began := time.Now()
	out, errOut, code := runCLI(t, append([]string{"doctor", "--json", "--timeout", timeout.String()}, args...)...)
	took := time.Since(began)
	t.Logf("servo doctor took %s:\n%s%s", took, out, errOut)
	if code != exitFailure {
		t.Fatalf("exit %d, want %d", code, exitFailure)
	}
	if took > timeout+margin {
		t.Errorf("doctor took %s, want it within --timeout %s", took, timeout)
	}
	var checks []doctorCheck
	if err := json.Unmarshal([]byte(out), &checks); err != nil || len(checks) != 8 {
		t.Fatalf("%v\n%s", err, out)
	}
	return checks
}
