package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/auth"
)

// Key rotation the way a user does it (issue 38): `servo dev` started
// with SERVO_TOKEN_KEYS_FILE, and `servo keys add|activate|retire --file`
// on that file while it runs. New tasks are signed with the activated key
// within seconds; retiring the old key is refused while its tokens may be
// valid, and when forced it says so on stderr, and the stack stops
// accepting the old key's tokens.
func TestServoDevRotatesItsKeyFile(t *testing.T) {
	ring := filepath.Join(t.TempDir(), "ring.json")
	if _, errOut, code := runCLI(t, "keys", "generate", "k1", "--file", ring); code != 0 {
		t.Fatalf("generate: %s", errOut)
	}
	// The worker records each delivery's token and answers 200.
	var mu sync.Mutex
	tokens := map[string]string{} // taskId -> the envelope's token
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var env api.Envelope
		if json.Unmarshal(body, &env) == nil {
			mu.Lock()
			tokens[env.TaskID] = env.TaskToken
			mu.Unlock()
		}
	}))
	t.Cleanup(rec.Close)

	addr := freeAddr(t)
	dev := exec.Command(servoBinary(t), "dev", "--addr", addr, "--no-demo", "--project", emulatortest.ProjectID(t),
		"--firestore", emulatortest.FirestoreHost(t), "--pubsub", emulatortest.PubSubHost(t),
		"--worker", "rec="+rec.URL, "--start-timeout", "1h", "--log", filepath.Join(t.TempDir(), "dev.log"))
	dev.Env = append(withoutEmulatorEnv(os.Environ()), auth.EnvKeysFile+"="+ring, auth.EnvKeys+"=")
	stdout, _ := dev.StdoutPipe()
	var stderr bytes.Buffer
	dev.Stderr = &stderr
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	ready, exited := make(chan struct{}), make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "servo dev: running; Ctrl-C to stop" {
				close(ready)
			}
		}
		exited <- dev.Wait()
	}()
	t.Cleanup(func() { dev.Process.Kill(); <-exited })
	select {
	case <-ready:
	case err := <-exited:
		t.Fatalf("servo dev exited: %v\n%s", err, stderr.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("servo dev not ready\n%s", stderr.String())
	}
	c, err := client.New("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	// delivered submits a task to rec and returns its envelope's token.
	delivered := func() (string, string) {
		t.Helper()
		sub, _, err := c.Submit(context.Background(), []byte(`{"tenantId":"acme","workspaceId":"ws","taskKey":"k","worker":"rec","payload":{}}`))
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			tok := tokens[sub.TaskID]
			mu.Unlock()
			if tok != "" {
				return sub.TaskID, tok
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("task %s never delivered", sub.TaskID)
		return "", ""
	}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20 s", what)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	oldID, oldTok := delivered()
	if kid := kidOf(t, oldTok); kid != "k1" {
		t.Fatalf("first task signed with %q, want k1", kid)
	}

	for _, args := range [][]string{{"add", "k2"}, {"activate", "k2"}} {
		if out, errOut, code := runCLI(t, append(append([]string{"keys"}, args...), "--file", ring)...); code != 0 {
			t.Fatalf("servo keys %v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	eventually("new tasks signed with k2", func() bool { _, tok := delivered(); return kidOf(t, tok) == "k2" })

	// Retiring k1 now, or with a grace shorter than a token's lifetime, is
	// refused; forced, it is done and said on stderr.
	for _, args := range [][]string{{"retire", "k1"}, {"retire", "k1", "--grace", "1s"}} {
		if _, errOut, code := runCLI(t, append(append([]string{"keys"}, args...), "--file", ring)...); code != exitConflict {
			t.Fatalf("servo keys %v: exit %d %s, want %d", args, code, errOut, exitConflict)
		}
	}
	_, errOut, code := runCLI(t, "keys", "retire", "k1", "--grace", "1s", "--force", "--file", ring)
	if code != 0 || !strings.Contains(errOut, "--force") || !strings.Contains(errOut, "401") {
		t.Fatalf("forced retire: exit %d, stderr %q; want 0 and a warning", code, errOut)
	}
	// The running stack no longer accepts k1's tokens.
	eventually("k1's tokens refused", func() bool {
		body, _ := json.Marshal(api.StartedRequest{Attempt: 1, WorkerID: "w1"})
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/tasks/"+oldID+"/started", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+oldTok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusUnauthorized
	})
}
