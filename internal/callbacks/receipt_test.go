package callbacks_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/servotest"
)

// slowBody is a request body that takes `took` of the server's clock to
// arrive: the clock moves on while the handler reads it.
type slowBody struct {
	r     io.Reader
	clock *servotest.Clock
	took  time.Duration
	moved bool
}

func (b *slowBody) Read(p []byte) (int, error) {
	if !b.moved {
		b.moved = true
		b.clock.Advance(b.took)
	}
	return b.r.Read(p)
}

// The lease is renewed from the time a heartbeat is received in full
// (docs/contract.md §5: receipt time), not from its first byte: a
// heartbeat whose body took 1.8 s to arrive, then the next one on time by
// the receipt-time rule, are both accepted.
func TestLeaseFromReceiptTime(t *testing.T) {
	e := newEnv(t, nil)
	tk := e.running("w1")
	tok := e.token(tk, 1)
	hb := mustJSON(t, heartbeatReq(1, "w1"))

	req := request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: tok}.httpRequest()
	req.Body = io.NopCloser(&slowBody{r: bytes.NewReader(hb), clock: e.clock, took: 1800 * time.Millisecond})
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("slow heartbeat: %d %s", w.Code, w.Body)
	}
	received := e.clock.Now()
	got := e.get(tk.ID)
	if want := received.Add(testTiming.HeartbeatTimeout()); !got.LeaseExpiresAt.Equal(want) {
		t.Fatalf("lease %v, want receipt time + timeout = %v", got.LeaseExpiresAt, want)
	}
	// The next heartbeat, just inside a lease counted from receipt (and
	// outside one counted from the first byte).
	e.clock.Advance(testTiming.HeartbeatTimeout() - 100*time.Millisecond)
	if rp := e.post(callbacks.KindHeartbeat, tk.ID, tok, hb); rp.status != http.StatusOK {
		t.Fatalf("heartbeat on time by receipt: %d %s", rp.status, rp.raw)
	}
}

// A delivery ahead of its schedule (a retry's Cloud Task forced to run
// now) carries a token valid only from the retry's time: the worker is
// told to retry then (503 too_early, RETRY, Retry-After up to nbf), never
// to drop the attempt. Once the token is valid, the same start goes
// through.
func TestEarlyDeliveryIsRetryable(t *testing.T) {
	e := newEnv(t, nil)
	tk := e.queued()
	now := e.clock.Now()
	tok, _, err := e.keys.SignFrom(scopeOf(tk, 1), time.Hour, now, now.Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rp := e.post(callbacks.KindStarted, tk.ID, tok, startedReq(1, "w1"))
	if rp.status != http.StatusServiceUnavailable || rp.resp.Disposition != api.Retry || rp.resp.Error != api.CodeTooEarly {
		t.Fatalf("early started: %d %s, want 503 too_early RETRY", rp.status, rp.raw)
	}
	if ra, _ := strconv.Atoi(rp.header.Get("Retry-After")); ra < 28 || ra > 31 {
		t.Fatalf("Retry-After %q, want about 30", rp.header.Get("Retry-After"))
	}
	if got := e.get(tk.ID); got.State != api.Queued {
		t.Fatalf("the early start changed the task: %s", got.State)
	}
	// A forged early token is still invalid, not early.
	forged := tok[:len(tok)-4] + "AAAA"
	if rp := e.post(callbacks.KindHeartbeat, tk.ID, forged, heartbeatReq(1, "w1")); rp.status != http.StatusUnauthorized || rp.resp.Disposition != api.Rejected {
		t.Fatalf("forged token: %d %s, want 401 REJECTED", rp.status, rp.raw)
	}

	e.clock.Advance(30 * time.Second)
	if rp := e.post(callbacks.KindStarted, tk.ID, tok, startedReq(1, "w1")); rp.status != http.StatusOK {
		t.Fatalf("started once valid: %d %s", rp.status, rp.raw)
	}

}
