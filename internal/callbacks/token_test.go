package callbacks_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/task"
)

// claimsFor are the claims the control plane signs for tk's attempt.
func claimsFor(tk task.Task, attempt int, now time.Time) auth.Claims {
	return auth.Claims{
		Scope: scopeOf(tk, attempt),
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: auth.TaskTokenIssuer, IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour)), ID: rand.Text(),
		},
	}
}

func signWith(t *testing.T, m jwt.SigningMethod, kid string, key any, c auth.Claims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// algNone builds an unsigned token ("alg":"none") with valid claims.
func algNone(t *testing.T, kid string, c auth.Claims) string {
	t.Helper()
	header := map[string]string{"alg": "none", "typ": "JWT"}
	if kid != "" {
		header["kid"] = kid
	}
	h, _ := json.Marshal(header)
	p, _ := json.Marshal(c)
	enc := base64.RawURLEncoding.EncodeToString
	return enc(h) + "." + enc(p) + "."
}

// TestForgedTokens presents tokens an attacker could make. Every one is
// refused before Firestore is touched (no RPC, no write): 401 for tokens
// that do not verify, 403 for genuine tokens used outside their scope.
func TestForgedTokens(t *testing.T) {
	e := newEnv(t, nil)
	tk := e.running("w1")
	other := e.running("w1")
	now := e.clock.Now()
	secretOf := func(ringJSON []byte) []byte {
		var ring struct {
			Keys map[string]string `json:"keys"`
		}
		if err := json.Unmarshal(ringJSON, &ring); err != nil {
			t.Fatal(err)
		}
		b, err := base64.StdEncoding.DecodeString(ring.Keys["k1"])
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	secret := secretOf(e.keysJSON) // the real signing secret
	otherRing, otherJSON, err := auth.GenerateKeyRing("k1")
	if err != nil {
		t.Fatal(err)
	}
	wrongSecret := secretOf(otherJSON)
	genuine := e.token(tk, 1)
	parts := strings.Split(genuine, ".")
	tamperedClaims := claimsFor(tk, 2, now)
	tp, _ := json.Marshal(tamperedClaims)

	tests := []struct {
		name   string
		tok    string
		body   any
		status int
		code   string
	}{
		{"alg none", algNone(t, "k1", claimsFor(tk, 1, now)), heartbeatReq(1, "w1"), 401, api.CodeInvalidToken},
		{"alg none without kid", algNone(t, "", claimsFor(tk, 1, now)), heartbeatReq(1, "w1"), 401, api.CodeInvalidToken},
		{"alg none with the genuine signature", strings.Replace(genuine, parts[0], base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"k1","typ":"JWT"}`)), 1), heartbeatReq(1, "w1"), 401, api.CodeInvalidToken},
		{"wrong key under the right kid", signWith(t, jwt.SigningMethodHS256, "k1", wrongSecret, claimsFor(tk, 1, now)), heartbeatReq(1, "w1"), 401, api.CodeInvalidToken},
		{"another deployment's genuine token", func() string {
			s, _, _ := otherRing.Sign(scopeOf(tk, 1), time.Hour, now)
			return s
		}(), heartbeatReq(1, "w1"), 401, api.CodeInvalidToken},
		{"unknown kid", signWith(t, jwt.SigningMethodHS256, "k9", secret, claimsFor(tk, 1, now)), heartbeatReq(1, "w1"), 401, api.CodeInvalidToken},
		{"HS512 with the real secret", signWith(t, jwt.SigningMethodHS512, "k1", secret, claimsFor(tk, 1, now)), heartbeatReq(1, "w1"), 401, api.CodeInvalidToken},
		{"HS256 with the real secret but no issuer", func() string {
			c := claimsFor(tk, 1, now)
			c.Issuer = ""
			return signWith(t, jwt.SigningMethodHS256, "k1", secret, c)
		}(), heartbeatReq(1, "w1"), 401, api.CodeInvalidToken},
		{"claims tampered (attempt 1 → 2)", parts[0] + "." + base64.RawURLEncoding.EncodeToString(tp) + "." + parts[2], heartbeatReq(2, "w1"), 401, api.CodeInvalidToken},
		{"signature stripped", parts[0] + "." + parts[1] + ".", heartbeatReq(1, "w1"), 401, api.CodeInvalidToken},
		{"expired", e.tokenFor(scopeOf(tk, 1), time.Hour, now.Add(-time.Hour-auth.TaskTokenLeeway-time.Second)), heartbeatReq(1, "w1"), 401, api.CodeTokenExpired},
		// A genuine early token is 503 too_early (receipt_test.go); a
		// forged one is invalid, whatever its nbf.
		{"not valid yet, wrong key", signWith(t, jwt.SigningMethodHS256, "k1", wrongSecret, claimsFor(tk, 1, now.Add(time.Minute))), heartbeatReq(1, "w1"), 401, api.CodeInvalidToken},
		{"another task's token", e.token(other, 1), heartbeatReq(1, "w1"), 403, api.CodeTokenScopeMismatch},
		{"body attempt is not the token's", genuine, heartbeatReq(2, "w1"), 403, api.CodeTokenScopeMismatch},
		{"token of a later attempt, body of this one", e.token(tk, 2), heartbeatReq(1, "w1"), 403, api.CodeTokenScopeMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.t = t
			before := e.snapshot(tk.ID)
			e.rpc.Reset()
			rp := e.post(callbacks.KindHeartbeat, tk.ID, tt.tok, tt.body)
			if rp.status != tt.status || rp.resp.Error != tt.code || rp.resp.Disposition != api.Rejected {
				t.Fatalf("got %d %s, want %d %s REJECTED", rp.status, rp.raw, tt.status, tt.code)
			}
			if got := e.rpc.Counts(); !maps.Equal(got, map[string]int{}) {
				t.Errorf("Firestore RPCs %v before the token was accepted", got)
			}
			if !sameSnapshot(before, e.snapshot(tk.ID)) {
				t.Errorf("a rejected request wrote")
			}
		})
	}
	// The genuine token still works, for contrast.
	e.t = t
	if rp := e.post(callbacks.KindHeartbeat, tk.ID, genuine, heartbeatReq(1, "w1")); rp.status != http.StatusOK {
		t.Fatalf("genuine token: %d %s", rp.status, rp.raw)
	}
}

// TestTokenScopeCheckedAgainstTheTask covers a token that verifies and
// names the task but another tenant, workspace or run: only a signer bug
// or a stolen key can make one (task ids are unique, and the control plane
// copies the scope from the task). The answer is 403, logged at ERROR.
// The check runs after the transaction (see the package's known gap in
// the report); here it is exercised on a callback that changes nothing.
func TestTokenScopeCheckedAgainstTheTask(t *testing.T) {
	e := newEnv(t, nil)
	tk := e.running("w1")
	for _, mutate := range []func(*auth.Scope){
		func(s *auth.Scope) { s.TenantID = "globex" },
		func(s *auth.Scope) { s.WorkspaceID = "ws9" },
		func(s *auth.Scope) { s.RunID = "run_other" },
	} {
		s := scopeOf(tk, 1)
		mutate(&s)
		rp := e.post(callbacks.KindStarted, tk.ID, e.tokenFor(s, time.Hour, e.clock.Now()), startedReq(1, "w1"))
		if rp.status != http.StatusForbidden || rp.resp.Error != api.CodeTokenScopeMismatch || rp.resp.Disposition != api.Rejected {
			t.Fatalf("scope %+v: %d %s", s, rp.status, rp.raw)
		}
	}
	if n := strings.Count(e.logs.String(), `"severity":"ERROR"`); n != 3 {
		t.Errorf("%d ERROR lines, want 3:\n%s", n, e.logs.String())
	}
}

// TestHeartbeatRefreshesToken: a heartbeat whose token has less than a
// quarter of its lifetime left, or less than two heartbeat intervals (the
// next heartbeat could arrive after it expired), gets a fresh token for the
// same scope, valid for task.TokenTTL (covering the deadline when it can,
// and two intervals); with more left, none.
func TestHeartbeatRefreshesToken(t *testing.T) {
	e := newEnv(t, nil)
	now := e.clock.Now()
	deadline := now.Add(100 * time.Minute)
	tests := []struct {
		name     string
		deadline *time.Time
		issued   time.Duration // before now, for a one-hour token
		interval time.Duration // the heartbeat interval; testTiming's when 0
		want     bool
	}{
		{"half the lifetime left", nil, 30 * time.Minute, 0, false},
		{"just over a quarter left", nil, 44 * time.Minute, 0, false},
		{"less than a quarter left", nil, 46 * time.Minute, 0, true},
		{"minutes left, with a deadline", &deadline, 58 * time.Minute, 0, true},
		// 20 minutes left is over a quarter, but the next heartbeat is due
		// in 35: without a fresh token it would arrive expired.
		{"over a quarter left, less than two intervals", nil, 40 * time.Minute, 35 * time.Minute, true},
		{"more than two intervals left", nil, 5 * time.Minute, 25 * time.Minute, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.t = t
			e.clock.Set(now)
			timing := testTiming
			if tt.interval > 0 {
				timing = api.Timing{HeartbeatIntervalMs: tt.interval.Milliseconds(), HeartbeatTimeoutMs: 3 * tt.interval.Milliseconds(), CancelGracePeriodMs: 1000}
			}
			tk := e.create(func(tk *task.Task) { tk.Deadline, tk.Timing = tt.deadline, timing })
			old := e.tokenFor(scopeOf(tk, 1), time.Hour, now.Add(-tt.issued))
			rp := e.post(callbacks.KindHeartbeat, tk.ID, old, heartbeatReq(1, "w1"))
			if rp.status != http.StatusOK {
				t.Fatalf("%d %s", rp.status, rp.raw)
			}
			if got := rp.resp.TaskToken != ""; got != tt.want {
				t.Fatalf("refreshed = %v, want %v: %s", got, tt.want, rp.raw)
			}
			if !tt.want {
				if _, ok := rp.fields["tokenExpiresAt"]; ok {
					t.Errorf("tokenExpiresAt without a token: %s", rp.raw)
				}
				return
			}
			claims, err := e.keys.Verify(rp.resp.TaskToken, now)
			if err != nil {
				t.Fatalf("fresh token does not verify: %v", err)
			}
			if claims.Scope != scopeOf(tk, 1) {
				t.Errorf("fresh token scope %+v", claims.Scope)
			}
			wantExp := now.Add(task.TokenTTL(now, tt.deadline, timing.HeartbeatInterval())).Truncate(time.Second)
			if !claims.ExpiresAtTime().Equal(wantExp) || rp.resp.TokenExpiresAt == nil || !rp.resp.TokenExpiresAt.Equal(wantExp) {
				t.Errorf("fresh token expires %v (answer says %v), want %v", claims.ExpiresAtTime(), rp.resp.TokenExpiresAt, wantExp)
			}
			if tt.deadline != nil && claims.ExpiresAtTime().Before(*tt.deadline) {
				t.Errorf("fresh token expires %v, before the deadline %v", claims.ExpiresAtTime(), tt.deadline)
			}
			if tt.interval > 0 {
				// The next heartbeat, an interval later, is accepted with it.
				e.clock.Set(now.Add(tt.interval))
				if rp = e.post(callbacks.KindHeartbeat, tk.ID, rp.resp.TaskToken, heartbeatReq(1, "w1")); rp.status != http.StatusOK {
					t.Errorf("next heartbeat with the fresh token: %d %s", rp.status, rp.raw)
				}
				return
			}
			// The fresh token works, and is not refreshed again.
			rp = e.post(callbacks.KindHeartbeat, tk.ID, rp.resp.TaskToken, heartbeatReq(1, "w1"))
			if rp.status != http.StatusOK || rp.resp.TaskToken != "" {
				t.Errorf("fresh token: %d %s", rp.status, rp.raw)
			}
		})
	}
}
