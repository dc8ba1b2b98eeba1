package main

import (
	"slices"
	"testing"

	"github.com/servo-dev/servo/internal/scale"
	"github.com/servo-dev/servo/internal/store"
)

func TestAttribute(t *testing.T) {
	writes := []store.RecordedWrite{
		// A submit: the task, its quota shard and run in one commit.
		{Commit: 1, Doc: "quotas/t-0", Collection: "quotas"},
		{Commit: 1, Doc: "tasks/a", Collection: "tasks", TaskID: "a", Entries: []store.RecordedEntry{{Index: "tasks.__name__", Value: "tasks/a"}}},
		{Commit: 1, Doc: "runs/r", Collection: "runs"},
		// A delivery mark: the outbox entry holds its task's id.
		{Commit: 2, Doc: "outbox/e", Collection: "outbox", TaskID: "b"},
		// The sweeper's record, and a delete.
		{Commit: 3, Doc: "meta/sweeper", Collection: "meta"},
		{Commit: 4, Doc: "tasks/a", Collection: "tasks", Delete: true},
	}
	var got []string
	for _, e := range attribute(writes) {
		got = append(got, string(e.Kind)+" "+e.Name+" "+e.Task)
	}
	want := []string{"document quotas/t-0 a", "document tasks/a a", "index tasks.__name__ a", "document runs/r a",
		"document outbox/e b", "document meta/sweeper "}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if e := attribute(writes[1:2])[1]; e.Kind != scale.IndexEntry || e.Doc != "tasks/a" || e.Value != "tasks/a" {
		t.Errorf("index entry %+v", e)
	}
}
