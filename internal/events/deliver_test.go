package events_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// TestDeliveryDeletesTheEntry: each event of a lifecycle is published, and
// its outbox entry costs one write (in the transition's commit) and one
// delete once delivered — no delivered mark, nothing left for a TTL —
// whether the hook delivers it at once or the re-drive does after a failed
// try (which records the failure on the entry, one write more, and keeps
// it until the re-drive delivers it). The task document's history answers
// the same events, byte for byte, with no entry left to read.
func TestDeliveryDeletesTheEntry(t *testing.T) {
	for _, tc := range []struct {
		name string
		// outage: the topics are missing at first, so that the hook's
		// publish and a first re-drive fail.
		outage bool
		// updates is how many writes each entry gets besides its creation
		// and its delete.
		updates int
	}{
		{name: "hook", outage: false, updates: 0},
		{name: "re-drive after a failed try", outage: true, updates: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			rec, rc := store.NewWriteRecorder(), store.NewRPCCounter()
			st, err := store.New(ctx, e.project, store.WithRPCCounter(rc), store.WithClientOptions(rec.ClientOptions()...))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			fs, err := firestore.NewClient(ctx, e.project)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { fs.Close() })

			var sub *collector
			if !tc.outage {
				sub = e.subscribe(t, "ev-del")
			}
			p := e.publisher(t, events.Config{Store: st, EventsTopic: "ev-del", DeadLetterTopic: "dl-del"})
			st.OnCommit(p.Hook())
			tk := submitted(time.Now(), "run_1", api.RetryPolicy{})
			run(t, st, []task.Task{tk}, [][]step{succeed})
			_ = p.Flush(ctx)

			ids := make([]string, len(successWant))
			for i := range ids {
				ids[i] = task.EventID(tk.ID, int64(i+1))
			}
			exists := func(id string) bool {
				_, err := fs.Collection(store.OutboxCollection).Doc(id).Get(ctx)
				if err != nil && status.Code(err) != codes.NotFound {
					t.Fatal(err)
				}
				return err == nil
			}
			if tc.outage {
				e.clock.Advance(time.Minute)
				if err := p.Redrive(ctx); err == nil {
					t.Fatal("Redrive with the topics missing succeeded")
				}
				for _, id := range ids {
					if !exists(id) {
						t.Fatalf("entry %s gone after a failed delivery", id)
					}
				}
				sub = e.subscribe(t, "ev-del")
				if err := events.EnsureTopics(ctx, e.ps, "dl-del"); err != nil {
					t.Fatal(err)
				}
				e.clock.Advance(time.Hour)
				if err := p.Redrive(ctx); err != nil {
					t.Fatalf("Redrive after the outage: %v", err)
				}
			}
			msgs := sub.waitIDs(t, ids, 1)
			for _, id := range ids {
				if exists(id) {
					t.Errorf("entry %s still stored after delivery", id)
				}
			}

			// Per entry: one creation (in the commit that wrote the task
			// document), tc.updates updates, one delete.
			taskCommits := map[int]bool{}
			type count struct{ creates, updates, deletes int }
			perEntry := map[string]*count{}
			for _, w := range rec.Writes() {
				if w.Doc == store.TasksCollection+"/"+store.TaskDocID(tk.ID) {
					taskCommits[w.Commit] = true
				}
			}
			for _, w := range rec.Writes() {
				if w.Collection != store.OutboxCollection {
					continue
				}
				c := perEntry[w.Doc]
				if c == nil {
					c = &count{}
					perEntry[w.Doc] = c
				}
				switch {
				case w.Delete:
					c.deletes++
				case w.Create:
					c.creates++
					if !taskCommits[w.Commit] {
						t.Errorf("entry %s created outside a commit of the task", w.Doc)
					}
				default:
					c.updates++
				}
			}
			if len(perEntry) != len(ids) {
				t.Fatalf("%d outbox entries written, want %d", len(perEntry), len(ids))
			}
			for _, id := range ids {
				if c := perEntry[store.OutboxCollection+"/"+id]; c == nil || *c != (count{1, tc.updates, 1}) {
					t.Errorf("entry %s: %+v, want 1 creation, %d updates, 1 delete", id, c, tc.updates)
				}
			}
			if u := rc.Usage(); u.DocsDeleted != len(ids) {
				t.Errorf("%d documents deleted, want %d (one per event)", u.DocsDeleted, len(ids))
			}

			// The history on the task document: the same events, the
			// published bodies byte for byte, no entry read.
			got, err := st.GetTask(ctx, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			rc.Reset()
			trs, err := st.TaskEvents(ctx, got)
			if err != nil {
				t.Fatal(err)
			}
			if n := rc.Usage().RPCs; n != 0 {
				t.Errorf("TaskEvents of a task with its whole history: %d RPCs, want 0", n)
			}
			bodies := map[string]string{}
			for _, m := range msgs {
				bodies[m.attrs[events.AttrEventID]] = string(m.data)
			}
			if len(trs) != len(ids) {
				t.Fatalf("%d events from the history, want %d", len(trs), len(ids))
			}
			for i, tr := range trs {
				b, _ := json.Marshal(events.EventOf(tr))
				if tr.EventID != ids[i] || string(b) != bodies[ids[i]] {
					t.Errorf("history event %d:\n%s\nwant the published\n%s", i, b, bodies[ids[i]])
				}
			}
		})
	}
}
