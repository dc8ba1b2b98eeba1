package task

import (
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
)

// TestHistoryBound: the task document keeps its most recent transitions,
// at most HistoryLimit and within HistoryBytes (the latest always), in seq
// order without gaps, and Events gives them back with the task's identity.
func TestHistoryBound(t *testing.T) {
	big := &api.ErrorInfo{Category: api.CategoryInfrastructure, Message: strings.Repeat("m", api.MaxMessageBytes),
		StackTrace: strings.Repeat("s", api.MaxStackTraceBytes)}
	huge := &api.ErrorInfo{Category: api.CategoryInfrastructure, StackTrace: strings.Repeat("s", 2*HistoryBytes)}
	for _, tc := range []struct {
		name  string
		n     int            // transitions
		batch int            // transitions per record call
		err   *api.ErrorInfo // on every transition
		want  int            // kept
	}{
		{name: "few", n: 5, batch: 1, want: 5},
		{name: "past the limit, one at a time", n: HistoryLimit + 50, batch: 1, want: HistoryLimit},
		{name: "past the limit at once", n: HistoryLimit + 50, batch: HistoryLimit + 50, want: HistoryLimit},
		{name: "large errors: the byte bound", n: 10, batch: 1, err: big, want: HistoryBytes / (120 + 40 + len(big.Category) + len(big.Message) + len(big.StackTrace) + len("RUNNING") + len("QUEUED") + len("RETRY_SCHEDULED") + len("FAILED"))},
		{name: "one larger than the bound is kept", n: 3, batch: 1, err: huge, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := Task{ID: "task_01HX", RunID: "run_01HX", TenantID: "acme", WorkspaceID: "ws", Worker: "etl"}
			var all []Transition
			for i := 1; i <= tc.n; i++ {
				all = append(all, Transition{Attempt: i, From: api.Running, To: api.Queued, Reason: api.ReasonRetryScheduled,
					Outcome: api.OutcomeFailed, Error: tc.err, NextAttempt: i + 1, Seq: int64(i), OccurredAt: time.Unix(int64(i), 0)})
			}
			for i := 0; i < len(all); i += tc.batch {
				tk.record(all[i:min(len(all), i+tc.batch)])
			}
			if len(tk.History) != tc.want {
				t.Fatalf("%d transitions kept, want %d", len(tk.History), tc.want)
			}
			size := 0
			for i, ev := range tk.Events() {
				want := all[tc.n-tc.want+i]
				want.EventID, want.TaskID, want.RunID, want.TenantID, want.WorkspaceID, want.Worker = EventID(tk.ID, want.Seq), tk.ID, tk.RunID, tk.TenantID, tk.WorkspaceID, tk.Worker
				want.OccurredAt = want.OccurredAt.UTC()
				if ev.Seq != want.Seq || ev.EventID != want.EventID || ev.TaskID != tk.ID || ev.RunID != tk.RunID || ev.TenantID != tk.TenantID ||
					ev.WorkspaceID != tk.WorkspaceID || ev.Worker != tk.Worker || ev.To != want.To || ev.NextAttempt != want.NextAttempt ||
					ev.Error != want.Error || !ev.OccurredAt.Equal(want.OccurredAt) {
					t.Fatalf("event %d = %+v, want %+v", i, ev, want)
				}
				size += tk.History[i].size()
			}
			if tc.want > 1 && size > HistoryBytes {
				t.Errorf("history of %d bytes, bound %d", size, HistoryBytes)
			}
		})
	}
}
