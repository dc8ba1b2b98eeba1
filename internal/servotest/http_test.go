package servotest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Do sends a value as JSON and a []byte as it is, with the header pairs
// after the JSON content type; GetJSON decodes the answer.
func TestDoAndGetJSON(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen", r.Method+"|"+r.Header.Get("Content-Type")+"|"+string(b))
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, `{"n":1}`)
	}))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		body   any
		header []string
		seen   string
	}{
		{map[string]int{"a": 1}, nil, `POST|application/json|{"a":1}`},
		{[]byte(`{`), []string{"Content-Type", "text/plain"}, `POST|text/plain|{`},
		{nil, nil, `POST|application/json|`},
	} {
		r := Do(t, http.MethodPost, srv.URL, c.body, c.header...)
		if r.Status != http.StatusTeapot || string(r.Body) != `{"n":1}` || r.Header.Get("X-Seen") != c.seen {
			t.Errorf("Do(%v, %q): %d %s, seen %q; want 418, seen %q", c.body, c.header, r.Status, r.Body, r.Header.Get("X-Seen"), c.seen)
		}
	}
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"n":2}`) }))
	t.Cleanup(ok.Close)
	if got := GetJSON[struct{ N int }](t, ok.URL); got.N != 2 {
		t.Errorf("GetJSON: %+v, want N 2", got)
	}
}

// WaitFor returns the first value ok holds for.
func TestWaitFor(t *testing.T) {
	t.Parallel()
	n := 0
	if got := WaitFor(t, "three calls", func() int { n++; return n }, func(n int) bool { return n == 3 }, nil); got != 3 {
		t.Errorf("WaitFor returned %d, want 3", got)
	}
	Until(t, "true", func() bool { return true })
}
