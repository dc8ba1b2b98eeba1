package dashboard_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
)

// TestTenantUsage: the tasks page filtered by a tenant shows the tenant's
// usage against its limits, the figures GET /v1/tenants/{tenant}/usage
// gives: a limited tenant's from its quota counters, an unlimited one's
// from its tasks.
func TestTenantUsage(t *testing.T) {
	f := stack(t)
	id := f.submit(t, map[string]any{"tenantId": "limited", "worker": "held", "taskKey": "usage", "payload": map[string]any{"message": "held"}})
	f.cancelLater(t, id)

	get := func(path string) string {
		t.Helper()
		res, err := http.Get(f.stack.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, res.StatusCode, b)
		}
		return string(b)
	}
	// Once the worker started it, the task holds a run slot and is no
	// longer queued (enqueued and not started, it counts in both).
	var api api.UsageResponse
	deadline := time.Now().Add(30 * time.Second)
	for api.Running != 1 || api.Queued != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("API usage %+v, want 1 running and 0 queued", api)
		}
		time.Sleep(100 * time.Millisecond)
		if err := json.Unmarshal([]byte(get("/v1/tenants/limited/usage")), &api); err != nil {
			t.Fatal(err)
		}
	}
	if api.Limits.MaxRunning != 3 || api.Source != "counters" {
		t.Fatalf("API usage %+v, want the counters against maxRunning 3", api)
	}
	want := "running 1 of 3 (maxRunning), queued 0 of 20 (maxQueued)"
	for page := get("/ui/?tenant=limited"); !strings.Contains(page, want); page = get("/ui/?tenant=limited") {
		if time.Now().After(deadline) {
			t.Fatalf("the tasks page of tenant limited does not show %q:\n%s", want, page)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if page := get("/ui/?tenant=nobody"); !strings.Contains(page, "running 0 of unlimited (maxRunning), queued 0 of unlimited (maxQueued)") {
		t.Errorf("an unlimited tenant's page:\n%s", page)
	}
	if page := get("/ui/"); strings.Contains(page, `id="usage"`) {
		t.Errorf("the unfiltered tasks page shows a tenant's usage")
	}
}
