package main

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/scale"
	"github.com/servo-dev/servo/internal/store"
)

func TestAttribute(t *testing.T) {
	writes := []store.RecordedWrite{
		// A submit: the task, its quota shard and run in one commit.
		{Commit: 1, Doc: "quotas/t-0", Collection: "quotas"},
		{Commit: 1, Doc: "tasks/a", Collection: "tasks", TaskID: "a", Entries: []store.RecordedEntry{{Index: "tasks.__name__", Value: "tasks/a"}}},
		{Commit: 1, Doc: "runs/r", Collection: "runs"},
		// A failed delivery's record: the outbox entry holds its task's id.
		{Commit: 2, Doc: "outbox/e", Collection: "outbox", TaskID: "b"},
		// The sweeper's record, and a delete.
		{Commit: 3, Doc: "meta/sweeper", Collection: "meta", Cause: "sweeper"},
		{Commit: 4, Doc: "tasks/a", Collection: "tasks", Delete: true},
		// A fire decided: the schedule, and what else its commit writes.
		{Commit: 5, Doc: "schedules/s", Collection: "schedules"},
		{Commit: 5, Doc: "meta/fires", Collection: "meta"},
	}
	events, err := attribute(writes)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events {
		got = append(got, strings.TrimSpace(string(e.Kind)+" "+e.Name+" "+e.Task+" "+e.Schedule))
	}
	want := []string{"document quotas/t-0 a", "document tasks/a a", "index tasks.__name__ a", "document runs/r a",
		"document outbox/e b", "document meta/sweeper", "document tasks/a a", "document schedules/s  schedules/s", "document meta/fires  schedules/s"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if e := events[2]; e.Kind != scale.IndexEntry || e.Doc != "tasks/a" || e.Value != "tasks/a" {
		t.Errorf("index entry %+v", e)
	}
	// The delete counts, for the task of the document's last write.
	if e := events[6]; !e.Delete || e.Task != "a" {
		t.Errorf("delete %+v, want task a's", e)
	}
	// A TTL expiry (listed after the writes) is for whom the document's
	// last write was, its removed entries with it.
	exp, err := attribute(append(slices.Clone(writes), store.RecordedWrite{Doc: "runs/r", Collection: "runs", Delete: true, Expiry: true, Cause: "TTL expiry",
		Entries: []store.RecordedEntry{{Index: "runs.__name__", Value: "runs/r", Removed: true}}}))
	if err != nil {
		t.Fatal(err)
	}
	if e := exp[len(exp)-2:]; e[0].Task != "a" || !e[0].Expiry || !e[0].Delete || e[1].Kind != scale.IndexEntry || !e[1].Delete || !e[1].Expiry {
		t.Errorf("expiry %+v, want a delete of task a's with its entry removed", e)
	}
	// A commit of no task, no schedule and no cause is the model's error,
	// never the sweeper's: a counter written in a commit of its own.
	writes = append(writes, store.RecordedWrite{Commit: 6, Doc: "meta/completions", Collection: "meta", Path: "github.com/servo-dev/servo/internal/callbacks.count (handler.go:42)"})
	if _, err := attribute(writes); err == nil || !strings.Contains(err.Error(), "meta/completions, from github.com/servo-dev/servo/internal/callbacks.count (handler.go:42)") {
		t.Errorf("an unattributed commit: %v, want an error naming its document and code", err)
	}
}

// TestFamilies: the members of hash-spread families are renamed to their
// family and counted at the target.
func TestFamilies(t *testing.T) {
	hot := "quotas/t_" + base64.RawURLEncoding.EncodeToString([]byte("hot"))
	plain := "quotas/t_" + base64.RawURLEncoding.EncodeToString([]byte("tenant-1"))
	events := []scale.Event{
		{Kind: scale.IndexEntry, Name: "tasks(dueShard,state,leaseExpiresAt)", Range: `dueShard=12,state="RUNNING"`},
		{Kind: scale.Document, Name: hot + "-17"},
		{Kind: scale.Document, Name: plain + "-2"}, // no limits at the target: not a family
		{Kind: scale.Dispatch, Name: "queues/big"},
		{Kind: scale.Dispatch, Name: "queues/big-q7"},
		{Kind: scale.Dispatch, Name: "queues/worker-1"},
		{Kind: scale.IndexEntry, Name: "tasks.quota.tenantShard ASCENDING", Value: "0000000017", Doc: "tasks/ab12_task_1"},
	}
	tg := scale.DefaultTarget
	tg.Workers = 2 // worker-1 takes the other half: 5 000 tasks/s, 10 000 declared
	spread, _ := families(events, tg, plan{dueShards: 128, workers: map[string]scale.Role{"big": scale.Hot, "worker-1": scale.Ordinary}},
		map[string]scale.Role{"hot": scale.Hot, "tenant-1": scale.Ordinary},
		map[string]string{"big": "queues/big", "worker-1": "queues/worker-1"})
	var got []string
	for _, e := range events {
		got = append(got, e.Name+" "+e.Range)
	}
	want := []string{`tasks(dueShard,state,leaseExpiresAt) dueShard={k},state="RUNNING"`, hot + "-{k} ", plain + "-2 ",
		"queues/big-q{k} ", "queues/big-q{k} ", "queues/worker-1-q{k} ", "tasks.quota.tenantShard ASCENDING tasks.quota.tenantShard={k}"}
	if !slices.Equal(got, want) {
		t.Errorf("renamed:\n%q\nwant\n%q", got, want)
	}
	// The hot tenant declares 2 × 3 000 tasks/s (the target's peak): 30 000
	// shards at 5 writes a task (quota.WritesPerTask) and 1 write/s a
	// shard; each worker 2 × 5 000 tasks/s × 1.5 dispatches a task
	// (DispatchesPerTask): 30 queues.
	// A quota shard number's index: spread over the fewest shards of a
	// limited scope (the hot tenant's here).
	if e := events[len(events)-1]; e.Value != "tasks/ab12_task_1" {
		t.Errorf("hash-valued entry %+v: want its value replaced by its document", e)
	}
	for k, n := range map[string]int{"dueShard": 128, hot + "-{k}": 30000, "queues/big-q{k}": 30, "queues/worker-1-q{k}": 30, "tasks.quota.tenantShard": 30000} {
		if spread[k] != n {
			t.Errorf("spread[%q] = %d, want %d (all: %v)", k, spread[k], n, spread)
		}
	}
	if len(spread) != 5 {
		t.Errorf("spread has %d families, want 5: %v", len(spread), spread)
	}
}

// TestOverCap: a tenant whose declared peak (Headroom × its rate) is over
// the quota's cap is named.
func TestOverCap(t *testing.T) {
	tenants := map[string]scale.Role{"hot": scale.Hot, "limited-1": scale.Limited, "tenant-1": scale.Ordinary}
	if got := overCap(scale.DefaultTarget, tenants); len(got) != 0 {
		t.Errorf("at the default target: %v, want none (the hot tenant declares 6 000/s)", got)
	}
	tg := scale.DefaultTarget
	tg.HotShare, tg.Submits = 0.6, quota.MaxPeakRate // its peak 1.2 × the cap
	if got := overCap(tg, tenants); !slices.Equal(got, []string{"hot"}) {
		t.Errorf("a 60 %% tenant: %v, want [hot]", got)
	}
	if l := targetLimits(tg, scale.Hot); l.PeakRate != quota.MaxPeakRate {
		t.Errorf("declared peak %v, want the cap %d", l.PeakRate, quota.MaxPeakRate)
	}
}

// TestQuotaWritesPerTask: the counter writes a task of a rate-sized
// scope makes, and the dispatches a worker's task makes, are measured on
// the recording and held to what sizes the shards and queues
// (quota.WritesPerTask, DispatchesPerTask): more is reported (run exits
// 1 with the line; TestScaleCommand requires the real recording within).
func TestQuotaWritesPerTask(t *testing.T) {
	tg := scale.DefaultTarget
	hot := "quotas/t_" + base64.RawURLEncoding.EncodeToString([]byte("hot")) + "-"
	build := func(writes int, dispatches int) scale.Traffic {
		tr := scale.Traffic{Tasks: map[string]scale.TaskInfo{}, Tenants: map[string]scale.Role{"hot": scale.Hot, "t": scale.Ordinary}}
		for i := range 10 {
			id := fmt.Sprint("task_", i)
			tr.Tasks[id] = scale.TaskInfo{Tenant: "hot", Worker: "big"}
			for k := range writes {
				tr.Events = append(tr.Events, scale.Event{Kind: scale.Document, Name: fmt.Sprint(hot, (i+k)%7), Task: id})
			}
			for range dispatches {
				tr.Events = append(tr.Events, scale.Event{Kind: scale.Dispatch, Name: "queues/big", Task: id})
			}
		}
		// An unlimited tenant's counters, and a delete: not counted.
		tr.Tasks["task_x"] = scale.TaskInfo{Tenant: "t", Worker: "big"}
		tr.Events = append(tr.Events, scale.Event{Kind: scale.Document, Name: hot + "1", Task: "task_0", Delete: true})
		return tr
	}
	w, d := perTask(build(quota.WritesPerTask, 1), tg)
	if w["hot"] != quota.WritesPerTask || len(w) != 1 || d["big"] != 10.0/11 {
		t.Errorf("per task: writes %v, dispatches %v; want hot %d, big 10/11", w, d, quota.WritesPerTask)
	}
	if got := overPerTask(w, d); got != nil {
		t.Errorf("within: %q", got)
	}
	w, d = perTask(build(quota.WritesPerTask+1, 2), tg)
	if got := overPerTask(w, d); len(got) != 2 || !strings.Contains(got[0], "hot tenant's recorded tasks make 6.00 counter writes a task, over quota.WritesPerTask (5)") ||
		!strings.Contains(got[1], "big worker's recorded tasks make 1.82 dispatches a task") {
		t.Errorf("over: %q", got)
	}
}
