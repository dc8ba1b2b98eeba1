package task

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/servo-dev/servo/api"
)

// TestHistoryBound: the task document keeps its most recent transitions,
// at most HistoryLimit and within HistoryBytes, less when a large payload
// leaves less room in the document; the latest is always kept, its error
// cut when it alone passes the room. They stay in seq order without gaps,
// and Events gives them back with the task's identity.
func TestHistoryBound(t *testing.T) {
	big := &api.ErrorInfo{Category: api.CategoryInfrastructure, Message: strings.Repeat("m", api.MaxMessageBytes),
		StackTrace: strings.Repeat("s", api.MaxStackTraceBytes)}
	bigStep := Step{From: api.Running, To: api.Queued, Reason: api.ReasonRetryScheduled, Outcome: api.OutcomeFailed, Error: big}
	medium := &api.ErrorInfo{Category: api.CategoryInfrastructure, Message: strings.Repeat("m", 3000)}
	mediumStep := Step{From: api.Running, To: api.Queued, Reason: api.ReasonRetryScheduled, Outcome: api.OutcomeFailed, Error: medium}
	huge := &api.ErrorInfo{Category: api.CategoryInfrastructure, Message: "é" + strings.Repeat("m", 100), StackTrace: strings.Repeat("ü", HistoryBytes)}
	// A payload that leaves 10 KiB for the history.
	large := json.RawMessage(`"` + strings.Repeat("p", maxDocBytes-api.MaxCheckpointBytes-docReserve-10<<10-2) + `"`)
	for _, tc := range []struct {
		name    string
		payload json.RawMessage
		n       int            // transitions
		batch   int            // transitions per record call
		err     *api.ErrorInfo // on every transition
		want    int            // kept
		room    int            // the history's room
		cut     bool           // the last step's error is cut to the room
	}{
		{name: "few", n: 5, batch: 1, want: 5, room: HistoryBytes},
		{name: "past the limit, one at a time", n: HistoryLimit + 50, batch: 1, want: HistoryLimit, room: HistoryBytes},
		{name: "past the limit at once", n: HistoryLimit + 50, batch: HistoryLimit + 50, want: HistoryLimit, room: HistoryBytes},
		{name: "large errors: the byte bound", n: 10, batch: 1, err: big, want: HistoryBytes / bigStep.size(), room: HistoryBytes},
		{name: "a large payload leaves less room", n: 10, batch: 1, err: medium, payload: large, want: 10 << 10 / mediumStep.size(), room: 10 << 10},
		{name: "one larger than the room is cut to fit", n: 3, batch: 1, err: huge, want: 1, room: HistoryBytes, cut: true},
		{name: "cut to a large payload's room", n: 3, batch: 1, err: huge, payload: large, want: 1, room: 10 << 10, cut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := Task{ID: "task_01HX", RunID: "run_01HX", TenantID: "acme", WorkspaceID: "ws", Worker: "etl", Payload: tc.payload}
			if r := tk.historyRoom(); r != tc.room {
				t.Fatalf("room %d, want %d", r, tc.room)
			}
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
				gotErr, wantErr := ev.Error, want.Error
				ev.Error, want.Error = nil, nil
				if !reflect.DeepEqual(ev, want) {
					t.Fatalf("event %d = %+v, want %+v", i, ev, want)
				}
				switch {
				case tc.cut:
					if gotErr.Category != wantErr.Category || !strings.HasPrefix(wantErr.StackTrace, gotErr.StackTrace) ||
						!strings.HasPrefix(wantErr.Message, gotErr.Message) || !utf8.ValidString(gotErr.StackTrace) || !utf8.ValidString(gotErr.Message) {
						t.Fatalf("event %d: error %+v is not a cut of %+v", i, gotErr, wantErr)
					}
				case !reflect.DeepEqual(gotErr, wantErr):
					t.Fatalf("event %d: error %+v, want %+v", i, gotErr, wantErr)
				}
				size += tk.History[i].size()
			}
			if size > tc.room {
				t.Errorf("history of %d bytes, room %d", size, tc.room)
			}
		})
	}
}
