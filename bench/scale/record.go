package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	ctpb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	fspb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/servo-dev/servo/internal/scale"
	"github.com/servo-dev/servo/internal/store"
)

// recorder records the Cloud Tasks and Pub/Sub calls of the stack (the
// Firestore writes are store.WriteRecorder's), and fails the first publish
// of the tasks in failOnce, so that their events reach Pub/Sub through the
// outbox re-drive.
type recorder struct {
	mu        sync.Mutex
	calls     []scale.Event // Dispatch and Publish, in call order
	failOnce  map[string]bool
	redriven  map[string]int // publishes of failOnce's tasks after the failure
	writes    *store.WriteRecorder
	deletions int
	// outage is the task document (store.TaskDocID) whose next commit is
	// refused unavailable (armOutage); met says one was.
	outage string
	met    bool
}

// armOutage has the next commit that writes task id's document refused
// with codes.Internal, before it reaches Firestore: the store sees an
// outage (its call failed unavailable), which it records when its next
// call succeeds (outages/{id}), as it does in production.
func (r *recorder) armOutage(id string) {
	r.mu.Lock()
	r.outage = "/" + store.TasksCollection + "/" + store.TaskDocID(id)
	r.mu.Unlock()
}

// outageMet reports whether an armed outage refused a commit.
func (r *recorder) outageMet() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.met
}

// storeOptions are the store's Firestore client options: the write
// recorder's, outside the armed outage (a refused commit writes nothing).
func (r *recorder) storeOptions() []option.ClientOption {
	return append(r.writes.ClientOptions(), option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if c, ok := req.(*fspb.CommitRequest); ok && r.refuse(c) {
				// Internal, not Unavailable: the Firestore client retries
				// a Commit refused Unavailable itself, and the store would
				// never see the outage; it takes Internal as one too.
				return status.Error(codes.Internal, "bench/scale: the recorded outage")
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})))
}

// refuse reports whether c writes the armed outage's task document, and
// disarms it.
func (r *recorder) refuse(c *fspb.CommitRequest) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.outage == "" {
		return false
	}
	for _, w := range c.GetWrites() {
		if strings.HasSuffix(w.GetUpdate().GetName(), r.outage) {
			r.outage, r.met = "", true
			return true
		}
	}
	return false
}

func newRecorder() *recorder {
	return &recorder{failOnce: map[string]bool{}, redriven: map[string]int{}, writes: store.NewWriteRecorder()}
}

// tasksOptions record CreateTask (one dispatch each) on the Cloud Tasks client.
func (r *recorder) tasksOptions() []option.ClientOption {
	return []option.ClientOption{option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			switch q := req.(type) {
			case *ctpb.CreateTaskRequest:
				if err == nil {
					var env struct {
						TaskID string `json:"taskId"`
					}
					_ = json.Unmarshal(q.GetTask().GetHttpRequest().GetBody(), &env)
					r.add(scale.Event{Kind: scale.Dispatch, Name: relQueue(q.GetParent()), Task: env.TaskID})
				}
			case *ctpb.DeleteTaskRequest:
				r.mu.Lock()
				r.deletions++
				r.mu.Unlock()
			}
			return err
		}))}
}

// relQueue is a queue's name without its project and location.
func relQueue(name string) string {
	if i := strings.Index(name, "/queues/"); i >= 0 {
		return name[i+1:]
	}
	return name
}

// pubsubOptions record every published message on the Pub/Sub client.
func (r *recorder) pubsubOptions() []option.ClientOption {
	return []option.ClientOption{option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			p, ok := req.(*pubsubpb.PublishRequest)
			if !ok {
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			if r.failFirst(p) {
				return status.Error(codes.PermissionDenied, "bench/scale: first publish refused, for the outbox re-drive")
			}
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err != nil {
				return err
			}
			topic := p.GetTopic()[strings.LastIndex(p.GetTopic(), "/")+1:]
			for _, m := range p.GetMessages() {
				n := len(m.GetData()) + len(m.GetOrderingKey())
				for k, v := range m.GetAttributes() {
					n += len(k) + len(v)
				}
				task := m.GetAttributes()["taskId"]
				r.add(scale.Event{Kind: scale.Publish, Name: topic, Key: m.GetOrderingKey(), Bytes: n, Task: task})
				r.mu.Lock()
				if _, ok := r.redriven[task]; ok {
					r.redriven[task]++
				}
				r.mu.Unlock()
			}
			return nil
		}))}
}

// failFirst reports whether p carries a message of a task whose first
// publish is to fail, and marks it failed.
func (r *recorder) failFirst(p *pubsubpb.PublishRequest) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	fail := false
	for _, m := range p.GetMessages() {
		id := m.GetAttributes()["taskId"]
		if r.failOnce[id] {
			delete(r.failOnce, id)
			r.redriven[id] = 0
			fail = true
		}
	}
	return fail
}

func (r *recorder) add(e scale.Event) {
	r.mu.Lock()
	r.calls = append(r.calls, e)
	r.mu.Unlock()
}

// redrives returns how many of the refused tasks' events were published
// since, and how many tasks were refused.
func (r *recorder) redrives() (published, refused int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.redriven {
		published += n
	}
	return published, len(r.redriven)
}

// events turns the recording into the model's events, Firestore's
// attributed (attribute), then the dispatches and publishes.
func (r *recorder) events() ([]scale.Event, error) {
	out, err := attribute(append(r.writes.Writes(), r.writes.Expiries()...))
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(out, r.calls...), err
}

// attribute turns Firestore writes into the model's events: each write is
// for the task whose id the document holds, else for the first task whose
// document its commit writes (a quota shard, a run, an idempotency key),
// else for the first schedule whose document its commit writes (a fire
// decided or settled), else for its commit's cause (store.WithCause: the
// sweeper's pass and the like, which recur with passes, not with tasks).
// A write of none of these is a model error: the error names its code.
// Deletes count like writes (a document's delete, each entry it removes),
// and so do the entries a changed or cleared value removes; a delete (or
// a TTL expiry, store.WriteRecorder.Expiries) is for whom the document's
// last write was.
func attribute(writes []store.RecordedWrite) ([]scale.Event, error) {
	commitTask, commitSchedule := map[int]string{}, map[int]string{}
	for _, w := range writes {
		if w.Expiry {
			continue
		}
		if _, ok := commitTask[w.Commit]; !ok && w.TaskID != "" {
			commitTask[w.Commit] = w.TaskID
		}
		if _, ok := commitSchedule[w.Commit]; !ok && w.Collection == store.SchedulesCollection && !w.Delete {
			commitSchedule[w.Commit] = w.Doc
		}
	}
	type owner struct{ task, schedule, cause string }
	last := map[string]owner{} // document → whom its last write was for
	var out []scale.Event
	unattributed := map[string]string{} // code path → a document it wrote
	for _, w := range writes {
		var task, sched string
		if !w.Expiry {
			task = cmp.Or(w.TaskID, commitTask[w.Commit])
			if task == "" {
				sched = commitSchedule[w.Commit]
			}
		}
		cause := w.Cause
		if o, ok := last[w.Doc]; ok && w.Delete && task == "" && sched == "" {
			task, sched, cause = o.task, o.schedule, cmp.Or(o.cause, cause)
		} else if w.Expiry {
			task = w.TaskID
		}
		if !w.Delete {
			last[w.Doc] = owner{task, sched, cause}
		}
		if task == "" && sched == "" && cause == "" {
			unattributed[w.Path] = w.Doc
		}
		out = append(out, scale.Event{Kind: scale.Document, Name: w.Doc, Collection: w.Collection, Task: task, Schedule: sched, Delete: w.Delete, Expiry: w.Expiry})
		for _, e := range w.Entries {
			out = append(out, scale.Event{Kind: scale.IndexEntry, Name: e.Index, Range: e.Prefix, Value: e.Value, Text: e.Text, Doc: w.Doc, Task: task, Schedule: sched, At: w.At,
				Delete: e.Removed, Expiry: w.Expiry})
		}
	}
	var errs []error
	for _, path := range slices.Sorted(maps.Keys(unattributed)) {
		errs = append(errs, fmt.Errorf("a commit of no task, no schedule and no cause (store.WithCause) wrote %s, from %s", unattributed[path], cmp.Or(path, "an unknown caller")))
	}
	return out, errors.Join(errs...)
}
