package functions

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/pull"
)

// ServoClaim accepts only a verified Google ID token: the local stack's
// identity header, even naming the pool's own account, a token that does
// not verify, and no credentials at all are 401, before anything reaches
// Pub/Sub (its address here is dead).
func TestServoClaimAcceptsOnlyVerifiedIdentities(t *testing.T) {
	const sa = "gpu-box@servo-test.iam.gserviceaccount.com"
	instanceEnv(t)
	t.Setenv("SERVO_WORKERS", `{"gpu":{"pull":true,"serviceAccounts":["`+sa+`"]}}`)
	t.Setenv("SERVO_CLAIM_AUDIENCE", "https://claim.example.com")
	_, ring, err := auth.GenerateKeyRing("k1")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(auth.EnvKeys, string(ring))
	freshInstance(nil)

	cases := []struct {
		name, header, value string
		want                int
		code                string
	}{
		{"dev identity header", pull.DevIdentityHeader, sa, http.StatusUnauthorized, api.CodeUnauthenticated},
		{"unverifiable ID token", "Authorization", "Bearer not.a.token", http.StatusUnauthorized, api.CodeUnauthenticated},
		{"nothing", "", "", http.StatusUnauthorized, api.CodeUnauthenticated},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/pools/gpu/claim", strings.NewReader(`{"workerId":"w","maxWaitMs":0}`))
			r.Header.Set("Content-Type", "application/json")
			if c.header != "" {
				r.Header.Set(c.header, c.value)
			}
			rec := httptest.NewRecorder()
			ServoClaim(rec, r)
			var body api.ClaimResponse
			if rec.Code != c.want || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error != c.code || body.Disposition != api.Rejected {
				t.Fatalf("%d %s, want %d %s", rec.Code, rec.Body, c.want, c.code)
			}
		})
	}
}
