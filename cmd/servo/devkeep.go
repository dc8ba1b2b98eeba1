package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/servo-dev/servo/emulator"
)

// keptEmulator is an emulator `servo dev --keep` left running.
type keptEmulator struct {
	Host string `json:"host"`
	PID  int    `json:"pid"` // its process group, led by Java (or gcloud)
}

// keptStatePath is the file where `servo dev --keep` records the emulators
// it keeps: $XDG_CACHE_HOME/servo/dev-emulators.json (~/.cache/... by
// default).
func keptStatePath() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("--keep needs a user cache directory: %w", err)
	}
	return filepath.Join(d, "servo", "dev-emulators.json"), nil
}

// keepEmulators returns the hosts of the Firestore and Pub/Sub emulators
// for `servo dev --keep`: those recorded by an earlier run when they still
// answer, others started to outlive this process. A host already given
// (--firestore, --pubsub) is returned as it is.
func keepEmulators(ctx context.Context, errOut io.Writer, firestoreHost, pubsubHost string) (string, string, error) {
	path, err := keptStatePath()
	if err != nil {
		return "", "", err
	}
	state := map[emulator.Kind]keptEmulator{}
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &state) // a bad file is replaced
	}
	hosts := map[emulator.Kind]string{emulator.Firestore: firestoreHost, emulator.PubSub: pubsubHost}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", "", fmt.Errorf("--keep: %w", err)
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
	)
	for _, k := range []emulator.Kind{emulator.Firestore, emulator.PubSub} {
		if hosts[k] != "" {
			continue
		}
		if e, ok := state[k]; ok && keptAlive(ctx, k, e) {
			hosts[k] = e.Host
			fmt.Fprintf(errOut, "servo dev: reusing the kept %s emulator at %s (pid %d)\n", k, e.Host, e.PID)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := emulator.StartKept(ctx, k, filepath.Join(filepath.Dir(path), "dev-"+string(k)+".log"))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			hosts[k] = p.Host
			state[k] = keptEmulator{Host: p.Host, PID: p.PID()}
			fmt.Fprintf(errOut, "servo dev: started the %s emulator at %s (pid %d); it is kept after servo dev stops\n", k, p.Host, p.PID())
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return "", "", err
	}
	if b, err := json.MarshalIndent(state, "", "  "); err == nil {
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			return "", "", fmt.Errorf("record kept emulators: %w", err)
		}
	}
	return hosts[emulator.Firestore], hosts[emulator.PubSub], nil
}

// keptAlive reports whether the kept emulator still runs and answers: its
// process leads its group, its command line names the emulator, and its
// host answers.
func keptAlive(ctx context.Context, k emulator.Kind, e keptEmulator) bool {
	if e.PID <= 0 || e.Host == "" || syscall.Kill(-e.PID, 0) != nil {
		return false
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(e.PID) + "/cmdline")
	if err == nil && !strings.Contains(string(cmdline), string(k)) {
		return false // the pid was reused by something else
	}
	return emulator.Answers(ctx, e.Host, 2*time.Second)
}

// keptStopHint tells how to stop the kept emulators.
func keptStopHint() string {
	path, err := keptStatePath()
	if err != nil {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var state map[emulator.Kind]keptEmulator
	if json.Unmarshal(b, &state) != nil {
		return ""
	}
	var groups []string
	for _, k := range []emulator.Kind{emulator.Firestore, emulator.PubSub} {
		if e, ok := state[k]; ok {
			groups = append(groups, "-"+strconv.Itoa(e.PID))
		}
	}
	if len(groups) == 0 {
		return ""
	}
	return "servo dev: the emulators keep running for the next servo dev --keep; stop them with: kill -- " + strings.Join(groups, " ")
}
