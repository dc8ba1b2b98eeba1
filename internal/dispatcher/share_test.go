package dispatcher

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/quota"
)

// A worker's perTenant limits are each tenant's share of it: a tenant
// over its share of maxQueued is refused (429) while another tenant's
// submits are still admitted, and it holds at most its share of the run
// slots, so another tenant gets one; the repair finds the share counters
// exact.
func TestWorkerTenantShare(t *testing.T) {
	t.Parallel()
	e := quotaEnv(t, quota.Policy{Workers: map[string]quota.Limits{"render": {MaxQueued: 6, MaxRunning: 2,
		PerTenant: &quota.Limits{MaxQueued: 3, MaxRunning: 1}}}})
	submit := func(tenant string, i int) response {
		b := validSubmit(tenant)
		b["taskKey"] = fmt.Sprintf("k-%d", i)
		return e.do("POST", "/v1/tasks", b, "")
	}
	statuses := map[int]int{}
	for i := range 6 {
		r := submit("greedy", i)
		statuses[r.status]++
		if r.status == http.StatusTooManyRequests && (r.err(t).Code != api.CodeQuotaExceeded || !strings.Contains(r.err(t).Message, "share")) {
			t.Fatalf("greedy's refusal: %s", r.body)
		}
	}
	if statuses[http.StatusCreated] != 3 || statuses[http.StatusTooManyRequests] != 3 {
		t.Fatalf("greedy's 6 submits: %v, want 3 created and 3 refused (its share of maxQueued)", statuses)
	}
	for i := range 3 {
		if r := submit("polite", i); r.status != http.StatusCreated {
			t.Fatalf("polite's submit %d while greedy is at its share: %d %s", i, r.status, r.body)
		}
	}
	slots := func(tenant string) (withSlot, waiting int) {
		for _, tk := range e.tenantTasks(tenant) {
			switch {
			case tk.WaitingSince != nil:
				waiting++
			case tk.Quota != nil && tk.Quota.Slot:
				withSlot++
			}
		}
		return withSlot, waiting
	}
	for _, tenant := range []string{"greedy", "polite"} {
		if s, w := slots(tenant); s != 1 || w != 2 {
			t.Errorf("%s: %d tasks with a run slot and %d waiting, want 1 and 2 (its share of maxRunning)", tenant, s, w)
		}
	}
	// A waiting task, as GET shows it (docs/tenants.md).
	for _, tk := range e.tenantTasks("polite") {
		if tk.WaitingSince != nil {
			r := e.do("GET", "/v1/tasks/"+tk.ID, nil, "")
			var v api.Task
			r.decode(t, &v)
			if v.State != api.Queued || v.Reason != "QUOTA_WAIT" || v.WaitingSince == nil || v.ScheduledAt != nil || len(v.Attempts) != 1 || v.Attempts[0].StartedAt != nil {
				t.Errorf("GET of a task waiting for a slot: %s", r.body)
			}
			break
		}
	}
	if st, err := e.sweeper().Sweep(e.ctx); err != nil || st.QuotaRepairs != 0 {
		t.Fatalf("sweep: %d counter repairs (err %v), want 0", st.QuotaRepairs, err)
	}
}
