package keysecret

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/api/option"
)

// A stand-in for the Secret Manager REST API's two calls (there is no
// emulator): versions are kept in order, latest is the last.
func fakeSecretManager(t *testing.T) (*httptest.Server, *[][]byte) {
	var mu sync.Mutex
	var versions [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/projects/p/secrets/s:addVersion"):
			var req struct {
				Payload struct{ Data string } `json:"payload"`
			}
			_ = json.NewDecoder(r.Body).Decode(&req)
			b, _ := base64.StdEncoding.DecodeString(req.Payload.Data)
			versions = append(versions, b)
			json.NewEncoder(w).Encode(map[string]any{"name": "projects/p/secrets/s/versions/" + string(rune('0'+len(versions)))})
		case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/projects/p/secrets/s/versions/latest:access"):
			if len(versions) == 0 {
				http.Error(w, `{"error":{"code":404,"message":"no version"}}`, http.StatusNotFound)
				return
			}
			json.NewEncoder(w).Encode(map[string]any{"payload": map[string]string{"data": base64.StdEncoding.EncodeToString(versions[len(versions)-1])}})
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &versions
}

func TestClient(t *testing.T) {
	srv, versions := fakeSecretManager(t)
	opts := []option.ClientOption{option.WithEndpoint(srv.URL + "/"), option.WithoutAuthentication()}
	c, err := New("projects/p/secrets/s", opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Latest(ctx); err == nil {
		t.Fatal("Latest of a secret without versions: no error")
	}
	for _, data := range []string{`{"v":1}`, `{"v":2}`} {
		name, err := c.Add(ctx, []byte(data))
		if err != nil || !strings.HasPrefix(name, "projects/p/secrets/s/versions/") {
			t.Fatalf("Add: %q %v", name, err)
		}
	}
	got, err := Source("projects/p/secrets/s", opts...)(ctx)
	if err != nil || string(got) != `{"v":2}` || len(*versions) != 2 {
		t.Fatalf("Source read %q, %v; want the latest of 2 versions", got, err)
	}
	for _, bad := range []string{"", "projects/p", "projects/p/secrets/s/versions/1", "p/s"} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%q): no error", bad)
		}
		if _, err := Source(bad)(ctx); err == nil {
			t.Errorf("Source(%q): no error", bad)
		}
	}
}
