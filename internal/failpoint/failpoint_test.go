package failpoint

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want map[string]int64
		err  string
	}{
		{spec: "", want: map[string]int64{}},
		{spec: "events.after-commit=crash", want: map[string]int64{EventsAfterCommit: 1}},
		{spec: "events.after-commit=crash@3, enqueue.after-create-task=crash@2", want: map[string]int64{EventsAfterCommit: 3, EnqueueAfterCreateTask: 2}},
		{spec: "nope=crash", err: "unknown"},
		{spec: "events.after-commit", err: "want name=crash"},
		{spec: "events.after-commit=crash@0", err: "N ≥ 1"},
		{spec: "events.after-commit=panic", err: "unknown action"},
	} {
		got, err := Parse(tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q) = %v, %v; want an error with %q", tc.spec, got, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.spec, got, err, tc.want)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("Parse(%q)[%s] = %d, want %d", tc.spec, k, got[k], v)
			}
		}
	}
}

// TestHitCrashes runs this test binary as a child that arms a failpoint
// at its third hit and hits it five times: the child must die of SIGKILL
// after exactly two hits returned.
func TestHitCrashes(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		if err := Arm(EventsAfterCommit + "=crash@3"); err != nil {
			os.Exit(3)
		}
		Hit(EnqueueAfterCreateTask) // not armed: nothing
		for i := range 5 {
			Hit(EventsAfterCommit)
			os.Stdout.WriteString("returned " + string(rune('1'+i)) + "\n")
		}
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHitCrashes$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1")
	out, err := cmd.Output()
	ee, ok := err.(*exec.ExitError)
	if !ok {
		t.Fatalf("child: err %v, want it killed; output:\n%s", err, out)
	}
	if ws := ee.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended %v, want killed by SIGKILL", ws)
	}
	if got := strings.Count(string(out), "returned"); got != 2 {
		t.Errorf("%d hits returned before the crash, want 2; output:\n%s", got, out)
	}
}

func TestUnarmedHitIsANoOp(t *testing.T) {
	if err := Arm(""); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		Hit(EventsAfterCommit)
	}
}
