package pull

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// FuzzDecodeClaim feeds arbitrary bodies to the claim's decoding and
// validation (decodeClaim, then task.ValidateClaim), what a pool worker
// sends before any store or transport is asked. Whatever the input: no
// panic; a refusal has a message (and names a field of the claim when it
// names one); an accepted claim has a workerId without control characters
// and a wait within the contract's bounds, and re-encoded it is accepted
// again, unchanged.
func FuzzDecodeClaim(f *testing.F) {
	for _, s := range []string{
		`{"workerId":"w1"}`, `{"workerId":"w1","maxWaitMs":0}`, `{"workerId":"w1","maxWaitMs":60000}`,
		`{"workerId":"w1","maxWaitMs":-1}`, `{"workerId":"w\u001b[2Jx"}`, `{"workerId":"w","extra":1}`,
		`{"workerId":"w"} {}`, `{"workerId":5}`, `[]`, `null`, ``, `{"workerId":"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	fields := map[string]bool{"": true, "workerId": true, "maxWaitMs": true}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req api.ClaimRequest
		field, msg := decodeClaim(body, &req)
		if msg == "" {
			if fe := task.ValidateClaim(req); fe != nil {
				field, msg = fe.Field, fe.Message
				if field == "" || msg == "" {
					t.Fatalf("ValidateClaim refused %q without a field or message: %+v", body, fe)
				}
			}
		}
		if msg != "" {
			// A refusal names a field of the claim, none, or the unknown
			// field the body holds (the message says so).
			if !fields[field] && !strings.Contains(msg, "unknown field") {
				t.Fatalf("refused %q naming field %q: %s", body, field, msg)
			}
			return
		}
		if field != "" {
			t.Fatalf("accepted %q but named field %q", body, field)
		}
		for i, r := range req.WorkerID {
			if unicode.IsControl(r) {
				t.Fatalf("accepted a workerId holding U+%04X at %d: %q", r, i, req.WorkerID)
			}
		}
		if w := task.ClaimWait(req); w < 0 || w.Milliseconds() > 60000 {
			t.Fatalf("accepted %q with a wait of %v", body, w)
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		var req2 api.ClaimRequest
		if _, msg := decodeClaim(again, &req2); msg != "" {
			t.Fatalf("re-encoded claim %s refused: %s", again, msg)
		}
		if fe := task.ValidateClaim(req2); fe != nil || req2.WorkerID != req.WorkerID || (req.MaxWaitMs == nil) != (req2.MaxWaitMs == nil) ||
			(req.MaxWaitMs != nil && *req.MaxWaitMs != *req2.MaxWaitMs) {
			t.Fatalf("round trip changed the claim: %+v → %+v (%v)", req, req2, fe)
		}
	})
}
