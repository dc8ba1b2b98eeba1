package main

import (
	"encoding/base64"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/scale"
)

// The families a hash spreads at the target (scale.Traffic.Spread): the
// due shards of every due and listing index, each limited scope's quota
// counter shards, and each worker's queues. The recording names their
// members; families() renames them to the family and says how many
// members the target has.

var (
	dueShardRE   = regexp.MustCompile(`\bdueShard=\d+`)
	quotaShardRE = regexp.MustCompile(`^(quotas/([tws])_([A-Za-z0-9_-]*))-\d+$`)
	extraQueueRE = regexp.MustCompile(`-q\d+$`)
	// hashValuedRE are the single-field indexes whose values are a quota
	// shard number, drawn by a hash of the task id (quota.Admission): a
	// task's own shard, and each counter document's.
	hashValuedRE = regexp.MustCompile(`^(tasks\.quota\.\w*Shard|quotas\.shard) (?:ASCENDING|DESCENDING)$`)
)

// A tenant or worker declares its peak (quota peakRate, a worker's
// maxDispatchesPerSecond) at the target's Peak times its mean rate
// (scale.Target.Peak, -peak): the model checks every rate at that peak,
// so quota shards and queues are checked at their declared peak. A
// worker's peak is in dispatches: a task costs DispatchesPerTask of them
// (retries, re-drives), which TestDispatchesPerTask holds against the
// recording; a scope's counter writes a task are quota.WritesPerTask
// (TestQuotaWritesPerTask).

// DispatchesPerTask is the Cloud Tasks dispatches a task makes at most
// on average, as an operator declaring maxDispatchesPerSecond counts
// them: the recording's tasks make 1.4 (one in ten is retried after a
// failure, one in ten after its lease lapsed).
const DispatchesPerTask = 1.5

// declared are the quota limits and dispatch rates the deployment's
// Terraform variables declare (-var-file): the zero value declares
// nothing, and every tenant and worker then declares what an operator
// would at the target.
type declared struct {
	// hot, when set, is the hot tenant's limits: tenant_quotas' entry
	// with the highest peak_rate (hotName).
	hot     *quota.Limits
	hotName string
	// bigDispatches, when above 0, is the big worker's
	// maxDispatchesPerSecond: workers' entry with the highest
	// queue.max_dispatches_per_second (bigName).
	bigDispatches float64
	bigName       string
	// quotaShards is quota_shards: the counter shards of a limited scope
	// that declares no peak rate (0: quota.DefaultShards).
	quotaShards int
}

// policy is the quota policy the deployment declares shards with.
func (d declared) policy() *quota.Policy { return &quota.Policy{Shards: d.quotaShards} }

// targetLimits are the quota limits of a tenant of role r at tg, as an
// operator would declare them: the hot tenant's peakRate its share of the
// submits (maxRunning far above what it runs); a limited tenant runs at
// its limit, which holds its rate's tasks for their lifetime.
func targetLimits(tg scale.Target, r scale.Role) quota.Limits { return declared{}.tenantLimits(tg, r) }

// tenantLimits are the limits of a tenant of role r at tg: the hot
// tenant's as d declares them, else targetLimits'.
func (d declared) tenantLimits(tg scale.Target, r scale.Role) quota.Limits {
	switch r {
	case scale.Hot:
		if d.hot != nil {
			return *d.hot
		}
		return quota.Limits{MaxRunning: 10_000_000, PeakRate: min(quota.MaxPeakRate, tg.PeakFactor()*tg.TenantRate(scale.Hot))}
	case scale.Limited:
		rate := tg.TenantRate(scale.Limited)
		return quota.Limits{MaxRunning: int(math.Ceil(rate * tg.Lifetime())), PeakRate: min(quota.MaxPeakRate, tg.PeakFactor()*rate)}
	}
	return quota.Limits{}
}

// workerLimits are the limits at tg of a limited worker of role r (one the
// recording limits, limitedWorker): as an operator would declare them,
// its run slots its rate's tasks for their lifetime and its peakRate its
// peak; each tenant's share (perTenant) the run slots of an ordinary
// tenant's tasks on it (the tenant's rate times the worker's share of all
// tasks), with no peak rate (Terraform's worker_quotas.per_tenant has
// none): its shards are quota_shards.
func (d declared) workerLimits(tg scale.Target, r scale.Role) quota.Limits {
	rate := tg.WorkerRate(r)
	pair := tg.TenantRate(scale.Ordinary) * rate / max(1, tg.Submits)
	return quota.Limits{MaxRunning: int(math.Ceil(rate * tg.Lifetime())), PeakRate: min(quota.MaxPeakRate, tg.PeakFactor()*rate),
		PerTenant: &quota.Limits{MaxRunning: max(1, int(math.Ceil(pair*tg.Lifetime())))}}
}

// overCap returns the tenants of tenants whose peak at tg (tg.Peak × their
// rate) is over the quota's cap (quota.MaxPeakRate): their counters are
// sized at the cap, and the model's rows for them understate nothing but
// say no more than the cap allows.
func overCap(tg scale.Target, tenants map[string]scale.Role) []string {
	var out []string
	for name, r := range tenants {
		if (r == scale.Hot || r == scale.Limited) && tg.PeakFactor()*tg.TenantRate(r) > quota.MaxPeakRate {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// workerRate is the dispatch rate a worker of role r declares at tg: its
// tasks' dispatches at the target's peak.
func workerRate(tg scale.Target, r scale.Role) float64 { return declared{}.workerRate(tg, r) }

// workerRate is the dispatch rate of a worker of role r at tg: the big
// worker's as d declares it, else its tasks' dispatches at the target's
// peak.
func (d declared) workerRate(tg scale.Target, r scale.Role) float64 {
	if r == scale.Hot && d.bigDispatches > 0 {
		return d.bigDispatches
	}
	return min(maxWorkerRate, tg.PeakFactor()*DispatchesPerTask*tg.WorkerRate(r))
}

// maxWorkerRate is the most a worker may declare: its most queues
// (enqueue.MaxQueuesPerWorker) at a queue's most (MaxQueueDispatchesPerSecond). A
// worker whose peak is above it declares it, and its queues' row is over.
const maxWorkerRate = enqueue.MaxQueuesPerWorker * enqueue.MaxQueueDispatchesPerSecond

// families renames the events of spread families to their family name
// (scale.ShardMark for the member) and returns the families' member counts
// at tg, and the documents of a tenant's share of a worker
// (scale.Traffic.Pairs). p gives the stack's due shard count, the
// recorded workers with their roles, the limited worker and what the
// deployment declares; tenants are the recorded tenants with their roles;
// queues maps each worker to its base queue (relQueue form).
func families(events []scale.Event, tg scale.Target, p plan, tenants map[string]scale.Role, queues map[string]string) (spread map[string]int, pairs map[string]bool) {
	spread, pairs = map[string]int{"dueShard": p.dueShards}, map[string]bool{}
	policy := p.decl.policy()
	family := map[string]string{} // base queue → its family name
	for w, base := range queues {
		if n := enqueue.QueueCount(p.decl.workerRate(tg, p.workers[w])); n > 1 {
			family[base] = base + "-q" + scale.ShardMark
			spread[family[base]] = n
		}
	}
	// A quota shard number's index takes its entries at random places:
	// its busiest stretch carries no more than the scope with the fewest
	// shards gives one shard.
	fewest := 0
	for _, r := range tenants {
		if l := p.decl.tenantLimits(tg, r); l.Limited() {
			if n := policy.ShardsFor(l); fewest == 0 || n < fewest {
				fewest = n
			}
		}
	}
	// limits are the target's limits of a quota scope: a tenant's, a
	// worker's or a tenant's share of a worker (quota.ShareName).
	limits := func(kind, name string) quota.Limits {
		switch kind {
		case "t":
			return p.decl.tenantLimits(tg, tenants[name])
		case "w":
			if name == p.limitedWorker {
				return p.decl.workerLimits(tg, p.workers[name])
			}
		case "s":
			if w, _, _ := strings.Cut(name, "\x00"); w == p.limitedWorker {
				if l := p.decl.workerLimits(tg, p.workers[w]).PerTenant; l != nil {
					return *l
				}
			}
		}
		return quota.Limits{}
	}
	for i, e := range events {
		switch e.Kind {
		case scale.IndexEntry:
			if m := hashValuedRE.FindStringSubmatch(e.Name); m != nil && fewest > 0 {
				e.Range, e.Value, e.Text = m[1]+"="+scale.ShardMark, e.Doc, ""
				spread[m[1]] = fewest
				break
			}
			e.Range = dueShardRE.ReplaceAllString(e.Range, "dueShard="+scale.ShardMark)
		case scale.Document:
			m := quotaShardRE.FindStringSubmatch(e.Name)
			if m == nil {
				break
			}
			name, err := base64.RawURLEncoding.DecodeString(m[3])
			if err != nil {
				break
			}
			if l := limits(m[2], string(name)); l.Limited() {
				e.Name = m[1] + "-" + scale.ShardMark
				spread[e.Name] = policy.ShardsFor(l)
			}
			if m[2] == "s" {
				pairs[e.Name] = true
			}
		case scale.Dispatch:
			if f, ok := family[strings.TrimSuffix(e.Name, extraQueueRE.FindString(e.Name))]; ok {
				e.Name = f
			}
		}
		events[i] = e
	}
	return spread, pairs
}

// perTask is what the recording's tasks cost their rate-sized scopes and
// their workers: each limited tenant's counter writes a task (its
// quota/t_… documents' writes over its recorded tasks) and each worker's
// dispatches a task.
func perTask(tr scale.Traffic, tg scale.Target) (writes, dispatches map[string]float64) {
	tasksOf, tasksAt := map[string]int{}, map[string]int{}
	for _, ti := range tr.Tasks {
		tasksOf[ti.Tenant]++
		tasksAt[ti.Worker]++
	}
	scopes := map[string]string{} // quota document prefix → tenant
	for name, r := range tr.Tenants {
		if targetLimits(tg, r).PeakRate > 0 {
			scopes["quotas/t_"+base64.RawURLEncoding.EncodeToString([]byte(name))+"-"] = name
		}
	}
	nw, nd := map[string]int{}, map[string]int{}
	for _, e := range tr.Events {
		switch {
		case e.Kind == scale.Document && !e.Delete && strings.HasPrefix(e.Name, "quotas/t_"):
			if tn, ok := scopes[e.Name[:strings.LastIndex(e.Name, "-")+1]]; ok {
				nw[tn]++
			}
		case e.Kind == scale.Dispatch && e.Task != "":
			nd[tr.Tasks[e.Task].Worker]++
		}
	}
	writes, dispatches = map[string]float64{}, map[string]float64{}
	for tn, n := range nw {
		writes[tn] = float64(n) / float64(max(1, tasksOf[tn]))
	}
	for w, n := range nd {
		dispatches[w] = float64(n) / float64(max(1, tasksAt[w]))
	}
	return writes, dispatches
}

// overPerTask says which scopes' tasks make more counter writes than
// quota.WritesPerTask sizes their shards for, and which workers' tasks
// more dispatches than DispatchesPerTask sizes their queues for: their
// shards and queues, sized at the declared peak for fewer, are over it
// at that peak.
func overPerTask(writes, dispatches map[string]float64) []string {
	var out []string
	for _, tn := range slices.Sorted(maps.Keys(writes)) {
		if w := writes[tn]; w > quota.WritesPerTask {
			out = append(out, fmt.Sprintf("The %s tenant's recorded tasks make %.2f counter writes a task, over quota.WritesPerTask (%d) that sizes its counter shards.", tn, w, quota.WritesPerTask))
		}
	}
	for _, w := range slices.Sorted(maps.Keys(dispatches)) {
		if d := dispatches[w]; d > DispatchesPerTask {
			out = append(out, fmt.Sprintf("The %s worker's recorded tasks make %.2f dispatches a task, over DispatchesPerTask (%g) that sizes its queues.", w, d, DispatchesPerTask))
		}
	}
	return out
}
