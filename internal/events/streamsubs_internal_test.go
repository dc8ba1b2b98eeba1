package events

import (
	"strings"
	"testing"
	"time"
)

// The stream's filter names the caller's tenants when they fit in
// Pub/Sub's 256 bytes, and leaves them to the per-event check otherwise.
func TestStreamFilter(t *testing.T) {
	many := make([]string, 20)
	for i := range many {
		many[i] = "tenant-" + strings.Repeat("x", 8) + string(rune('a'+i))
	}
	for _, c := range []struct {
		name   string
		opts   StreamOptions
		want   string
		fitted bool
	}{
		{"nothing", StreamOptions{}, "", true},
		{"one tenant named", StreamOptions{TenantID: "acme"}, `attributes.tenantId = "acme"`, true},
		{"task and tenants", StreamOptions{TaskID: "tsk_1", Tenants: []string{"acme", "globex"}},
			`attributes.taskId = "tsk_1" AND (attributes.tenantId = "acme" OR attributes.tenantId = "globex")`, true},
		{"tenants only", StreamOptions{Tenants: []string{"acme"}}, `(attributes.tenantId = "acme")`, true},
		{"a quote in a tenant", StreamOptions{Tenants: []string{`a"b`}}, `(attributes.tenantId = "a\"b")`, true},
		{"too many tenants", StreamOptions{RunID: "run_1", Tenants: many}, `attributes.runId = "run_1"`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, fitted := streamFilter(c.opts)
			if f != c.want || fitted != c.fitted {
				t.Fatalf("streamFilter = %q, %v; want %q, %v", f, fitted, c.want, c.fitted)
			}
			if len(f) > MaxFilterBytes {
				t.Fatalf("filter of %d bytes", len(f))
			}
		})
	}
}

func TestStreamSubscriptionID(t *testing.T) {
	until := time.Unix(1_900_000_000, 0)
	id := streamSubscriptionID(until)
	if !strings.HasPrefix(id, "servo-stream-1900000000-") {
		t.Fatalf("id %q", id)
	}
	for name, want := range map[string]bool{
		id: true, "projects/p/subscriptions/" + id: true,
		"servo-tail-abc": false, "servo-stream-x-abc": false, "servo-stream-12": false, "other": false,
	} {
		got, ok := streamUntil(name)
		if ok != want || (ok && !got.Equal(until)) {
			t.Errorf("streamUntil(%q) = %v, %v", name, got, ok)
		}
	}
}
