package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/examples/worker/partitions"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/servotest/stacktest"
	"github.com/servo-dev/servo/worker"
)

// kidOf returns the kid header of a JWT ("" when it has none).
func kidOf(_ *testing.T, jwt string) string {
	head, _, _ := strings.Cut(jwt, ".")
	b, _ := base64.RawURLEncoding.DecodeString(head)
	var h struct {
		Kid string `json:"kid"`
	}
	_ = json.Unmarshal(b, &h)
	return h.Kid
}

// The servo keys commands on a file, without a stack: each step's result,
// --dry-run writing nothing, and the refusals with their exit codes.
func TestKeysFile(t *testing.T) {
	ring := filepath.Join(t.TempDir(), "ring.json")
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	keysNow = func() time.Time { return now }
	t.Cleanup(func() { keysNow = time.Now })
	read := func() auth.Ring {
		t.Helper()
		b, err := os.ReadFile(ring)
		if err != nil {
			t.Fatal(err)
		}
		r, err := auth.ParseRing(b)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	steps := []struct {
		args   []string
		code   int
		active string
		kids   int
		later  time.Duration // the clock moves on before the step
	}{
		{[]string{"generate", "k1"}, 0, "k1", 1, 0},
		{[]string{"generate", "k1"}, exitConflict, "k1", 1, 0}, // never overwrites
		{[]string{"add", "k2", "--dry-run"}, 0, "k1", 1, 0},
		{[]string{"add", "k2"}, 0, "k1", 2, 0},
		{[]string{"add", "k2"}, exitConflict, "k1", 2, 0},
		{[]string{"activate", "k9"}, exitNotFound, "k1", 2, 0},
		{[]string{"activate", "k2"}, 0, "k2", 2, time.Minute},
		{[]string{"retire", "k2"}, exitConflict, "k2", 2, 0},                    // active
		{[]string{"retire", "k1"}, exitConflict, "k2", 2, time.Hour},            // tokens may be valid
		{[]string{"retire", "k1", "--dry-run"}, 0, "k2", 2, defaultRetireGrace}, // after the grace: allowed, not written
		{[]string{"retire", "k1"}, 0, "k2", 1, 0},
	}
	for _, s := range steps {
		now = now.Add(s.later)
		out, errOut, code := runCLI(t, append(append([]string{"keys"}, s.args...), "--file", ring)...)
		if code != s.code {
			t.Fatalf("servo keys %v: exit %d, want %d\n%s%s", s.args, code, s.code, out, errOut)
		}
		r := read()
		if r.Active != s.active || len(r.Keys) != s.kids {
			t.Fatalf("after servo keys %v: %v; want active %s and %d keys", s.args, r, s.active, s.kids)
		}
		for _, secret := range r.Keys {
			if strings.Contains(out+errOut, secret) {
				t.Fatalf("servo keys %v printed a secret", s.args)
			}
		}
	}
	if info, err := os.Stat(ring); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("ring file mode: %v %v", info.Mode(), err)
	}
	if _, errOut, code := runCLI(t, "keys", "add", "k3", "--file", ring, "--secret", "projects/p/secrets/s"); code != exitUsage {
		t.Fatalf("--file and --secret: exit %d %s", code, errOut)
	}
	if _, errOut, code := runCLI(t, "keys", "add", "k3", "--secret", "nope"); code != exitUsage {
		t.Fatalf("bad --secret: exit %d %s", code, errOut)
	}
}

// slowTimers keep a loaded machine from expiring leases during the test.
var slowTimers = map[string]any{"heartbeatIntervalMs": 500, "heartbeatTimeoutMs": 30000}

// Rotation on the running local stack: tasks run while a key is added and
// activated; their callbacks (tokens signed with the old key) keep
// working; a token signed elsewhere with the new key makes the stack
// re-read its ring; heartbeats then refresh tokens with the new kid, and new
// attempts carry it. Retiring the old key too early is refused.
func TestKeysRotateRunningStack(t *testing.T) {
	dir := t.TempDir()
	ring := filepath.Join(dir, "ring.json")
	if _, errOut, code := runCLI(t, "keys", "generate", "k1", "--file", ring); code != 0 {
		t.Fatalf("generate: %s", errOut)
	}
	oldRing, err := os.ReadFile(ring)
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	envelopeKids := map[string]string{} // taskId -> kid of the envelope's token
	release := make(chan struct{})
	sdk := worker.Handler(func(ctx context.Context, wt *worker.Task) (any, error) {
		wt.Progress(40, "holding")
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return map[string]any{"ok": true}, nil
	}, worker.WithLogger(slog.New(slog.DiscardHandler)))
	// The SDK keeps the envelope's token to itself: read it on the way in.
	held := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var env api.Envelope
		if json.Unmarshal(body, &env) == nil {
			mu.Lock()
			envelopeKids[env.TaskID] = kidOf(t, env.TaskToken)
			mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sdk.ServeHTTP(w, r)
	}))
	t.Cleanup(held.CloseClientConnections)
	s := stacktest.Start(t, devstack.Options{
		WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process},
		SweepEvery:  200 * time.Millisecond, Workers: map[string]string{"held": held.URL}, KeysFile: ring,
	})
	c, err := client.New(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	st := &stack{t: t, s: s, c: c, release: release}
	t.Cleanup(st.unhold)

	var ids []string
	for range 3 {
		ids = append(ids, st.submit("held", `{}`, slowTimers).TaskID)
	}
	runningNow := func(id string) api.Task {
		return st.wait(id, "RUNNING at 40%", func(v api.Task) bool {
			p, known, _ := progressOf(&v)
			return v.State == api.Running && known && p == 40 && len(v.Attempts) > 0
		})
	}
	for _, id := range ids {
		runningNow(id)
	}

	// Rotate: add k2, activate it; retiring k1 now is refused.
	for _, args := range [][]string{{"add", "k2"}, {"activate", "k2"}} {
		if out, errOut, code := runCLI(t, append(append([]string{"keys"}, args...), "--file", ring)...); code != 0 {
			t.Fatalf("servo keys %v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	if _, errOut, code := runCLI(t, "keys", "retire", "k1", "--file", ring); code != exitConflict || !strings.Contains(errOut, "may still be valid") {
		t.Fatalf("retire k1 right after the rotation: exit %d %s; want %d", code, errOut, exitConflict)
	}
	newRing, err := os.ReadFile(ring)
	if err != nil {
		t.Fatal(err)
	}

	// heartbeat sends a heartbeat for id with a token signed by ring 50
	// minutes ago (a long-running attempt, due for a fresh token) and
	// returns the fresh token's kid.
	heartbeat := func(id string, ringJSON []byte) string {
		t.Helper()
		kr, err := auth.ParseKeyRing(ringJSON)
		if err != nil {
			t.Fatal(err)
		}
		v := runningNow(id)
		a := v.Attempts[len(v.Attempts)-1]
		now := time.Now()
		tok, _, err := kr.Sign(auth.Scope{TenantID: v.TenantID, WorkspaceID: v.WorkspaceID, RunID: v.RunID, TaskID: id, Attempt: v.Attempt}, time.Hour, now.Add(-50*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(api.HeartbeatRequest{Attempt: v.Attempt, WorkerID: a.WorkerID})
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/tasks/"+id+"/heartbeat", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out api.CallbackResponse
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || out.TaskToken == "" {
			t.Fatalf("heartbeat of %s signed with kid %s: %d %+v %v; want 200 with a fresh token", id, kidOf(t, tok), resp.StatusCode, out, err)
		}
		return kidOf(t, out.TaskToken)
	}
	// Another instance, which has read the new ring, signed this token
	// with k2: the stack, which still signs with k1, re-reads its ring.
	if kid := heartbeat(ids[0], newRing); kid != "k2" {
		t.Fatalf("fresh token after a k2 heartbeat: kid %s, want k2", kid)
	}
	if s.Keys.Active() != "k2" {
		t.Fatalf("the stack signs with %s after the re-read, want k2", s.Keys.Active())
	}
	// A token signed with k1 before the rotation still verifies, and its
	// refresh carries k2.
	if kid := heartbeat(ids[1], oldRing); kid != "k2" {
		t.Fatalf("fresh token after a k1 heartbeat: kid %s, want k2", kid)
	}

	// A task submitted after the rotation gets a k2 envelope; the running
	// ones finish through their k1 tokens.
	late := st.submit("held", `{}`, slowTimers).TaskID
	st.wait(late, "RUNNING", func(v api.Task) bool { return v.State == api.Running })
	st.unhold()
	for _, id := range append(ids, late) {
		st.waitState(id, api.Succeeded)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if envelopeKids[id] != "k1" {
			t.Errorf("task %s started with kid %q, want k1", id, envelopeKids[id])
		}
	}
	if envelopeKids[late] != "k2" {
		t.Errorf("task submitted after the rotation: envelope kid %q, want k2", envelopeKids[late])
	}
}
