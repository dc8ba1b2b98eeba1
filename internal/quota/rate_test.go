package quota

import (
	"context"
	"errors"
	"slices"
	"testing"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"

	"github.com/servo-dev/servo/internal/task"
)

// The shard count of a scope: today's (Shards, capped by the smallest
// limit) without a peak rate; sized to the rate with one, capped by the
// smallest limit / MinShare and MaxRateShards. The shares of each limit
// add up to it and none is under MinShare when the rate sized it.
func TestShardsForRate(t *testing.T) {
	for _, c := range []struct {
		name      string
		shards    int
		l         Limits
		want      int
		sustained float64
	}{
		{"no rate: default", 0, Limits{MaxRunning: 100}, DefaultShards, 4.0 / WritesPerTask},
		{"no rate: smallest limit", 0, Limits{MaxRunning: 2, MaxQueued: 100}, 2, 2.0 / WritesPerTask},
		{"no rate: policy shards", 16, Limits{MaxQueued: 100}, 16, 16.0 / WritesPerTask},
		{"rate overrides shards", 16, Limits{MaxRunning: 1000, PeakRate: 1}, WritesPerTask, 1},
		{"3000/s, room", 0, Limits{MaxRunning: 100000, PeakRate: 3000}, 3000 * WritesPerTask, 3000},
		{"3000/s, limit caps at limit/2", 0, Limits{MaxRunning: 10000, MaxQueued: 50000, PeakRate: 3000}, 5000, 5000.0 / WritesPerTask},
		{"fractional rate rounds up", 0, Limits{MaxQueued: 10, PeakRate: 0.1}, 1, 1.0 / WritesPerTask},
		{"limit 1", 0, Limits{MaxRunning: 1, PeakRate: 3000}, 1, 1.0 / WritesPerTask},
		{"limit 3: one shard of share 3", 0, Limits{MaxRunning: 3, PeakRate: 50}, 1, 1.0 / WritesPerTask},
		{"max rate", 0, Limits{MaxQueued: 1 << 30, PeakRate: MaxPeakRate}, MaxPeakRate * WritesPerTask, MaxPeakRate},
		{"capped by MaxRateShards", 0, Limits{MaxQueued: 1 << 30, PeakRate: 1 << 20}, MaxRateShards, float64(MaxRateShards) / WritesPerTask},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &Policy{Shards: c.shards}
			n := p.ShardsFor(c.l)
			if n != c.want {
				t.Fatalf("ShardsFor(%+v) = %d, want %d", c.l, n, c.want)
			}
			if got := p.Sustained(c.l); got < c.sustained-1e-9 || got > c.sustained+1e-9 {
				t.Errorf("Sustained = %v, want %v", got, c.sustained)
			}
			for _, limit := range []int{c.l.MaxRunning, c.l.MaxQueued} {
				if limit == 0 {
					continue
				}
				sum, least := 0, limit
				for k := range n {
					s := Share(limit, n, k)
					sum, least = sum+s, min(least, s)
				}
				if sum != limit {
					t.Errorf("shares of %d over %d shards add up to %d", limit, n, sum)
				}
				if c.l.PeakRate > 0 && least < min(MinShare, limit) {
					t.Errorf("a shard owns %d of %d, want ≥ %d", least, limit, MinShare)
				}
			}
		})
	}
}

// A policy field Validate refuses is named precisely.
func TestValidateNamesTheField(t *testing.T) {
	for _, c := range []struct{ json, field string }{
		{`{"tenants": {"acme": {"maxRunning": 10, "peakRate": -1}}}`, `tenants["acme"].peakRate`},
		{`{"tenants": {"acme": {"maxRunning": 10, "peakRate": 50001}}}`, `tenants["acme"].peakRate`},
		{`{"workers": {"gpu": {"perTenant": {"maxRunning": 1, "peakRate": 1e9}}}}`, `workers["gpu"].perTenant.peakRate`},
		{`{"tenants": {"a": {"maxRunning": -1}}}`, `tenants["a"].maxRunning`},
		{`{"tenants": {"a": {"maxQueued": -1}}}`, `tenants["a"].maxQueued`},
		{`{"workers": {"gpu": {"maxRunning": 2, "perTenant": {"maxRunning": 3}}}}`, `workers["gpu"].perTenant.maxRunning`},
		{`{"shards": 1000}`, `shards`},
	} {
		_, err := Parse([]byte(c.json))
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Field != c.field || !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%s): %v, want an InvalidError on %s", c.json, err, c.field)
		}
	}
	if _, err := Parse([]byte(`{"tenants": {"acme": {"maxRunning": 10, "peakRate": 2.5}}}`)); err != nil {
		t.Errorf("a valid peakRate: %v", err)
	}
}

// probes are bounded, distinct, never the shard itself, and every other
// shard when there are few.
func TestProbes(t *testing.T) {
	for _, c := range []struct {
		n, k int
		seed uint32
		want []int
	}{
		{1, 0, 7, nil},
		{4, 2, 99, []int{3, 0, 1}},
		{9, 8, 5, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{20, 3, 0, []int{4, 5, 6, 7, 8, 9, 10, 11}},
		{20, 3, 10, []int{14, 15, 16, 17, 18, 19, 0, 1}},
		{20, 3, 17, []int{1, 2, 4, 5, 6, 7, 8, 9}},
	} {
		if got := probes(c.n, c.k, c.seed); !slices.Equal(got, c.want) {
			t.Errorf("probes(%d, %d, %d) = %v, want %v", c.n, c.k, c.seed, got, c.want)
		}
	}
	for seed := range uint32(500) {
		got := probes(9000, 42, seed*7919)
		if len(got) != MaxProbes || slices.Contains(got, 42) || len(slices.Compact(slices.Sorted(slices.Values(got)))) != MaxProbes {
			t.Fatalf("probes(9000, 42, %d) = %v", seed*7919, got)
		}
	}
}

// fakeTx serves counter documents and records what each Get read.
type fakeTx struct {
	docs map[string]*pb.Document
	gets [][]string
}

func (f *fakeTx) Get(_ context.Context, names []string) (map[string]*pb.Document, error) {
	f.gets = append(f.gets, names)
	out := map[string]*pb.Document{}
	for _, n := range names {
		if d := f.docs[n]; d != nil {
			out[n] = d
		}
	}
	return out, nil
}

// Admission of one task in a scope of 20 shards (maxRunning 40 or
// maxQueued 40, peak 10/s: 20 shards of 2): its own shard when it has
// room, else one of at most MaxProbes others read in one more RPC; a
// limit is never exceeded, even when that means refusing (or holding) a
// task while an unprobed shard has room.
func TestAdmissionReadsBoundedShards(t *testing.T) {
	const n = 20
	for _, c := range []struct {
		name      string
		l         Limits
		counts    func(own int, probed []int) map[int][2]int // shard: queued, running
		slot      bool
		exceeded  bool
		gets      int
		onOwn     bool
		slotOnOwn bool
	}{
		{name: "empty: own shard, no more read", l: Limits{MaxRunning: 40, PeakRate: 10},
			counts: func(int, []int) map[int][2]int { return nil }, slot: true, onOwn: true, slotOnOwn: true},
		{name: "own slots taken: a probed shard's slot", l: Limits{MaxRunning: 40, PeakRate: 10},
			counts: func(own int, _ []int) map[int][2]int { return map[int][2]int{own: {0, 2}} },
			slot:   true, gets: 1, onOwn: true},
		{name: "every probed slot taken: waits, though others are free", l: Limits{MaxRunning: 40, PeakRate: 10},
			counts: func(own int, probed []int) map[int][2]int {
				m := map[int][2]int{own: {0, 2}}
				for _, j := range probed {
					m[j] = [2]int{0, 2}
				}
				return m
			}, gets: 1, onOwn: true},
		{name: "own queue full: admitted on a probed shard", l: Limits{MaxQueued: 40, PeakRate: 10},
			counts: func(own int, _ []int) map[int][2]int { return map[int][2]int{own: {2, 0}} },
			slot:   true, gets: 1},
		{name: "every probed queue full: refused", l: Limits{MaxQueued: 40, PeakRate: 10},
			counts: func(own int, probed []int) map[int][2]int {
				m := map[int][2]int{own: {2, 0}}
				for _, j := range probed {
					m[j] = [2]int{2, 0}
				}
				return m
			}, exceeded: true, gets: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			cs, err := NewCounters(&Policy{Tenants: map[string]Limits{"hot": c.l}}, "projects/p/databases/d/documents")
			if err != nil {
				t.Fatal(err)
			}
			a := cs.Admission(&task.Task{ID: "task_01", TenantID: "hot", Worker: "w"})
			sc := a.scopes[0]
			if sc.n != n {
				t.Fatalf("%d shards, want %d", sc.n, n)
			}
			own := a.start % n
			probed := probes(n, own, a.seed)
			tx := &fakeTx{docs: map[string]*pb.Document{}}
			for k, qr := range c.counts(own, probed) {
				tx.docs[cs.shardName(KindTenant, "hot", k)] = &pb.Document{Fields: map[string]*pb.Value{
					"kind": strVal("tenant"), "name": strVal("hot"), "shard": intVal(k), "queued": intVal(qr[0]), "running": intVal(qr[1])}}
			}
			first, _ := tx.Get(context.Background(), a.Reads())
			tx.gets = nil
			h, slot, err := a.Hold(context.Background(), first, tx)
			if c.exceeded {
				if !errors.Is(err, ErrExceeded) {
					t.Fatalf("Hold: %v, want ErrExceeded", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if len(tx.gets) != c.gets {
				t.Fatalf("%d more reads, want %d", len(tx.gets), c.gets)
			}
			for _, g := range tx.gets {
				if len(g) > MaxProbes {
					t.Errorf("read %d shards in one more read, want ≤ %d", len(g), MaxProbes)
				}
			}
			if c.exceeded {
				return
			}
			if slot != c.slot {
				t.Errorf("slot free %v, want %v", slot, c.slot)
			}
			if (h.TenantShard == own) != c.onOwn || !(h.TenantShard == own || slices.Contains(probed, h.TenantShard)) {
				t.Errorf("admitted on shard %d (own %d, probed %v)", h.TenantShard, own, probed)
			}
			if c.slot {
				if (h.TenantSlotShard == own) != c.slotOnOwn || !(h.TenantSlotShard == own || slices.Contains(probed, h.TenantSlotShard)) {
					t.Errorf("slot on shard %d (own %d, probed %v)", h.TenantSlotShard, own, probed)
				}
				qr := c.counts(own, probed)[h.TenantSlotShard]
				if !Fits(c.l.MaxRunning, n, h.TenantSlotShard, qr[1]) {
					t.Errorf("slot on a full shard %d (%v)", h.TenantSlotShard, qr)
				}
			}
			if q := c.counts(own, probed)[h.TenantShard]; !Fits(c.l.MaxQueued, n, h.TenantShard, q[0]) {
				t.Errorf("admitted on a full shard %d (%v)", h.TenantShard, q)
			}
		})
	}
}
