package scale_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/scale"
)

// workload builds hand-made traffic of n tasks: tenant "hot" submits 30 %,
// worker "big" takes half; each task's events come from events(i, id).
func workload(n int, events func(i int, id string) []scale.Event) scale.Traffic {
	tr := scale.Traffic{Tasks: map[string]scale.TaskInfo{},
		Tenants: map[string]scale.Role{"hot": scale.Hot, "t1": scale.Ordinary, "t2": scale.Ordinary},
		Workers: map[string]scale.Role{"big": scale.Hot, "w1": scale.Ordinary}}
	for i := range n {
		id := fmt.Sprintf("task_%06d", i)
		tenant, worker := []string{"hot", "t1", "t2"}[i%3], []string{"big", "w1"}[i%2]
		tr.Tasks[id] = scale.TaskInfo{Tenant: tenant, Worker: worker}
		tr.Events = append(tr.Events, events(i, id)...)
	}
	return tr
}

// mean is the default target at its mean (Peak 1): the tests of what the
// model counts; TestPeak tests the peak.
func mean() scale.Target {
	tg := scale.DefaultTarget
	tg.Peak = 1
	return tg
}

func hash(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:8]) }

func doc(name, coll, task string) scale.Event {
	return scale.Event{Kind: scale.Document, Name: name, Collection: coll, Task: task}
}

func entry(index, rng, value, docName, task string) scale.Event {
	return scale.Event{Kind: scale.IndexEntry, Name: index, Range: rng, Value: value, Doc: docName, Task: task}
}

func TestExtrapolate(t *testing.T) {
	for _, c := range []struct {
		name string
		tr   scale.Traffic
		over []string // section/name of the rows over their limits
	}{
		{"spread: per-task documents, hashed names, sharded queues", workload(200, func(i int, id string) []scale.Event {
			name := "tasks/" + hash(id)
			ev := []scale.Event{doc(name, "tasks", id), doc(name, "tasks", id), entry("tasks.__name__", "", "", name, id),
				{Kind: scale.Dispatch, Name: fmt.Sprintf("queues/w-%d", i%32), Task: id},
				{Kind: scale.Publish, Name: "events", Key: id, Bytes: 500, Task: id}}
			for range 3 {
				ev = append(ev, doc(name, "tasks", id))
			}
			return ev
		}), nil},
		{"one hot document: every task writes meta/counter", workload(200, func(i int, id string) []scale.Event {
			return []scale.Event{doc("tasks/"+hash(id), "tasks", id), doc("meta/counter", "meta", id)}
		}), []string{"document meta/counter"}},
		{"one sequential index: ULID-like names", workload(200, func(i int, id string) []scale.Event {
			return []scale.Event{doc("tasks/"+id, "tasks", id), entry("tasks.__name__", "", "", "tasks/"+id, id)}
		}), []string{"index tasks.__name__"}},
		{"one sequential range of a composite index: one shard", workload(200, func(i int, id string) []scale.Event {
			return []scale.Event{entry("tasks(dueShard,state,leaseExpiresAt)", "dueShard=0,state=RUNNING", fmt.Sprintf("%012d", i), "tasks/"+hash(id), id)}
		}), []string{"index tasks(dueShard,state,leaseExpiresAt)"}},
		{"a time rounded to the second: few values, still sequential", workload(200, func(i int, id string) []scale.Event {
			// 200 tasks written over 5 seconds: the value is the second
			// (store.WriteRecorder's timestamp encoding: tag '3').
			return []scale.Event{entry("tasks.updatedSec ASCENDING", "", fmt.Sprintf("3%08d", 1000+i/40), "tasks/"+hash(id), id)}
		}), []string{"index tasks.updatedSec ASCENDING"}},
		{"a state: few values, each spread by document name", workload(200, func(i int, id string) []scale.Event {
			return []scale.Event{entry("tasks.state ASCENDING", "", []string{"4QUEUED", "4RUNNING"}[i/100], "tasks/"+hash(id), id)}
		}), nil},
		{"one hot queue: the big worker's only queue", workload(200, func(i int, id string) []scale.Event {
			q := "queues/w1"
			if i%2 == 0 {
				q = "queues/big"
			}
			return []scale.Event{{Kind: scale.Dispatch, Name: q, Task: id}}
		}), []string{"queue queues/big"}},
		{"a hot tenant's quota on 4 shards", workload(200, func(i int, id string) []scale.Event {
			if i%3 != 0 {
				return nil
			}
			return []scale.Event{doc(fmt.Sprintf("quotas/tenant-hot-%d", i%4), "quotas", id)}
		}), []string{"document quotas/{id}"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rows := scale.New(c.tr).Extrapolate(mean())
			var got []string
			for _, r := range scale.Over(rows) {
				got = append(got, r.Section+" "+r.Name)
			}
			if strings.Join(got, ";") != strings.Join(c.over, ";") {
				var b strings.Builder
				scale.Print(&b, rows)
				t.Errorf("over: %q, want %q\n%s", got, c.over, b.String())
			}
		})
	}
}

// TestRates checks the extrapolated rates of each scope.
func TestRates(t *testing.T) {
	tr := workload(300, func(i int, id string) []scale.Event {
		ev := []scale.Event{doc("tasks/"+hash(id), "tasks", id)}
		if i%3 == 0 { // the hot tenant's tasks: one shard of 100
			ev = append(ev, doc("quotas/hot", "quotas", id))
		}
		if i%2 == 0 {
			ev = append(ev, scale.Event{Kind: scale.Dispatch, Name: "queues/big", Task: id})
		}
		return ev
	})
	tr.Events = append(tr.Events, doc("meta/sweeper", "meta", ""), doc("meta/sweeper", "meta", ""))
	tr.Duration, tr.SweepEvery = 10*time.Second, time.Second
	tg := scale.DefaultTarget
	want := map[string]struct {
		scope scale.Scope
		rate  float64
	}{
		"document tasks/{id}":   {scale.PerTask, 1 / tg.Lifetime()},                // one write in a 100 s life
		"document quotas/{id}":  {scale.PerTenant, 0.3 * tg.Submits},               // every hot submit
		"document meta/sweeper": {scale.Periodic, 2.0 / 10 * 1 / 15},               // 2 in 10 s at a 1 s cadence, 15 s in production
		"queue queues/big":      {scale.PerWorker, tg.BigWorkerShare * tg.Submits}, // every task of the big worker
		"collection tasks":      {scale.Global, tg.Submits},
	}
	rows := scale.New(tr).Extrapolate(tg)
	seen := 0
	for _, r := range rows {
		w, ok := want[r.Section+" "+r.Name]
		if !ok {
			continue
		}
		seen++
		if r.Scope != w.scope || r.Mean < w.rate*0.999 || r.Mean > w.rate*1.001 {
			t.Errorf("%s %s: %s %.4f, want %s %.4f", r.Section, r.Name, r.Scope, r.Mean, w.scope, w.rate)
		}
		// At the peak: twice the mean, but the sweeper's own record.
		peak := tg.Peak
		if r.Scope == scale.Periodic {
			peak = 1
		}
		if r.Rate < r.Mean*peak*0.999 || r.Rate > r.Mean*peak*1.001 {
			t.Errorf("%s %s: %.4f at the peak, want %g × %.4f", r.Section, r.Name, r.Rate, peak, r.Mean)
		}
	}
	if seen != len(want) {
		t.Errorf("%d of %d rows found", seen, len(want))
	}
}

func TestMonotonic(t *testing.T) {
	seq := func(n int, f func(i int) string) []string {
		var out []string
		for i := range n {
			out = append(out, f(i))
		}
		return out
	}
	for _, c := range []struct {
		name string
		keys []string
		want bool
	}{
		{"increasing", seq(50, func(i int) string { return fmt.Sprintf("%06d", i) }), true},
		{"decreasing", seq(50, func(i int) string { return fmt.Sprintf("%06d", 1000-i) }), true},
		{"hashed", seq(50, func(i int) string { return hash(fmt.Sprint(i)) }), false},
		{"too few", []string{"a", "b", "c", "d", "e", "f", "g"}, false},
		// Each of 30 tasks writes 3 entries over its life, 8 tasks at a
		// time: a window of recent ids moving up.
		{"moving window", seq(90, func(i int) string { return fmt.Sprintf("%06d", i/3+(i%3)*8) }), true},
		{"one key rewritten", seq(50, func(int) string { return "quotas/t-0" }), false},
		{"short and spread", seq(9, func(i int) string { return hash(fmt.Sprint(i)) }), false},
		{"short and sequential", seq(9, func(i int) string { return fmt.Sprintf("%06d", i) }), true},
		{"mostly increasing, a few late", seq(100, func(i int) string {
			if i%20 == 0 {
				return "0000"
			}
			return fmt.Sprintf("%06d", i)
		}), true},
	} {
		if got := scale.Monotonic(c.keys); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestTarget(t *testing.T) {
	tg := scale.DefaultTarget
	if tg.Lifetime() != 100 || tg.HeartbeatsPerTask() != 3 {
		t.Errorf("lifetime %.0f s, %d heartbeats a task; want 100 s and 3", tg.Lifetime(), tg.HeartbeatsPerTask())
	}
}

// TestSpread: a family spread by a hash over n members gets 1/n of its
// traffic each, however unevenly a small recording fell on them.
func TestSpread(t *testing.T) {
	// 200 tasks' lease entries over 16 due shards, skewed: shard 0 has
	// half of them; and the hot tenant's quota writes over 8 of 9000 shards.
	tr := workload(200, func(i int, id string) []scale.Event {
		shard := i % 16
		if i%2 == 0 {
			shard = 0
		}
		ev := []scale.Event{entry("tasks(dueShard,state,leaseExpiresAt)", fmt.Sprintf("dueShard=%d,state=RUNNING", shard), fmt.Sprintf("%012d", i), "tasks/"+hash(id), id)}
		if i%3 == 0 {
			ev = append(ev, doc(fmt.Sprintf("quotas/t_hot-%d", i%8), "quotas", id))
		}
		return ev
	})
	rate := func(tr scale.Traffic, section, name string) float64 {
		t.Helper()
		for _, r := range scale.New(tr).Extrapolate(mean()) {
			if r.Section == section && r.Name == name {
				return r.Rate
			}
		}
		t.Fatalf("no row %s %s", section, name)
		return 0
	}
	const lease, quota = "tasks(dueShard,state,leaseExpiresAt)", "quotas/{id}"
	skewed := rate(tr, "index", lease)
	// 200 entries for 200 tasks: 10 000 a second at the target; shard 0
	// took the 100 of even tasks.
	if want := 10000.0 * 100 / 200; math.Abs(skewed-want) > 1 {
		t.Errorf("sampled peak %.0f, want %.0f (the busiest recorded shard)", skewed, want)
	}
	spread := tr
	spread.Events = slices.Clone(tr.Events)
	spread.Spread = map[string]int{"dueShard": 16, "quotas/t_hot-" + scale.ShardMark: 9000}
	for i, e := range spread.Events {
		e.Range = strings.NewReplacer(strings.Split(e.Range, ",")[0], "dueShard="+scale.ShardMark).Replace(e.Range)
		if e.Kind == scale.Document && strings.HasPrefix(e.Name, "quotas/t_hot-") {
			e.Name = "quotas/t_hot-" + scale.ShardMark
		}
		spread.Events[i] = e
	}
	if got, want := rate(spread, "index", lease), 10000.0/16; math.Abs(got-want) > 1 {
		t.Errorf("spread over 16 shards: %.0f entries/s, want %.0f", got, want)
	}
	// The hot tenant: 3 000 tasks/s, one quota write each, over 9 000 shards.
	if got, want := rate(spread, "document", quota), 3000.0/9000; math.Abs(got-want) > 0.01 {
		t.Errorf("quota shard: %.3f writes/s, want %.3f", got, want)
	}
}

// fires builds hand-made traffic of a schedules recording: n schedules,
// each firing twice; a fire makes a task and writes its schedule twice
// (decided, settled), plus what extra(fire, schedule doc) adds.
func fires(n int, extra func(i int, sched string) []scale.Event) scale.Traffic {
	tr := workload(2*n, func(i int, id string) []scale.Event {
		sched := "schedules/" + hash(fmt.Sprint("s", i/2))
		ev := []scale.Event{doc("tasks/"+hash(id), "tasks", id),
			{Kind: scale.Document, Name: sched, Collection: "schedules", Schedule: sched},
			{Kind: scale.Document, Name: sched, Collection: "schedules", Schedule: sched}}
		if extra != nil {
			ev = append(ev, extra(i, sched)...)
		}
		return ev
	})
	tr.Fires = map[string]int{}
	for i := range n {
		tr.Fires["schedules/"+hash(fmt.Sprint("s", i))] = 2
	}
	return tr
}

func TestSchedules(t *testing.T) {
	tg := scale.DefaultTarget
	if got, want := tg.FireBurst(), 10000.0/60; math.Abs(got-want) > 0.01 {
		t.Errorf("burst %.2f fires/s, want %.2f", got, want)
	}
	if got, want := tg.SteadyFires(), 90000.0/3540; math.Abs(got-want) > 0.01 {
		t.Errorf("steady %.2f fires/s, want %.2f", got, want)
	}
	if f := tg.Fires(); f.Submits != tg.FireBurst() || math.Abs(f.Lifetime()-tg.Lifetime()) > 1e-9 {
		t.Errorf("fires target: %.1f submits/s, a task lives %.0f s; want %.1f and %.0f", f.Submits, f.Lifetime(), tg.FireBurst(), tg.Lifetime())
	}
	rows := scale.New(fires(100, nil)).Extrapolate(tg.Fires())
	want := map[string]struct {
		scope scale.Scope
		rate  float64
	}{
		// 4 writes in 2 fires, a fire every 15 s sweep.
		"document schedules/{id}": {scale.PerSchedule, 2.0 / 15},
		// 2 writes a fire, at the burst's rate.
		"collection schedules": {scale.Global, 2 * tg.FireBurst()},
		"collection tasks":     {scale.Global, tg.FireBurst()},
	}
	seen := 0
	for _, r := range rows {
		if w, ok := want[r.Section+" "+r.Name]; ok {
			seen++
			if r.Scope != w.scope || math.Abs(r.Rate-w.rate) > w.rate*0.001 {
				t.Errorf("%s %s: %s %.4f, want %s %.4f", r.Section, r.Name, r.Scope, r.Rate, w.scope, w.rate)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("%d of %d rows found", seen, len(want))
	}
	if over := scale.Over(rows); len(over) > 0 {
		t.Errorf("over: %+v", over)
	}
	// Planted: every fire also counts itself in one document.
	rows = scale.New(fires(100, func(i int, sched string) []scale.Event {
		return []scale.Event{{Kind: scale.Document, Name: "meta/fires", Collection: "meta", Schedule: sched}}
	})).Extrapolate(tg.Fires())
	if over := scale.Over(rows); len(over) != 1 || over[0].Name != "meta/fires" || over[0].Scope != scale.Global {
		t.Errorf("a document every fire writes: over %+v, want meta/fires alone", over)
	}
}

func TestCombine(t *testing.T) {
	limit := scale.SequentialIndex
	burst := []scale.Row{
		{Section: "index", Name: "a(dueShard,t)", Scope: scale.Global, Rate: 100},
		{Section: "index", Name: "b(dueShard,t)", Scope: scale.Global, Rate: 100, Monotonic: true, Limit: &limit},
		{Section: "document", Name: "schedules/{id}", Scope: scale.PerSchedule, Rate: 0.1},
		{Section: "document", Name: "meta/sweeper", Scope: scale.Periodic, Rate: 0.1},
	}
	steady := []scale.Row{
		{Section: "index", Name: "a(dueShard,t)", Scope: scale.Global, Rate: 450, Monotonic: true, Limit: &limit},
		{Section: "index", Name: "b(dueShard,t)", Scope: scale.Global, Rate: 300, Monotonic: true, Limit: &limit},
		{Section: "document", Name: "meta/sweeper", Scope: scale.Periodic, Rate: 0.1},
	}
	got := map[string]scale.Row{}
	for _, r := range scale.Combine(burst, steady) {
		got[r.Name] = r
	}
	if _, ok := got["meta/sweeper"]; ok || len(got) != 3 {
		t.Errorf("rows %v: want a, b and schedules/{id}, the sweeper's record left to the steady table", got)
	}
	// a: spread in the burst, sequential in the steady load: held to the
	// sequential limit at the sum, and over it.
	if a := got["a(dueShard,t)"]; a.Rate != 550 || a.Steady != 450 || !a.Over() {
		t.Errorf("a: %+v, want 550 (450 steady), over", a)
	}
	if b := got["b(dueShard,t)"]; b.Rate != 400 || b.Over() {
		t.Errorf("b: %+v, want 400, under", b)
	}
	if s := got["schedules/{id}"]; s.Rate != 0.1 || s.Steady != 0 {
		t.Errorf("schedules/{id}: %+v, want 0.1 alone", s)
	}
}

// timeEntry is an index entry whose value is the time v (the recorder's
// encoding), written at at.
func timeEntry(index string, v, at time.Time, docName, task string) scale.Event {
	b := []byte{'3'}
	b = binary.BigEndian.AppendUint64(b, uint64(v.Unix())^1<<63)
	b = binary.BigEndian.AppendUint32(b, uint32(v.Nanosecond()))
	return scale.Event{Kind: scale.IndexEntry, Name: index, Value: string(b), Doc: docName, Task: task, At: at}
}

// TestTracksClock: a time that keeps a fixed distance from its write
// time is sequential, even when a short recording saw one value of it; a
// time that does not (a deadline callers choose) is not.
func TestTracksClock(t *testing.T) {
	base := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		at   func(i int) (value, written time.Time)
		over bool
	}{
		{"rounded to the second, all in one second", func(i int) (time.Time, time.Time) {
			w := base.Add(time.Duration(i) * 4 * time.Millisecond)
			return w.Truncate(time.Second), w
		}, true},
		{"a lease: the write time and a fixed timeout", func(i int) (time.Time, time.Time) {
			w := base.Add(time.Duration(i) * 4 * time.Millisecond)
			return w.Add(90 * time.Second), w
		}, true},
		{"deadlines callers choose, hours apart", func(i int) (time.Time, time.Time) {
			w := base.Add(time.Duration(i) * 4 * time.Millisecond)
			return w.Add(time.Duration(i*7919%200) * time.Hour), w
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := workload(200, func(i int, id string) []scale.Event {
				v, w := c.at(i)
				return []scale.Event{timeEntry("tasks.updatedSec ASCENDING", v, w, "tasks/"+hash(id), id)}
			})
			over := len(scale.Over(scale.New(tr).Extrapolate(scale.DefaultTarget))) > 0
			if over != c.over {
				t.Errorf("over %v, want %v", over, c.over)
			}
		})
	}
}

// The topic row counts what the publisher throughput quota counts (a
// request is at least 1 kB, rounded up to whole kB; one message a
// request) against the quota of the deployment's region: a large
// region's 200 MB/s, a small one's 50 MB/s.
func TestTopicQuota(t *testing.T) {
	for _, c := range []struct{ n, want int }{{0, 1000}, {1, 1000}, {500, 1000}, {1000, 1000}, {1001, 2000}, {2500, 3000}} {
		if got := scale.QuotaBytes(c.n); got != c.want {
			t.Errorf("QuotaBytes(%d) = %d, want %d", c.n, got, c.want)
		}
	}
	for region, want := range map[string]float64{"": 200e6, "us-central1": 200e6, "europe-west1": 200e6, "us-east1": 200e6, "europe-west3": 50e6, "asia-northeast1": 50e6} {
		if got := scale.TopicLimit(region).PerSecond; got != want {
			t.Errorf("TopicLimit(%q) = %g, want %g", region, got, want)
		}
	}
	// 300-byte messages, five a task: 5 kB of quota a task, 1 500 bytes of
	// messages. At the default 10 000 tasks/s and a peak of 2: 100 MB/s.
	tr := workload(100, func(i int, id string) []scale.Event {
		var ev []scale.Event
		for range 5 {
			ev = append(ev, scale.Event{Kind: scale.Publish, Name: "events", Key: id, Bytes: 300, Task: id})
		}
		return ev
	})
	for _, c := range []struct {
		region string
		over   bool
	}{{"us-central1", false}, {"europe-west3", true}} {
		tg := scale.DefaultTarget
		tg.Region = c.region
		var topic *scale.Row
		for _, r := range scale.New(tr).Extrapolate(tg) {
			if r.Section == "topic" {
				topic = &r
			}
		}
		if topic == nil {
			t.Fatal("no topic row")
		}
		if math.Abs(topic.Rate-100e6) > 1e3 || topic.Limit.PerSecond != scale.TopicLimit(c.region).PerSecond {
			t.Errorf("%s: topic row %.0f %s against %g, want 100 MB/s of quota bytes against the region's quota", c.region, topic.Rate, topic.Unit, topic.Limit.PerSecond)
		}
		if got := slices.ContainsFunc(scale.Over([]scale.Row{*topic}), func(r scale.Row) bool { return r.Section == "topic" }); got != c.over {
			t.Errorf("%s: topic over %v, want %v", c.region, got, c.over)
		}
	}
}
