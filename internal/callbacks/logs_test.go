package callbacks_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/callbacks"
)

// TestLogsNeverShowTheToken runs callbacks of every kind, accepted and
// refused (bad, forged, expired, out-of-scope tokens, bad bodies, a token
// refresh), captures the handler's logs, and checks that no token, nor any
// of a token's three segments, appears in them; and that there is exactly
// one JSON line per callback with the fields operators search by.
func TestLogsNeverShowTheToken(t *testing.T) {
	// LogHeartbeats: the accepted heartbeat's line too (by default at DEBUG).
	e := newEnv(t, func(c *callbacks.Config) { c.LogHeartbeats = true })
	now := e.clock.Now()
	tk := e.running("w1")
	other := e.running("w1")
	oldTok := e.tokenFor(scopeOf(tk, 1), time.Hour, now.Add(-50*time.Minute)) // refreshed on heartbeat
	tok := e.token(tk, 1)
	tokens := []string{oldTok, tok, e.token(other, 1), algNone(t, "k1", claimsFor(tk, 1, now)),
		e.tokenFor(scopeOf(tk, 1), time.Hour, now.Add(-2*time.Hour))}
	calls := []request{
		{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: oldTok, body: mustJSON(t, heartbeatReq(1, "w1"))},
		{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: tokens[3], body: mustJSON(t, heartbeatReq(1, "w1"))},
		{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: tokens[4], body: mustJSON(t, heartbeatReq(1, "w1"))},
		{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: tokens[2], body: mustJSON(t, heartbeatReq(1, "w1"))},
		{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: tok, body: []byte(`{"attempt":1,"workerId":"w1","progressPct":"` + tok + `"}`)},
		{kind: callbacks.KindStarted, taskID: tk.ID, token: tok, body: mustJSON(t, startedReq(1, "w2"))},
		{kind: callbacks.KindStarted, taskID: tk.ID, token: tok, contentType: "text/plain", body: mustJSON(t, startedReq(1, "w1"))},
		{kind: callbacks.KindCompleted, taskID: tk.ID, authz: "Bearer " + tok + " trailing", body: mustJSON(t, completedReq(1, "w1", api.OutcomeSucceeded))},
		{kind: callbacks.KindCompleted, taskID: tk.ID, token: tok, body: mustJSON(t, completedReq(1, "w1", api.OutcomeSucceeded))},
		{kind: callbacks.KindCompleted, taskID: tk.ID, token: tok, body: mustJSON(t, failedReq(1, "w1", api.CategoryUserCode))},
	}
	statuses := make([]int, len(calls))
	for i, rq := range calls {
		r := rq.httpRequest()
		r.Header.Set("X-Cloud-Trace-Context", "0123456789abcdef0123456789abcdef/42;o=1")
		w := newRecorder()
		e.h.ServeHTTP(w, r)
		statuses[i] = w.Code
		var resp api.CallbackResponse
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
			t.Fatal(err)
		}
		if resp.TaskToken != "" {
			tokens = append(tokens, resp.TaskToken)
		}
	}
	if len(tokens) != 6 {
		t.Fatalf("the old token was not refreshed (statuses %v); the test needs a refreshed token in play", statuses)
	}
	logs := e.logs.String()
	for _, tok := range tokens {
		for _, part := range append([]string{tok}, strings.Split(tok, ".")...) {
			if len(part) >= 8 && strings.Contains(logs, part) {
				t.Fatalf("logs contain a token segment %q:\n%s", part, logs)
			}
		}
	}
	if strings.Contains(strings.ToLower(logs), "bearer") {
		t.Errorf("logs mention the Authorization header:\n%s", logs)
	}
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		lines = append(lines, m)
	}
	if len(lines) != len(calls) {
		t.Fatalf("%d log lines for %d callbacks:\n%s", len(lines), len(calls), logs)
	}
	for i, m := range lines {
		for _, k := range []string{"severity", "message", "time", "taskId", "attempt", "tenantId", "kind", "status", "disposition", "latencyMs", "logging.googleapis.com/trace"} {
			if _, ok := m[k]; !ok {
				t.Errorf("line %d lacks %s: %v", i, k, m)
			}
		}
		if m["message"] != "callback" || m["taskId"] != tk.ID || int(m["status"].(float64)) != statuses[i] ||
			m["logging.googleapis.com/trace"] != "projects/servo-test/traces/0123456789abcdef0123456789abcdef" {
			t.Errorf("line %d: %v", i, m)
		}
		if statuses[i] != http.StatusOK && m["error"] == nil {
			t.Errorf("line %d: refused without an error code: %v", i, m)
		}
	}
	// The accepted ones name the tenant and attempt from the token.
	if first := lines[0]; first["tenantId"] != "acme" || first["attempt"] != float64(1) || first["tokenRefreshed"] != true {
		t.Errorf("first line: %v", first)
	}
}
