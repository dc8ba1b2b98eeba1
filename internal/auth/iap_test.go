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
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/servo-dev/servo/internal/servotest"
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
// "accounts.google.com:" prefix; only ES256 is accepted.
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

	// ES256 only: an RS256 token naming IAP as issuer is refused before
	// any key is fetched (IAP signs ES256; Google's RS256 keys sign ID
	// tokens for any audience).
	google := servotest.NewGoogleIDTokens(t)
	rs := google.Sign(t, v.Audience, "alice@example.com", false, func(c jwt.MapClaims) { c["iss"] = IAPIssuer })
	if _, err := v.Verify(context.Background(), rs); !errors.Is(err, ErrInvalidIdentityToken) || !strings.Contains(err.Error(), "ES256") {
		t.Errorf("an RS256 token as IAP's header: %v", err)
	}
}

// IAP's signed header is read only when IAP is configured, and then only
// IAP's verifier checks it: a header a client adds is ignored otherwise,
// and a token the bearer verifiers accept is refused in it.
func TestVerifiersCredential(t *testing.T) {
	keys := newIAPKeys(t)
	val, err := idtoken.NewValidator(context.Background(), option.WithHTTPClient(&http.Client{Transport: keys}))
	if err != nil {
		t.Fatal(err)
	}
	iap := &IAPVerifier{Audience: "/projects/123/global/backendServices/456", Validator: val}
	devKey := NewDevKey()
	dev := []IdentityVerifier{DevVerifier{Key: devKey}}
	alice, _ := SignDev(devKey, "alice@example.com", time.Now(), time.Hour)
	bob, _ := SignDev(devKey, "bob@example.com", time.Now(), time.Hour)
	p, _ := ParsePolicy([]byte(`{"principals": {"alice@example.com": {"a": "viewer"}, "bob@example.com": {"b": "viewer"}}}`))
	for _, c := range []struct {
		name      string
		vs        Verifiers
		authz     string
		iapHeader string
		who       string // "" when refused
		iap       bool
	}{
		{"no IAP: the header is ignored", Verifiers{Bearer: dev}, "Bearer " + bob, alice, "bob@example.com", false},
		{"no IAP: the header alone is no identity", Verifiers{Bearer: dev}, "", alice, "", false},
		{"IAP: its header wins", Verifiers{Bearer: dev, IAP: iap}, "Bearer " + bob, keys.sign(t, false, nil), "alice@example.com", true},
		{"IAP: a bearer token in its header is refused", Verifiers{Bearer: dev, IAP: iap}, "Bearer " + bob, alice, "", true},
		{"IAP: a forged header is refused", Verifiers{Bearer: dev, IAP: iap}, "Bearer " + bob, keys.sign(t, true, nil), "", true},
		{"IAP: without its header, Authorization", Verifiers{Bearer: dev, IAP: iap}, "Bearer " + bob, "", "bob@example.com", false},
		{"IAP: its header in Authorization is refused", Verifiers{Bearer: dev, IAP: iap}, "Bearer " + keys.sign(t, false, nil), "", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			if c.authz != "" {
				h.Set("Authorization", c.authz)
			}
			if c.iapHeader != "" {
				h.Set("x-goog-iap-jwt-assertion", c.iapHeader)
			}
			authz, vs, iap := c.vs.Credential(h)
			if iap != c.iap {
				t.Fatalf("iap %v, want %v", iap, c.iap)
			}
			who, err := p.Authenticate(context.Background(), authz, vs)
			if c.who == "" {
				if err == nil {
					t.Fatalf("accepted as %q, want a refusal", who)
				}
				return
			}
			if err != nil || who != c.who {
				t.Fatalf("%q %v, want %q", who, err, c.who)
			}
		})
	}
	if got := (Verifiers{Bearer: dev, IAP: iap}).Kinds(); !slices.Equal(got, []string{"iap", "dev"}) {
		t.Errorf("Kinds %v", got)
	}
}
