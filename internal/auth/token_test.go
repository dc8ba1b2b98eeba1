package auth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var (
	t0     = time.Date(2026, 1, 15, 10, 0, 0, 0, time.UTC)
	scope0 = Scope{TenantID: "ten_1", WorkspaceID: "ws_1", RunID: "run_1", TaskID: "task_1", Attempt: 2}
	key1   = bytes.Repeat([]byte{1}, 32)
	key2   = bytes.Repeat([]byte{2}, 32)
)

func mustRing(t *testing.T, active string, keys map[string][]byte) *KeyRing {
	t.Helper()
	r, err := NewKeyRing(active, keys)
	if err != nil {
		t.Fatalf("NewKeyRing: %v", err)
	}
	return r
}

// validClaims returns the claims Sign would produce for scope0 at t0, as a
// map the tests can break one field at a time.
func validClaims() map[string]any {
	return map[string]any{
		"tenantId":    scope0.TenantID,
		"workspaceId": scope0.WorkspaceID,
		"runId":       scope0.RunID,
		"taskId":      scope0.TaskID,
		"attempt":     scope0.Attempt,
		"iss":         TaskTokenIssuer,
		"iat":         t0.Unix(),
		"nbf":         t0.Unix(),
		"exp":         t0.Add(DefaultTaskTokenTTL).Unix(),
		"jti":         "jti-1",
	}
}

func b64(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// forge builds a token by hand: any header, any claims, signed with method
// and key by the jwt library (or unsigned when method is nil).
func forge(t *testing.T, header, claims map[string]any, method jwt.SigningMethod, key any) string {
	t.Helper()
	input := b64(header) + "." + b64(claims)
	if method == nil {
		return input + "."
	}
	sig, err := method.Sign(input, key)
	if err != nil {
		t.Fatalf("sign %s: %v", method.Alg(), err)
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func hs256(t *testing.T, claims map[string]any) string {
	return forge(t, map[string]any{"alg": "HS256", "typ": "JWT", "kid": "k1"}, claims, jwt.SigningMethodHS256, key1)
}

func with(claims map[string]any, k string, v any) map[string]any {
	c := maps.Clone(claims)
	if v == nil {
		delete(c, k)
	} else {
		c[k] = v
	}
	return c
}

func TestSignVerifyRoundTrip(t *testing.T) {
	r := mustRing(t, "k1", map[string][]byte{"k1": key1})
	tok, exp, err := r.Sign(scope0, 0, t0.Add(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(DefaultTaskTokenTTL); !exp.Equal(want) {
		t.Errorf("expiresAt = %v, want %v", exp, want)
	}
	c, err := r.Verify(tok, t0.Add(time.Minute))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if c.Scope != scope0 {
		t.Errorf("scope = %+v, want %+v", c.Scope, scope0)
	}
	if c.Issuer != TaskTokenIssuer || c.ID == "" {
		t.Errorf("iss = %q, jti = %q", c.Issuer, c.ID)
	}
	if !c.IssuedAtTime().Equal(t0) || !c.NotBeforeTime().Equal(t0) || !c.ExpiresAtTime().Equal(exp) {
		t.Errorf("iat, nbf, exp = %v, %v, %v", c.IssuedAtTime(), c.NotBeforeTime(), c.ExpiresAtTime())
	}

	// The header names the active key and the algorithm.
	hdr, _, _ := strings.Cut(tok, ".")
	raw, err := base64.RawURLEncoding.DecodeString(hdr)
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatal(err)
	}
	if h["alg"] != "HS256" || h["kid"] != "k1" {
		t.Errorf("header = %v", h)
	}

	// The wire form uses exactly the contract's claim names.
	_, rest, _ := strings.Cut(tok, ".")
	payload, _, _ := strings.Cut(rest, ".")
	raw, err = base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tenantId", "workspaceId", "runId", "taskId", "attempt", "iss", "iat", "nbf", "exp", "jti"} {
		if _, ok := m[k]; !ok {
			t.Errorf("claim %q missing from %v", k, m)
		}
	}
}

func TestSignTTLAndJTI(t *testing.T) {
	r := mustRing(t, "k1", map[string][]byte{"k1": key1})
	tests := []struct {
		ttl     time.Duration
		wantTTL time.Duration
		wantErr bool
	}{
		{ttl: 0, wantTTL: DefaultTaskTokenTTL},
		{ttl: -time.Second, wantTTL: DefaultTaskTokenTTL},
		{ttl: 90 * time.Second, wantTTL: 90 * time.Second},
		{ttl: MaxTaskTokenTTL, wantTTL: MaxTaskTokenTTL},
		{ttl: MaxTaskTokenTTL + time.Second, wantErr: true},
	}
	for _, tt := range tests {
		tok, exp, err := r.Sign(scope0, tt.ttl, t0)
		if tt.wantErr {
			if err == nil {
				t.Errorf("Sign(ttl=%v) succeeded, want error", tt.ttl)
			}
			continue
		}
		if err != nil {
			t.Errorf("Sign(ttl=%v): %v", tt.ttl, err)
			continue
		}
		if got := exp.Sub(t0); got != tt.wantTTL {
			t.Errorf("Sign(ttl=%v): lifetime %v, want %v", tt.ttl, got, tt.wantTTL)
		}
		if _, err := r.Verify(tok, t0); err != nil {
			t.Errorf("Verify(ttl=%v): %v", tt.ttl, err)
		}
	}

	a, _, _ := r.Sign(scope0, 0, t0)
	b, _, _ := r.Sign(scope0, 0, t0)
	ca, _ := r.Verify(a, t0)
	cb, _ := r.Verify(b, t0)
	if ca.ID == cb.ID {
		t.Errorf("two tokens share jti %q", ca.ID)
	}
}

func TestSignRejectsIncompleteScope(t *testing.T) {
	r := mustRing(t, "k1", map[string][]byte{"k1": key1})
	tests := map[string]func(*Scope){
		"tenantId":    func(s *Scope) { s.TenantID = "" },
		"workspaceId": func(s *Scope) { s.WorkspaceID = "" },
		"runId":       func(s *Scope) { s.RunID = "" },
		"taskId":      func(s *Scope) { s.TaskID = "" },
		"attempt":     func(s *Scope) { s.Attempt = 0 },
	}
	for name, mutate := range tests {
		s := scope0
		mutate(&s)
		if _, _, err := r.Sign(s, 0, t0); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Sign without %s: err = %v, want one naming it", name, err)
		}
	}
}

func TestVerifyRejects(t *testing.T) {
	ring := mustRing(t, "k1", map[string][]byte{"k1": key1})
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hdr := func(alg string) map[string]any { return map[string]any{"alg": alg, "typ": "JWT", "kid": "k1"} }
	good := hs256(t, validClaims())
	goodHeader, rest, _ := strings.Cut(good, ".")
	goodPayload, goodSig, _ := strings.Cut(rest, ".")

	tests := []struct {
		name  string
		token string
		at    time.Time // t0 if zero
		want  error
		// reason is a substring the error must contain: the check that
		// failed, so that a case cannot pass for the wrong reason.
		reason string
	}{
		// Algorithms: HS256 only.
		{name: "alg none", token: forge(t, hdr("none"), validClaims(), nil, nil), want: ErrInvalidTaskToken, reason: "algorithm not allowed"},
		{name: "alg none signed by lib", token: forge(t, hdr("none"), validClaims(), jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType), want: ErrInvalidTaskToken, reason: "algorithm not allowed"},
		{name: "alg NONE", token: forge(t, hdr("NONE"), validClaims(), nil, nil), want: ErrInvalidTaskToken, reason: "algorithm not allowed"},
		{name: "alg HS384 same key", token: forge(t, hdr("HS384"), validClaims(), jwt.SigningMethodHS384, key1), want: ErrInvalidTaskToken, reason: "algorithm not allowed"},
		{name: "alg HS512 same key", token: forge(t, hdr("HS512"), validClaims(), jwt.SigningMethodHS512, key1), want: ErrInvalidTaskToken, reason: "algorithm not allowed"},
		{name: "alg RS256", token: forge(t, hdr("RS256"), validClaims(), jwt.SigningMethodRS256, rsaKey), want: ErrInvalidTaskToken, reason: "algorithm not allowed"},
		{name: "alg ES256", token: forge(t, hdr("ES256"), validClaims(), jwt.SigningMethodES256, ecKey), want: ErrInvalidTaskToken, reason: "algorithm not allowed"},
		{name: "alg unknown", token: forge(t, hdr("XX999"), validClaims(), nil, nil) + "c2ln", want: ErrInvalidTaskToken, reason: "algorithm not allowed"},
		{name: "alg missing", token: forge(t, map[string]any{"typ": "JWT", "kid": "k1"}, validClaims(), nil, nil) + "c2ln", want: ErrInvalidTaskToken, reason: "algorithm not allowed"},
		{name: "HS256 header, HS512 signature", token: forge(t, hdr("HS256"), validClaims(), jwt.SigningMethodHS512, key1), want: ErrInvalidTaskToken, reason: "signature invalid"},

		// Keys.
		{name: "kid missing", token: forge(t, map[string]any{"alg": "HS256", "typ": "JWT"}, validClaims(), jwt.SigningMethodHS256, key1), want: ErrInvalidTaskToken, reason: "missing key id"},
		{name: "kid empty", token: forge(t, map[string]any{"alg": "HS256", "kid": ""}, validClaims(), jwt.SigningMethodHS256, key1), want: ErrInvalidTaskToken, reason: "missing key id"},
		{name: "kid not a string", token: forge(t, map[string]any{"alg": "HS256", "kid": 1}, validClaims(), jwt.SigningMethodHS256, key1), want: ErrInvalidTaskToken, reason: "missing key id"},
		{name: "kid unknown", token: forge(t, map[string]any{"alg": "HS256", "kid": "k9"}, validClaims(), jwt.SigningMethodHS256, key1), want: ErrInvalidTaskToken, reason: "unknown key id"},
		{name: "wrong key", token: forge(t, hdr("HS256"), validClaims(), jwt.SigningMethodHS256, key2), want: ErrInvalidTaskToken, reason: "signature invalid"},
		{name: "tampered payload", token: goodHeader + "." + b64(with(validClaims(), "attempt", 3)) + "." + goodSig, want: ErrInvalidTaskToken, reason: "signature invalid"},
		{name: "signature stripped", token: goodHeader + "." + goodPayload + ".", want: ErrInvalidTaskToken, reason: "signature invalid"},

		// Claims.
		{name: "missing tenantId", token: hs256(t, with(validClaims(), "tenantId", nil)), want: ErrInvalidTaskToken, reason: "missing claim tenantId"},
		{name: "missing workspaceId", token: hs256(t, with(validClaims(), "workspaceId", nil)), want: ErrInvalidTaskToken, reason: "missing claim workspaceId"},
		{name: "missing runId", token: hs256(t, with(validClaims(), "runId", nil)), want: ErrInvalidTaskToken, reason: "missing claim runId"},
		{name: "missing taskId", token: hs256(t, with(validClaims(), "taskId", nil)), want: ErrInvalidTaskToken, reason: "missing claim taskId"},
		{name: "empty taskId", token: hs256(t, with(validClaims(), "taskId", "")), want: ErrInvalidTaskToken, reason: "missing claim taskId"},
		{name: "missing attempt", token: hs256(t, with(validClaims(), "attempt", nil)), want: ErrInvalidTaskToken, reason: "missing claim attempt"},
		{name: "attempt 0", token: hs256(t, with(validClaims(), "attempt", 0)), want: ErrInvalidTaskToken, reason: "missing claim attempt"},
		{name: "attempt negative", token: hs256(t, with(validClaims(), "attempt", -1)), want: ErrInvalidTaskToken, reason: "missing claim attempt"},
		{name: "attempt not a number", token: hs256(t, with(validClaims(), "attempt", "1")), want: ErrInvalidTaskToken, reason: "malformed"},
		{name: "missing exp", token: hs256(t, with(validClaims(), "exp", nil)), want: ErrInvalidTaskToken, reason: "missing claim exp"},
		{name: "missing iat", token: hs256(t, with(validClaims(), "iat", nil)), want: ErrInvalidTaskToken, reason: "missing claim iat"},
		{name: "missing jti", token: hs256(t, with(validClaims(), "jti", nil)), want: ErrInvalidTaskToken, reason: "missing claim jti"},
		{name: "missing iss", token: hs256(t, with(validClaims(), "iss", nil)), want: ErrInvalidTaskToken, reason: "missing claim iss"},
		{name: "wrong iss", token: hs256(t, with(validClaims(), "iss", "arco")), want: ErrInvalidTaskToken, reason: "wrong issuer"},
		{name: "exp not a number", token: hs256(t, with(validClaims(), "exp", "soon")), want: ErrInvalidTaskToken, reason: "malformed"},
		{name: "lifetime over MaxTaskTokenTTL", token: hs256(t, with(validClaims(), "exp", t0.Add(MaxTaskTokenTTL+time.Minute).Unix())), want: ErrInvalidTaskToken, reason: "lifetime exceeds"},

		// Time.
		{name: "expired beyond leeway", token: hs256(t, validClaims()), at: t0.Add(DefaultTaskTokenTTL + TaskTokenLeeway), want: ErrTaskTokenExpired},
		{name: "expired long ago", token: hs256(t, validClaims()), at: t0.Add(48 * time.Hour), want: ErrTaskTokenExpired},
		{name: "nbf in the future", token: hs256(t, with(validClaims(), "nbf", t0.Add(time.Minute).Unix())), want: ErrInvalidTaskToken, reason: "not valid yet"},
		{name: "iat in the future", token: hs256(t, with(with(validClaims(), "iat", t0.Add(time.Minute).Unix()), "nbf", nil)), want: ErrInvalidTaskToken, reason: "issued in the future"},
		{name: "expired and missing claim", token: hs256(t, with(validClaims(), "taskId", nil)), at: t0.Add(48 * time.Hour), want: ErrInvalidTaskToken, reason: "missing claim taskId"},

		// Malformed.
		{name: "empty", token: "", want: ErrInvalidTaskToken, reason: "malformed"},
		{name: "one segment", token: "abc", want: ErrInvalidTaskToken, reason: "malformed"},
		{name: "two segments", token: goodHeader + "." + goodPayload, want: ErrInvalidTaskToken, reason: "malformed"},
		{name: "four segments", token: good + ".x", want: ErrInvalidTaskToken, reason: "malformed"},
		{name: "bearer prefix", token: "Bearer " + good, want: ErrInvalidTaskToken, reason: "malformed"},
		{name: "not base64", token: "!!!.???.***", want: ErrInvalidTaskToken, reason: "malformed"},
		{name: "padded base64", token: goodHeader + "=." + goodPayload + "." + goodSig, want: ErrInvalidTaskToken, reason: "malformed"},
		{name: "header not JSON", token: base64.RawURLEncoding.EncodeToString([]byte("nope")) + "." + goodPayload + "." + goodSig, want: ErrInvalidTaskToken, reason: "malformed"},
		{name: "payload not JSON", token: goodHeader + "." + base64.RawURLEncoding.EncodeToString([]byte("[1,2")) + "." + goodSig, want: ErrInvalidTaskToken, reason: "malformed"},
		{name: "payload null", token: hs256(t, nil), want: ErrInvalidTaskToken, reason: "missing claim tenantId"},
		{name: "huge", token: strings.Repeat("a", 5000) + "." + goodPayload + "." + goodSig, want: ErrInvalidTaskToken, reason: "malformed: too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := tt.at
			if at.IsZero() {
				at = t0
			}
			c, err := ring.Verify(tt.token, at)
			if err == nil {
				t.Fatalf("Verify accepted the token: %+v", c)
			}
			if c != nil {
				t.Errorf("Verify returned claims with an error")
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want one wrapping %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("err = %v, want reason %q", err, tt.reason)
			}
			if other := map[error]error{ErrInvalidTaskToken: ErrTaskTokenExpired, ErrTaskTokenExpired: ErrInvalidTaskToken}[tt.want]; errors.Is(err, other) {
				t.Errorf("err = %v wraps both ErrInvalidTaskToken and ErrTaskTokenExpired", err)
			}
			assertNoLeak(t, err, tt.token, key1)
		})
	}
}

// assertNoLeak fails if err's text contains the token, any segment of it,
// any 8-byte run of its signature, or the key.
func assertNoLeak(t *testing.T, err error, token string, key []byte) {
	t.Helper()
	msg := err.Error()
	if token != "" && strings.Contains(msg, token) {
		t.Errorf("error %q contains the token", msg)
	}
	parts := strings.Split(token, ".")
	for _, p := range parts {
		if len(p) >= 8 && strings.Contains(msg, p) {
			t.Errorf("error %q contains a token segment", msg)
		}
	}
	if sig := parts[len(parts)-1]; len(parts) == 3 {
		for i := 0; i+8 <= len(sig); i++ {
			if strings.Contains(msg, sig[i:i+8]) {
				t.Fatalf("error %q contains part of the signature", msg)
			}
		}
	}
	if strings.Contains(msg, string(key)) || strings.Contains(msg, base64.StdEncoding.EncodeToString(key)) {
		t.Errorf("error %q contains the key", msg)
	}
}

func TestVerifyLeeway(t *testing.T) {
	ring := mustRing(t, "k1", map[string][]byte{"k1": key1})
	tok := hs256(t, validClaims())
	exp := t0.Add(DefaultTaskTokenTTL)
	tests := []struct {
		name string
		at   time.Time
		want error
	}{
		{"before nbf within leeway", t0.Add(-TaskTokenLeeway + time.Second), nil},
		{"before nbf beyond leeway", t0.Add(-TaskTokenLeeway - time.Second), ErrInvalidTaskToken},
		{"just before exp", exp.Add(-time.Second), nil},
		{"at exp within leeway", exp, nil},
		{"after exp within leeway", exp.Add(TaskTokenLeeway - time.Millisecond), nil},
		{"after exp beyond leeway", exp.Add(TaskTokenLeeway), ErrTaskTokenExpired},
	}
	for _, tt := range tests {
		_, err := ring.Verify(tok, tt.at)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
		}
	}
	if TaskTokenLeeway <= 0 || TaskTokenLeeway > 5*time.Second {
		t.Errorf("TaskTokenLeeway = %v, want a few seconds at most", TaskTokenLeeway)
	}
}

func TestRotation(t *testing.T) {
	old := mustRing(t, "k1", map[string][]byte{"k1": key1})
	both := mustRing(t, "k2", map[string][]byte{"k1": key1, "k2": key2})
	next := mustRing(t, "k2", map[string][]byte{"k2": key2})

	tok1, _, err := old.Sign(scope0, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := both.Verify(tok1, t0); err != nil {
		t.Errorf("ring {k1, k2*} rejects a k1 token: %v", err)
	}
	tok2, _, err := both.Sign(scope0, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if kid := headerKID(t, tok2); kid != "k2" {
		t.Errorf("ring {k1, k2*} signs with kid %q, want k2", kid)
	}
	if _, err := both.Verify(tok2, t0); err != nil {
		t.Errorf("ring {k1, k2*} rejects its own token: %v", err)
	}
	if _, err := next.Verify(tok2, t0); err != nil {
		t.Errorf("ring {k2*} rejects a k2 token: %v", err)
	}
	if _, err := old.Verify(tok2, t0); !errors.Is(err, ErrInvalidTaskToken) {
		t.Errorf("ring {k1*} on a k2 token: err = %v, want ErrInvalidTaskToken", err)
	}
	_, err = next.Verify(tok1, t0)
	if !errors.Is(err, ErrInvalidTaskToken) {
		t.Errorf("ring {k2*} on a k1 token: err = %v, want ErrInvalidTaskToken", err)
	}
	assertNoLeak(t, err, tok1, key1)

	// A ring that reuses kid k1 for another secret rejects old k1 tokens.
	reused := mustRing(t, "k1", map[string][]byte{"k1": key2})
	if _, err := reused.Verify(tok1, t0); !errors.Is(err, ErrInvalidTaskToken) {
		t.Errorf("k1 reassigned: err = %v, want ErrInvalidTaskToken", err)
	}
}

func headerKID(t *testing.T, tok string) string {
	t.Helper()
	hdr, _, _ := strings.Cut(tok, ".")
	raw, err := base64.RawURLEncoding.DecodeString(hdr)
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		KID string `json:"kid"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatal(err)
	}
	return h.KID
}

func TestVerifyConcurrent(t *testing.T) {
	ring := mustRing(t, "k1", map[string][]byte{"k1": key1})
	done := make(chan error)
	for i := range 8 {
		go func() {
			s := scope0
			s.Attempt = i + 1
			tok, _, err := ring.Sign(s, 0, t0)
			if err == nil {
				var c *Claims
				c, err = ring.Verify(tok, t0)
				if err == nil && c.Attempt != i+1 {
					err = errors.New("wrong attempt")
				}
			}
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestSignFrom: a token signed now for a delivery at from is valid from
// from (minus the leeway) for ttl after it, however far ahead from is; a
// from in the past is now. Its lifetime counts from nbf, so the MaxTaskTokenTTL
// bound holds relative to the delivery, and a forged window longer than
// MaxTaskTokenTTL is still refused.
func TestSignFrom(t *testing.T) {
	r := mustRing(t, "k1", map[string][]byte{"k1": key1})
	from := t0.Add(3 * time.Hour) // further ahead than any token lives
	tok, exp, err := r.SignFrom(scope0, MaxTaskTokenTTL, t0, from)
	if err != nil {
		t.Fatal(err)
	}
	if want := from.Add(MaxTaskTokenTTL); !exp.Equal(want) {
		t.Fatalf("expiresAt = %v, want %v", exp, want)
	}
	for _, tc := range []struct {
		at   time.Time
		want error
	}{
		{t0, ErrInvalidTaskToken}, // not valid yet
		{from.Add(-TaskTokenLeeway - time.Second), ErrInvalidTaskToken}, // not valid yet
		{from, nil},
		{from.Add(MaxTaskTokenTTL - time.Second), nil},
		{from.Add(MaxTaskTokenTTL + TaskTokenLeeway + time.Second), ErrTaskTokenExpired},
	} {
		c, err := r.Verify(tok, tc.at)
		if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("Verify at %v: %v, want %v", tc.at.Sub(t0), err, tc.want)
			continue
		}
		if err == nil && (!c.IssuedAtTime().Equal(t0) || !c.NotBeforeTime().Equal(from) || c.Lifetime() != MaxTaskTokenTTL) {
			t.Errorf("iat %v nbf %v lifetime %v", c.IssuedAtTime(), c.NotBeforeTime(), c.Lifetime())
		}
	}
	if _, exp, _ := r.SignFrom(scope0, time.Hour, t0, t0.Add(-time.Hour)); !exp.Equal(t0.Add(time.Hour)) {
		t.Errorf("from in the past: expiresAt %v", exp)
	}
	long := with(with(validClaims(), "nbf", from.Unix()), "exp", from.Add(MaxTaskTokenTTL+time.Second).Unix())
	if _, err := r.Verify(hs256(t, long), from.Add(time.Minute)); !errors.Is(err, ErrInvalidTaskToken) {
		t.Errorf("a window longer than MaxTaskTokenTTL: %v", err)
	}
}
