package store

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/task"
)

// TestWaitingWithoutRank: a task a build before ranks left waiting (its
// waitingSince set, no waitRank) is not found by rank, and is found with
// the oldest, ranked from its waitingSince; a ranked one is found both
// ways, once.
func TestWaitingWithoutRank(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, emulatortest.ProjectID(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	since := now.Add(-time.Minute)
	ids := map[string]string{}
	for _, name := range []string{"legacy", "ranked"} {
		tk, _, err := s.Create(ctx, task.Task{ID: task.NewTaskID(now), RunID: task.NewRunID(now), TenantID: "acme", WorkspaceID: "ws",
			TaskKey: name, Worker: "w", Payload: json.RawMessage(`{}`), Retry: api.RetryPolicy{MaxAttempts: 1}}, now)
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = tk.ID
		// Waiting for a slot since a minute ago, as the admission stores it.
		fields := map[string]*pb.Value{"state": strVal(string(api.Queued)), "waitingSince": timeValue(since)}
		drop := []string{}
		if name == "ranked" {
			fields["priority"], fields["waitRank"] = intVal(2), timeValue(since.Add(task.PriorityAging))
		} else {
			drop = append(drop, "waitRank", "priority")
		}
		rewriteDoc(t, s, s.taskName(tk.ID), fields, drop...)
	}
	for _, c := range []struct {
		oldest bool
		want   []string
	}{{false, []string{ids["ranked"]}}, {true, []string{ids["legacy"], ids["ranked"]}}} {
		got, failed, err := s.WaitingForSlot(ctx, now, 10, c.oldest)
		if err != nil || failed != 0 {
			t.Fatalf("oldest %v: %d failed, %v", c.oldest, failed, err)
		}
		var gotIDs []string
		for _, tk := range got {
			gotIDs = append(gotIDs, tk.ID)
			if r := task.WaitRank(&tk); tk.ID == ids["legacy"] && (r == nil || !r.Equal(since.Add(2*task.PriorityAging))) {
				t.Errorf("the legacy task ranks %v, want its waitingSince + 2 levels", r)
			}
		}
		if slices.Sort(gotIDs); !slices.Equal(gotIDs, slices.Sorted(slices.Values(c.want))) {
			t.Errorf("oldest %v: waiting %v, want %v", c.oldest, gotIDs, c.want)
		}
	}
}
