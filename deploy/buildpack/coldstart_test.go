package buildpack

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ctpb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"

	"github.com/servo-dev/servo/emulator/cloudtasks"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/auth"
)

// helloSource is the hello-world function the cold starts are compared
// with: functions-framework-go and one HTTP function, nothing else.
const helloSource = `// Package hello is the cold-start baseline: one functions-framework function.
package hello

import (
	"fmt"
	"net/http"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"
)

func init() {
	functions.HTTP("Hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
}
`

// clientsSource is the hello-world function linking the three Google
// clients every Servo function needs (Firestore, Pub/Sub, Cloud Tasks) and
// using none of them: what linking them alone costs a cold start.
const clientsSource = `// Package clients is the hello-world function with Servo's Google clients linked.
package clients

import (
	"fmt"
	"net/http"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	firestore "cloud.google.com/go/firestore/apiv1"
	"cloud.google.com/go/pubsub/v2"
	"github.com/GoogleCloudPlatform/functions-framework-go/functions"
)

// Linked, never called.
var _ = []any{firestore.NewClient, pubsub.NewClient, cloudtasks.NewClient}

func init() {
	functions.HTTP("Clients", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
}
`

// coldStartBinaries builds, as the buildpack does (TestBuildpackFunctions),
// the Servo functions' binary and a hello-world function's, inside the
// same copied module (so both use the same functions-framework-go).
func coldStartBinaries(tb testing.TB) (servo, hello string) {
	servo, hello, _ = coldStartBinariesWith(tb, false)
	return servo, hello
}

// coldStartBinariesWith is coldStartBinaries that, with withClients, also
// builds clientsSource's function.
func coldStartBinariesWith(tb testing.TB, withClients bool) (servo, hello, clients string) {
	tb.Helper()
	root := repoRoot(tb)
	src := filepath.Join(tb.TempDir(), "serverless_function_source_code")
	copySource(tb, root, src, sourceExcludes(tb, root))
	module := goOutput(tb, src, "list", "-m")
	helloDir := filepath.Join(src, "functions.local", "hello")
	if err := os.MkdirAll(helloDir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(helloDir, "hello.go"), []byte(helloSource), 0o644); err != nil {
		tb.Fatal(err)
	}
	binDir := tb.TempDir()
	servo = buildMain(tb, src, binDir, "servo", mainDeclarative, map[string]string{"Package": module})
	hello = buildMain(tb, src, binDir, "hello", mainDeclarative, map[string]string{"Package": module + "/functions.local/hello"})
	if withClients {
		clientsDir := filepath.Join(src, "functions.local", "clients")
		if err := os.MkdirAll(clientsDir, 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(clientsDir, "clients.go"), []byte(clientsSource), 0o644); err != nil {
			tb.Fatal(err)
		}
		clients = buildMain(tb, src, binDir, "clients", mainDeclarative, map[string]string{"Package": module + "/functions.local/clients"})
	}
	return servo, hello, clients
}

// coldStartEnv is functionEnv with the example worker's queue created in
// the Cloud Tasks emulator, and the key ring it holds.
func coldStartEnv(tb testing.TB) ([]string, string, *auth.KeyRing) {
	tb.Helper()
	return coldStartEnvFor(tb, emulatortest.ProjectID(tb))
}

func coldStartEnvFor(tb testing.TB, project string) ([]string, string, *auth.KeyRing) {
	tb.Helper()
	tasks := cloudtasks.NewServer(cloudtasks.Options{})
	tasksAddr, err := tasks.Start("127.0.0.1:0")
	if err != nil {
		tb.Fatalf("start the Cloud Tasks emulator: %v", err)
	}
	tb.Cleanup(tasks.Stop)
	ctx := context.Background()
	ct, err := cloudtasks.NewClient(ctx, cloudtasks.ClientOptions(tasksAddr)...)
	if err != nil {
		tb.Fatal(err)
	}
	defer ct.Close()
	parent := "projects/" + project + "/locations/us-central1"
	if _, err := ct.CreateQueue(ctx, &ctpb.CreateQueueRequest{Parent: parent, Queue: &ctpb.Queue{Name: parent + "/queues/servo-example"}}); err != nil {
		tb.Fatalf("create the example queue: %v", err)
	}
	env := functionEnv(tb, project, tasksAddr)
	var keys *auth.KeyRing
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, auth.EnvKeys+"="); ok {
			if keys, err = auth.ParseKeyRing([]byte(v)); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return env, project, keys
}

// probe is one request a cold-started function must answer successfully.
type probe func(base string) (ok bool, detail string)

// timeToFirstAnswer starts bin with target and returns the time from the
// process start to the first successful answer to p, polling every
// millisecond (connection refused until the function listens), and the
// time until it first accepted a connection.
func timeToFirstAnswer(tb testing.TB, bin, target string, env []string, p probe) (answer, listen time.Duration) {
	answer, listen, _ = timeToFirstAnswerWarm(tb, bin, target, env, p, nil)
	return answer, listen
}

// warmAnswers is how many requests after the first one measure the warm
// instance's answer.
const warmAnswers = 3

// timeToFirstAnswerWarm is timeToFirstAnswer that then, when next is not
// nil, sends warmAnswers more requests of the same kind (a new probe from
// next each: a new task, not a duplicate) and returns the quickest: what
// the same request costs once the instance is warm, the floor under any
// cold start of it.
func timeToFirstAnswerWarm(tb testing.TB, bin, target string, env []string, p probe, next func() probe) (answer, listen, warm time.Duration) {
	tb.Helper()
	port := freePort(tb)
	cmd := exec.Command(bin)
	cmd.Env = append(append([]string(nil), env...), "PORT="+port, "FUNCTION_TARGET="+target, "K_SERVICE="+strings.ToLower(target))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	base := "http://127.0.0.1:" + port
	deadline := begin.Add(60 * time.Second)
	last := ""
	for {
		if listen == 0 {
			if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
				listen = time.Since(begin)
				c.Close()
			}
		}
		if listen == 0 {
			if time.Now().After(deadline) {
				tb.Fatalf("%s: not listening within 60s\n%s", target, out.String())
			}
			time.Sleep(time.Millisecond)
			continue
		}
		ok, detail := p(base)
		if ok {
			answer = time.Since(begin)
			for i := 0; next != nil && i < warmAnswers; i++ {
				q := next()
				t0 := time.Now()
				if ok, detail := q(base); !ok {
					tb.Fatalf("%s: a warm request failed: %s\n%s", target, detail, out.String())
				}
				if d := time.Since(t0); warm == 0 || d < warm {
					warm = d
				}
			}
			return answer, listen, warm
		}
		last = detail
		if time.Now().After(deadline) {
			tb.Fatalf("%s: no successful answer within 60s; last: %s\n%s", target, last, out.String())
		}
		time.Sleep(time.Millisecond)
	}
}

var probeClient = &http.Client{Timeout: 30 * time.Second}

// send makes one request and reports whether it answered want.
func send(method, url string, body any, header http.Header, want int) (bool, string, []byte) {
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return false, err.Error(), nil
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return false, err.Error(), nil
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode == want, fmt.Sprintf("%d %s", resp.StatusCode, buf.String()), buf.Bytes()
}

var submitSeq atomic.Int64

// submitBody is a new task for the example worker.
func submitBody() map[string]any {
	n := submitSeq.Add(1)
	return map[string]any{
		"tenantId": "bench", "workspaceId": "cold", "taskKey": fmt.Sprintf("k%d", n), "worker": "example",
		"idempotencyKey": fmt.Sprintf("cold-%d-%d", time.Now().UnixNano(), n), "payload": map[string]any{},
	}
}

// submitProbe: the API's first submit answered 201.
func submitProbe(base string) (bool, string) {
	ok, detail, _ := send(http.MethodPost, base+"/v1/tasks", submitBody(), nil, http.StatusCreated)
	return ok, detail
}

// submitted submits a task through a running API and returns the token
// scope of its first attempt.
func submitted(tb testing.TB, apiBase string) auth.Scope {
	tb.Helper()
	body := submitBody()
	ok, detail, raw := send(http.MethodPost, apiBase+"/v1/tasks", body, nil, http.StatusCreated)
	if !ok {
		tb.Fatalf("submit: %s", detail)
	}
	var res struct{ TaskID, RunID string }
	_ = json.Unmarshal(raw, &res)
	return auth.Scope{TenantID: "bench", WorkspaceID: "cold", RunID: res.RunID, TaskID: res.TaskID, Attempt: 1}
}

// startedProbe: a worker's `started` callback for scope answered 200.
func startedProbe(keys *auth.KeyRing, scope auth.Scope) probe {
	tok, _, err := keys.Sign(scope, time.Hour, time.Now())
	return func(base string) (bool, string) {
		if err != nil {
			return false, err.Error()
		}
		h := http.Header{"Authorization": {"Bearer " + tok}}
		ok, detail, _ := send(http.MethodPost, base+"/v1/tasks/"+scope.TaskID+"/started",
			map[string]any{"attempt": 1, "workerId": "cold-start"}, h, http.StatusOK)
		return ok, detail
	}
}

// sweepProbe: a sweep tick (the Pub/Sub CloudEvent Eventarc delivers)
// answered 2xx, that is, the sweeper's first pass done.
func sweepProbe(project string) probe {
	return func(base string) (bool, string) {
		msg := map[string]any{
			"message": map[string]any{
				"data":        base64.StdEncoding.EncodeToString([]byte("{}")),
				"messageId":   "1",
				"publishTime": time.Now().UTC().Format(time.RFC3339Nano),
			},
			"subscription": "projects/" + project + "/subscriptions/eventarc-servo-sweep",
		}
		h := http.Header{
			"Ce-Specversion": {"1.0"},
			"Ce-Type":        {"google.cloud.pubsub.topic.v1.messagePublished"},
			"Ce-Source":      {"//pubsub.googleapis.com/projects/" + project + "/topics/servo-sweep"},
			"Ce-Id":          {fmt.Sprint(time.Now().UnixNano())},
			"Ce-Time":        {time.Now().UTC().Format(time.RFC3339Nano)},
		}
		ok, detail, _ := send(http.MethodPost, base+"/", msg, h, http.StatusOK)
		if !ok && strings.HasPrefix(detail, "204") {
			ok = true
		}
		return ok, detail
	}
}

func helloProbe(base string) (bool, string) {
	ok, detail, _ := send(http.MethodGet, base+"/", nil, nil, http.StatusOK)
	return ok, detail
}

// BenchmarkColdStart builds the three functions and a hello-world function
// the buildpack's way and measures, per iteration, each one's time from
// process start to its first successful answer against the emulators:
// ServoAPI a submit (201), ServoCallbacks a worker's `started` (200),
// ServoSweeper one sweep tick (its first pass), Hello a GET, and Clients
// (clientsSource: the hello-world with Firestore's, Pub/Sub's and Cloud
// Tasks' clients linked) a GET. It reports
// ms per function (ms-listen: until the port accepted a connection, that
// is, init and the framework's setup; ms-warm: the same kind of request
// answered by the instance once warm, the quickest of warmAnswers) and each
// one's ratio to Hello, next to x-hello-floor, the ratio a Servo function
// would reach if it started as fast as Clients and its first request cost
// no more than a warm one; no assertion on time.
//
//	go test ./deploy/buildpack -run '^$' -bench ColdStart -benchtime 5x
func BenchmarkColdStart(b *testing.B) {
	servo, hello, clients := coldStartBinariesWith(b, true)
	env, project, keys := coldStartEnv(b)
	// A warm API prepares the tasks the callbacks' probes start.
	apiPort := freePort(b)
	apiCmd := exec.Command(servo)
	apiCmd.Env = append(append([]string(nil), env...), "PORT="+apiPort, "FUNCTION_TARGET=ServoAPI")
	if err := apiCmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = apiCmd.Process.Kill(); _ = apiCmd.Wait() })
	apiBase := "http://127.0.0.1:" + apiPort
	timeToFirstAnswer(b, servo, "ServoAPI", env, submitProbe) // warms the emulators and page cache

	totals, listens, warms := map[string]time.Duration{}, map[string]time.Duration{}, map[string]time.Duration{}
	measure := func(name, bin string, next func() probe) {
		answer, listen, warm := timeToFirstAnswerWarm(b, bin, name, env, next(), next)
		totals[name] += answer
		listens[name] += listen
		warms[name] += warm
	}
	// A new task's `started` each time: the warm requests are first
	// reports too, not duplicates (which would write nothing).
	newStarted := func() probe { return startedProbe(keys, submitted(b, apiBase)) }
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		deadline := time.Now().Add(60 * time.Second)
		for ok, _ := submitProbe(apiBase); !ok; ok, _ = submitProbe(apiBase) {
			if time.Now().After(deadline) {
				b.Fatal("the warm API does not answer")
			}
			time.Sleep(10 * time.Millisecond)
		}
		b.StartTimer()
		measure("Hello", hello, func() probe { return helloProbe })
		measure("Clients", clients, func() probe { return helloProbe })
		measure("ServoAPI", servo, func() probe { return submitProbe })
		measure("ServoCallbacks", servo, newStarted)
		measure("ServoSweeper", servo, func() probe { return sweepProbe(project) })
	}
	b.StopTimer()
	hello0 := float64(totals["Hello"]) / float64(b.N)
	clients0 := float64(totals["Clients"]) / float64(b.N)
	names := make([]string, 0, len(totals))
	for n := range totals {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		avg := float64(totals[n]) / float64(b.N)
		b.ReportMetric(avg/float64(time.Millisecond), "ms/"+n)
		b.ReportMetric(float64(listens[n])/float64(b.N)/float64(time.Millisecond), "ms-listen/"+n)
		warm := float64(warms[n]) / float64(b.N)
		b.ReportMetric(warm/float64(time.Millisecond), "ms-warm/"+n)
		if n != "Hello" {
			b.ReportMetric(avg/hello0, "x-hello/"+n)
		}
		if strings.HasPrefix(n, "Servo") {
			// The least a cold start of this request could take: the
			// cold start of a function that links the Google clients and
			// does nothing else, plus the request's own work when warm.
			b.ReportMetric((clients0+warm)/hello0, "x-hello-floor/"+n)
		}
	}
}

// recorder accepts connections and counts them, holding each open.
type recorder struct {
	l     net.Listener
	count atomic.Int64
}

func newRecorder(tb testing.TB) *recorder {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r := &recorder{l: l}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				for _, c := range conns {
					c.Close()
				}
				return
			}
			r.count.Add(1)
			conns = append(conns, c)
		}
	}()
	tb.Cleanup(func() { l.Close(); <-done })
	return r
}

// Cold start makes no network call: with every Google endpoint the
// functions could reach (the emulators, Cloud Tasks, the metadata server)
// pointed at a listener that counts connections, a started function has
// connected nowhere until its first request, which then does connect
// there (so the listener would have seen an earlier call).
func TestNoNetworkBeforeFirstRequest(t *testing.T) {
	servo, _ := coldStartBinaries(t)
	env, project, _ := coldStartEnv(t)
	for _, target := range []string{"ServoAPI", "ServoCallbacks", "ServoSweeper"} {
		t.Run(target, func(t *testing.T) {
			rec := newRecorder(t)
			addr := rec.l.Addr().String()
			fenv := append(append([]string(nil), env...),
				"FIRESTORE_EMULATOR_HOST="+addr, "PUBSUB_EMULATOR_HOST="+addr,
				cloudtasks.EnvVar+"="+addr, "GCE_METADATA_HOST="+addr)
			base := startFunction(t, servo, target, fenv)
			// Listening means init and the framework's setup are done;
			// give stray goroutines a moment more.
			time.Sleep(time.Second)
			if n := rec.count.Load(); n != 0 {
				t.Fatalf("%s connected %d time(s) before its first request", target, n)
			}
			probeClient := &http.Client{Timeout: 5 * time.Second}
			var req *http.Request
			switch target {
			case "ServoSweeper":
				b, _ := json.Marshal(map[string]any{"message": map[string]any{"data": "e30=", "messageId": "1"}, "subscription": "projects/" + project + "/subscriptions/s"})
				req, _ = http.NewRequest(http.MethodPost, base+"/", bytes.NewReader(b))
				req.Header.Set("Ce-Specversion", "1.0")
				req.Header.Set("Ce-Type", "google.cloud.pubsub.topic.v1.messagePublished")
				req.Header.Set("Ce-Source", "//pubsub.googleapis.com/projects/"+project+"/topics/servo-sweep")
				req.Header.Set("Ce-Id", "1")
			case "ServoAPI":
				b, _ := json.Marshal(submitBody())
				req, _ = http.NewRequest(http.MethodPost, base+"/v1/tasks", bytes.NewReader(b))
			default:
				req, _ = http.NewRequest(http.MethodPost, base+"/v1/tasks/task_00000000000000000000000000/started",
					strings.NewReader(`{"attempt":1,"workerId":"w"}`))
				req.Header.Set("Authorization", "Bearer x.y.z")
			}
			req.Header.Set("Content-Type", "application/json")
			if resp, err := probeClient.Do(req); err == nil {
				resp.Body.Close()
			}
			deadline := time.Now().Add(30 * time.Second)
			for rec.count.Load() == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%s made no connection on its first request either: the check would not see one", target)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
