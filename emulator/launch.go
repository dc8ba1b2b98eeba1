package emulator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// LaunchEnv names the environment variable that chooses how Start runs an
// emulator: "java" (the default) runs the emulator's jar found in the
// Cloud SDK directly with java, falling back to gcloud when the jar is not
// found; "gcloud" always runs it through gcloud's wrapper.
const LaunchEnv = "SERVO_EMULATOR_LAUNCH"

// JVMOptions are the options Start passes to java when it runs an
// emulator's jar directly: a small heap with the serial collector, the
// client compiler only, small thread stacks, and quiet class-data sharing
// logs. They were chosen by measurement (see docs/performance.md): the
// client compiler alone starts no faster, and once an emulator has run for
// thousands of transactions both compilers make each one cheaper
// (BenchmarkJVMOptions), but over a servo dev session's first minutes the
// server compiler's own work costs more CPU than it saves, and ~18 MiB more
// memory. Without performance data (-XX:-UsePerfData: no hsperfdata file
// for jps and jstat, which the emulators do not need) an idle emulator's
// JVM stops sampling it every 50 ms, which was half of its idle CPU
// (~1.5 of ~3 ms a second each). The class-data sharing archive (AppCDS)
// is added per emulator by Start.
var JVMOptions = []string{
	"-XX:+UseSerialGC",
	"-XX:TieredStopAtLevel=1",
	"-Xss512k",
	"-Xms16m",
	"-Xmx512m",
	"-XX:-UsePerfData",
	"-Xshare:auto",
	"-Xlog:cds*=off",
	"-Duser.language=en", // as the SDK's own launcher: English error messages
}

// launcher is how Start runs emulators: java on a jar of the Cloud SDK, or
// gcloud.
type launcher struct {
	bash   string
	java   string
	gcloud string // "" when not on PATH
	jars   map[Kind]string
}

// direct reports whether k runs its jar directly with java.
func (l *launcher) direct(k Kind) bool { return l.jars[k] != "" }

// command returns the argv that runs emulator k on host:port. For the
// direct launch it also returns the class-data sharing archive it writes
// on exit ("" if none).
func (l *launcher) command(k Kind, host, port, dataDir string, mayDump bool) (argv []string, archiveTmp string) {
	if !l.direct(k) {
		argv = []string{l.gcloud, "--quiet"}
		switch k {
		case Firestore:
			return append(argv, "emulators", "firestore", "start", "--host-port="+host+":"+port), ""
		default:
			return append(argv, "beta", "emulators", "pubsub", "start", "--host-port="+host+":"+port, "--data-dir="+dataDir), ""
		}
	}
	jar := l.jars[k]
	argv = append([]string{l.java}, JVMOptions...)
	cds, archiveTmp := classDataSharing(k, l.java, jar, mayDump)
	argv = append(argv, cds...)
	// The arguments gcloud's wrapper passes (googlecloudsdk/command_lib/
	// emulators: firestore_util.StartFirestoreEmulator, util.BuildArgsList).
	switch k {
	case Firestore:
		argv = append(argv, "-cp", jar, "com.google.cloud.datastore.emulator.firestore.CloudFirestore",
			"start", "--host="+host, "--port="+port, "--database-mode=firestore-native")
	default:
		argv = append(argv, "-jar", jar, "--host="+host, "--port="+port)
	}
	return argv, archiveTmp
}

// newLauncher finds java, bash and the emulators' jars (through gcloud),
// or returns an error wrapping ErrMissingTool that names what to install.
func newLauncher() (*launcher, error) {
	gcloud, bash, java, err := lookTools()
	if err != nil {
		return nil, err
	}
	l := &launcher{bash: bash, java: java, gcloud: gcloud, jars: map[Kind]string{}}
	if os.Getenv(LaunchEnv) != "gcloud" && gcloud != "" {
		l.jars = findJars(gcloud)
	}
	return l, nil
}

var sdkJars struct {
	sync.Mutex
	byGcloud map[string]map[Kind]string
}

// findJars returns the emulators' jars in the Cloud SDK that gcloud
// belongs to; a kind is missing when its jar is not installed.
func findJars(gcloud string) map[Kind]string {
	sdkJars.Lock()
	defer sdkJars.Unlock()
	if j, ok := sdkJars.byGcloud[gcloud]; ok {
		return j
	}
	jars := jarsIn(sdkRootOf(gcloud))
	if len(jars) < 2 {
		// An unusual layout: ask gcloud itself (slow: Python).
		if root := sdkRootFromGcloud(gcloud); root != "" {
			jars = jarsIn(root)
		}
	}
	if sdkJars.byGcloud == nil {
		sdkJars.byGcloud = map[string]map[Kind]string{}
	}
	sdkJars.byGcloud[gcloud] = jars
	return jars
}

// sdkRootOf returns the Cloud SDK directory of a gcloud on PATH
// (ROOT/bin/gcloud, often behind a symlink such as /usr/bin/gcloud).
func sdkRootOf(gcloud string) string {
	p, err := filepath.EvalSymlinks(gcloud)
	if err != nil {
		return ""
	}
	return filepath.Dir(filepath.Dir(p))
}

func sdkRootFromGcloud(gcloud string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, gcloud, "info", "--format=value(installation.sdk_root)").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// jarsIn returns the emulators' jars installed under the SDK root.
func jarsIn(root string) map[Kind]string {
	jars := map[Kind]string{}
	if root == "" {
		return jars
	}
	fs := filepath.Join(root, "platform", "cloud-firestore-emulator", "cloud-firestore-emulator.jar")
	if st, err := os.Stat(fs); err == nil && st.Mode().IsRegular() {
		jars[Firestore] = fs
	}
	ps, _ := filepath.Glob(filepath.Join(root, "platform", "pubsub-emulator", "lib", "cloud-pubsub-emulator-*-all.jar"))
	if len(ps) > 0 {
		sort.Strings(ps)
		jars[PubSub] = ps[len(ps)-1]
	}
	return jars
}

// cdsDir returns the directory of the class-data sharing archives, or ""
// when there is no user cache directory.
var cdsDir = func() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "servo", "emulators")
}

// classDataSharing returns the JVM options that use the emulator's AppCDS
// archive (the classes it loads, pre-parsed: it starts in about half the
// time), or, when there is none yet, that write one on exit to a private
// temporary file, which Stop then moves into place. The archive's name
// depends on the jar, the java binary and the JVM options, so that a new
// SDK or JVM gets a new one. Without a cache directory, or without an
// archive when mayDump is false, it returns nothing.
func classDataSharing(k Kind, java, jar string, mayDump bool) (opts []string, archiveTmp string) {
	dir := cdsDir()
	if dir == "" {
		return nil, ""
	}
	h := sha256.New()
	for _, p := range []string{jar, java} {
		real, _ := filepath.EvalSymlinks(p)
		st, err := os.Stat(real)
		if err != nil {
			return nil, ""
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00", real, st.Size(), st.ModTime().UnixNano())
	}
	fmt.Fprint(h, strings.Join(JVMOptions, "\x00"))
	archive := filepath.Join(dir, string(k)+"-"+hex.EncodeToString(h.Sum(nil))[:16]+".jsa")
	if st, err := os.Stat(archive); err == nil && st.Size() > 0 {
		return []string{"-XX:SharedArchiveFile=" + archive}, ""
	}
	if !mayDump {
		return nil, ""
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, ""
	}
	removeStaleArchives(dir)
	tmp := archive + ".tmp-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	return []string{"-XX:ArchiveClassesAtExit=" + tmp}, tmp
}

// removeStaleArchives removes temporary archives left by emulators that
// were killed before they could finish writing them.
func removeStaleArchives(dir string) {
	tmps, _ := filepath.Glob(filepath.Join(dir, "*.jsa.tmp-*"))
	for _, t := range tmps {
		if st, err := os.Stat(t); err == nil && time.Since(st.ModTime()) > 10*time.Minute {
			os.Remove(t)
		}
	}
}

// keepArchive moves the archive the emulator wrote on a clean exit into
// place; after a SIGKILL it may be incomplete and is removed.
func keepArchive(tmp string, clean bool) {
	if tmp == "" {
		return
	}
	final := tmp[:strings.LastIndex(tmp, ".tmp-")]
	if st, err := os.Stat(tmp); clean && err == nil && st.Size() > 0 {
		if err := os.Rename(tmp, final); err == nil {
			return
		}
	}
	os.Remove(tmp)
}
