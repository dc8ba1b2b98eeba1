package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/api/idtoken"
	"google.golang.org/api/option"
)

// iapKeys signs IAP-style headers (ES256) and serves the key where IAP's
// keys are fetched from (www.gstatic.com), for the real idtoken validator.
type iapKeys struct {
	key     *ecdsa.PrivateKey
	jwks    []byte
	fetches atomic.Int32
}

func newIAPKeys(t *testing.T) *iapKeys {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(b []byte) string {
		p := make([]byte, 32)
		copy(p[32-len(b):], b)
		return base64.RawURLEncoding.EncodeToString(p)
	}
	k := &iapKeys{key: key}
	k.jwks, _ = json.Marshal(map[string]any{"keys": []map[string]string{{"kid": "iap-1", "kty": "EC", "alg": "ES256", "crv": "P-256", "use": "sig",
		"x": enc(key.X.Bytes()), "y": enc(key.Y.Bytes())}}})
	return k
}

func (k *iapKeys) RoundTrip(r *http.Request) (*http.Response, error) {
	k.fetches.Add(1)
	if r.URL.Host != "www.gstatic.com" {
		return &http.Response{StatusCode: 404, Body: io.NopCloser(strings.NewReader("")), Header: http.Header{}, Request: r}, nil
	}
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(string(k.jwks))), Header: http.Header{"Content-Type": {"application/json"}}, Request: r}, nil
}

func (k *iapKeys) sign(t *testing.T, forge bool, mutate func(jwt.MapClaims)) string {
	t.Helper()
	now := time.Now()
	c := jwt.MapClaims{"iss": IAPIssuer, "aud": "/projects/123/global/backendServices/456", "sub": "accounts.google.com:1",
		"email": "accounts.google.com:alice@example.com", "iat": now.Unix(), "exp": now.Add(10 * time.Minute).Unix()}
	if mutate != nil {
		mutate(c)
	}
	key := k.key
	if forge {
		key, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, c)
	tok.Header["kid"] = "iap-1"
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// IAP's signed header is verified: its signature with IAP's keys, issuer,
// audience, expiry and issue time; the e-mail loses IAP's
// "accounts.google.com:" prefix. The header comes before Authorization.
func TestIAPVerifier(t *testing.T) {
	keys := newIAPKeys(t)
	val, err := idtoken.NewValidator(context.Background(), option.WithHTTPClient(&http.Client{Transport: keys}))
	if err != nil {
		t.Fatal(err)
	}
	v := IAPVerifier{Audience: "/projects/123/global/backendServices/456", Validator: val}
	for _, c := range []struct {
		name string
		raw  string
		want error
	}{
		{"valid", keys.sign(t, false, nil), nil},
		{"forged", keys.sign(t, true, nil), ErrInvalidIdentityToken},
		{"another issuer", keys.sign(t, false, func(c jwt.MapClaims) { c["iss"] = "https://accounts.google.com" }), ErrInvalidIdentityToken},
		{"another backend", keys.sign(t, false, func(c jwt.MapClaims) { c["aud"] = "/projects/123/global/backendServices/789" }), ErrInvalidIdentityToken},
		{"expired", keys.sign(t, false, func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() }), ErrIdentityTokenExpired},
		{"issued in the future", keys.sign(t, false, func(c jwt.MapClaims) { c["iat"] = time.Now().Add(time.Hour).Unix() }), ErrInvalidIdentityToken},
		{"no email", keys.sign(t, false, func(c jwt.MapClaims) { delete(c, "email") }), ErrInvalidIdentityToken},
	} {
		t.Run(c.name, func(t *testing.T) {
			email, err := v.Verify(context.Background(), c.raw)
			if c.want == nil {
				if err != nil || email != "alice@example.com" {
					t.Fatalf("%q %v, want alice@example.com", email, err)
				}
				return
			}
			if !errors.Is(err, c.want) || email != "" {
				t.Fatalf("%q %v, want %v", email, err, c.want)
			}
		})
	}
	if _, err := (IAPVerifier{Validator: val}).Verify(context.Background(), keys.sign(t, false, nil)); !errors.Is(err, ErrInvalidIdentityToken) {
		t.Errorf("no audience configured: %v", err)
	}
	if keys.fetches.Load() == 0 {
		t.Fatal("IAP's keys were never fetched: no signature was checked")
	}

	// Through the policy, from a request's headers.
	p, _ := ParsePolicy([]byte(`{"principals": {"alice@example.com": {"acme": "viewer"}}}`))
	h := http.Header{}
	h.Set("Authorization", "Bearer not-a-token")
	h.Set("x-goog-iap-jwt-assertion", keys.sign(t, false, nil))
	if who, err := p.Authenticate(context.Background(), RequestCredential(h), []IdentityVerifier{v}); err != nil || who != "alice@example.com" {
		t.Errorf("IAP header before Authorization: %q %v", who, err)
	}
	h.Set("x-goog-iap-jwt-assertion", keys.sign(t, true, nil))
	if _, err := p.Authenticate(context.Background(), RequestCredential(h), []IdentityVerifier{v}); err == nil {
		t.Error("a forged IAP header was accepted")
	}
	if got := RequestCredential(http.Header{"Authorization": {"Bearer x"}}); got != "Bearer x" {
		t.Errorf("without IAP's header: %q", got)
	}
}
