package servotest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// GoogleIDTokens signs Google-style ID tokens with a key of its own and
// serves that key where Google's certificates are fetched from, so that the
// real validator of google.golang.org/api/idtoken, built with Client,
// checks the tokens a test signs.
type GoogleIDTokens struct {
	key *rsa.PrivateKey
	kid string
	// Fetches counts the certificate requests the validator made.
	Fetches atomic.Int32
	jwks    []byte
}

// NewGoogleIDTokens makes a signing key and its key set.
func NewGoogleIDTokens(t testing.TB) *GoogleIDTokens {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	g := &GoogleIDTokens{key: key, kid: "test-key"}
	enc := base64.RawURLEncoding.EncodeToString
	g.jwks, err = json.Marshal(map[string]any{"keys": []map[string]string{{
		"kid": g.kid, "kty": "RSA", "alg": "RS256", "use": "sig",
		"n": enc(key.N.Bytes()), "e": enc(big.NewInt(int64(key.E)).Bytes()),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Client answers www.googleapis.com (the certificates) with the key set,
// and anything else 404: pass it to idtoken.NewValidator with
// option.WithHTTPClient.
func (g *GoogleIDTokens) Client() *http.Client { return &http.Client{Transport: g} }

// RoundTrip implements http.RoundTripper for Client.
func (g *GoogleIDTokens) RoundTrip(r *http.Request) (*http.Response, error) {
	g.Fetches.Add(1)
	if r.URL.Host != "www.googleapis.com" {
		return &http.Response{StatusCode: 404, Body: io.NopCloser(strings.NewReader("")), Header: http.Header{}, Request: r}, nil
	}
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(string(g.jwks))),
		Header: http.Header{"Content-Type": {"application/json"}}, Request: r}, nil
}

// Sign returns a token for audience and email (verified, issued by
// accounts.google.com, valid for an hour), after mutate (when not nil) has
// changed its claims. With forge, it is signed by another key under the
// same key id.
func (g *GoogleIDTokens) Sign(t testing.TB, audience, email string, forge bool, mutate func(jwt.MapClaims)) string {
	t.Helper()
	c := jwt.MapClaims{"iss": "https://accounts.google.com", "aud": audience, "sub": "1", "email": email, "email_verified": true,
		"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
	if mutate != nil {
		mutate(c)
	}
	key := g.key
	if forge {
		var err error
		if key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			t.Fatal(err)
		}
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
	tok.Header["kid"] = g.kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
