package auth

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzVerify feeds arbitrary strings, and mutations of real tokens, to the
// token parser. It never panics; a token it accepts carries every scope
// and registered claim, a lifetime within MaxTaskTokenTTL and an unexpired
// exp; a token it refuses is ErrInvalidTaskToken or ErrTaskTokenExpired,
// and the error never contains the token or its signature. Seed corpus:
// testdata/fuzz/FuzzVerify.
func FuzzVerify(f *testing.F) {
	ring, err := NewKeyRing("k1", map[string][]byte{"k1": []byte("0123456789abcdef0123456789abcdef"), "k0": []byte("fedcba9876543210fedcba9876543210")})
	if err != nil {
		f.Fatal(err)
	}
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	scope := Scope{TenantID: "acme", WorkspaceID: "ws", RunID: "run_1", TaskID: "task_1", Attempt: 2}
	good, _, err := ring.Sign(scope, time.Hour, now)
	if err != nil {
		f.Fatal(err)
	}
	expired, _, _ := ring.Sign(scope, time.Minute, now.Add(-time.Hour))
	parts := strings.Split(good, ".")
	for _, s := range []string{
		good, expired, "", ".", "..", "a.b.c", parts[0] + "." + parts[1] + ".",
		"eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + parts[1] + ".", // alg none
		parts[0] + "." + parts[1] + "." + parts[2] + "x",
		strings.Replace(good, parts[1], parts[1][:len(parts[1])-2], 1),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := ring.Verify(tok, now)
		if err == nil {
			if c == nil || c.Scope.missing() != "" || c.Issuer == "" || c.ExpiresAt == nil || c.IssuedAt == nil || c.ID == "" {
				t.Fatalf("accepted %q with incomplete claims %+v", tok, c)
			}
			if c.Lifetime() > MaxTaskTokenTTL || !c.ExpiresAtTime().Add(TaskTokenLeeway).After(now) {
				t.Fatalf("accepted %q with lifetime %v, exp %v", tok, c.Lifetime(), c.ExpiresAtTime())
			}
			return
		}
		if c != nil {
			t.Fatalf("refused %q but returned claims", tok)
		}
		if !errors.Is(err, ErrInvalidTaskToken) && !errors.Is(err, ErrTaskTokenExpired) {
			t.Fatalf("refused %q with %v: want ErrInvalidTaskToken or ErrTaskTokenExpired", tok, err)
		}
		msg := err.Error()
		if len(tok) >= 8 && strings.Contains(msg, tok) {
			t.Fatalf("the error %q contains the token", msg)
		}
		if ps := strings.Split(tok, "."); len(ps) == 3 && len(ps[2]) >= 8 && strings.Contains(msg, ps[2]) {
			t.Fatalf("the error %q contains the token's signature", msg)
		}
	})
}
