package pull_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/pull"
)

// claimPools posts one claim of pool then thenPools as identity.
func (e *env) claimPools(pool string, thenPools []string, identity string, maxWaitMs int) (int, api.ClaimResponse, api.Error) {
	e.T.Helper()
	var h []string
	if identity != "" {
		h = []string{pull.DevIdentityHeader, identity}
	}
	status, _, out := e.do("POST", "/v1/pools/"+pool+"/claim", map[string]any{"workerId": "w-pools", "maxWaitMs": maxWaitMs, "thenPools": thenPools}, h...)
	var r api.ClaimResponse
	var ae api.Error
	if json.Unmarshal(out, &r) != nil || json.Unmarshal(out, &ae) != nil {
		e.T.Fatalf("claim answer %d is not JSON: %s", status, out)
	}
	return status, r, ae
}

// A claim naming several pools takes from the first that has an attempt:
// the urgent pool's task before the bulk pool's older ones, then the bulk
// pool's; a lower pool's message that came with a higher one's is handed
// back at once (the next claim gets it well within Pub/Sub's ack deadline).
func TestClaimThenPools(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	bulk1 := e.submit("bulk", map[string]any{"taskKey": "bulk-1"}).TaskID
	urgent := e.submit("urgent", map[string]any{"taskKey": "urgent-1"}).TaskID
	claim := func(want string) {
		t.Helper()
		began := time.Now()
		status, r, ae := e.claimPools("urgent", []string{"bulk"}, "", 3000)
		if status != http.StatusOK || !r.Claimed {
			t.Fatalf("claim: %d %+v %+v", status, r, ae)
		}
		if r.Envelope.TaskID != want {
			t.Fatalf("claimed %s, want %s", r.Envelope.TaskID, want)
		}
		if took := time.Since(began); took > pull.AckDeadline {
			t.Fatalf("the claim took %v: a message was hidden for its ack deadline", took)
		}
	}
	claim(urgent)
	claim(bulk1)
	// Nothing left: claimed:false after the wait.
	if status, r, _ := e.claimPools("urgent", []string{"bulk"}, "", 500); status != http.StatusOK || r.Claimed {
		t.Fatalf("empty pools: %d %+v", status, r)
	}
}

// thenPools is checked as the path's pool is: each a pool the caller may
// claim from (the same 403 for an unknown one), distinct, not the path's,
// at most 9.
func TestClaimThenPoolsRefused(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	const b = "b@servo-test.iam.gserviceaccount.com"
	ten := make([]string, 10)
	for i := range ten {
		ten[i] = "p" + strings.Repeat("x", i)
	}
	for _, c := range []struct {
		name, pool string
		then       []string
		identity   string
		status     int
		code       string
		field      string
	}{
		{"another's pool", "pool-b", []string{"pool-a"}, b, http.StatusForbidden, api.CodePermissionDenied, "thenPools[0]"},
		{"unknown pool", "pool-b", []string{"bulk", "no-such-pool"}, b, http.StatusForbidden, api.CodePermissionDenied, "thenPools[1]"},
		{"twice", "urgent", []string{"bulk", "bulk"}, "", http.StatusBadRequest, api.CodeInvalidRequest, "thenPools[1]"},
		{"the path's own", "urgent", []string{"urgent"}, "", http.StatusBadRequest, api.CodeInvalidRequest, "thenPools[0]"},
		{"empty name", "urgent", []string{""}, "", http.StatusBadRequest, api.CodeInvalidRequest, "thenPools[0]"},
		{"too many", "urgent", ten, "", http.StatusBadRequest, api.CodeInvalidRequest, "thenPools"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, r, ae := e.claimPools(c.pool, c.then, c.identity, 0)
			if status != c.status || ae.Code != c.code || ae.Field != c.field || r.Disposition != api.Rejected {
				t.Fatalf("%d %+v, want %d %s on %s, REJECTED", status, ae, c.status, c.code, c.field)
			}
			if c.status == http.StatusForbidden && strings.Contains(ae.Message, "pool-b") {
				t.Fatalf("the refusal names the caller's own pool instead of the refused one: %s", ae.Message)
			}
		})
	}
}
