package emulator

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Kind names an emulator.
type Kind string

// The emulators Start knows.
const (
	Firestore Kind = "firestore"
	PubSub    Kind = "pubsub"
)

// EnvVar returns the variable Google's client libraries read the emulator's
// host:port from: FIRESTORE_EMULATOR_HOST or PUBSUB_EMULATOR_HOST.
func (k Kind) EnvVar() string {
	switch k {
	case Firestore:
		return "FIRESTORE_EMULATOR_HOST"
	case PubSub:
		return "PUBSUB_EMULATOR_HOST"
	}
	return ""
}

// Timeouts of Start and Stop.
const (
	// StartTimeout bounds Start when ctx has no earlier deadline.
	StartTimeout = 60 * time.Second
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL.
	StopTimeout = 5 * time.Second
	// archiveStopTimeout replaces StopTimeout for an emulator that writes
	// its class-data sharing archive on exit (its first start).
	archiveStopTimeout = 30 * time.Second
)

// ErrMissingTool is wrapped by Start's error when gcloud, java or bash is
// not on PATH. The error text names what to install.
var ErrMissingTool = errors.New("emulator: required tool not found")

// tools are the programs Start needs, with what to install when one is
// missing.
var tools = []struct{ name, hint string }{
	{"gcloud", "install the Google Cloud SDK and its emulator components " +
		"(gcloud components install cloud-firestore-emulator pubsub-emulator beta, " +
		"or apt-get install google-cloud-cli-firestore-emulator google-cloud-cli-pubsub-emulator)"},
	{"java", "the emulators need a Java 11+ runtime (apt-get install default-jre-headless)"},
	{"bash", "the emulator watchdog needs bash (apt-get install bash)"},
}

// lookTools returns the paths of gcloud, bash and java, or an error
// wrapping ErrMissingTool that names every missing tool and what to
// install.
func lookTools() (gcloud, bash, java string, err error) {
	var missing []string
	paths := map[string]string{}
	for _, t := range tools {
		p, err := exec.LookPath(t.name)
		if err != nil {
			missing = append(missing, t.name+" not found on PATH: "+t.hint)
			continue
		}
		paths[t.name] = p
	}
	if len(missing) > 0 {
		return "", "", "", fmt.Errorf("%w: %s", ErrMissingTool, strings.Join(missing, "; "))
	}
	return paths["gcloud"], paths["bash"], paths["java"], nil
}

// Process is a running emulator.
type Process struct {
	// Kind is the emulator running.
	Kind Kind
	// Host is the emulator's address, 127.0.0.1:port.
	Host string

	pgid    int           // process group (and session) of Java (and gcloud)
	out     *ringBuffer   // tail of the combined output
	done    chan struct{} // closed when gcloud has exited and been reaped
	waitErr error         // gcloud's exit status; read after done
	dataDir string        // removed by Stop; "" if none
	archive string        // class-data sharing archive Java writes on exit; "" if none
	killed  bool          // Stop had to send SIGKILL
	logPath string        // where a kept emulator's output goes; "" if to out
	gone    atomic.Bool   // the group is known to be empty: never signal it again

	watchdogPID  int           // leader of the watchdog's own process group
	watchdogDone chan struct{} // closed when the watchdog has been reaped

	stopOnce sync.Once
	stopErr  error
}

// EnvVar returns the variable clients read Host from (see Kind.EnvVar).
func (p *Process) EnvVar() string { return p.Kind.EnvVar() }

// Group returns the emulator's process group id (Java's, or gcloud's):
// what Freeze and Thaw signal, for another process to do the same.
func (p *Process) Group() int { return p.pgid }

// Output returns the tail of the emulator's combined stdout and stderr.
func (p *Process) Output() string {
	if p.logPath != "" {
		return logTail(p.logPath, 64<<10)
	}
	return string(p.out.bytes())
}

// Start starts the emulator k on a free port of 127.0.0.1 and waits until it
// answers HTTP GET / with 200, for at most StartTimeout or until ctx ends.
// ctx bounds only the start: the emulator runs until Stop is called or this
// process exits. On failure the error includes the tail of the emulator's
// output; when gcloud, java or bash is missing it wraps ErrMissingTool.
func Start(ctx context.Context, k Kind) (*Process, error) {
	return startWith(ctx, k, "")
}

func startWith(ctx context.Context, k Kind, keptLog string) (*Process, error) {
	if k.EnvVar() == "" {
		return nil, fmt.Errorf("emulator: unknown kind %q", k)
	}
	l, err := newLauncher()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	// The free port may be taken between choosing and binding it; then the
	// emulator exits at once and another port is tried.
	for attempt := 1; ; attempt++ {
		p, err := start(ctx, k, l, keptLog)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, errPortInUse) || attempt == 3 {
			return nil, err
		}
	}
}

var errPortInUse = errors.New("port already in use")

func start(ctx context.Context, k Kind, l *launcher, keptLog string) (*Process, error) {
	port, err := pickPort()
	if err != nil {
		return nil, err
	}
	host := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var dataDir string
	if k == PubSub && !l.direct(k) {
		// gcloud writes env.yaml into the Pub/Sub emulator's data dir; a
		// private one keeps concurrent emulators apart.
		if dataDir, err = os.MkdirTemp("", "servo-pubsub-"); err != nil {
			return nil, fmt.Errorf("emulator: %w", err)
		}
	}
	argv, archive := l.command(k, "127.0.0.1", strconv.Itoa(port), dataDir, keptLog == "")
	var p *Process
	if keptLog != "" {
		p, err = spawnKept(argv, keptLog)
	} else {
		p, err = spawn(l.bash, argv)
	}
	if err != nil {
		keepArchive(archive, false)
		if dataDir != "" {
			os.RemoveAll(dataDir)
		}
		return nil, err
	}
	p.Kind, p.Host, p.dataDir, p.archive = k, host, dataDir, archive

	if err := p.waitReady(ctx); err != nil {
		stopErr := p.Stop()
		out := p.outputTail(40, 4096)
		return nil, fmt.Errorf("emulator: %s on %s did not become ready: %w%s\n--- last output of %s ---\n%s",
			k, host, err, stopSuffix(stopErr), strings.Join(argv, " "), out)
	}
	return p, nil
}

func stopSuffix(err error) string {
	if err == nil {
		return ""
	}
	return " (and stopping it failed: " + err.Error() + ")"
}

func portInUse(out string) bool {
	return strings.Contains(out, "Address already in use") || strings.Contains(out, "BindException")
}

// pickPort is the port chooser start uses; tests replace it.
var pickPort = freePort

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("emulator: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// watchdog is the bash program that outlives this process by at most a
// moment. Its arguments are this process's pid and the emulator's process
// group; its standard input is a pipe whose write end only this process
// holds (watchdogPipes). It reads that pipe: end of file comes the moment
// this process is gone, however it died. When it gets end of file, when
// its parent pid changes (this process died and the watchdog was
// re-parented), or when it gets SIGTERM, SIGINT or SIGHUP (Pdeathsig), it
// sends SIGTERM to the group, waits up to two seconds, then sends SIGKILL.
// It exits as soon as the group is gone, which it looks at every
// watchdogPoll seconds. Waiting on the pipe costs nothing: read is a
// builtin, so an idle watchdog starts no process (a sleep a loop would fork
// twice a second, ~10 ms of CPU a second per watchdog on a busy machine).
const watchdog = `
parent=$1
group=$2
poll=$3
cleanup() {
	trap '' TERM INT HUP
	kill -TERM -- "-$group" 2>/dev/null
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		kill -0 -- "-$group" 2>/dev/null || exit 0
		sleep 0.2
	done
	kill -KILL -- "-$group" 2>/dev/null
	exit 0
}
trap cleanup TERM INT HUP
echo servo-emulator-watchdog-ready
parent_alive() {
	if [ -r /proc/$$/stat ]; then
		local _pid _comm _state ppid _rest
		read -r _pid _comm _state ppid _rest </proc/$$/stat
		[ "$ppid" = "$parent" ]
	else
		kill -0 "$parent" 2>/dev/null
	fi
}
while kill -0 -- "-$group" 2>/dev/null; do
	parent_alive || cleanup
	read -r -t "$poll" _
	st=$?
	if [ "$st" -ne 0 ] && [ "$st" -le 128 ]; then
		cleanup # end of file: this process is gone
	fi
done
`

// watchdogPoll is how often, in seconds, a watchdog looks whether its
// emulator's group is still there (it learns of this process's death at
// once, from its pipe).
const watchdogPoll = "5"

// watchdogPipes holds the write ends of the watchdogs' pipes, by the
// watchdog's pid, for as long as each watchdog runs: an *os.File dropped
// would be closed by its finalizer, and the watchdog would take it for
// this process's death.
var watchdogPipes sync.Map

// pdeathsig enables Pdeathsig (Linux only): the kernel sends SIGKILL to
// gcloud and SIGTERM to the watchdog the moment this process dies. Tests
// disable it to exercise the watchdog alone (its pipe, and its polling).
var pdeathsig = true

// spawn starts argv (gcloud) as the leader of a new session and process
// group, and a watchdog for that group.
//
// gcloud must lead its session: otherwise it moves itself into a new
// process group before it starts Java (googlecloudsdk/command_lib/
// emulators/util.py), out of reach of a signal to the group it was started
// in. As session leader it keeps its group, and Java stays in it.
func spawn(bash string, argv []string) (*Process, error) {
	out := newRingBuffer(64 << 10)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "CLOUDSDK_CORE_DISABLE_PROMPTS=1")
	cmd.Stdin = nil // /dev/null
	cmd.Stdout, cmd.Stderr = out, out
	// Java inherits the output pipe; once gcloud has exited, do not wait
	// long for stragglers to close it.
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if pdeathsig {
		// Covers the moment before the watchdog runs; the watchdog then
		// takes care of Java.
		setPdeathsig(cmd.SysProcAttr, syscall.SIGKILL)
	}
	var err error
	onSpawnThread(func() { err = cmd.Start() })
	if err != nil {
		return nil, fmt.Errorf("emulator: start %s: %w", argv[0], err)
	}
	p := &Process{pgid: cmd.Process.Pid, out: out, done: make(chan struct{}), watchdogDone: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		p.checkGone()
		close(p.done)
	}()

	wd := exec.Command(bash, "-c", watchdog, "servo-emulator-watchdog", strconv.Itoa(os.Getpid()), strconv.Itoa(p.pgid), watchdogPoll)
	wd.Stderr = out
	wd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if pdeathsig {
		setPdeathsig(wd.SysProcAttr, syscall.SIGTERM)
	}
	// The pipe's ends are close-on-exec: no other child of this process
	// holds its write end, so the watchdog reads end of file exactly when
	// this process is gone.
	pr, pw, err := os.Pipe()
	var wdOut io.ReadCloser
	if err == nil {
		wd.Stdin = pr
		wdOut, err = wd.StdoutPipe()
	}
	if err == nil {
		onSpawnThread(func() { err = wd.Start() })
	}
	if pr != nil {
		pr.Close()
	}
	if err != nil {
		if pw != nil {
			pw.Close()
		}
		close(p.watchdogDone)
		_ = p.Stop()
		return nil, fmt.Errorf("emulator: start watchdog: %w", err)
	}
	p.watchdogPID = wd.Process.Pid
	watchdogPipes.Store(p.watchdogPID, pw)
	// Until the watchdog has set its trap, a SIGTERM (Pdeathsig) would end
	// it without cleaning up the group: wait for its ready line (bounded:
	// a watchdog that never says it is ready still polls).
	ready := make(chan struct{})
	go func() {
		r := bufio.NewReader(wdOut)
		if line, _ := r.ReadString('\n'); !strings.HasPrefix(line, "servo-emulator-watchdog-ready") {
			_, _ = out.Write([]byte(line))
		}
		close(ready)
		_, _ = io.Copy(out, r)
		_ = wd.Wait() // after the last read of its output, as exec requires
		if pw, ok := watchdogPipes.LoadAndDelete(p.watchdogPID); ok {
			pw.(*os.File).Close()
		}
		close(p.watchdogDone)
	}()
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
	}
	return p, nil
}

// setPdeathsig sets SysProcAttr.Pdeathsig, which only Linux has. It is set
// by name so that the package still builds on other Unix systems, where the
// watchdog alone (its pipe, and its polling) notices a dead parent.
func setPdeathsig(a *syscall.SysProcAttr, sig syscall.Signal) {
	if f := reflect.ValueOf(a).Elem().FieldByName("Pdeathsig"); f.IsValid() && f.CanSet() {
		f.Set(reflect.ValueOf(sig))
	}
}

// Pdeathsig fires when the thread that started the child exits, not only
// when the process does, and Go ends the thread of a goroutine that exits
// while locked to it. So children are started from one goroutine locked to
// a thread that lives as long as the process.
var spawnThread struct {
	once sync.Once
	fns  chan func()
}

func onSpawnThread(fn func()) {
	spawnThread.once.Do(func() {
		spawnThread.fns = make(chan func())
		go func() {
			runtime.LockOSThread()
			for f := range spawnThread.fns {
				f()
			}
		}()
	})
	done := make(chan struct{})
	spawnThread.fns <- func() { defer close(done); fn() }
	<-done
}

var errExited = errors.New("emulator exited")

// httpClient talks to emulators on 127.0.0.1, never through a proxy.
var httpClient = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// waitReady polls GET http://host/ until it answers 200 and the emulator
// is known to be ours: it has logged that it listens on our port (the
// usual case, a second or less after it answers), or it has kept running
// for a while since the port first answered. A foreign process that took
// the port first would make ours fail to bind and exit within that time.
func (p *Process) waitReady(ctx context.Context) error {
	marker := p.readyMarker()
	var answered time.Time
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		// The Pub/Sub emulator's JVM outlives a failed bind (its Netty
		// threads keep running), so the port's loss may show only in its
		// output; without this check Start would wait out its timeout.
		if portInUse(p.Output()) {
			return errPortInUse
		}
		select {
		case <-p.done:
			return p.exited()
		default:
		}
		if p.ping(ctx) {
			switch {
			case marker != "" && strings.Contains(p.Output(), marker):
				return nil
			case answered.IsZero():
				answered = time.Now()
			case time.Since(answered) >= readySettle:
				return nil
			}
		}
		select {
		case <-p.done:
			return p.exited()
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// exited returns why an emulator that exited before it was ready did so:
// errPortInUse if its output says its port was taken, else errExited.
func (p *Process) exited() error {
	if portInUse(p.Output()) {
		return fmt.Errorf("%w (%v)", errPortInUse, p.waitErr)
	}
	return fmt.Errorf("%w (%v)", errExited, p.waitErr)
}

// readySettle is how long an emulator that does not log readyMarker must
// keep running after its port first answers before it counts as ready.
const readySettle = 5 * time.Second

// readyMarker returns the line part by which the emulator logs that it
// listens on its port, or "" if unknown.
func (p *Process) readyMarker() string {
	switch p.Kind {
	case Firestore:
		return "API endpoint: http://" + p.Host // [firestore] API endpoint: http://127.0.0.1:PORT
	case PubSub:
		_, port, _ := net.SplitHostPort(p.Host)
		return "listening on " + port // [pubsub] INFO: Server started, listening on PORT
	}
	return ""
}

func (p *Process) ping(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Host+"/", nil)
	if err != nil {
		return false
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<10))
	return resp.StatusCode == http.StatusOK
}

// Stop stops the emulator: SIGTERM to its whole process group, up to
// StopTimeout for the group to exit (30 s when Java writes its class-data
// sharing archive on exit), then SIGKILL to the group. It removes the
// emulator's temporary files. Calling it again returns the first
// result.
func (p *Process) Stop() error {
	p.stopOnce.Do(func() { p.stopErr = p.stop() })
	return p.stopErr
}

func (p *Process) stop() error {
	defer func() {
		p.stopWatchdog()
		keepArchive(p.archive, !p.killed)
		if p.dataDir != "" {
			os.RemoveAll(p.dataDir)
		}
	}()
	if err := p.signalGroup(syscall.SIGTERM); err != nil {
		return err
	}
	_ = p.signalGroup(syscall.SIGCONT) // a frozen emulator must see the SIGTERM
	wait := StopTimeout
	if p.archive != "" {
		// Java writes its class-data sharing archive as it exits: let it
		// finish, even on a loaded machine.
		wait = archiveStopTimeout
	}
	if !p.waitGroupGone(wait) {
		p.killed = true
		if err := p.signalGroup(syscall.SIGKILL); err != nil {
			return err
		}
		if !p.waitGroupGone(StopTimeout) {
			return fmt.Errorf("emulator: %s on %s: process group %d still running after SIGKILL", p.Kind, p.Host, p.pgid)
		}
	}
	<-p.done
	return nil
}

// Freeze stops every process of the emulator (SIGSTOP to its process
// group): it keeps its connections and its data but answers nothing until
// Thaw. Fault-injection tests use it to simulate an outage.
func (p *Process) Freeze() error { return p.signalGroup(syscall.SIGSTOP) }

// Thaw resumes an emulator Freeze stopped (SIGCONT to its process group).
func (p *Process) Thaw() error { return p.signalGroup(syscall.SIGCONT) }

// stopWatchdog kills the watchdog's process group (the watchdog and its
// sleep) unless the watchdog has already exited and been reaped; until then
// its group id cannot belong to anyone else.
func (p *Process) stopWatchdog() {
	select {
	case <-p.watchdogDone:
		return
	default:
	}
	_ = syscall.Kill(-p.watchdogPID, syscall.SIGKILL)
	<-p.watchdogDone
}

// checkGone records that the process group is empty, if it is. An empty
// group's id may be reused by the kernel for another process, so once it is
// gone the group is never signalled again. (While any member is alive, or
// the watchdog is not yet reaped, the id cannot be reused.)
func (p *Process) checkGone() bool {
	if p.gone.Load() {
		return true
	}
	if errors.Is(syscall.Kill(-p.pgid, 0), syscall.ESRCH) {
		p.gone.Store(true)
	}
	return p.gone.Load()
}

// signalGroup sends sig to the emulator's process group if it still exists.
func (p *Process) signalGroup(sig syscall.Signal) error {
	if p.gone.Load() {
		return nil
	}
	if err := syscall.Kill(-p.pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("emulator: %s on %s: signal process group %d: %w", p.Kind, p.Host, p.pgid, err)
	}
	return nil
}

// waitGroupGone waits up to d for every process of the group to exit and
// the watchdog to be reaped.
func (p *Process) waitGroupGone(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		select {
		case <-p.done:
			if p.checkGone() {
				return true
			}
		default:
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ResetFirestore deletes every document of project in the Firestore
// emulator at host, through the emulator's REST reset endpoint.
func ResetFirestore(ctx context.Context, host, project string) error {
	url := "http://" + host + "/emulator/v1/projects/" + project + "/databases/(default)/documents"
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, url, nil)
	if err != nil {
		return fmt.Errorf("emulator: reset firestore: %w", err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return fmt.Errorf("emulator: reset firestore: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("emulator: reset firestore project %s: %s: %s", project, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// ringBuffer keeps the last bytes written to it.
type ringBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newRingBuffer(max int) *ringBuffer { return &ringBuffer{max: max} }

// Write implements io.Writer; it never fails.
func (r *ringBuffer) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, b...)
	if len(r.buf) > 2*r.max { // trim in batches, not on every write
		r.buf = append([]byte(nil), r.buf[len(r.buf)-r.max:]...)
	}
	return len(b), nil
}

// bytes returns a copy of the last max bytes written.
func (r *ringBuffer) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.buf
	if len(b) > r.max {
		b = b[len(b)-r.max:]
	}
	return bytes.Clone(b)
}

// tail returns at most the last n lines and maxBytes bytes written.
func (r *ringBuffer) tail(n, maxBytes int) string {
	b := bytes.TrimRight(r.bytes(), "\n")
	if len(b) > maxBytes {
		b = b[len(b)-maxBytes:]
	}
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 1 && len(lines[0]) == 0 {
		return "(no output)"
	}
	return string(bytes.Join(lines, []byte("\n")))
}
