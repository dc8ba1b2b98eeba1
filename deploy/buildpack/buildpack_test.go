package buildpack

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/cloudtasks"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/servotest"
)

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore, emulator.PubSub) }

const (
	frameworkModule = "github.com/GoogleCloudPlatform/functions-framework-go"
	// A root package importing this package makes the buildpack generate a
	// main that only blank-imports the function package (functions
	// registered by name in init); otherwise it generates one that refers
	// to <package>.<FUNCTION_TARGET>.
	frameworkFunctions = frameworkModule + "/functions"
	// Where the buildpack writes the generated main: a package inside the
	// function's own module.
	appDir = "functions.local/app"
)

// The entry points Terraform deploys (deploy/terraform_test.go checks the
// names there) and how each is called.
var entryPoints = []struct {
	target     string
	cloudEvent bool
}{
	{"ServoAPI", false},
	{"ServoCallbacks", false},
	{"ServoSweeper", true},
	{"ServoJobs", false},
}

// proposedRoot is the smallest root package that satisfies the buildpack,
// shown when the source has none.
const proposedRoot = `// Package servo is the root of the Cloud Functions source: the Go buildpack
// builds the package at the root of the uploaded source, and this one only
// pulls in the functions registered by package functions.
package servo

import (
	// Importing the framework's functions package tells the buildpack the
	// functions are registered by name (functions.HTTP / functions.CloudEvent).
	_ "github.com/GoogleCloudPlatform/functions-framework-go/functions"

	// ServoAPI, ServoCallbacks, ServoSweeper and ServoJobs, registered in init.
	_ "github.com/servo-dev/servo/functions"
)
`

func TestBuildpackFunctions(t *testing.T) {
	root := repoRoot(t)
	src := filepath.Join(t.TempDir(), "serverless_function_source_code")
	copySource(t, root, src, sourceExcludes(t, root))

	// --- The buildpack's rules --------------------------------------------
	for _, f := range []string{"go.mod", "go.sum"} {
		if _, err := os.Stat(filepath.Join(src, f)); err != nil {
			// Without go.sum the buildpack runs go mod tidy over the network.
			t.Fatalf("the function source has no %s", f)
		}
	}
	if _, err := os.Stat(filepath.Join(src, "vendor")); err == nil {
		t.Fatal("the function source has a vendor directory: the buildpack then builds from it alone; leave vendor/ out of the zip")
	}
	pkgName, imports := rootPackage(t, src)
	if pkgName == "main" {
		t.Fatal("the package at the source root is package main; the buildpack imports the root package, and a main package cannot be imported")
	}
	module := goOutput(t, src, "list", "-m")
	if first, _, _ := strings.Cut(module, "/"); !strings.Contains(first, ".") {
		t.Fatalf("module path %q: the buildpack requires a dot in its first element", module)
	}
	version := goOutput(t, src, "list", "-m", "-f", "{{.Version}}", frameworkModule)
	t.Logf("root package %s of module %s; functions-framework-go %s", pkgName, module, version)

	// --- The main the buildpack generates, built offline --------------------
	declarative := imports[frameworkFunctions]
	binDir := t.TempDir()
	binaries := map[string]string{} // target => binary
	if declarative {
		bin := buildMain(t, src, binDir, "app", mainDeclarative, map[string]string{"Package": module})
		for _, ep := range entryPoints {
			binaries[ep.target] = bin
		}
	} else {
		t.Logf("the root package does not import %s: building the buildpack's per-target main (<package>.<target>)", frameworkFunctions)
		for _, ep := range entryPoints {
			binaries[ep.target] = buildMain(t, src, binDir, ep.target, mainByName,
				map[string]string{"Package": module, "Target": ep.target})
		}
	}

	// --- Run each entry point ------------------------------------------------
	project := emulatortest.ProjectID(t)
	tasks := cloudtasks.NewServer(cloudtasks.Options{})
	tasksAddr, err := tasks.Start("127.0.0.1:0")
	if err != nil {
		t.Fatalf("start the Cloud Tasks emulator: %v", err)
	}
	t.Cleanup(tasks.Stop)
	env := functionEnv(t, project, tasksAddr)
	for _, name := range terraformEnv(t, root) {
		if !hasEnv(env, name) {
			t.Fatalf("Terraform gives the functions %s; set it here too", name)
		}
	}

	for _, ep := range entryPoints {
		t.Run(ep.target, func(t *testing.T) {
			base, out := startFunctionOut(t, binaries[ep.target], ep.target, env)
			if ep.cloudEvent {
				callSweeper(t, base, project)
			} else {
				callHTTP(t, base, ep.target)
			}
			// The instance says what its cold start's dependencies cost
			// (the output reaches the buffer through a pipe: wait for it).
			built := regexp.MustCompile(`"message":"dependencies built","ms":[0-9.]+`)
			for deadline := time.Now().Add(5 * time.Second); !built.MatchString(out.String()); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Errorf("%s logged no \"dependencies built\" line with its ms:\n%s", ep.target, out.String())
					break
				}
			}
		})
	}
	if declarative {
		t.Run("unknown FUNCTION_TARGET", func(t *testing.T) {
			// functions-framework-go serves only the registered function named
			// by FUNCTION_TARGET; a wrong name must not start a server.
			out, err := runUntilExit(t, binaries[entryPoints[0].target], "NoSuchFunction", env, 20*time.Second)
			if err == nil || !strings.Contains(out, "NoSuchFunction") {
				t.Errorf("FUNCTION_TARGET=NoSuchFunction: want a failed start naming it; err=%v output:\n%s", err, out)
			}
		})
	}
}

// repoRoot is the module root; the test runs in deploy/buildpack.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("%s is not the module root: %v", root, err)
	}
	return root
}

// sourceExcludes reads the default of the Terraform variable
// function_source_excludes: what archive_file leaves out of the zip.
func sourceExcludes(t testing.TB, root string) []string {
	t.Helper()
	file := filepath.Join(root, "terraform", "variables.tf")
	f, diags := hclparse.NewParser().ParseHCLFile(file)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	for _, b := range f.Body.(*hclsyntax.Body).Blocks {
		if b.Type != "variable" || b.Labels[0] != "function_source_excludes" {
			continue
		}
		a, ok := b.Body.Attributes["default"]
		if !ok {
			break
		}
		v, diags := a.Expr.Value(nil)
		if diags.HasErrors() {
			t.Fatalf("%s: function_source_excludes default: %s", file, diags.Error())
		}
		var out []string
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			out = append(out, e.AsString())
		}
		return out
	}
	t.Fatalf("%s: no default for variable function_source_excludes", file)
	return nil
}

// terraformEnv returns the names of the variables Terraform sets on the
// functions: the keys of local.function_env, and SERVO_TOKEN_KEYS from
// Secret Manager.
func terraformEnv(t testing.TB, root string) []string {
	t.Helper()
	file := filepath.Join(root, "terraform", "main.tf")
	f, diags := hclparse.NewParser().ParseHCLFile(file)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	for _, b := range f.Body.(*hclsyntax.Body).Blocks {
		a, ok := b.Body.Attributes["function_env"]
		if b.Type != "locals" || !ok {
			continue
		}
		obj, ok := a.Expr.(*hclsyntax.ObjectConsExpr)
		if !ok {
			t.Fatalf("%s: local.function_env is not an object", file)
		}
		names := []string{"SERVO_TOKEN_KEYS"}
		for _, item := range obj.Items {
			k, diags := item.KeyExpr.Value(nil)
			if diags.HasErrors() {
				t.Fatalf("%s: local.function_env has a computed key", file)
			}
			names = append(names, k.AsString())
		}
		return names
	}
	t.Fatalf("%s: no local.function_env", file)
	return nil
}

// hasEnv reports whether env sets name.
func hasEnv(env []string, name string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			return true
		}
	}
	return false
}

// excluded mirrors archive_file's excludes for the two forms the variable
// allows: a name at the root, or "**/<glob>" for a name at any depth.
func excluded(rel string, patterns []string) bool {
	for _, p := range patterns {
		if g, ok := strings.CutPrefix(p, "**/"); ok {
			if m, _ := path.Match(g, path.Base(rel)); m {
				return true
			}
		} else if rel == p {
			return true
		}
	}
	return false
}

// copySource copies the repository the way terraform/ zips it: regular
// files (symbolic links followed), excludes applied, mode 0644.
func copySource(t testing.TB, root, dst string, excludes []string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if excluded(rel, excludes) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, filepath.FromSlash(rel))
		info, err := os.Stat(p) // follows symbolic links
		if err != nil {
			return err
		}
		if info.IsDir() {
			if d.Type()&fs.ModeSymlink != 0 {
				return fmt.Errorf("%s: symbolic links to directories are not copied; keep them out of the source", rel)
			}
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatalf("copy the function source: %v", err)
	}
}

// rootPackage does what the buildpack's package extraction does: parse every
// .go file at the source root (test files too), require one package, and
// return its name and imports.
func rootPackage(t testing.TB, src string) (string, map[string]bool) {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	names, imports := map[string]bool{}, map[string]bool{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(src, e.Name()), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("parse %s: %v", e.Name(), err)
		}
		names[f.Name.Name] = true
		for _, im := range f.Imports {
			imports[strings.Trim(im.Path.Value, `"`)] = true
		}
	}
	switch len(names) {
	case 0:
		t.Fatalf("no Go package at the root of the function source. The buildpack builds the package at the "+
			"source root (FUNCTION_TARGET names a function it registers); Servo's functions are in ./functions. "+
			"Add a root file such as servo.go:\n\n%s", proposedRoot)
	case 1:
	default:
		var list []string
		for n := range names {
			list = append(list, n)
		}
		sort.Strings(list)
		t.Fatalf("the function source root holds several packages %v; the buildpack requires exactly one", list)
	}
	for n := range names {
		return n, imports
	}
	return "", nil
}

// goEnv is the environment of every go command here: offline, module cache
// only, no workspace, go.mod as it is.
func goEnv() []string {
	return append(os.Environ(), "GOFLAGS=-mod=readonly", "GOPROXY=off", "GOWORK=off")
}

// goOutput runs a go command in dir and returns its trimmed output.
func goOutput(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = dir, goEnv()
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out))
}

// The mains the buildpack generates, in our words. With declarative
// registration one binary serves any FUNCTION_TARGET; otherwise the target
// is compiled in.
var (
	mainDeclarative = template.Must(template.New("declarative").Parse(`// Generated by deploy/buildpack's test, as the Go buildpack would.
package main

import (
	"log"
	"net/http"
	"os"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"

	_ "{{.Package}}"
)

func main() {
	http.HandleFunc("/robots.txt", http.NotFound)
	http.HandleFunc("/favicon.ico", http.NotFound)
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	if err := funcframework.Start(port); err != nil {
		log.Fatalf("function failed to start: %v", err)
	}
}
`))
	mainByName = template.Must(template.New("byName").Parse(`// Generated by deploy/buildpack's test, as the Go buildpack would.
package main

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"
	cloudevents "github.com/cloudevents/sdk-go/v2"

	fn "{{.Package}}"
)

func main() {
	ctx := context.Background()
	var err error
	switch f := any(fn.{{.Target}}).(type) {
	case func(http.ResponseWriter, *http.Request):
		err = funcframework.RegisterHTTPFunctionContext(ctx, "/", f)
	case func(context.Context, cloudevents.Event) error:
		err = funcframework.RegisterCloudEventFunctionContext(ctx, "/", f)
	default:
		err = funcframework.RegisterEventFunctionContext(ctx, "/", f)
	}
	if err != nil {
		log.Fatalf("function failed to register: %v", err)
	}
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	if err := funcframework.Start(port); err != nil {
		log.Fatalf("function failed to start: %v", err)
	}
}
`))
)

// buildMain writes the generated main into the copied module and builds it.
func buildMain(t testing.TB, src, binDir, name string, tmpl *template.Template, data map[string]string) string {
	t.Helper()
	dir := filepath.Join(src, filepath.FromSlash(appDir))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir, name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./"+appDir)
	cmd.Dir, cmd.Env = src, goEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./%s (the buildpack's main for %s): %v\n%s", appDir, data["Package"], err, out)
	}
	return bin
}

// functionEnv is what Terraform gives the functions, pointed at the
// emulators (the *_EMULATOR_HOST variables set by emulatortest.Main are
// inherited).
func functionEnv(t testing.TB, project, tasksAddr string) []string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	keys, _ := json.Marshal(map[string]any{"active": "k1", "keys": map[string]string{"k1": base64.StdEncoding.EncodeToString(key)}})
	workers, _ := json.Marshal(map[string]any{"example": map[string]string{
		"url":            "https://example-worker.invalid/",
		"queue":          "projects/" + project + "/locations/us-central1/queues/servo-example",
		"serviceAccount": "servo-tasks-invoker@" + project + ".iam.gserviceaccount.com",
	}})
	return append(os.Environ(),
		"GOOGLE_CLOUD_PROJECT="+project,
		"SERVO_PROJECT="+project,
		"SERVO_FIRESTORE_DATABASE=(default)",
		"SERVO_NAME_PREFIX=servo",
		"SERVO_TOKEN_KEYS="+string(keys),
		// As Terraform sets it: the ring is re-read from the secret, but only
		// on a kid miss or after 5 minutes, so a cold start reads nothing.
		"SERVO_TOKEN_KEYS_SECRET=projects/"+project+"/secrets/servo-token-keys",
		"SERVO_CALLBACK_BASE_URL=https://servo-callbacks.invalid",
		"SERVO_WORKERS="+string(workers),
		"SERVO_EVENTS_TOPIC=servo-task-events",
		"SERVO_DEAD_LETTER_TOPIC=servo-dead-letter",
		"SERVO_SWEEP_EVERY=15s",
		"SERVO_SWEEP_WINDOW=0", // one pass per tick, so the test does not wait a minute
		"SERVO_START_TIMEOUT=10m",
		"SERVO_DUE_SHARDS=16",
		"SERVO_RUN_DOCUMENT_EVERY=60s", // Terraform's for up to 30 api instances
		"SERVO_JOBS_DISPATCH_URL=https://servo-jobs.invalid",
		"SERVO_JOBS_CONTAINER=worker",
		"SERVO_CLAIM_AUDIENCE=https://servo-claim.invalid",
		"SERVO_ACCESS=",       // Terraform's default: no policy (open, IAM only)
		"SERVO_QUOTAS=",       // Terraform's default: no limits
		"SERVO_IAP_AUDIENCE=", // Terraform's default: not behind IAP
		"SERVO_API_AUDIENCE=https://servo-api.invalid",
		"SERVO_RETENTION_DAYS=30",
		"SERVO_SWEEP_EARLY_END=true",
		"SERVO_TRACE_SAMPLE_RATIO=0.01",
		"SERVO_TRACE_SLOW=1s",
		"SERVO_LOG_HEARTBEATS=false",
		"SERVO_LOG_STARTED=false",
		cloudtasks.EnvVar+"="+tasksAddr,
	)
}

// freePort returns a port that was free on 127.0.0.1 a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// start runs bin with FUNCTION_TARGET=target on a free port; the process
// is killed when the test ends. exited is closed when it exits.
func start(t testing.TB, bin, target string, env []string) (port string, out *servotest.Buffer, exited chan struct{}, waitErr *error) {
	t.Helper()
	port = freePort(t)
	out = &servotest.Buffer{}
	cmd := exec.Command(bin)
	cmd.Env = append(append([]string(nil), env...), "PORT="+port, "FUNCTION_TARGET="+target, "K_SERVICE="+strings.ToLower(target))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan struct{})
	waitErr = new(error)
	go func() { *waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("%s output:\n%s", target, out.String())
		}
	})
	return port, out, exited, waitErr
}

// startFunction starts the entry point and waits until it accepts
// connections; it returns its base URL.
func startFunction(t *testing.T, bin, target string, env []string) string {
	t.Helper()
	base, _ := startFunctionOut(t, bin, target, env)
	return base
}

// startFunctionOut is startFunction that also returns the process's
// output (its log lines).
func startFunctionOut(t *testing.T, bin, target string, env []string) (string, *servotest.Buffer) {
	t.Helper()
	port, out, exited, waitErr := start(t, bin, target, env)
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("%s exited before serving: %v\n%s", target, *waitErr, out.String())
		default:
		}
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
		if err == nil {
			c.Close()
			return "http://127.0.0.1:" + port, out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen on port %s within 30s\n%s", target, port, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runUntilExit starts bin with a target and waits for it to exit.
func runUntilExit(t *testing.T, bin, target string, env []string, limit time.Duration) (string, error) {
	t.Helper()
	_, out, exited, waitErr := start(t, bin, target, env)
	select {
	case <-exited:
		return out.String(), *waitErr
	case <-time.After(limit):
		return out.String(), nil
	}
}

var client = &http.Client{Timeout: 60 * time.Second}

// callHTTP sends the HTTP function a request it must answer without a 5xx
// and in JSON: the control API a lookup of an unknown task, the callbacks a
// heartbeat without a token.
func callHTTP(t *testing.T, base, target string) {
	t.Helper()
	var req *http.Request
	var err error
	switch target {
	case "ServoAPI":
		req, err = http.NewRequest(http.MethodGet, base+"/v1/tasks/task_00000000000000000000000000", nil)
	case "ServoJobs":
		// An envelope with a bad token: the dispatch answers 401.
		req, err = http.NewRequest(http.MethodPost, base+"/",
			strings.NewReader(`{"taskId":"task_00000000000000000000000000","attempt":1,"taskToken":"x.y.z"}`))
		req.Header.Set("Content-Type", "application/json")
	default:
		req, err = http.NewRequest(http.MethodPost, base+"/v1/tasks/task_00000000000000000000000000/heartbeat",
			strings.NewReader(`{"attempt":1,"workerId":"buildpack-test"}`))
		req.Header.Set("Content-Type", "application/json")
	}
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	t.Logf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, body)
	if resp.StatusCode >= 500 {
		t.Errorf("%s answered %d: the function is not wired up (see the body and output)", target, resp.StatusCode)
	}
	if !strings.Contains(resp.Header.Get("Content-Type"), "json") || !json.Valid(body) {
		t.Errorf("%s answered %q with Content-Type %q: want JSON", target, body, resp.Header.Get("Content-Type"))
	}
}

// callSweeper delivers a sweep tick the way Eventarc does: a binary-mode
// CloudEvent of type google.cloud.pubsub.topic.v1.messagePublished whose
// data is the Pub/Sub push body.
func callSweeper(t *testing.T, base, project string) {
	t.Helper()
	msg := map[string]any{
		"message": map[string]any{
			"data":        base64.StdEncoding.EncodeToString([]byte("{}")),
			"attributes":  map[string]string{"source": "servo-sweep"},
			"messageId":   "1",
			"publishTime": time.Now().UTC().Format(time.RFC3339Nano),
		},
		"subscription": "projects/" + project + "/subscriptions/eventarc-servo-sweep",
	}
	body, _ := json.Marshal(msg)
	req, err := http.NewRequest(http.MethodPost, base+"/", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Ce-Specversion", "1.0")
	req.Header.Set("Ce-Type", "google.cloud.pubsub.topic.v1.messagePublished")
	req.Header.Set("Ce-Source", "//pubsub.googleapis.com/projects/"+project+"/topics/servo-sweep")
	req.Header.Set("Ce-Id", "1")
	req.Header.Set("Ce-Time", time.Now().UTC().Format(time.RFC3339Nano))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST CloudEvent: %v", err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	t.Logf("CloudEvent: %d %s", resp.StatusCode, answer)
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		t.Errorf("ServoSweeper answered %d %s to a sweep tick: want 2xx", resp.StatusCode, answer)
	}
}
