package jobs_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"cloud.google.com/go/run/apiv2/runpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/jobs"
	"github.com/servo-dev/servo/internal/task"
)

// fakeRun is a Cloud Run Admin API server (jobs and executions) that
// records the requests the real run/apiv2 client sends.
type fakeRun struct {
	runpb.UnimplementedJobsServer
	runpb.UnimplementedExecutionsServer

	mu        sync.Mutex
	runs      []*runpb.RunJobRequest
	cancelled []string
	execs     []*runpb.Execution
	cancelErr error
}

func (f *fakeRun) RunJob(_ context.Context, req *runpb.RunJobRequest) (*longrunningpb.Operation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs = append(f.runs, req)
	ex := &runpb.Execution{Name: fmt.Sprintf("%s/executions/e%d", req.GetName(), len(f.execs)+1), CreateTime: timestamppb.Now(), Template: &runpb.TaskTemplate{Containers: []*runpb.Container{{}}}}
	for _, o := range req.GetOverrides().GetContainerOverrides() {
		ex.Template.Containers[0].Env = append(ex.Template.Containers[0].Env, o.GetEnv()...)
	}
	f.execs = append(f.execs, ex)
	md, err := anypb.New(ex)
	if err != nil {
		return nil, err
	}
	return &longrunningpb.Operation{Name: "projects/p/locations/l/operations/op1", Metadata: md}, nil
}

func (f *fakeRun) ListExecutions(_ context.Context, req *runpb.ListExecutionsRequest) (*runpb.ListExecutionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &runpb.ListExecutionsResponse{Executions: f.execs}, nil
}

func (f *fakeRun) CancelExecution(_ context.Context, req *runpb.CancelExecutionRequest) (*longrunningpb.Operation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancelled = append(f.cancelled, req.GetName())
	if f.cancelErr != nil {
		return nil, f.cancelErr
	}
	return &longrunningpb.Operation{Name: "projects/p/locations/l/operations/op2"}, nil
}

func startFakeRun(t *testing.T) (*fakeRun, *jobs.CloudRun) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRun{}
	srv := grpc.NewServer()
	runpb.RegisterJobsServer(srv, f)
	runpb.RegisterExecutionsServer(srv, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	c, err := jobs.NewCloudRun(context.Background(), "worker", option.WithEndpoint(lis.Addr().String()), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return f, c
}

// TestCloudRunRequests checks the Admin API requests the Cloud Run runner
// makes with the real run/apiv2 client: RunJob on the job with one
// container override carrying the envelope and the labels as environment
// variables (nothing else overridden), Find by those labels, and Cancel.
func TestCloudRunRequests(t *testing.T) {
	const job = "projects/my-project/locations/europe-west1/jobs/render"
	envelope := []byte(`{"taskId":"task_1","attempt":2,"taskToken":"secret"}`)
	labels := jobs.Labels("task_1", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, c := startFakeRun(t)

	if _, ok, err := c.Find(ctx, job, labels); err != nil || ok {
		t.Fatalf("Find before Run: ok=%v err=%v", ok, err)
	}
	ex, err := c.Run(ctx, job, envelope, labels)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Name != job+"/executions/e1" || ex.Done {
		t.Fatalf("execution %+v", ex)
	}
	if len(f.runs) != 1 {
		t.Fatalf("%d RunJob requests", len(f.runs))
	}
	req := f.runs[0]
	ov := req.GetOverrides()
	if req.GetName() != job || ov.GetTaskCount() != 0 || ov.GetTimeout() != nil || len(ov.GetContainerOverrides()) != 1 {
		t.Fatalf("RunJob request %v", req)
	}
	co := ov.GetContainerOverrides()[0]
	if co.GetName() != "worker" || len(co.GetArgs()) != 0 || co.GetClearArgs() {
		t.Fatalf("container override %v", co)
	}
	env := map[string]string{}
	for _, v := range co.GetEnv() {
		env[v.GetName()] = v.GetValue()
	}
	want := map[string]string{api.EnvelopeEnv: string(envelope), task.ExecutionLabelsEnv: "servo-attempt=2,servo-task-id=task_1"}
	if len(env) != len(want) || env[api.EnvelopeEnv] != want[api.EnvelopeEnv] || env[task.ExecutionLabelsEnv] != want[task.ExecutionLabelsEnv] {
		t.Fatalf("override env %v, want %v", env, want)
	}

	// Find matches the labels, not another attempt's.
	got, ok, err := c.Find(ctx, job, labels)
	if err != nil || !ok || got.Name != ex.Name || got.Done {
		t.Fatalf("Find: %+v ok=%v err=%v", got, ok, err)
	}
	if _, ok, err := c.Find(ctx, job, jobs.Labels("task_1", 3)); err != nil || ok {
		t.Fatalf("Find of attempt 3: ok=%v err=%v", ok, err)
	}
	f.mu.Lock()
	f.execs[0].CompletionTime = timestamppb.Now()
	f.mu.Unlock()
	if got, ok, _ := c.Find(ctx, job, labels); !ok || !got.Done {
		t.Fatalf("Find of a completed execution: %+v", got)
	}
	// Of the attempt's executions, Find prefers one that runs to a newer
	// one that ended (a concurrent delivery's, superseded and cancelled).
	f.mu.Lock()
	f.execs[0].CompletionTime = nil
	f.mu.Unlock()
	if _, err := c.Run(ctx, job, envelope, labels); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.execs[1].CompletionTime = timestamppb.Now()
	f.mu.Unlock()
	if got, ok, _ := c.Find(ctx, job, labels); !ok || got.Name != ex.Name || got.Done {
		t.Fatalf("Find with a newer ended execution: %+v, want the running %s", got, ex.Name)
	}

	// Cancel; an execution already finished or gone is not an error.
	for _, e := range []error{nil, status.Error(codes.FailedPrecondition, "already finished"), status.Error(codes.NotFound, "gone")} {
		f.cancelErr = e
		if err := c.Cancel(ctx, ex.Name); err != nil {
			t.Fatalf("Cancel with the server answering %v: %v", e, err)
		}
	}
	f.cancelErr = status.Error(codes.PermissionDenied, "no")
	if err := c.Cancel(ctx, ex.Name); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Cancel refused: %v", err)
	}
	if len(f.cancelled) != 4 || f.cancelled[0] != ex.Name {
		t.Fatalf("cancelled %q", f.cancelled)
	}
}
