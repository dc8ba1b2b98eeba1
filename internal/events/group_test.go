package events_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// refusal makes the Pub/Sub emulator refuse the publish requests that
// carry given event ids, on the client that uses its interceptor: the
// messages of such a request before the first refused one are published
// for real (their ack is lost), the request fails.
type refusal struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (r *refusal) set(ids ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = map[string]bool{}
	for _, id := range ids {
		r.ids[id] = true
	}
}

func (r *refusal) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	pr, ok := req.(*pubsubpb.PublishRequest)
	if !ok || method != "/google.pubsub.v1.Publisher/Publish" {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	r.mu.Lock()
	at := slices.IndexFunc(pr.GetMessages(), func(m *pubsubpb.PubsubMessage) bool { return r.ids[m.GetAttributes()[events.AttrEventID]] })
	r.mu.Unlock()
	if at < 0 {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if at > 0 {
		before := proto.Clone(pr).(*pubsubpb.PublishRequest)
		before.Messages = before.Messages[:at]
		if err := invoker(ctx, method, before, new(pubsubpb.PublishResponse), cc, opts...); err != nil {
			return err
		}
	}
	return status.Error(codes.FailedPrecondition, "refused by the test")
}

// TestCommitSharesOneOutboxDocument: a submit commits its two transitions
// (→PENDING, PENDING→QUEUED) in one outbox document, named by the second's
// event id: one write in the commit, one delete once both events are
// published, in seq order. When Pub/Sub refuses the second event (the
// first one published or not), the document is kept whole, and the
// re-drive publishes both and deletes it: an event may arrive twice,
// none is lost.
func TestCommitSharesOneOutboxDocument(t *testing.T) {
	for _, tc := range []struct {
		name string
		// refuse: the events (by seq) Pub/Sub refuses until the re-drive.
		refuse []int64
		// firstOut: the first event reaches the subscription before the
		// re-drive.
		firstOut bool
	}{
		{name: "delivered at once"},
		{name: "the second event refused", refuse: []int64{2}, firstOut: true},
		{name: "both events refused", refuse: []int64{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			rc := e.countedStore(t)
			ref := &refusal{}
			ps, err := pubsub.NewClient(ctx, e.project, option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(ref.unary)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ps.Close() })
			sub := e.subscribe(t, "ev-group")
			if err := events.EnsureTopics(ctx, e.ps, "dl-group"); err != nil {
				t.Fatal(err)
			}
			p := e.publisher(t, events.Config{Client: ps, EventsTopic: "ev-group", DeadLetterTopic: "dl-group"})
			e.st.OnCommit(p.Hook())

			tk := submitted(time.Now(), "run_g", api.RetryPolicy{})
			ids := []string{task.EventID(tk.ID, 1), task.EventID(tk.ID, 2)}
			var refused []string
			for _, seq := range tc.refuse {
				refused = append(refused, ids[seq-1])
			}
			ref.set(refused...)
			rc.Reset()
			if r := e.st.CreateMany(ctx, []task.Task{tk}, time.Now(), true)[0]; r.Err != nil || r.Task.State != api.Queued {
				t.Fatalf("submit: %+v", r)
			}
			if n := rc.DocsWrittenIn(store.OutboxCollection); n != 1 {
				t.Errorf("the submit's commit wrote %d outbox documents, want 1 for its 2 transitions", n)
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}

			fs, err := firestore.NewClient(ctx, e.project)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { fs.Close() })
			stored := func() []string {
				var out []string
				for _, id := range ids {
					_, err := fs.Collection(store.OutboxCollection).Doc(id).Get(ctx)
					if err == nil {
						out = append(out, id)
					} else if status.Code(err) != codes.NotFound {
						t.Fatal(err)
					}
				}
				return out
			}

			if len(tc.refuse) > 0 {
				if got := stored(); !slices.Equal(got, ids[1:]) {
					t.Fatalf("after the refused publish the outbox holds %v, want the one document %v", got, ids[1:])
				}
				if tc.firstOut {
					sub.waitIDs(t, ids[:1], 1)
				}
				if n := countByID(sub.snapshot())[ids[1]]; n != 0 {
					t.Fatalf("the refused event was received %d times", n)
				}
				ref.set()
				e.clock.Advance(events.DefaultGrace + time.Second)
				if err := p.Redrive(ctx); err != nil {
					t.Fatalf("Redrive: %v", err)
				}
			}
			msgs := sub.waitIDs(t, ids, 1)
			if got := stored(); len(got) != 0 {
				t.Errorf("outbox documents %v still stored after delivery", got)
			}
			if u := rc.Usage(); u.DocsDeleted != 1 {
				t.Errorf("%d documents deleted, want 1 (the commit's one document)", u.DocsDeleted)
			}
			if n := rc.DocsWrittenIn(store.OutboxCollection); n != 1 {
				t.Errorf("%d outbox writes in all, want 1 (no failure recorded: the hook's try is not the re-drive's)", n)
			}
			var seqs []int64
			for _, ev := range firstByTask(t, msgs)[tk.ID] {
				seqs = append(seqs, ev.Seq)
			}
			if !slices.Equal(seqs, []int64{1, 2}) {
				t.Errorf("events first received in seq order %v, want [1 2]", seqs)
			}
			for _, g := range e.st.OutboxGroups() {
				if und, err := e.st.Undelivered(ctx, g, e.clock.Now().Add(time.Hour), 10); err != nil || len(und) != 0 {
					t.Fatalf("undelivered after delivery: %+v, %v", und, err)
				}
			}
		})
	}
}

// TestRedriveOlderEntries: the entries an older version wrote, one
// document per transition, are re-driven as before: a submit's two
// entries (no earlier transitions on the second) both published and
// deleted, one delete each; an entry it marked delivered is never read
// again.
func TestRedriveOlderEntries(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rc := e.countedStore(t)
	sub := e.subscribe(t, events.DefaultEventsTopic)
	p := e.publisher(t, events.Config{}) // no hook: all is left to the re-drive
	fs, err := firestore.NewClient(ctx, e.project)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	outbox := fs.Collection(store.OutboxCollection)

	now := time.Now()
	legacy, done := submitted(now, "run_old", api.RetryPolicy{}), submitted(now, "run_old", api.RetryPolicy{})
	for _, r := range e.st.CreateMany(ctx, []task.Task{legacy, done}, now, true) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// Rewrite both tasks' documents the way an older version stored them:
	// evt(1) and evt(2) apart, each one transition; done's marked
	// delivered.
	for _, tk := range []task.Task{legacy, done} {
		second := outbox.Doc(task.EventID(tk.ID, 2))
		snap, err := second.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		own := snap.Data()
		earlier, _ := own["earlier"].([]any)
		if len(earlier) != 1 {
			t.Fatalf("task %s: earlier = %v, want the first transition", tk.ID, own["earlier"])
		}
		delete(own, "earlier")
		first := earlier[0].(map[string]any)
		for _, k := range []string{"dueShard", "delivered", "createdAt", "nextTryAt", "tries", "eventPublished", "deliveredAt", "expireAt"} {
			first[k] = own[k]
		}
		if tk.ID == done.ID {
			for _, d := range []map[string]any{first, own} {
				d["delivered"], d["deliveredAt"], d["expireAt"] = true, now, now.Add(7*24*time.Hour)
			}
		}
		if _, err := outbox.Doc(task.EventID(tk.ID, 1)).Set(ctx, first); err != nil {
			t.Fatal(err)
		}
		if _, err := second.Set(ctx, own); err != nil {
			t.Fatal(err)
		}
	}

	rc.Reset()
	e.clock.Advance(events.DefaultGrace + time.Second)
	if err := p.Redrive(ctx); err != nil {
		t.Fatalf("Redrive: %v", err)
	}
	ids := []string{task.EventID(legacy.ID, 1), task.EventID(legacy.ID, 2)}
	msgs := sub.waitIDs(t, ids, 1)
	var seqs []int64
	for _, ev := range firstByTask(t, msgs)[legacy.ID] {
		seqs = append(seqs, ev.Seq)
	}
	if !slices.Equal(seqs, []int64{1, 2}) {
		t.Errorf("older entries first received in seq order %v, want [1 2]", seqs)
	}
	if n := countByID(msgs)[task.EventID(done.ID, 1)] + countByID(msgs)[task.EventID(done.ID, 2)]; n != 0 {
		t.Errorf("entries marked delivered by an older version published %d times", n)
	}
	if u := rc.Usage(); u.DocsDeleted != 2 {
		t.Errorf("%d documents deleted, want 2 (the older version's two entries)", u.DocsDeleted)
	}
	for _, tk := range []task.Task{legacy, done} {
		for seq := int64(1); seq <= 2; seq++ {
			_, err := outbox.Doc(task.EventID(tk.ID, seq)).Get(ctx)
			if kept := err == nil; kept != (tk.ID == done.ID) {
				t.Errorf("task %s seq %d: stored %v (%v), want %v", tk.ID, seq, kept, err, tk.ID == done.ID)
			}
		}
	}
}
