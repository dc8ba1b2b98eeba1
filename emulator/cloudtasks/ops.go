package cloudtasks

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"

	pb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The batch methods return long-running operations that are already done;
// the Operations service serves them again by name.

// operationName returns the operation's resource name under the location of
// queue qn; requestID, when set, makes a retried batch return the same
// operation.
func operationName(qn queueName, kind, requestID string) string {
	if requestID == "" {
		requestID = strconv.FormatUint(rand.Uint64(), 10)
	}
	return qn.locationName.String() + "/operations/" + kind + "-" + requestID
}

// storedOperation returns the operation already recorded under name.
func (s *Server) storedOperation(name string) *longrunningpb.Operation {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if op := s.ops[name]; op != nil {
		return proto.Clone(op).(*longrunningpb.Operation)
	}
	return nil
}

func (s *Server) storeOperation(op *longrunningpb.Operation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops[op.Name] = proto.Clone(op).(*longrunningpb.Operation)
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(fmt.Sprintf("cloudtasks emulator: marshal %T: %v", m, err))
	}
	return a
}

func (v *service) BatchCreateTasks(_ context.Context, req *pb.BatchCreateTasksRequest) (*longrunningpb.Operation, error) {
	qn, err := parseQueueName(req.GetParent())
	if err != nil {
		return nil, grpcErr(err)
	}
	if n := len(req.GetRequests()); n == 0 || n > maxBatchCreate {
		return nil, grpcErr(invalidf("requests must hold 1 to %d tasks, got %d", maxBatchCreate, n))
	}
	for i, r := range req.GetRequests() {
		if r.GetParent() != "" && r.GetParent() != qn.String() {
			return nil, grpcErr(invalidf("requests[%d].parent %q differs from parent %q", i, r.GetParent(), qn))
		}
	}
	if _, err := v.s.lookupQueue(qn.String()); err != nil {
		return nil, grpcErr(err)
	}
	name := operationName(qn, "batchCreateTasks", req.GetRequestId())
	if op := v.s.storedOperation(name); op != nil {
		return op, nil
	}
	start := v.s.clock.Now()
	resp := &pb.BatchCreateTasksResponse{}
	meta := &pb.BatchCreateTasksMetadata{StartTime: timestamppb.New(start), FailedRequests: map[int32]*rpcstatus.Status{}}
	for i, r := range req.GetRequests() {
		r = proto.Clone(r).(*pb.CreateTaskRequest)
		r.Parent = qn.String()
		t, err := v.s.createTask(r)
		if err != nil {
			meta.FailedRequests[int32(i)] = status.Convert(grpcErr(err)).Proto()
			continue
		}
		resp.Tasks = append(resp.Tasks, t)
	}
	meta.EndTime = timestamppb.New(v.s.clock.Now())
	op := &longrunningpb.Operation{Name: name, Done: true}
	switch {
	case len(meta.FailedRequests) == 0:
		meta.State = pb.BatchCreateTasksMetadata_SUCCEEDED
		op.Result = &longrunningpb.Operation_Response{Response: mustAny(resp)}
	case len(resp.Tasks) == 0:
		meta.State = pb.BatchCreateTasksMetadata_FAILED
		op.Result = &longrunningpb.Operation_Error{Error: &rpcstatus.Status{
			Code:    int32(codes.Aborted),
			Message: "None of the requests succeeded, refer to BatchCreateTasksMetadata.failed_requests for individual error details",
		}}
	default:
		meta.State = pb.BatchCreateTasksMetadata_PARTIALLY_SUCCEEDED
		op.Result = &longrunningpb.Operation_Response{Response: mustAny(resp)}
	}
	op.Metadata = mustAny(meta)
	v.s.storeOperation(op)
	return op, nil
}

func (v *service) BatchDeleteTasks(_ context.Context, req *pb.BatchDeleteTasksRequest) (*longrunningpb.Operation, error) {
	qn, err := parseQueueName(req.GetParent())
	if err != nil {
		return nil, grpcErr(err)
	}
	if n := len(req.GetNames()); n == 0 || n > maxBatchDelete {
		return nil, grpcErr(invalidf("names must hold 1 to %d task names, got %d", maxBatchDelete, n))
	}
	ids := make([]string, len(req.GetNames()))
	for i, n := range req.GetNames() {
		tn, err := parseTaskName(n)
		if err != nil {
			return nil, grpcErr(fmt.Errorf("names[%d]: %w", i, err))
		}
		if tn.queueName != qn {
			return nil, grpcErr(invalidf("names[%d] %q is not in queue %s", i, n, qn))
		}
		ids[i] = tn.task
	}
	name := operationName(qn, "batchDeleteTasks", req.GetRequestId())
	if op := v.s.storedOperation(name); op != nil {
		return op, nil
	}
	start := v.s.clock.Now()
	meta := &pb.BatchDeleteTasksMetadata{StartTime: timestamppb.New(start), FailedRequests: map[int32]*rpcstatus.Status{}}
	err = v.withQueue(qn.String(), func(q *queue) error {
		now := v.s.clock.Now()
		for i, id := range ids {
			t := q.tasks[id]
			if t == nil {
				meta.FailedRequests[int32(i)] = status.Convert(grpcErr(fmt.Errorf("%w: task %s", errNotFound, req.GetNames()[i]))).Proto()
				continue
			}
			q.removeLocked(t, now)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	meta.EndTime = timestamppb.New(v.s.clock.Now())
	op := &longrunningpb.Operation{Name: name, Done: true}
	switch {
	case len(meta.FailedRequests) == 0:
		meta.State = pb.BatchDeleteTasksMetadata_SUCCEEDED
		op.Result = &longrunningpb.Operation_Response{Response: mustAny(&emptypb.Empty{})}
	case len(meta.FailedRequests) == len(ids):
		meta.State = pb.BatchDeleteTasksMetadata_PARTIALLY_SUCCEEDED
		op.Result = &longrunningpb.Operation_Error{Error: &rpcstatus.Status{
			Code:    int32(codes.Aborted),
			Message: "None of the requests succeeded, refer to BatchDeleteTasksMetadata.failed_requests for individual error details",
		}}
	default:
		meta.State = pb.BatchDeleteTasksMetadata_PARTIALLY_SUCCEEDED
		op.Result = &longrunningpb.Operation_Response{Response: mustAny(&emptypb.Empty{})}
	}
	op.Metadata = mustAny(meta)
	v.s.storeOperation(op)
	return op, nil
}

// operations implements google.longrunning.Operations for the operations the
// batch methods return.
type operations struct {
	longrunningpb.UnimplementedOperationsServer
	s *Server
}

func (o *operations) GetOperation(_ context.Context, req *longrunningpb.GetOperationRequest) (*longrunningpb.Operation, error) {
	if op := o.s.storedOperation(req.GetName()); op != nil {
		return op, nil
	}
	return nil, grpcErr(fmt.Errorf("%w: operation %s", errNotFound, req.GetName()))
}

func (o *operations) WaitOperation(ctx context.Context, req *longrunningpb.WaitOperationRequest) (*longrunningpb.Operation, error) {
	return o.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: req.GetName()})
}

func (o *operations) CancelOperation(ctx context.Context, req *longrunningpb.CancelOperationRequest) (*emptypb.Empty, error) {
	if _, err := o.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: req.GetName()}); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil // already done: nothing to cancel
}

func (o *operations) DeleteOperation(_ context.Context, req *longrunningpb.DeleteOperationRequest) (*emptypb.Empty, error) {
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	if _, ok := o.s.ops[req.GetName()]; !ok {
		return nil, grpcErr(fmt.Errorf("%w: operation %s", errNotFound, req.GetName()))
	}
	delete(o.s.ops, req.GetName())
	return &emptypb.Empty{}, nil
}

func (o *operations) ListOperations(_ context.Context, req *longrunningpb.ListOperationsRequest) (*longrunningpb.ListOperationsResponse, error) {
	if req.GetFilter() != "" {
		return nil, grpcErr(invalidf("the emulator does not support operation filters"))
	}
	n, err := pageSize(req.GetPageSize(), maxTaskPageSize)
	if err != nil {
		return nil, grpcErr(err)
	}
	after, err := decodePageToken(req.GetPageToken(), "")
	if err != nil {
		return nil, grpcErr(err)
	}
	prefix := strings.TrimSuffix(req.GetName(), "/operations") + "/operations/"
	o.s.mu.RLock()
	var names []string
	for name := range o.s.ops {
		if strings.HasPrefix(name, prefix) && name > after {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	resp := &longrunningpb.ListOperationsResponse{}
	if len(names) > n {
		names = names[:n]
		resp.NextPageToken = encodePageToken("", names[n-1])
	}
	for _, name := range names {
		resp.Operations = append(resp.Operations, proto.Clone(o.s.ops[name]).(*longrunningpb.Operation))
	}
	o.s.mu.RUnlock()
	return resp, nil
}
