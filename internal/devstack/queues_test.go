package devstack_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	ctpb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/api/iterator"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator/cloudtasks"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/task"
)

// A worker declared at 1 500 dispatches a second gets three queues, in the
// local Cloud Tasks emulator at 500/s each. Its attempts spread over them
// (each in the queue QueueIndex names); a repeated enqueue is deduplicated
// and a re-drive lands in the same queue, replacing its predecessor; Held
// finds an attempt in its queue and Dequeue removes it. When the worker's
// rate is raised to five queues, an attempt that the placement now puts
// elsewhere is still found (Held) and removed (Dequeue) where it waits.
func TestWorkerOverSeveralQueues(t *testing.T) {
	t.Parallel()
	const tasks = 30
	e := start(t, func(o *devstack.Options) {
		o.WorkerRates = map[string]float64{"scripted": 1500}
		o.NoSweeper = true
	})
	ctx := context.Background()
	w := e.stack.Workers["scripted"]
	queues := w.Queues()
	if len(queues) != 3 || queues[0] != w.Queue {
		t.Fatalf("queues %q, want three starting with %s", queues, w.Queue)
	}
	ct, err := cloudtasks.NewClient(ctx, cloudtasks.ClientOptions(e.stack.CloudTasksHost)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ct.Close() })
	for _, q := range queues {
		got, err := ct.GetQueue(ctx, &ctpb.GetQueueRequest{Name: q})
		if err != nil {
			t.Fatalf("servo dev did not create %s: %v", q, err)
		}
		if r := got.GetRateLimits().GetMaxDispatchesPerSecond(); r != 500 {
			t.Errorf("%s: %v dispatches/s, want 500", q, r)
		}
		// Paused, the queues keep what is enqueued for the test to see.
		if _, err := ct.PauseQueue(ctx, &ctpb.PauseQueueRequest{Name: q}); err != nil {
			t.Fatal(err)
		}
	}
	list := func(q string) []string {
		t.Helper()
		var names []string
		it := ct.ListTasks(ctx, &ctpb.ListTasksRequest{Parent: q})
		for {
			c, err := it.Next()
			if err == iterator.Done {
				return names
			}
			if err != nil {
				t.Fatalf("list %s: %v", q, err)
			}
			names = append(names, c.Name)
		}
	}

	byID := map[string]task.Task{}
	for i := range tasks {
		id := e.submit(map[string]any{"taskKey": fmt.Sprintf("k%d", i)}).TaskID
		e.WaitState(id, api.Queued)
		tk, err := e.stack.Store.GetTask(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		byID[id] = tk
	}
	total := 0
	for i, q := range queues {
		names := list(q)
		total += len(names)
		if len(names) == 0 {
			t.Errorf("queue %s holds none of the %d attempts", q, tasks)
		}
		for _, n := range names {
			var tk *task.Task
			for _, v := range byID {
				if enqueue.TaskName(q, &v) == n {
					tk = &v
				}
			}
			if tk == nil {
				t.Fatalf("%s: Cloud Task %s is no submitted attempt's", q, n)
			}
			if got := enqueue.QueueIndex(tk, len(queues)); got != i {
				t.Errorf("%s in queue %d, its index is %d", tk.ID, i, got)
			}
		}
	}
	if total != tasks {
		t.Fatalf("%d Cloud Tasks in the queues, want %d", total, tasks)
	}

	// Every attempt enqueued again (deduplicated), then re-driven: each
	// re-drive's Cloud Task replaces its predecessor in the same queue.
	want := make([][]string, len(queues))
	for _, v := range byID {
		if err := e.stack.Enqueuer.Enqueue(ctx, v); err != nil {
			t.Fatalf("repeated enqueue: %v", err)
		}
		v.Redrives = 1
		if err := e.stack.Enqueuer.Enqueue(ctx, v); err != nil {
			t.Fatalf("re-drive: %v", err)
		}
		i := enqueue.QueueIndex(&v, len(queues))
		want[i] = append(want[i], enqueue.TaskName(queues[i], &v))
	}
	for i, q := range queues {
		got := list(q)
		slices.Sort(got)
		slices.Sort(want[i])
		if !slices.Equal(got, want[i]) {
			t.Fatalf("after the re-drives %s holds %q, want %q", q, got, want[i])
		}
	}

	// One attempt held, then dequeued.
	var tk task.Task
	for _, v := range byID {
		tk = v
		break
	}
	tk.Redrives = 1
	home := queues[enqueue.QueueIndex(&tk, len(queues))]
	before := len(list(home))
	if held, err := e.stack.Enqueuer.Held(ctx, tk); err != nil || !held {
		t.Fatalf("Held(re-driven attempt) = %v, %v; want true", held, err)
	}
	if err := e.stack.Enqueuer.Dequeue(ctx, tk); err != nil {
		t.Fatal(err)
	}
	if n := len(list(home)); n != before-1 {
		t.Fatalf("after Dequeue %s holds %d Cloud Tasks, want %d", home, n, before-1)
	}
	if held, err := e.stack.Enqueuer.Held(ctx, tk); err != nil || held {
		t.Fatalf("Held(dequeued attempt) = %v, %v; want false", held, err)
	}
	delete(byID, tk.ID)

	// The rate raised to five queues: attempts placed elsewhere now are
	// still found where they wait.
	grown := w
	grown.MaxDispatchesPerSecond = 2500
	for _, q := range grown.Queues()[len(queues):] {
		parent := q[:strings.Index(q, "/queues/")]
		if _, err := ct.CreateQueue(ctx, &ctpb.CreateQueueRequest{Parent: parent, Queue: &ctpb.Queue{Name: q}}); err != nil {
			t.Fatal(err)
		}
	}
	enq, err := enqueue.New(enqueue.Config{Store: e.stack.Store, Tasks: ct, Keys: e.stack.Keys,
		Workers: enqueue.Workers{"scripted": grown}, CallbackBaseURL: e.stack.URL})
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for _, v := range byID {
		v.Redrives = 1
		old, now := enqueue.QueueIndex(&v, len(queues)), enqueue.QueueIndex(&v, 5)
		if old == now {
			continue
		}
		moved++
		if held, err := enq.Held(ctx, v); err != nil || !held {
			t.Fatalf("%s waits in queue %d, placed in %d now: Held = %v, %v; want true", v.ID, old, now, held, err)
		}
		before := len(list(queues[old]))
		if err := enq.Dequeue(ctx, v); err != nil {
			t.Fatal(err)
		}
		if n := len(list(queues[old])); n != before-1 {
			t.Fatalf("Dequeue left %d Cloud Tasks in %s, want %d", n, queues[old], before-1)
		}
	}
	if moved == 0 {
		t.Fatalf("none of %d attempts changes queue from 3 to 5 queues", len(byID))
	}
}
