package dashboard

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// oneToken verifies one identity token only.
type oneToken string

func (v oneToken) Verify(_ context.Context, raw string) (string, error) {
	if raw == string(v) {
		return "alice@example.com", nil
	}
	return "", errors.New("not the token")
}

// FuzzForms posts arbitrary bodies, with an arbitrary anti-forgery cookie
// and content type, to the dashboard's forms: sign-in (a token) and
// cancel (a reason). Whatever the input: no panic and no 5xx; the cancel
// reaches the control API only when the form's csrf field equals its
// cookie (of at least 32 bytes); the sign-in cookie is set only for the
// one valid token; and no submitted token or reason of 8 bytes or more is
// echoed by an error or sign-in page.
func FuzzForms(f *testing.F) {
	const good = "good-token-0123456789"
	csrf := strings.Repeat("c", 43)
	for _, s := range []struct {
		form       uint8
		body, csrf string
		ctype      uint8
	}{
		{0, "csrf=" + csrf + "&token=" + good, csrf, 0},
		{0, "csrf=" + csrf + "&token=bad", csrf, 0},
		{0, "token=" + good, "", 0},
		{1, "csrf=" + csrf + "&reason=%3Cscript%3E", csrf, 0},
		{1, "csrf=short&reason=x", "short", 0},
		{1, "csrf=" + csrf + "&csrf=other", csrf, 0},
		{1, "%zz=1", csrf, 0},
		{1, "--b\r\nContent-Disposition: form-data; name=\"csrf\"\r\n\r\n" + csrf + "\r\n--b--\r\n", csrf, 1},
		{0, strings.Repeat("a", 70<<10), csrf, 2},
	} {
		f.Add(s.form, []byte(s.body), s.csrf, s.ctype)
	}
	var apiCalls int
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		apiCalls++
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"state":"CANCELLING"}`))
	})
	d, err := New(Config{Store: &store.Store{}, API: api, Identity: auth.Verifiers{Bearer: []auth.IdentityVerifier{oneToken(good)}}})
	if err != nil {
		f.Fatal(err)
	}
	id := task.NewTaskID(time.Now())
	ctypes := []string{"application/x-www-form-urlencoded", "multipart/form-data; boundary=b", "text/plain", ""}
	f.Fuzz(func(t *testing.T, form uint8, body []byte, cookie string, ctype uint8) {
		path := Prefix + "signin"
		if form%2 == 1 {
			path = Prefix + "tasks/" + id + "/cancel"
		}
		r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		r.Header.Set("Content-Type", ctypes[int(ctype)%len(ctypes)])
		if cookie != "" {
			r.AddCookie(&http.Cookie{Name: CSRFCookie, Value: url.QueryEscape(cookie)})
		}
		before := apiCalls
		w := httptest.NewRecorder()
		d.ServeHTTP(w, r)
		if w.Code >= 500 {
			t.Fatalf("%s answered %d: %s", path, w.Code, w.Body)
		}
		// What the handler saw, parsed as it parses it.
		parsed := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		parsed.Header.Set("Content-Type", ctypes[int(ctype)%len(ctypes)])
		parsed.Body = http.MaxBytesReader(nil, parsed.Body, maxFormBytes)
		formOK := parsed.ParseForm() == nil
		sent := parsed.PostFormValue("csrf")
		c, cerr := r.Cookie(CSRFCookie)
		valid := formOK && cerr == nil && len(c.Value) >= 32 && sent == c.Value
		if apiCalls != before && !valid {
			t.Fatalf("a form without a matching anti-forgery token reached the API: %q (cookie %q)", body, cookie)
		}
		for _, sc := range w.Result().Cookies() {
			if sc.Name == IdentityCookie && sc.MaxAge >= 0 && sc.Value != good {
				t.Fatalf("sign-in cookie set to %q", sc.Value)
			}
		}
		if w.Code != http.StatusSeeOther && formOK {
			for _, field := range []string{"token", "reason"} {
				if v := strings.TrimSpace(parsed.PostFormValue(field)); len(v) >= 8 && strings.Contains(w.Body.String(), v) {
					t.Fatalf("the page echoes the submitted %s %q", field, v)
				}
			}
		}
	})
}
