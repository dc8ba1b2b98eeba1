// Package failpoint crashes the process at named points of its code, for
// the fault harness (package faults): a failpoint is a call to [Hit]
// placed at a commit boundary, which does nothing unless the process was
// started with the failpoint armed (SERVO_FAILPOINTS, read by package
// config, which calls [Arm]). Armed, the Nth hit kills the process with
// SIGKILL at once: nothing flushed, nothing deferred run, as a crash of the
// machine would leave it.
//
// The spec is a comma-separated list of name=action, where action is
// "crash" (the first hit) or "crash@N" (the Nth hit, N ≥ 1):
//
//	SERVO_FAILPOINTS=events.after-commit=crash@3
//
// The points placed in Servo's code are listed in [Names].
package failpoint

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// The failpoints of Servo's code.
const (
	// EventsAfterCommit: a store transaction committed (its transitions
	// are in the outbox), before they are queued for publishing.
	EventsAfterCommit = "events.after-commit"
	// EnqueueBeforeCreateTask: an attempt is about to be handed to Cloud
	// Tasks.
	EnqueueBeforeCreateTask = "enqueue.before-create-task"
	// EnqueueAfterCreateTask: Cloud Tasks has the attempt; QUEUED is not
	// recorded yet.
	EnqueueAfterCreateTask = "enqueue.after-create-task"
)

// Names lists the failpoints placed in Servo's code.
var Names = []string{EventsAfterCommit, EnqueueBeforeCreateTask, EnqueueAfterCreateTask}

var (
	armed  atomic.Bool
	mu     sync.Mutex
	points map[string]*point
)

type point struct {
	at   int64 // the hit that crashes
	hits atomic.Int64
}

// Parse checks spec and returns each named point's crashing hit.
func Parse(spec string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, action, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("failpoint %q: want name=crash or name=crash@N", item)
		}
		if !slices.Contains(Names, name) {
			return nil, fmt.Errorf("failpoint %q: unknown (known: %s)", name, strings.Join(Names, ", "))
		}
		n := int64(1)
		switch {
		case action == "crash":
		case strings.HasPrefix(action, "crash@"):
			v, err := strconv.ParseInt(strings.TrimPrefix(action, "crash@"), 10, 64)
			if err != nil || v < 1 {
				return nil, fmt.Errorf("failpoint %q: %q: want crash@N with N ≥ 1", name, action)
			}
			n = v
		default:
			return nil, fmt.Errorf("failpoint %q: unknown action %q (want crash or crash@N)", name, action)
		}
		out[name] = n
	}
	return out, nil
}

// Arm arms the failpoints of spec (see the package comment), replacing
// any armed before; an empty spec disarms them all.
func Arm(spec string) error {
	ps, err := Parse(spec)
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	points = map[string]*point{}
	for name, n := range ps {
		points[name] = &point{at: n}
	}
	armed.Store(len(points) > 0)
	return nil
}

// Hit marks the failpoint name: when it is armed and this is its crashing
// hit, the process is killed (SIGKILL) before Hit returns. Unarmed, Hit
// costs one atomic load.
func Hit(name string) {
	if !armed.Load() {
		return
	}
	mu.Lock()
	p := points[name]
	mu.Unlock()
	if p == nil || p.hits.Add(1) != p.at {
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint %s: crashing (SIGKILL) at hit %d\n", name, p.at)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
