package dispatcher

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// Routes, including the ":batch" custom method, answer the right handler;
// wrong methods are 405 with Allow; unknown paths are 404; every error is
// JSON.
func TestRouting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{paused: true})
	sr := e.submit(validSubmit("acme"), http.StatusCreated)
	unknown := task.NewTaskID(time.Now())
	batch := map[string]any{"tasks": []any{validSubmit("acme")}}
	cases := []struct {
		method, path string
		body         any
		status       int
		code         string
		allow        string
	}{
		{"POST", "/v1/tasks:batch", batch, http.StatusCreated, "", ""},
		{"GET", "/v1/tasks:batch", nil, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "POST"},
		{"PUT", "/v1/tasks:batch", batch, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "POST"},
		{"POST", "/v1/tasks:batchx", batch, http.StatusNotFound, api.CodeNotFound, ""},
		{"POST", "/v1/tasks:cancel", nil, http.StatusNotFound, api.CodeNotFound, ""},
		{"POST", "/v1/tasks/" + sr.TaskID + ":batch", batch, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "GET, HEAD"},
		{"GET", "/v1/tasks", nil, http.StatusOK, "", ""},
		{"DELETE", "/v1/tasks", nil, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "GET, HEAD, POST"},
		{"GET", "/v1/tasks/" + sr.TaskID, nil, http.StatusOK, "", ""},
		{"DELETE", "/v1/tasks/" + sr.TaskID, nil, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "GET, HEAD"},
		{"GET", "/v1/tasks/" + unknown, nil, http.StatusNotFound, api.CodeTaskNotFound, ""},
		{"GET", "/v1/tasks/not-a-task-id", nil, http.StatusNotFound, api.CodeTaskNotFound, ""},
		{"GET", "/v1/tasks/", nil, http.StatusNotFound, api.CodeNotFound, ""},
		{"GET", "/v1/tasks/" + sr.TaskID + "/cancel", nil, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "POST"},
		{"POST", "/v1/tasks/" + unknown + "/cancel", nil, http.StatusNotFound, api.CodeTaskNotFound, ""},
		{"GET", "/v1/runs/" + sr.RunID + "/cancel", nil, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "POST"},
		{"POST", "/v1/runs/" + task.NewRunID(time.Now()) + "/cancel", nil, http.StatusNotFound, api.CodeRunNotFound, ""},
		{"POST", "/v1/runs/not-a-run/cancel", nil, http.StatusNotFound, api.CodeRunNotFound, ""},
		{"GET", "/v2/tasks", nil, http.StatusNotFound, api.CodeNotFound, ""},
		{"GET", "/", nil, http.StatusNotFound, api.CodeNotFound, ""},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			r := e.do(c.method, c.path, c.body, "")
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			if !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
				t.Errorf("Content-Type %q", r.header.Get("Content-Type"))
			}
			if c.code != "" {
				if eb := r.err(t); eb.Code != c.code || eb.Message == "" {
					t.Errorf("error = %+v, want %s", eb, c.code)
				}
			}
			if got := r.header.Get("Allow"); got != c.allow {
				t.Errorf("Allow = %q, want %q", got, c.allow)
			}
		})
	}
}

// Content-Type must be JSON (with or without a utf-8 charset), checked
// before the size.
func TestContentType(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{paused: true})
	body := validSubmit("acme")
	for _, c := range []struct {
		ct     string
		status int
	}{
		{"application/json", http.StatusCreated},
		{"application/json; charset=utf-8", http.StatusCreated},
		{"Application/JSON;charset=UTF-8", http.StatusCreated},
		{"application/json; charset=latin1", http.StatusUnsupportedMediaType},
		{"text/plain", http.StatusUnsupportedMediaType},
		{"application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
		{"-", http.StatusUnsupportedMediaType}, // no Content-Type
		{"application/json; charset", http.StatusUnsupportedMediaType},
	} {
		t.Run(c.ct, func(t *testing.T) {
			r := e.do("POST", "/v1/tasks", body, c.ct)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			if c.status == http.StatusUnsupportedMediaType {
				if eb := r.err(t); eb.Code != api.CodeUnsupportedMediaType {
					t.Fatalf("error %+v", eb)
				}
			}
		})
	}
	// Content type comes before size.
	huge := strings.Repeat("x", int(DefaultMaxBodyBytes)+10)
	if r := e.do("POST", "/v1/tasks", huge, "text/plain"); r.status != http.StatusUnsupportedMediaType {
		t.Errorf("huge text/plain body: %d, want 415", r.status)
	}
	// Cancel: an empty body needs no content type; a body does.
	sr := e.submit(validSubmit("acme"), http.StatusCreated)
	if r := e.do("POST", "/v1/tasks/"+sr.TaskID+"/cancel", `{"reason":"x"}`, "text/plain"); r.status != http.StatusUnsupportedMediaType {
		t.Errorf("cancel with text/plain body: %d, want 415", r.status)
	}
	if r := e.do("POST", "/v1/tasks/"+sr.TaskID+"/cancel", nil, ""); r.status != http.StatusOK {
		t.Errorf("cancel without body: %d, want 200: %s", r.status, r.body)
	}
}

// A payload that would push the envelope past Cloud Tasks' limit is 413
// naming that limit; a body over the cap is 413 naming the cap. Nothing
// is stored.
func TestPayloadTooLarge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{paused: true})
	// The body fits the 1 MiB body cap; the envelope (token, ids, ...)
	// does not fit in a 1 MiB Cloud Task.
	body := validSubmit("acme")
	for _, size := range []int{enqueue.MaxTaskBytes - 400, maxEnvelopeBytes} {
		body["payload"] = strings.Repeat("p", size)
		r := e.do("POST", "/v1/tasks", body, "")
		if r.status != http.StatusRequestEntityTooLarge {
			t.Fatalf("payload of %d bytes: status %d, want 413: %.300s", size, r.status, r.body)
		}
		eb := r.err(t)
		if eb.Code != api.CodePayloadTooLarge || eb.Field != "payload" || eb.LimitBytes != maxEnvelopeBytes ||
			!strings.Contains(eb.Message, fmt.Sprint(enqueue.MaxTaskBytes)) || !strings.Contains(eb.Message, "Cloud Tasks") {
			t.Fatalf("answer = %+v", eb)
		}
	}

	// Over the body cap.
	body["payload"] = strings.Repeat("p", DefaultMaxBodyBytes)
	r := e.do("POST", "/v1/tasks", body, "")
	if r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", r.status)
	}
	if eb := r.err(t); eb.Code != api.CodePayloadTooLarge || eb.LimitBytes != DefaultMaxBodyBytes ||
		!strings.Contains(eb.Message, fmt.Sprint(DefaultMaxBodyBytes)) {
		t.Fatalf("answer = %+v", eb)
	}

	// In a batch, the task is named.
	big := validSubmit("acme")
	big["payload"] = strings.Repeat("p", enqueue.MaxTaskBytes-400)
	r = e.do("POST", "/v1/tasks:batch", map[string]any{"tasks": []any{validSubmit("acme"), big}}, "")
	if r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("batch status %d, want 413", r.status)
	}
	if eb := r.err(t); eb.Field != "tasks[1].payload" || eb.LimitBytes != maxEnvelopeBytes {
		t.Fatalf("batch answer = %+v", eb)
	}
	if ts := e.tenantTasks("acme"); len(ts) != 0 {
		t.Fatalf("oversized submits stored %d tasks", len(ts))
	}
	// Just under the limit is accepted, and stored whole.
	body["payload"] = strings.Repeat("p", maxEnvelopeBytes-2<<10)
	sr := e.submit(body, http.StatusCreated)
	if got := e.storedTask(sr.TaskID); len(got.Payload) != maxEnvelopeBytes-2<<10+2 {
		t.Fatalf("stored payload of %d bytes", len(got.Payload))
	}
}

// storeStatus maps store errors onto API answers.
func TestStoreStatus(t *testing.T) {
	t.Parallel()
	h := &handler{log: testLogger(t)}
	r := httptest.NewRequest("GET", "/v1/tasks", nil)
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("get: %w", store.ErrNotFound), http.StatusNotFound, api.CodeTaskNotFound},
		{fmt.Errorf("apply: %w: deadline", store.ErrUnavailable), http.StatusServiceUnavailable, api.CodeUnavailable},
		{errors.New("decode: bad field"), http.StatusInternalServerError, api.CodeInternal},
	} {
		status, body := h.storeStatus(r, c.err)
		if status != c.status || body.Code != c.code {
			t.Errorf("storeStatus(%v) = %d %s, want %d %s", c.err, status, body.Code, c.status, c.code)
		}
		w := httptest.NewRecorder()
		writeError(w, status, body)
		if (status == http.StatusServiceUnavailable) != (w.Header().Get("Retry-After") != "") {
			t.Errorf("%d: Retry-After %q", status, w.Header().Get("Retry-After"))
		}
	}
}
