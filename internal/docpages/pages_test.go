package docpages_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/sdkbuild"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/servotest/stacktest"
)

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore, emulator.PubSub) }

// repo is the Servo checkout, relative to this package.
const repo = "../.."

// firstWorkerPages are the "your first worker" pages, and what each needs
// installed (checked before anything runs, so that a missing tool fails
// the test with what to install rather than half way through a page).
var firstWorkerPages = []struct {
	file  string
	tools func(t *testing.T)
}{
	{"docs/workers/go.md", func(t *testing.T) {}},
	{"docs/workers/python.md", needPython},
	{"docs/workers/typescript.md", needNode},
}

// pageTimeout bounds one page's commands, from the empty folder to the
// worker stopped: a reader takes about ten minutes, the commands under one
// (on a loaded 2-core machine, with the builds cached: about 20 to 40 s).
const pageTimeout = 6 * time.Minute

// TestFirstWorkerPages runs each first-worker page's commands against one
// local stack (package doc), in parallel, then checks the page's two
// tasks through the control API: the retry task SUCCEEDED on its second
// attempt, the first FAILED INFRASTRUCTURE with a checkpoint, the second
// resumed from it; the long task CANCELLED, its one attempt reported
// CANCELLED by the worker, whose output shows the handler stopping.
func TestFirstWorkerPages(t *testing.T) {
	root, err := filepath.Abs(repo)
	if err != nil {
		t.Fatal(err)
	}
	var pages []page
	pools := map[string][]string{}
	for _, fp := range firstWorkerPages {
		md, err := os.ReadFile(filepath.Join(root, fp.file))
		if err != nil {
			t.Fatal(err)
		}
		p, err := parsePage(fp.file, string(md))
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := pools[p.pools[0]]; dup {
			t.Fatalf("%s: pool %s is another page's too: the pages run at once on one stack", fp.file, p.pools[0])
		}
		pools[p.pools[0]] = nil
		fp.tools(t)
		pages = append(pages, p)
	}
	// The SDKs and the CLI the pages use are this checkout's: go test
	// reruns the test when one of them changes.
	servotest.TrackFiles(t, filepath.Join(root, "cmd", "servo"), ".go")
	servotest.TrackFiles(t, filepath.Join(root, "sdk", "python", "servo_worker"), ".py")
	servotest.TrackFiles(t, filepath.Join(root, "sdk", "typescript", "dist"), ".js")

	tmp := t.TempDir()
	bin := filepath.Join(tmp, "bin")
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "servo"), "./cmd/servo")
	build.Dir = root
	built := make(chan error, 1)
	var buildOut servotest.Buffer
	build.Stdout, build.Stderr = &buildOut, &buildOut
	go func() { built <- build.Run() }() // while the stack starts
	stackLog, err := os.Create(filepath.Join(tmp, "stack.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer stackLog.Close()
	stack := stacktest.Start(t, devstack.Options{PullPools: pools, Log: stackLog})
	if err := <-built; err != nil {
		t.Fatalf("go build ./cmd/servo (the pages' go install ./cmd/servo): %v\n%s", err, buildOut.String())
	}
	cl := stacktest.NewAPI(t, stack)
	addr := strings.TrimPrefix(stack.URL, "http://")
	env := pageEnv(bin, tmp)

	t.Run("pages", func(t *testing.T) {
		for _, p := range pages {
			t.Run(strings.TrimSuffix(filepath.Base(p.path), ".md"), func(t *testing.T) {
				t.Parallel()
				runPage(t, p, root, addr, env)
				checkTasks(t, cl, p.pools[0])
			})
		}
	})
	if t.Failed() {
		if b, err := os.ReadFile(stackLog.Name()); err == nil {
			t.Logf("the stack's log, last lines:\n%s", tail(string(b), 40))
		}
	}
}

// pageEnv is the environment of the pages' commands: the test's, with the
// servo CLI first on the PATH, and package managers kept off the network
// (the SDKs install from the checkout, without an index or a registry)
// and out of the home folder.
func pageEnv(bin, tmp string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "SERVO_") || strings.HasPrefix(k, "npm_config_") || strings.HasPrefix(k, "PIP_") || k == "PYTHONPATH" || k == "PATH" {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"PIP_NO_INDEX=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_CACHE_DIR=1",
		"npm_config_offline=true", "npm_config_audit=false", "npm_config_fund=false", "npm_config_update_notifier=false",
		"npm_config_cache="+filepath.Join(tmp, "npm-cache"), "npm_config_userconfig="+filepath.Join(tmp, "npmrc"),
	)
}

// runPage runs p's script in an empty folder beside a link to the
// checkout (../servo from the page's folder) and checks the background
// process's output.
func runPage(t *testing.T, p page, root, addr string, env []string) {
	dir := t.TempDir()
	if err := os.Symlink(root, filepath.Join(dir, "servo")); err != nil {
		t.Fatal(err)
	}
	sh, err := p.script(addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "page.sh"), []byte(sh), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "background.log")
	ctx, cancel := context.WithTimeout(context.Background(), pageTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "page.sh")
	cmd.Dir = dir
	cmd.Env = append(slices.Clone(env), bgLog+"="+logFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 2 * stopTimeout * time.Second
	var out servotest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start).Round(time.Second)
	bg, _ := os.ReadFile(logFile)
	if err != nil {
		t.Fatalf("%s: the page's commands failed after %v (%v; a line ### FILE:LINE names each block as it starts).\n--- the commands' output, last lines:\n%s\n--- the background process's output, last lines:\n%s",
			p.path, took, err, tail(out.String(), 60), tail(string(bg), 40))
	}
	if m := missingOutput(string(bg), p.outputs(addr)); m != "" {
		t.Errorf("%s: the background process never printed %q (after the lines before it in the page's output blocks); it printed:\n%s", p.path, m, tail(string(bg), 60))
	}
	var marks []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "### ") {
			marks = append(marks, l)
		}
	}
	t.Logf("%s: %v from an empty folder to the worker stopped:\n%s", p.path, took, strings.Join(marks, "\n"))
}

// checkTasks checks the two tasks a page submits to pool: "retry" and "long".
func checkTasks(t *testing.T, cl stacktest.API, pool string) {
	status, body := cl.Do(http.MethodGet, "/v1/tasks?worker="+url.QueryEscape(pool), nil)
	if status != http.StatusOK {
		t.Fatalf("list the tasks of %s: %d %s", pool, status, body)
	}
	var list api.ListResponse
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	byKey := map[string]string{}
	for _, v := range list.Tasks {
		if _, dup := byKey[v.TaskKey]; dup {
			t.Errorf("worker %s: two tasks with key %s", pool, v.TaskKey)
		}
		byKey[v.TaskKey] = v.TaskID
	}
	if len(byKey) != 2 || byKey["retry"] == "" || byKey["long"] == "" {
		t.Fatalf("worker %s has the tasks %v; want one with key retry and one with key long", pool, byKey)
	}

	// The retry: attempt 1 FAILED, retryable, after a checkpoint; attempt 2
	// resumed from it and SUCCEEDED.
	retry := cl.Task(byKey["retry"])
	var in struct {
		Items  int `json:"items"`
		FailAt int `json:"failAt"`
	}
	if err := json.Unmarshal(retry.Payload, &in); err != nil || in.FailAt <= 0 || in.FailAt >= in.Items {
		t.Errorf("the retry task's payload %s: want items and a failAt between them (%v)", retry.Payload, err)
	}
	switch {
	case retry.State != api.Succeeded || retry.Attempt != 2 || len(retry.Attempts) != 2:
		t.Errorf("the retry task: want SUCCEEDED on attempt 2 of 2 attempts; %s", stacktest.DescribeTask(retry))
	case retry.Attempts[0].Outcome != api.OutcomeFailed || retry.Attempts[0].Error == nil || retry.Attempts[0].Error.Category != api.CategoryInfrastructure:
		t.Errorf("the retry task: want attempt 1 FAILED INFRASTRUCTURE; %s", stacktest.DescribeTask(retry))
	case retry.Attempts[1].Outcome != api.OutcomeSucceeded:
		t.Errorf("the retry task: want attempt 2 SUCCEEDED; %s", stacktest.DescribeTask(retry))
	default:
		var cp struct {
			Next int `json:"next"`
		}
		if err := json.Unmarshal(retry.Attempts[0].Checkpoint, &cp); err != nil || cp.Next != in.FailAt {
			t.Errorf("the retry task: attempt 1's checkpoint is %s, want {\"next\": %d} (%v)", retry.Attempts[0].Checkpoint, in.FailAt, err)
		}
		out := stacktest.AttemptOutput[map[string]int](t, retry.Attempts[1])
		if want := map[string]int{"items": in.Items, "resumedAt": in.FailAt}; fmt.Sprint(out) != fmt.Sprint(want) {
			t.Errorf("the retry task's output is %v, want %v: attempt 2 resumed from attempt 1's checkpoint", out, want)
		}
	}

	// The long task: cancelled while it ran; its worker reported the
	// attempt CANCELLED (the handler stopped: no cancel grace ran out).
	long := cl.Task(byKey["long"])
	if long.State != api.Cancelled || len(long.Attempts) != 1 || long.Attempts[0].Outcome != api.OutcomeCancelled || long.Attempts[0].StartedAt == nil {
		t.Errorf("the long task: want CANCELLED with one attempt, started, reported CANCELLED; %s", stacktest.DescribeTask(long))
	}
}

// needPython fails t unless python3 >= 3.10 with venv is installed.
func needPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is not installed: docs/workers/python.md needs it; install the Debian packages python3 and python3-venv (apt-get install python3 python3-venv), Python >= 3.10")
	}
	if out, err := exec.Command(py, "-c", "import sys, ensurepip, venv; sys.exit(sys.version_info < (3, 10))").CombinedOutput(); err != nil {
		t.Fatalf("%s is older than 3.10 or has no venv (%v %s): install Python >= 3.10 and the Debian package python3-venv", py, err, out)
	}
}

// needNode fails t unless node >= 20.3 and npm are installed, and builds
// the TypeScript SDK's dist/ when its sources are newer (sdkbuild).
func needNode(t *testing.T) {
	sdkbuild.TypeScript(t)
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatal("npm is not installed: docs/workers/typescript.md needs it; install the Debian package npm (apt-get install npm)")
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[%d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
