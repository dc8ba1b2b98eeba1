package quota

import (
	"errors"
	"testing"
)

func TestShare(t *testing.T) {
	for _, c := range []struct{ limit, n int }{{10, 4}, {2, 2}, {1, 1}, {7, 3}, {100, 4}} {
		sum := 0
		for k := range c.n {
			s := Share(c.limit, c.n, k)
			if s < c.limit/c.n || s > c.limit/c.n+1 {
				t.Errorf("Share(%d, %d, %d) = %d", c.limit, c.n, k, s)
			}
			sum += s
		}
		if sum != c.limit {
			t.Errorf("shares of %d over %d add up to %d", c.limit, c.n, sum)
		}
	}
	if !Fits(0, 4, 0, 1<<30) || Fits(10, 4, 0, 3) || !Fits(10, 4, 0, 2) {
		t.Error("Fits")
	}
}

func TestPolicy(t *testing.T) {
	p, err := Parse([]byte(`{"tenants": {"acme": {"maxRunning": 2}, "*": {"maxQueued": 100}}, "workers": {"gpu": {"maxRunning": 8, "maxQueued": 3}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		kind   Kind
		name   string
		want   Limits
		shards int
	}{
		{KindTenant, "acme", Limits{MaxRunning: 2}, 2},
		{KindTenant, "other", Limits{MaxQueued: 100}, DefaultShards},
		{KindWorker, "gpu", Limits{MaxRunning: 8, MaxQueued: 3}, 3},
		{KindWorker, "cpu", Limits{}, DefaultShards},
	} {
		if got := p.For(c.kind, c.name); got != c.want || p.ShardsFor(got) != c.shards {
			t.Errorf("%s %s: %+v (%d shards), want %+v (%d)", c.kind, c.name, got, p.ShardsFor(got), c.want, c.shards)
		}
	}
	if !p.Enabled() || (&Policy{}).Enabled() || (*Policy)(nil).Enabled() {
		t.Error("Enabled")
	}
	for _, bad := range []string{
		`{"tenants": {"a": {"maxRunning": -1}}}`,
		`{"workers": {"*": {"maxRunning": 1}}}`,
		`{"tenants": {"a": {"maxRuning": 1}}}`,
		`{"shards": 1000}`,
		`{"tenants": {"": {"maxRunning": 1}}}`,
		`{"tenants": {"a": {"perTenant": {"maxRunning": 1}}}}`,
		`{"workers": {"gpu": {"maxRunning": 2, "perTenant": {"maxRunning": 3}}}}`,
		`{"workers": {"gpu": {"perTenant": {"maxQueued": -1}}}}`,
		`{"workers": {"gpu": {"perTenant": {"perTenant": {"maxQueued": 1}}}}}`,
		`{"tenants": {"a": {"retentionDays": 7}}}`,
		`{"workers": {"gpu": {"retentionDays": 90}}}`,
		`{"workers": {"gpu": {"perTenant": {"retentionDays": 90}}}}`,
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%s) accepted", bad)
		}
	}
	if r, err := Parse([]byte(`{"tenants": {"a": {"retentionDays": 90}}}`)); err != nil || r.For(KindTenant, "a").RetentionDays != 90 || r.Enabled() {
		t.Errorf("retentionDays: %+v, %v (it limits nothing)", r, err)
	}
	if _, err := Parse([]byte(`{"tenants": {"a": {"maxRunning": -1}}}`)); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative limit: %v, want ErrInvalid", err)
	}
}

// A worker's perTenant limits are the limits of each tenant's share of
// it, and enable the quotas on their own.
func TestPolicyPerTenant(t *testing.T) {
	p, err := Parse([]byte(`{"workers": {"gpu": {"perTenant": {"maxRunning": 2, "maxQueued": 5}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Enabled() || p.For(KindWorker, "gpu").Limited() {
		t.Errorf("enabled %v, the worker's own limits %+v", p.Enabled(), p.For(KindWorker, "gpu"))
	}
	if got := p.For(KindShare, ShareName("gpu", "acme")); got != (Limits{MaxRunning: 2, MaxQueued: 5}) {
		t.Errorf("acme's share of gpu: %+v", got)
	}
	if got := p.For(KindShare, ShareName("cpu", "acme")); got.Limited() {
		t.Errorf("acme's share of cpu (no perTenant): %+v", got)
	}
}
