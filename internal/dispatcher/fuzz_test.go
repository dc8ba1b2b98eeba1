package dispatcher

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
	"time"

	cloudtasksapi "cloud.google.com/go/cloudtasks/apiv2"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// fuzzHandler is a handler that can decode and prepare submits without
// touching Firestore or Cloud Tasks (neither is called before the store
// write).
func fuzzHandler(f *testing.F) *handler {
	keys, err := auth.NewKeyRing("k1", map[string][]byte{"k1": []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		f.Fatal(err)
	}
	workers := enqueue.Workers{"render": {URL: "https://render.example/run", Queue: "projects/p/locations/l/queues/render"}}
	enq, err := enqueue.New(enqueue.Config{Store: &store.Store{}, Tasks: &cloudtasksapi.Client{}, Keys: keys, Workers: workers,
		CallbackBaseURL: "https://servo.example"})
	if err != nil {
		f.Fatal(err)
	}
	h, err := newHandler(Config{Store: &store.Store{}, Enqueuer: enq, MinTimer: task.MinTimerLocal})
	if err != nil {
		f.Fatal(err)
	}
	return h
}

// FuzzSubmitDecode feeds arbitrary bodies to the submit's decoding and
// validation (decodeObject, then prepare). Each body is either refused with
// a precise 4xx (a machine-readable code, and the field for a 400) or
// yields a task that passes the state machine's own checks; decoding is
// deterministic: the accepted request, encoded again, decodes to the same.
// Seed corpus: testdata/fuzz/FuzzSubmitDecode.
func FuzzSubmitDecode(f *testing.F) {
	h := fuzzHandler(f)
	for _, s := range []string{
		`{"tenantId":"acme","workspaceId":"ws","taskKey":"k","worker":"render"}`,
		`{"tenantId":"acme","workspaceId":"ws","taskKey":"k","worker":"render","payload":{"a":[1,2]},"resources":{"cpu":2},
		  "deadline":"2099-01-01T00:00:00Z","heartbeatIntervalMs":1000,"heartbeatTimeoutMs":3000,"cancelGracePeriodMs":500,
		  "retry":{"maxAttempts":5,"initialBackoffMs":100,"backoffCoefficient":1.5,"maxBackoffMs":1000},"idempotencyKey":"i"}`,
		`{"tenantId":"acme","workspaceId":"ws","taskKey":"k","worker":"https://attacker.example"}`,
		`{"tenantId":"acme","workspaceId":"ws","taskKey":"k","worker":"render","startAt":"2031-01-01T00:00:00Z","deadline":"2031-01-02T00:00:00Z"}`,
		`{"tenantId":"acme","workspaceId":"ws","taskKey":"k","worker":"render","startDelayMs":60000}`,
		`{"tenantId":"acme","workspaceId":"ws","taskKey":"k","worker":"render","startDelayMs":-5,"startAt":"x"}`,
		`{"tenantId":5}`, `[]`, `null`, `{"retry":{"maxAttempts":"x"}}`, `{"unknown":1}`, `{"retry":{"nope":1}}`,
	} {
		f.Add([]byte(s))
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		var req api.SubmitRequest
		if e := decodeObject(body, &req, ""); e != nil {
			if e.status != http.StatusBadRequest || e.body.Code != api.CodeInvalidRequest || e.body.Field == "" || e.body.Message == "" {
				t.Fatalf("decode refused %q with %d %+v: want 400 invalid_request naming the field", body, e.status, e.body)
			}
			return
		}
		tk, e := h.prepare(&req, "", now, "")
		if e != nil {
			switch {
			case e.status == http.StatusBadRequest && e.body.Code == api.CodeInvalidRequest && e.body.Field != "":
			case e.status == http.StatusRequestEntityTooLarge && e.body.Code == api.CodePayloadTooLarge:
			default:
				t.Fatalf("prepare refused %q with %d %+v: want a precise 4xx", body, e.status, e.body)
			}
			return
		}
		if fe := task.ValidateTiming(tk.Timing, task.MinTimerLocal); fe != nil {
			t.Fatalf("accepted %q with invalid timing: %v", body, fe)
		}
		if fe := task.ValidateRetry(tk.Retry, task.MinTimerLocal); fe != nil {
			t.Fatalf("accepted %q with an invalid retry policy: %v", body, fe)
		}
		if tk.TenantID == "" || tk.WorkspaceID == "" || tk.TaskKey == "" || tk.Worker != "render" || !task.ValidID(tk.ID, task.TaskIDPrefix) {
			t.Fatalf("accepted %q as an incomplete task %+v", body, tk)
		}
		if tk.NotBefore != nil && (!tk.NotBefore.After(now) || tk.NotBefore.Sub(now) > task.MaxStartDelay ||
			(tk.Deadline != nil && !tk.Deadline.After(*tk.NotBefore))) {
			t.Fatalf("accepted %q with a start %v (deadline %v) out of bounds", body, tk.NotBefore, tk.Deadline)
		}
		if len(tk.Payload) > 0 && !json.Valid(tk.Payload) {
			t.Fatalf("accepted %q with a payload that is not JSON", body)
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		var req2 api.SubmitRequest
		if e := decodeObject(again, &req2, ""); e != nil {
			t.Fatalf("the accepted request %q, encoded again as %s, is refused: %+v", body, again, e.body)
		}
		if !reflect.DeepEqual(normalized(req), normalized(req2)) {
			t.Fatalf("decoding is not deterministic:\n%+v\n%+v", req, req2)
		}
	})
}

// normalized compacts a request's raw JSON fields, which encoding may
// re-space.
func normalized(r api.SubmitRequest) api.SubmitRequest {
	for _, raw := range []*json.RawMessage{&r.Payload, &r.Resources} {
		if len(*raw) > 0 {
			var v any
			_ = json.Unmarshal(*raw, &v)
			*raw, _ = json.Marshal(v)
		}
	}
	return r
}
