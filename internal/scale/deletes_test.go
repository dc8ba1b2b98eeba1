package scale_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/servo-dev/servo/internal/scale"
)

// row is the row of section and name in rows (t fails without one).
func row(t *testing.T, rows []scale.Row, section, name string) scale.Row {
	t.Helper()
	for _, r := range rows {
		if r.Section == section && r.Name == name {
			return r
		}
	}
	var b strings.Builder
	scale.Print(&b, rows)
	t.Fatalf("no row %s %s in\n%s", section, name, b.String())
	return scale.Row{}
}

func near(got, want float64) bool { return math.Abs(got-want) <= want*0.001 }

// removal is the removal of an index entry (a delete, a changed or
// cleared value).
func removal(e scale.Event) scale.Event { e.Delete = true; return e }

// TestDeletesCounted: an explicit delete is a write to its document, its
// collection and every range it removes an entry from. 200 tasks each
// write one outbox entry into a due range (32 shards) and delete it after
// delivery: 312.5 entries/s a range written, as many removed: 625, over
// the sequential limit that the writes alone stay under.
func TestDeletesCounted(t *testing.T) {
	const due = "outbox(dueShard,delivered,nextTryAt)"
	tr := workload(200, func(i int, id string) []scale.Event {
		name := "outbox/evt_" + hash(id)
		e := entry(due, "dueShard={k},delivered=false", fmt.Sprintf("%012d", i), name, id)
		return []scale.Event{doc(name, "outbox", id), e}
	})
	// Deleted after delivery, in the order written.
	for i := range 200 {
		id := fmt.Sprintf("task_%06d", i)
		name := "outbox/evt_" + hash(id)
		d := doc(name, "outbox", id)
		d.Delete = true
		tr.Events = append(tr.Events, d, removal(entry(due, "dueShard={k},delivered=false", fmt.Sprintf("%012d", i), name, id)))
	}
	tr.Spread = map[string]int{"dueShard": 32}
	rows := scale.New(tr).Extrapolate(mean())
	ix := row(t, rows, "index", due)
	if ix.Recorded != 400 || ix.Deleted != 200 || !near(ix.Rate, 625) || !ix.Monotonic || !ix.Over() {
		t.Errorf("due range: %+v; want 400 entries (200 removed), 625 entries/s, sequential and over", ix)
	}
	if d := row(t, rows, "document", "outbox/{id}"); d.Recorded != 2 || d.Deleted != 1 || !near(d.Rate, 2/mean().Lifetime()) {
		t.Errorf("outbox/{id}: %+v; want 2 writes (1 delete) in a task's life", d)
	}
	if c := row(t, rows, "collection", "outbox"); !near(c.Rate, 2*mean().Submits) {
		t.Errorf("outbox collection: %.0f writes/s, want %.0f (a write and a delete a task)", c.Rate, 2*mean().Submits)
	}
	// The writes alone: under.
	var writes scale.Traffic = tr
	writes.Events = slices.DeleteFunc(slices.Clone(tr.Events), func(e scale.Event) bool { return e.Delete })
	if ix := row(t, scale.New(writes).Extrapolate(mean()), "index", due); ix.Over() || !near(ix.Rate, 312.5) {
		t.Errorf("without its deletes the range is %+v; want 312.5 entries/s, under", ix)
	}
}

// TestExpiryCounted: a TTL expiry (Event.Expiry, listed after the
// writes in the order documents expire) counts once per document, as the
// document is written once: at the rate documents expire, which in a
// steady state is the rate they are created. Ended tasks' listing
// entries, written in hash order (spread) and expiring in end order
// (sequential), make a range sequential by their expiries alone.
func TestExpiryCounted(t *testing.T) {
	const listing = "tasks(dueShard,state,taskId)"
	tr := workload(200, func(i int, id string) []scale.Event {
		name := "idempotency/" + hash(id)
		// Ended in a spread order: the value (a hash) spreads.
		return []scale.Event{doc(name, "idempotency", id), entry(listing, "dueShard={k},state=SUCCEEDED", hash("v"+id), "tasks/"+hash(id), id)}
	})
	// Expiring in value order (an ended task's retention runs out in the
	// order the tasks ended, here their values').
	type exp struct{ id, v string }
	var exps []exp
	for i := range 200 {
		id := fmt.Sprintf("task_%06d", i)
		exps = append(exps, exp{id, hash("v" + id)})
	}
	slices.SortFunc(exps, func(a, b exp) int { return strings.Compare(a.v, b.v) })
	for _, x := range exps {
		d := doc("idempotency/"+hash(x.id), "idempotency", x.id)
		d.Delete, d.Expiry = true, true
		e := removal(entry(listing, "dueShard={k},state=SUCCEEDED", x.v, "tasks/"+hash(x.id), x.id))
		e.Expiry = true
		tr.Events = append(tr.Events, d, e)
	}
	tr.Spread = map[string]int{"dueShard": 32}
	rows := scale.New(tr).Extrapolate(mean())
	if c := row(t, rows, "collection", "idempotency"); c.Deleted != 200 || !near(c.Rate, 2*mean().Submits) {
		t.Errorf("idempotency: %+v; want 200 expiries, %.0f writes/s (created and expired at the submit rate)", c, 2*mean().Submits)
	}
	if d := row(t, rows, "document", "idempotency/{id}"); d.Recorded != 2 || !near(d.Rate, 2/mean().Lifetime()) {
		t.Errorf("idempotency/{id}: %+v; want 2 writes (created, expired) in a task's life", d)
	}
	ix := row(t, rows, "index", listing)
	if !ix.Monotonic || !near(ix.Rate, 625) || !ix.Over() {
		t.Errorf("listing range: %+v; want sequential by its expiries, 625 entries/s, over", ix)
	}
	// Without the expiries: spread, 312.5 entries/s, no limit.
	var writes scale.Traffic = tr
	writes.Events = slices.DeleteFunc(slices.Clone(tr.Events), func(e scale.Event) bool { return e.Expiry })
	if ix := row(t, scale.New(writes).Extrapolate(mean()), "index", listing); ix.Monotonic || ix.Over() {
		t.Errorf("without its expiries the range is %+v; want spread", ix)
	}
}

// TestChangedValueRemovesEntry: a value that changes (a lease renewed)
// removes its old entry as it writes the new one, and a value cleared
// (the lease at the task's end) removes it: each removal counts in its
// range. A task starts, heartbeats 3 times and ends: 4 entries written,
// 4 removed; over 128 shards, 312.5 written a range and 625 in all.
func TestChangedValueRemovesEntry(t *testing.T) {
	const lease = "tasks(dueShard,state,leaseExpiresAt)"
	tr := workload(200, func(i int, id string) []scale.Event {
		name := "tasks/" + hash(id)
		e := func(k int) scale.Event {
			return entry(lease, "dueShard={k},state=RUNNING", fmt.Sprintf("%06d%02d", i, k), name, id)
		}
		ev := []scale.Event{e(0)}
		for k := 1; k <= 3; k++ { // renewed: the new lease, the old removed
			ev = append(ev, e(k), removal(e(k-1)))
		}
		return append(ev, removal(e(3))) // ended: cleared
	})
	tr.Spread = map[string]int{"dueShard": 128}
	ix := row(t, scale.New(tr).Extrapolate(mean()), "index", lease)
	if ix.Recorded != 1600 || ix.Deleted != 800 || !near(ix.Rate, 625) || !ix.Over() {
		t.Errorf("lease range: %+v; want 1600 entries (800 removed), 625 entries/s, over", ix)
	}
}

// TestPeak: every rate of the load is checked at Target.Peak times its
// mean; the sweeper's own records (periodic) and a schedule's own record
// (priced at its shortest period) are not. A range at 300 entries/s is
// under at the mean and over at twice it.
func TestPeak(t *testing.T) {
	if scale.DefaultTarget.Peak != 2 {
		t.Errorf("default peak %g, want 2", scale.DefaultTarget.Peak)
	}
	const lease = "tasks(dueShard,state,leaseExpiresAt)"
	tr := workload(200, func(i int, id string) []scale.Event {
		return []scale.Event{doc("tasks/"+hash(id), "tasks", id),
			entry(lease, "dueShard={k},state=RUNNING", fmt.Sprintf("%012d", i), "tasks/"+hash(id), id),
			{Kind: scale.Dispatch, Name: "queues/big-q" + scale.ShardMark, Task: id}}
	})
	tr.Events = append(tr.Events, doc("meta/sweeper", "meta", ""))
	tr.Duration, tr.SweepEvery = 10e9, 1e9
	tr.Spread = map[string]int{"dueShard": 32, "queues/big-q" + scale.ShardMark: 30}
	at := func(peak float64) []scale.Row {
		tg := scale.DefaultTarget
		tg.Peak = peak
		return scale.New(tr).Extrapolate(tg)
	}
	m, p := at(1), at(2)
	for _, c := range []struct {
		section, name string
		factor        float64
	}{{"index", lease, 2}, {"document", "tasks/{id}", 2}, {"collection", "tasks", 2}, {"queue", "queues/big-q{k}", 2}, {"document", "meta/sweeper", 1}} {
		a, b := row(t, m, c.section, c.name), row(t, p, c.section, c.name)
		if !near(b.Rate, c.factor*a.Rate) || !near(b.Mean, a.Rate) {
			t.Errorf("%s %s: %.4f at the peak, %.4f at the mean (%.4f); want ×%g", c.section, c.name, b.Rate, a.Rate, b.Mean, c.factor)
		}
	}
	if a, b := row(t, m, "index", lease), row(t, p, "index", lease); a.Over() || !b.Over() || !near(a.Rate, 312.5) {
		t.Errorf("lease range: %+v at the mean, %+v at the peak; want 312.5 under, 625 over", a, b)
	}
	if tg := scale.DefaultTarget; tg.Fires().Peak != 1 {
		t.Errorf("the fires' target peaks at %g: the burst is a peak already", tg.Fires().Peak)
	}
}
