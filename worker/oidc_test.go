package worker_test

import (
	"context"
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
	"google.golang.org/api/idtoken"
	"google.golang.org/api/option"

	"github.com/servo-dev/servo/worker"
	"github.com/servo-dev/servo/worker/googleauth"
)

// certsTransport answers Google's certificate URL with our own JWKS, so
// the real idtoken validator checks tokens we sign.
type certsTransport struct {
	jwks    []byte
	fetches atomic.Int32
}

func (c *certsTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.fetches.Add(1)
	if r.URL.Host != "www.googleapis.com" {
		return &http.Response{StatusCode: 404, Body: io.NopCloser(strings.NewReader("")), Header: http.Header{}, Request: r}, nil
	}
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(string(c.jwks))),
		Header: http.Header{"Content-Type": {"application/json"}}, Request: r}, nil
}

func TestOIDCVerification(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	jwks, _ := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kid": "k1", "kty": "RSA", "alg": "RS256", "use": "sig",
		"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes()),
	}}})
	ct := &certsTransport{jwks: jwks}
	v, err := idtoken.NewValidator(context.Background(), option.WithHTTPClient(&http.Client{Transport: ct}))
	if err != nil {
		t.Fatal(err)
	}
	const aud = "https://worker-abc-uc.a.run.app"
	const sa = "servo-tasks@proj.iam.gserviceaccount.com"
	sign := func(mutate func(jwt.MapClaims)) string {
		c := jwt.MapClaims{"iss": "https://accounts.google.com", "aud": aud, "sub": "1", "email": sa, "email_verified": true,
			"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
		if mutate != nil {
			mutate(c)
		}
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	forged := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": "https://accounts.google.com", "aud": aud, "email": sa,
		"email_verified": true, "exp": time.Now().Add(time.Hour).Unix()})
	forged.Header["kid"] = "k1"
	forgedTok, _ := forged.SignedString(other)

	f := newFake(t, nil)
	var calls atomic.Int32
	h, _ := testHandler(t, func(context.Context, *worker.Task) (any, error) { calls.Add(1); return nil, nil },
		googleauth.VerifyOIDCWith(v, aud, sa))
	env, _ := json.Marshal(f.envelope())
	for _, tc := range []struct {
		name   string
		header string
		status int
	}{
		{"no header", "", 401},
		{"not bearer", "Basic abc", 401},
		{"garbage", "Bearer not.a.jwt", 401},
		{"forged signature", "Bearer " + forgedTok, 401},
		{"wrong audience", "Bearer " + sign(func(c jwt.MapClaims) { c["aud"] = "https://elsewhere" }), 401},
		{"expired", "Bearer " + sign(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() }), 401},
		{"not Google", "Bearer " + sign(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" }), 401},
		{"other service account", "Bearer " + sign(func(c jwt.MapClaims) { c["email"] = "x@proj.iam.gserviceaccount.com" }), 401},
		{"email unverified", "Bearer " + sign(func(c jwt.MapClaims) { c["email_verified"] = false }), 401},
		{"valid", "Bearer " + sign(nil), 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := calls.Load()
			var hdr []string
			if tc.header != "" {
				hdr = []string{"Authorization", tc.header}
			}
			status, ans := deliver(t, h, env, hdr...)
			if status != tc.status {
				t.Fatalf("answer %d %+v, want %d", status, ans, tc.status)
			}
			if ran := calls.Load() > before; ran != (tc.status == 200) {
				t.Fatalf("function ran: %v", ran)
			}
			if tc.status == 401 && ans.Result != "unauthenticated" {
				t.Fatalf("result %q", ans.Result)
			}
		})
	}
	if ct.fetches.Load() == 0 {
		t.Fatal("the validator never fetched the certificates: the signature was not checked")
	}
}
