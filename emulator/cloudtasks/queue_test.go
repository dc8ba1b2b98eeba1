package cloudtasks

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	cloudtasksapi "cloud.google.com/go/cloudtasks/apiv2"
	pb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestPauseResume(t *testing.T) {
	h := newHarness(t, false, Options{})
	w := newWorker(t, nil)
	q := h.queue("pausable", nil)
	paused, err := h.client.PauseQueue(h.ctx, &pb.PauseQueueRequest{Name: q})
	if err != nil {
		t.Fatal(err)
	}
	if paused.State != pb.Queue_PAUSED {
		t.Fatalf("state after pause = %v", paused.State)
	}
	created := h.task(q, w.URL, nil) // tasks can still be added
	w.quiet(t, 0)
	if got, _ := h.client.GetQueue(h.ctx, &pb.GetQueueRequest{Name: q}); got.State != pb.Queue_PAUSED {
		t.Fatalf("GetQueue state = %v", got.State)
	}
	resumed, err := h.client.ResumeQueue(h.ctx, &pb.ResumeQueueRequest{Name: q})
	if err != nil {
		t.Fatal(err)
	}
	if resumed.State != pb.Queue_RUNNING {
		t.Fatalf("state after resume = %v", resumed.State)
	}
	w.waitN(t, 1)
	h.waitGone(created.Name)
}

func TestPurgeQueue(t *testing.T) {
	h := newHarness(t, false, Options{})
	w := newWorker(t, nil)
	q := h.queue("purgeable", nil)
	if _, err := h.client.PauseQueue(h.ctx, &pb.PauseQueueRequest{Name: q}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		h.task(q, w.URL, func(tk *pb.Task) { tk.Name = fmt.Sprintf("%s/tasks/t%d", q, i) })
	}
	purged, err := h.client.PurgeQueue(h.ctx, &pb.PurgeQueueRequest{Name: q})
	if err != nil {
		t.Fatal(err)
	}
	if purged.PurgeTime == nil {
		t.Error("purge_time not set")
	}
	if n := countTasks(t, h, q); n != 0 {
		t.Errorf("%d tasks left after purge", n)
	}
	if _, err := h.client.ResumeQueue(h.ctx, &pb.ResumeQueueRequest{Name: q}); err != nil {
		t.Fatal(err)
	}
	w.quiet(t, 0)
	_, err = h.client.CreateTask(h.ctx, &pb.CreateTaskRequest{Parent: q, Task: &pb.Task{Name: q + "/tasks/t0",
		MessageType: &pb.Task_HttpRequest{HttpRequest: &pb.HttpRequest{Url: w.URL}}}})
	wantCode(t, err, codes.AlreadyExists) // purged tasks are deleted tasks
}

func countTasks(t *testing.T, h *harness, q string) int {
	t.Helper()
	n := 0
	it := h.client.ListTasks(h.ctx, &pb.ListTasksRequest{Parent: q})
	for {
		_, err := it.Next()
		if err == iterator.Done {
			return n
		}
		if err != nil {
			t.Fatalf("ListTasks: %v", err)
		}
		n++
	}
}

func TestTaskNameDeduplication(t *testing.T) {
	tests := []struct {
		name   string
		window time.Duration // Options.TombstoneWindow
		expiry time.Duration // the effective window
	}{
		{"default window is one hour", 0, time.Hour},
		{"configured window", 5 * time.Minute, 5 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, true, Options{TombstoneWindow: tc.window})
			w := newWorker(t, nil)
			paused := h.queue("dedup-paused", nil)
			if _, err := h.client.PauseQueue(h.ctx, &pb.PauseQueueRequest{Name: paused}); err != nil {
				t.Fatal(err)
			}
			running := h.queue("dedup-running", nil)
			create := func(q, id string) error {
				_, err := h.client.CreateTask(h.ctx, &pb.CreateTaskRequest{Parent: q, Task: &pb.Task{Name: q + "/tasks/" + id,
					MessageType: &pb.Task_HttpRequest{HttpRequest: &pb.HttpRequest{Url: w.URL}}}})
				return err
			}

			if err := create(paused, "existing"); err != nil {
				t.Fatal(err)
			}
			wantCode(t, create(paused, "existing"), codes.AlreadyExists)

			if err := create(paused, "deleted"); err != nil {
				t.Fatal(err)
			}
			if err := h.client.DeleteTask(h.ctx, &pb.DeleteTaskRequest{Name: paused + "/tasks/deleted"}); err != nil {
				t.Fatal(err)
			}
			wantCode(t, create(paused, "deleted"), codes.AlreadyExists)

			if err := create(running, "executed"); err != nil {
				t.Fatal(err)
			}
			w.waitN(t, 1)
			h.waitGone(running + "/tasks/executed")
			wantCode(t, create(running, "executed"), codes.AlreadyExists)

			// The same id in another queue is a different task.
			if err := create(running, "existing"); err != nil {
				t.Fatalf("same id in another queue: %v", err)
			}

			h.clk.Advance(tc.expiry - time.Second)
			wantCode(t, create(paused, "deleted"), codes.AlreadyExists)
			wantCode(t, create(running, "executed"), codes.AlreadyExists)
			h.clk.Advance(time.Second)
			if err := create(paused, "deleted"); err != nil {
				t.Errorf("after the window, deleted name: %v", err)
			}
			if err := create(running, "executed"); err != nil {
				t.Errorf("after the window, executed name: %v", err)
			}
			wantCode(t, create(paused, "existing"), codes.AlreadyExists) // still exists
		})
	}
}

func TestRunTask(t *testing.T) {
	h := newHarness(t, true, Options{})
	w := newWorker(t, func(rw http.ResponseWriter, _ *http.Request, n int) {
		if n == 1 {
			rw.WriteHeader(http.StatusInternalServerError)
			return
		}
		rw.WriteHeader(http.StatusOK)
	})
	q := h.queue("run", &pb.Queue{
		RateLimits:  &pb.RateLimits{MaxDispatchesPerSecond: 1},
		RetryConfig: &pb.RetryConfig{MinBackoff: durationpb.New(30 * time.Second)},
	})
	if _, err := h.client.PauseQueue(h.ctx, &pb.PauseQueueRequest{Name: q}); err != nil {
		t.Fatal(err)
	}
	created := h.task(q, w.URL, func(tk *pb.Task) { tk.ScheduleTime = timestamppb.New(fakeStart.Add(24 * time.Hour)) })

	// RunTask dispatches now, although the queue is paused and the task is
	// scheduled tomorrow.
	ran, err := h.client.RunTask(h.ctx, &pb.RunTaskRequest{Name: created.Name})
	if err != nil {
		t.Fatal(err)
	}
	if ran.DispatchCount != 1 || ran.LastAttempt.GetDispatchTime() == nil {
		t.Errorf("RunTask returned dispatch_count %d, last attempt %v", ran.DispatchCount, ran.LastAttempt)
	}
	w.waitN(t, 1)
	// It failed: schedule_time is reset to now + the retry delay.
	var tk *pb.Task
	eventually(t, "the failed run to be recorded", func() bool {
		tk = h.getTask(created.Name)
		return tk.ResponseCount == 1
	})
	if got := tk.ScheduleTime.AsTime().Sub(fakeStart); got != 30*time.Second {
		t.Errorf("after a failed RunTask the task is due in %v, want 30s", got)
	}
	if _, err := h.client.RunTask(h.ctx, &pb.RunTaskRequest{Name: created.Name}); err != nil {
		t.Fatal(err)
	}
	w.waitN(t, 2)
	if got := w.nth(1).header.Get(HeaderRetryCount); got != "1" {
		t.Errorf("second run retry count %s", got)
	}
	h.waitGone(created.Name)
	_, err = h.client.RunTask(h.ctx, &pb.RunTaskRequest{Name: created.Name})
	wantCode(t, err, codes.NotFound) // a task that succeeded cannot be run
}

func TestStatusCodes(t *testing.T) {
	h := newHarness(t, false, Options{QueueTombstoneWindow: time.Hour})
	q := h.queue("codes", nil)
	gone := h.queue("gone", nil)
	if err := h.client.DeleteQueue(h.ctx, &pb.DeleteQueueRequest{Name: gone}); err != nil {
		t.Fatal(err)
	}
	missing := testParent + "/queues/missing"
	httpTask := func(url string, f func(*pb.Task)) *pb.Task {
		tk := &pb.Task{MessageType: &pb.Task_HttpRequest{HttpRequest: &pb.HttpRequest{Url: url}}}
		if f != nil {
			f(tk)
		}
		return tk
	}
	createTask := func(parent string, tk *pb.Task) error {
		_, err := h.client.CreateTask(h.ctx, &pb.CreateTaskRequest{Parent: parent, Task: tk})
		return err
	}
	createQueue := func(parent, name string, f func(*pb.Queue)) error {
		qq := &pb.Queue{Name: name}
		if f != nil {
			f(qq)
		}
		_, err := h.client.CreateQueue(h.ctx, &pb.CreateQueueRequest{Parent: parent, Queue: qq})
		return err
	}
	url := "http://127.0.0.1:1/work"
	tests := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"GetQueue malformed name", func() error {
			_, err := h.client.GetQueue(h.ctx, &pb.GetQueueRequest{Name: "queues/x"})
			return err
		}, codes.InvalidArgument},
		{"GetQueue bad queue id", func() error {
			_, err := h.client.GetQueue(h.ctx, &pb.GetQueueRequest{Name: testParent + "/queues/under_score"})
			return err
		}, codes.InvalidArgument},
		{"GetQueue queue id too long", func() error {
			_, err := h.client.GetQueue(h.ctx, &pb.GetQueueRequest{Name: testParent + "/queues/" + strings.Repeat("q", 101)})
			return err
		}, codes.InvalidArgument},
		{"GetQueue bad project id", func() error {
			_, err := h.client.GetQueue(h.ctx, &pb.GetQueueRequest{Name: "projects/bad project/locations/l/queues/q"})
			return err
		}, codes.InvalidArgument},
		{"GetQueue missing", func() error {
			_, err := h.client.GetQueue(h.ctx, &pb.GetQueueRequest{Name: missing})
			return err
		}, codes.NotFound},
		{"CreateQueue duplicate", func() error { return createQueue(testParent, q, nil) }, codes.AlreadyExists},
		{"CreateQueue recently deleted name", func() error { return createQueue(testParent, gone, nil) }, codes.FailedPrecondition},
		{"CreateQueue outside parent", func() error {
			return createQueue("projects/other/locations/us-central1", testParent+"/queues/x", nil)
		}, codes.InvalidArgument},
		{"CreateQueue bad parent", func() error { return createQueue("projects/p", testParent+"/queues/x", nil) }, codes.InvalidArgument},
		{"CreateQueue rate above 500", func() error {
			return createQueue(testParent, testParent+"/queues/fast", func(q *pb.Queue) {
				q.RateLimits = &pb.RateLimits{MaxDispatchesPerSecond: 501}
			})
		}, codes.InvalidArgument},
		{"CreateQueue concurrency above 5000", func() error {
			return createQueue(testParent, testParent+"/queues/wide", func(q *pb.Queue) {
				q.RateLimits = &pb.RateLimits{MaxConcurrentDispatches: 5001}
			})
		}, codes.InvalidArgument},
		{"CreateQueue max_attempts below -1", func() error {
			return createQueue(testParent, testParent+"/queues/att", func(q *pb.Queue) {
				q.RetryConfig = &pb.RetryConfig{MaxAttempts: -2}
			})
		}, codes.InvalidArgument},
		{"CreateQueue min_backoff above max_backoff", func() error {
			return createQueue(testParent, testParent+"/queues/bo", func(q *pb.Queue) {
				q.RetryConfig = &pb.RetryConfig{MinBackoff: durationpb.New(time.Minute), MaxBackoff: durationpb.New(time.Second)}
			})
		}, codes.InvalidArgument},
		{"DeleteQueue missing", func() error {
			return h.client.DeleteQueue(h.ctx, &pb.DeleteQueueRequest{Name: missing})
		}, codes.NotFound},
		{"PauseQueue missing", func() error {
			_, err := h.client.PauseQueue(h.ctx, &pb.PauseQueueRequest{Name: missing})
			return err
		}, codes.NotFound},
		{"CreateTask missing queue", func() error { return createTask(missing, httpTask(url, nil)) }, codes.NotFound},
		{"CreateTask bad task id", func() error {
			return createTask(q, httpTask(url, func(tk *pb.Task) { tk.Name = q + "/tasks/bad.id" }))
		}, codes.InvalidArgument},
		{"CreateTask task id too long", func() error {
			return createTask(q, httpTask(url, func(tk *pb.Task) { tk.Name = q + "/tasks/" + strings.Repeat("t", 501) }))
		}, codes.InvalidArgument},
		{"CreateTask name in another queue", func() error {
			return createTask(q, httpTask(url, func(tk *pb.Task) { tk.Name = missing + "/tasks/t" }))
		}, codes.InvalidArgument},
		{"CreateTask without a request", func() error { return createTask(q, &pb.Task{}) }, codes.InvalidArgument},
		{"CreateTask App Engine request", func() error {
			return createTask(q, &pb.Task{MessageType: &pb.Task_AppEngineHttpRequest{AppEngineHttpRequest: &pb.AppEngineHttpRequest{RelativeUri: "/x"}}})
		}, codes.Unimplemented},
		{"CreateTask non-http url", func() error { return createTask(q, httpTask("ftp://example.com/x", nil)) }, codes.InvalidArgument},
		{"CreateTask body on GET", func() error {
			return createTask(q, httpTask(url, func(tk *pb.Task) {
				tk.GetHttpRequest().HttpMethod = pb.HttpMethod_GET
				tk.GetHttpRequest().Body = []byte("x")
			}))
		}, codes.InvalidArgument},
		{"CreateTask oidc without email", func() error {
			return createTask(q, httpTask(url, func(tk *pb.Task) {
				tk.GetHttpRequest().AuthorizationHeader = &pb.HttpRequest_OidcToken{OidcToken: &pb.OidcToken{}}
			}))
		}, codes.InvalidArgument},
		{"CreateTask deadline below 15s", func() error {
			return createTask(q, httpTask(url, func(tk *pb.Task) { tk.DispatchDeadline = durationpb.New(14 * time.Second) }))
		}, codes.InvalidArgument},
		{"CreateTask deadline 15s", func() error {
			return createTask(q, httpTask(url, func(tk *pb.Task) { tk.DispatchDeadline = durationpb.New(15 * time.Second) }))
		}, codes.OK},
		{"CreateTask deadline 30m", func() error {
			return createTask(q, httpTask(url, func(tk *pb.Task) { tk.DispatchDeadline = durationpb.New(30 * time.Minute) }))
		}, codes.OK},
		{"CreateTask deadline above 30m", func() error {
			return createTask(q, httpTask(url, func(tk *pb.Task) { tk.DispatchDeadline = durationpb.New(31 * time.Minute) }))
		}, codes.InvalidArgument},
		{"CreateTask scheduled beyond 30 days", func() error {
			return createTask(q, httpTask(url, func(tk *pb.Task) { tk.ScheduleTime = timestamppb.New(time.Now().Add(31 * 24 * time.Hour)) }))
		}, codes.InvalidArgument},
		{"CreateTask larger than 1MB", func() error {
			return createTask(q, httpTask(url, func(tk *pb.Task) { tk.GetHttpRequest().Body = make([]byte, maxTaskSize) }))
		}, codes.InvalidArgument},
		{"CreateTask bad task retry config", func() error {
			return createTask(q, httpTask(url, func(tk *pb.Task) { tk.RetryConfig = &pb.RetryConfig{MaxAttempts: -5} }))
		}, codes.InvalidArgument},
		{"GetTask missing", func() error {
			_, err := h.client.GetTask(h.ctx, &pb.GetTaskRequest{Name: q + "/tasks/nope"})
			return err
		}, codes.NotFound},
		{"GetTask malformed", func() error {
			_, err := h.client.GetTask(h.ctx, &pb.GetTaskRequest{Name: q + "/nope"})
			return err
		}, codes.InvalidArgument},
		{"DeleteTask missing", func() error {
			return h.client.DeleteTask(h.ctx, &pb.DeleteTaskRequest{Name: q + "/tasks/nope"})
		}, codes.NotFound},
		{"RunTask missing", func() error {
			_, err := h.client.RunTask(h.ctx, &pb.RunTaskRequest{Name: q + "/tasks/nope"})
			return err
		}, codes.NotFound},
		{"ListTasks missing queue", func() error {
			_, err := h.client.ListTasks(h.ctx, &pb.ListTasksRequest{Parent: missing}).Next()
			return err
		}, codes.NotFound},
		{"ListQueues unsupported filter", func() error {
			_, err := h.client.ListQueues(h.ctx, &pb.ListQueuesRequest{Parent: testParent, Filter: "name = x"}).Next()
			return err
		}, codes.InvalidArgument},
		{"UpdateQueue unknown mask path", func() error {
			_, err := h.client.UpdateQueue(h.ctx, &pb.UpdateQueueRequest{Queue: &pb.Queue{Name: q},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"bogus"}}})
			return err
		}, codes.InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantCode(t, tc.call(), tc.want) })
	}
}

func TestUpdateQueue(t *testing.T) {
	h := newHarness(t, false, Options{})
	q := h.queue("updatable", &pb.Queue{RateLimits: &pb.RateLimits{MaxConcurrentDispatches: 7}})
	if _, err := h.client.PauseQueue(h.ctx, &pb.PauseQueueRequest{Name: q}); err != nil {
		t.Fatal(err)
	}
	got, err := h.client.UpdateQueue(h.ctx, &pb.UpdateQueueRequest{
		Queue: &pb.Queue{Name: q, State: pb.Queue_RUNNING,
			RateLimits:  &pb.RateLimits{MaxDispatchesPerSecond: 5, MaxConcurrentDispatches: 99},
			RetryConfig: &pb.RetryConfig{MaxAttempts: 4}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"rate_limits.max_dispatches_per_second", "retry_config", "state"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.RateLimits.MaxDispatchesPerSecond != 5 || got.RateLimits.MaxBurstSize != 5 || got.RateLimits.MaxConcurrentDispatches != 7 {
		t.Errorf("rate limits after masked update = %v", got.RateLimits)
	}
	if got.RetryConfig.MaxAttempts != 4 || got.RetryConfig.MaxDoublings != defaultMaxDoublings {
		t.Errorf("retry config = %v", got.RetryConfig)
	}
	if got.State != pb.Queue_PAUSED {
		t.Errorf("UpdateQueue changed state to %v", got.State)
	}
	// UpdateQueue creates a missing queue.
	created, err := h.client.UpdateQueue(h.ctx, &pb.UpdateQueueRequest{Queue: &pb.Queue{Name: testParent + "/queues/upserted"}})
	if err != nil {
		t.Fatal(err)
	}
	if created.State != pb.Queue_RUNNING || created.RateLimits.MaxDispatchesPerSecond != defaultMaxDispatchesPerSecond {
		t.Errorf("upserted queue = %v", created)
	}
}

func TestDeleteQueueCancelsDispatch(t *testing.T) {
	h := newHarness(t, false, Options{})
	cancelled := make(chan struct{})
	w := newWorker(t, func(_ http.ResponseWriter, r *http.Request, _ int) {
		<-r.Context().Done()
		close(cancelled)
	})
	q := h.queue("doomed", nil)
	h.task(q, w.URL, nil)
	w.waitN(t, 1)
	if err := h.client.DeleteQueue(h.ctx, &pb.DeleteQueueRequest{Name: q}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cancelled:
	case <-time.After(waitFor):
		t.Fatal("the in-flight request was not cancelled")
	}
	_, err := h.client.GetQueue(h.ctx, &pb.GetQueueRequest{Name: q})
	wantCode(t, err, codes.NotFound)
	_, err = h.client.CreateTask(h.ctx, &pb.CreateTaskRequest{Parent: q, Task: &pb.Task{
		MessageType: &pb.Task_HttpRequest{HttpRequest: &pb.HttpRequest{Url: w.URL}}}})
	wantCode(t, err, codes.NotFound)
	h.queue("doomed", nil) // the default queue tombstone window is 0
}

func TestListPaging(t *testing.T) {
	h := newHarness(t, false, Options{})
	var want []string
	for i := range 25 {
		want = append(want, h.queue(fmt.Sprintf("page-%02d", i), nil))
	}
	for _, q := range want[:3] {
		if _, err := h.client.PauseQueue(h.ctx, &pb.PauseQueueRequest{Name: q}); err != nil {
			t.Fatal(err)
		}
	}
	pager := iterator.NewPager(h.client.ListQueues(h.ctx, &pb.ListQueuesRequest{Parent: testParent}), 10, "")
	var got []string
	var sizes []int
	for {
		var page []*pb.Queue
		tok, err := pager.NextPage(&page)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(page))
		for _, q := range page {
			got = append(got, q.Name)
		}
		if tok == "" {
			break
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("queues = %v, want %v (lexicographic)", got, want)
	}
	if fmt.Sprint(sizes) != "[10 10 5]" {
		t.Errorf("page sizes = %v", sizes)
	}
	var paused []string
	it := h.client.ListQueues(h.ctx, &pb.ListQueuesRequest{Parent: testParent, Filter: "state: PAUSED"})
	for {
		q, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		paused = append(paused, q.Name)
	}
	if fmt.Sprint(paused) != fmt.Sprint(want[:3]) {
		t.Errorf("paused queues = %v", paused)
	}

	q := want[0] // paused, so tasks stay put
	var ids []string
	for i := range 23 {
		ids = append(ids, h.task(q, "http://127.0.0.1:1/", func(tk *pb.Task) { tk.Name = fmt.Sprintf("%s/tasks/t%02d", q, i) }).Name)
	}
	tp := iterator.NewPager(h.client.ListTasks(h.ctx, &pb.ListTasksRequest{Parent: q, ResponseView: pb.Task_FULL}), 7, "")
	var tasks []string
	pages := 0
	for {
		var page []*pb.Task
		tok, err := tp.NextPage(&page)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, tk := range page {
			if tk.View != pb.Task_FULL {
				t.Errorf("task view %v", tk.View)
			}
			tasks = append(tasks, tk.Name)
		}
		if tok == "" {
			break
		}
	}
	sort.Strings(ids)
	if fmt.Sprint(tasks) != fmt.Sprint(ids) || pages != 4 {
		t.Errorf("listed %d tasks in %d pages: %v", len(tasks), pages, tasks)
	}
}

func TestBatchCreateAndDeleteTasks(t *testing.T) {
	h := newHarness(t, false, Options{})
	q := h.queue("batch", nil)
	if _, err := h.client.PauseQueue(h.ctx, &pb.PauseQueueRequest{Name: q}); err != nil {
		t.Fatal(err)
	}
	mk := func(id string) *pb.CreateTaskRequest {
		return &pb.CreateTaskRequest{Parent: q, Task: &pb.Task{Name: q + "/tasks/" + id,
			MessageType: &pb.Task_HttpRequest{HttpRequest: &pb.HttpRequest{Url: "http://127.0.0.1:1/"}}}}
	}
	op, err := h.client.BatchCreateTasks(h.ctx, &pb.BatchCreateTasksRequest{Parent: q,
		Requests: []*pb.CreateTaskRequest{mk("a"), mk("a"), mk("b")}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := op.Wait(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Tasks) != 2 {
		t.Errorf("created %d tasks, want 2", len(resp.Tasks))
	}
	meta, err := op.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if meta.State != pb.BatchCreateTasksMetadata_PARTIALLY_SUCCEEDED || codes.Code(meta.FailedRequests[1].GetCode()) != codes.AlreadyExists {
		t.Errorf("metadata = %v", meta)
	}
	// The Operations service serves the operation again by name.
	again := h.client.BatchCreateTasksOperation(op.Name())
	if _, err := again.Poll(h.ctx); err != nil || !again.Done() {
		t.Errorf("poll by name: done=%v err=%v", again.Done(), err)
	}

	dop, err := h.client.BatchDeleteTasks(h.ctx, &pb.BatchDeleteTasksRequest{Parent: q, Names: []string{q + "/tasks/a", q + "/tasks/zz"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := dop.Wait(h.ctx); err != nil {
		t.Fatal(err)
	}
	dmeta, err := dop.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if dmeta.State != pb.BatchDeleteTasksMetadata_PARTIALLY_SUCCEEDED || codes.Code(dmeta.FailedRequests[1].GetCode()) != codes.NotFound {
		t.Errorf("delete metadata = %v", dmeta)
	}
	if n := countTasks(t, h, q); n != 1 {
		t.Errorf("%d tasks left, want 1", n)
	}
}

func TestIAMPolicy(t *testing.T) {
	h := newHarness(t, false, Options{})
	q := h.queue("iam", nil)
	p, err := h.client.GetIamPolicy(h.ctx, &iampb.GetIamPolicyRequest{Resource: q})
	if err != nil || len(p.Bindings) != 0 {
		t.Fatalf("GetIamPolicy = %v, %v", p, err)
	}
	binding := &iampb.Binding{Role: "roles/cloudtasks.enqueuer", Members: []string{"serviceAccount:a@b.iam.gserviceaccount.com"}}
	if _, err := h.client.SetIamPolicy(h.ctx, &iampb.SetIamPolicyRequest{Resource: q, Policy: &iampb.Policy{Bindings: []*iampb.Binding{binding}}}); err != nil {
		t.Fatal(err)
	}
	p, err = h.client.GetIamPolicy(h.ctx, &iampb.GetIamPolicyRequest{Resource: q})
	if err != nil || len(p.Bindings) != 1 || p.Bindings[0].Role != binding.Role {
		t.Fatalf("GetIamPolicy after set = %v, %v", p, err)
	}
	perms, err := h.client.TestIamPermissions(h.ctx, &iampb.TestIamPermissionsRequest{Resource: q, Permissions: []string{"cloudtasks.tasks.create"}})
	if err != nil || len(perms.Permissions) != 1 {
		t.Fatalf("TestIamPermissions = %v, %v", perms, err)
	}
	_, err = h.client.GetIamPolicy(h.ctx, &iampb.GetIamPolicyRequest{Resource: testParent + "/queues/none"})
	wantCode(t, err, codes.NotFound)
}

func TestNewClientHonoursEnvVar(t *testing.T) {
	h := newHarness(t, false, Options{})
	q := h.queue("env", nil)
	t.Setenv(EnvVar, h.addr)
	c, err := NewClient(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.GetQueue(context.Background(), &pb.GetQueueRequest{Name: q})
	if err != nil {
		t.Fatalf("GetQueue through NewClient: %v", err)
	}
	if got.Name != q {
		t.Errorf("got %s", got.Name)
	}
}

func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, "127.0.0.1:0", pw) }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "export "+EnvVar+"=")
	if !ok || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("Run printed %q", line)
	}
	c, err := cloudtasksapi.NewClient(ctx, ClientOptions(addr)...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateQueue(ctx, &pb.CreateQueueRequest{Parent: testParent, Queue: &pb.Queue{Name: testParent + "/queues/run"}}); err != nil {
		t.Fatalf("CreateQueue against Run: %v", err)
	}
	_ = c.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Run did not return after its context was cancelled")
	}
}

func TestStopWaitsAndLeaksNothing(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		release := make(chan struct{})
		w := newWorker(t, func(rw http.ResponseWriter, r *http.Request, _ int) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		defer close(release)
		srv := NewServer(Options{})
		addr, err := srv.Start("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c, err := cloudtasksapi.NewClient(context.Background(), ClientOptions(addr)...)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		qq, err := c.CreateQueue(ctx, &pb.CreateQueueRequest{Parent: testParent, Queue: &pb.Queue{Name: testParent + "/queues/stop"}})
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if _, err := c.CreateTask(ctx, &pb.CreateTaskRequest{Parent: qq.Name, Task: &pb.Task{
				MessageType: &pb.Task_HttpRequest{HttpRequest: &pb.HttpRequest{Url: w.URL}}}}); err != nil {
				t.Fatal(err)
			}
		}
		w.waitN(t, 5)
		_ = c.Close()
		srv.Stop()
		srv.Stop() // idempotent
		if _, err := srv.Start("127.0.0.1:0"); err != errStopped {
			t.Errorf("Start after Stop = %v, want errStopped", err)
		}
		n := w.count()
		w.quiet(t, n)
		w.Close()
	}()
	eventually(t, "goroutines to wind down", func() bool {
		runtime.GC()
		return runtime.NumGoroutine() <= before
	})
}
