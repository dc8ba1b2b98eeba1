package servotest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// requestTimeout bounds a request of Do, answer read: longer than any
// test's request should take (a claim long-polls for a minute at most), so
// that a server that hangs fails the test instead of hanging it.
const requestTimeout = 2 * time.Minute

// Response is an HTTP answer, read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends a request to url with http.DefaultClient (whose transport a
// benchmark may count requests with) and reads its answer whole. A body
// that is not nil is sent as JSON, or as it is when it is a []byte; the
// request's Content-Type is application/json unless header, name-value
// pairs set after it, says otherwise. Do fails t when the request cannot
// be sent or its answer read.
func Do(t testing.TB, method, url string, body any, header ...string) Response {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, raw := body.([]byte)
		if !raw {
			var err error
			if b, err = json.Marshal(body); err != nil {
				t.Fatalf("%s %s: %v", method, url, err)
			}
		}
		r = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, url, err)
	}
	return Response{Status: res.StatusCode, Header: res.Header, Body: out}
}

// GetJSON GETs url and returns its answer decoded from JSON; it fails t
// unless the answer is 200 OK with a T.
func GetJSON[T any](t testing.TB, url string) T {
	t.Helper()
	var v T
	r := Do(t, http.MethodGet, url, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, r.Status, r.Body)
	}
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, r.Body)
	}
	return v
}
