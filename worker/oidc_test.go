package worker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/api/idtoken"
	"google.golang.org/api/option"

	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/worker"
	"github.com/servo-dev/servo/worker/googleauth"
)

func TestOIDCVerification(t *testing.T) {
	google := servotest.NewGoogleIDTokens(t)
	v, err := idtoken.NewValidator(context.Background(), option.WithHTTPClient(google.Client()))
	if err != nil {
		t.Fatal(err)
	}
	const aud = "https://worker-abc-uc.a.run.app"
	const sa = "servo-tasks@proj.iam.gserviceaccount.com"
	sign := func(mutate func(jwt.MapClaims)) string { return google.Sign(t, aud, sa, false, mutate) }
	forgedTok := google.Sign(t, aud, sa, true, nil)

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
	if google.Fetches.Load() == 0 {
		t.Fatal("the validator never fetched the certificates: the signature was not checked")
	}
}
