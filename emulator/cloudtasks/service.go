package cloudtasks

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	pb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Page-size limits documented for ListQueues and ListTasks.
const (
	maxQueuePageSize = 9800
	maxTaskPageSize  = 1000
	maxBatchCreate   = 100
	maxBatchDelete   = 1000
	maxHeaderBytes   = 80 << 10
)

// service implements google.cloud.tasks.v2.CloudTasks on a Server.
type service struct {
	pb.UnimplementedCloudTasksServer
	s *Server
}

// grpcErr converts the emulator's errors to gRPC statuses.
func grpcErr(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, errInvalidName), errors.Is(err, errInvalidArgument):
		code = codes.InvalidArgument
	case errors.Is(err, errNotFound):
		code = codes.NotFound
	case errors.Is(err, errAlreadyExists):
		code = codes.AlreadyExists
	case errors.Is(err, errFailedPrecondition):
		code = codes.FailedPrecondition
	case errors.Is(err, errStopped):
		code = codes.Unavailable
	}
	return status.Error(code, err.Error())
}

// ---- page tokens ----

// encodePageToken makes an opaque token resuming after key; it binds the
// filter so that changing it between pages is an error.
func encodePageToken(filter, key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("v1\x00" + filter + "\x00" + key))
}

func decodePageToken(tok, filter string) (string, error) {
	if tok == "" {
		return "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", invalidf("malformed page_token")
	}
	p := strings.SplitN(string(raw), "\x00", 3)
	if len(p) != 3 || p[0] != "v1" {
		return "", invalidf("malformed page_token")
	}
	if p[1] != filter {
		return "", invalidf("filter changed while paging")
	}
	return p[2], nil
}

func pageSize(n int32, limit int) (int, error) {
	if n < 0 {
		return 0, invalidf("page_size must not be negative, got %d", n)
	}
	if n == 0 || int(n) > limit {
		return limit, nil
	}
	return int(n), nil
}

// ---- queues ----

var stateFilterRe = regexp.MustCompile(`^\s*state\s*(=|:|!=)\s*"?([A-Z_]+)"?\s*$`)

// queueFilter is the subset of the ListQueues filter language the emulator
// understands: a comparison of state with one of its values.
func queueFilter(f string) (func(*pb.Queue) bool, error) {
	if strings.TrimSpace(f) == "" {
		return func(*pb.Queue) bool { return true }, nil
	}
	m := stateFilterRe.FindStringSubmatch(f)
	if m == nil {
		return nil, invalidf("unsupported filter %q: the emulator supports only \"state: VALUE\", \"state = VALUE\" and \"state != VALUE\"", f)
	}
	v, ok := pb.Queue_State_value[m[2]]
	if !ok {
		return nil, invalidf("filter %q: unknown state %q", f, m[2])
	}
	want := pb.Queue_State(v)
	if m[1] == "!=" {
		return func(q *pb.Queue) bool { return q.State != want }, nil
	}
	return func(q *pb.Queue) bool { return q.State == want }, nil
}

func (v *service) ListQueues(_ context.Context, req *pb.ListQueuesRequest) (*pb.ListQueuesResponse, error) {
	loc, err := parseLocationName(req.GetParent())
	if err != nil {
		return nil, grpcErr(err)
	}
	n, err := pageSize(req.GetPageSize(), maxQueuePageSize)
	if err != nil {
		return nil, grpcErr(err)
	}
	match, err := queueFilter(req.GetFilter())
	if err != nil {
		return nil, grpcErr(err)
	}
	after, err := decodePageToken(req.GetPageToken(), req.GetFilter())
	if err != nil {
		return nil, grpcErr(err)
	}
	prefix := loc.String() + "/queues/"
	v.s.mu.RLock()
	var qs []*queue
	for name, q := range v.s.queues {
		if strings.HasPrefix(name, prefix) && name > after {
			qs = append(qs, q)
		}
	}
	v.s.mu.RUnlock()
	sort.Slice(qs, func(i, j int) bool { return qs[i].full < qs[j].full })

	resp := &pb.ListQueuesResponse{}
	for _, q := range qs {
		if len(resp.Queues) == n {
			resp.NextPageToken = encodePageToken(req.GetFilter(), resp.Queues[n-1].Name)
			break
		}
		q.mu.Lock()
		snap, gone := q.snapshotLocked(), q.deleted
		q.mu.Unlock()
		if !gone && match(snap) {
			resp.Queues = append(resp.Queues, snap)
		}
	}
	return resp, nil
}

// withQueue parses name, finds the queue and runs f under its lock.
func (v *service) withQueue(name string, f func(q *queue) error) error {
	qn, err := parseQueueName(name)
	if err != nil {
		return grpcErr(err)
	}
	q, err := v.s.lookupQueue(qn.String())
	if err != nil {
		return grpcErr(err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.deleted {
		return grpcErr(fmt.Errorf("%w: queue %s", errNotFound, qn))
	}
	return grpcErr(f(q))
}

func (v *service) GetQueue(_ context.Context, req *pb.GetQueueRequest) (*pb.Queue, error) {
	var out *pb.Queue
	err := v.withQueue(req.GetName(), func(q *queue) error {
		out = q.snapshotLocked()
		return nil
	})
	return out, err
}

func (v *service) CreateQueue(_ context.Context, req *pb.CreateQueueRequest) (*pb.Queue, error) {
	loc, err := parseLocationName(req.GetParent())
	if err != nil {
		return nil, grpcErr(err)
	}
	if req.GetQueue() == nil {
		return nil, grpcErr(invalidf("queue is required"))
	}
	qn, err := parseQueueName(req.GetQueue().GetName())
	if err != nil {
		return nil, grpcErr(err)
	}
	if qn.locationName != loc {
		return nil, grpcErr(invalidf("queue name %s is not in parent %s", qn, loc))
	}
	cfg := proto.Clone(req.GetQueue()).(*pb.Queue)
	if err := normalizeQueueConfig(cfg); err != nil {
		return nil, grpcErr(err)
	}
	q, err := v.s.createQueue(qn, cfg)
	if err != nil {
		return nil, grpcErr(err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.snapshotLocked(), nil
}

// createQueue adds a queue with the normalized configuration cfg and starts
// its dispatcher.
func (s *Server) createQueue(qn queueName, cfg *pb.Queue) (*queue, error) {
	cfg.Name = qn.String()
	cfg.State = pb.Queue_RUNNING
	cfg.PurgeTime = nil
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.queues[cfg.Name]; ok {
		return nil, fmt.Errorf("%w: queue %s", errAlreadyExists, cfg.Name)
	}
	if at, ok := s.queueTombs[cfg.Name]; ok {
		if s.clock.Now().Sub(at) < s.queueTomb {
			return nil, fmt.Errorf("%w: the queue cannot be created because a queue with this name existed too recently", errFailedPrecondition)
		}
		delete(s.queueTombs, cfg.Name)
	}
	q := newQueue(s, qn, cfg)
	if !s.goTracked(q.run) {
		q.cancel()
		return nil, errStopped
	}
	s.queues[cfg.Name] = q
	return q, nil
}

func (v *service) UpdateQueue(_ context.Context, req *pb.UpdateQueueRequest) (*pb.Queue, error) {
	if req.GetQueue() == nil {
		return nil, grpcErr(invalidf("queue is required"))
	}
	qn, err := parseQueueName(req.GetQueue().GetName())
	if err != nil {
		return nil, grpcErr(err)
	}
	src := proto.Clone(req.GetQueue()).(*pb.Queue)
	paths := req.GetUpdateMask().GetPaths()
	for {
		q, err := v.s.lookupQueue(qn.String())
		if errors.Is(err, errNotFound) {
			// UpdateQueue creates the queue if it does not exist.
			cfg := &pb.Queue{}
			if err := applyQueueMask(cfg, src, paths); err != nil {
				return nil, grpcErr(err)
			}
			if err := normalizeQueueConfig(cfg); err != nil {
				return nil, grpcErr(err)
			}
			q, err := v.s.createQueue(qn, cfg)
			if errors.Is(err, errAlreadyExists) {
				continue // lost a race with another creator: update instead
			}
			if err != nil {
				return nil, grpcErr(err)
			}
			q.mu.Lock()
			defer q.mu.Unlock()
			return q.snapshotLocked(), nil
		}
		q.mu.Lock()
		if q.deleted {
			q.mu.Unlock()
			continue
		}
		defer q.mu.Unlock()
		cfg := q.snapshotLocked()
		if err := applyQueueMask(cfg, src, paths); err != nil {
			return nil, grpcErr(err)
		}
		if err := normalizeQueueConfig(cfg); err != nil {
			return nil, grpcErr(err)
		}
		cfg.Name, cfg.State, cfg.PurgeTime = q.cfg.Name, q.cfg.State, q.cfg.PurgeTime
		q.cfg = cfg
		q.refillLocked(v.s.clock.Now())
		q.poke()
		return q.snapshotLocked(), nil
	}
}

func (v *service) DeleteQueue(_ context.Context, req *pb.DeleteQueueRequest) (*emptypb.Empty, error) {
	qn, err := parseQueueName(req.GetName())
	if err != nil {
		return nil, grpcErr(err)
	}
	name := qn.String()
	v.s.mu.Lock()
	q, ok := v.s.queues[name]
	if ok {
		delete(v.s.queues, name)
		v.s.queueTombs[name] = v.s.clock.Now()
	}
	v.s.mu.Unlock()
	if !ok {
		return nil, grpcErr(fmt.Errorf("%w: queue %s", errNotFound, name))
	}
	q.mu.Lock()
	q.deleted = true
	q.tasks = make(map[string]*task)
	q.ready = nil
	q.mu.Unlock()
	q.cancel()
	return &emptypb.Empty{}, nil
}

func (v *service) PurgeQueue(_ context.Context, req *pb.PurgeQueueRequest) (*pb.Queue, error) {
	var out *pb.Queue
	err := v.withQueue(req.GetName(), func(q *queue) error {
		q.purgeLocked(v.s.clock.Now())
		out = q.snapshotLocked()
		return nil
	})
	return out, err
}

func (v *service) PauseQueue(_ context.Context, req *pb.PauseQueueRequest) (*pb.Queue, error) {
	var out *pb.Queue
	err := v.withQueue(req.GetName(), func(q *queue) error {
		q.cfg.State = pb.Queue_PAUSED
		out = q.snapshotLocked()
		return nil
	})
	return out, err
}

func (v *service) ResumeQueue(_ context.Context, req *pb.ResumeQueueRequest) (*pb.Queue, error) {
	var out *pb.Queue
	err := v.withQueue(req.GetName(), func(q *queue) error {
		q.cfg.State = pb.Queue_RUNNING
		q.poke()
		out = q.snapshotLocked()
		return nil
	})
	return out, err
}

// ---- IAM (stored, never enforced) ----

func (v *service) GetIamPolicy(_ context.Context, req *iampb.GetIamPolicyRequest) (*iampb.Policy, error) {
	out := &iampb.Policy{}
	err := v.withQueue(req.GetResource(), func(q *queue) error {
		if q.iamPolicy != nil {
			out = proto.Clone(q.iamPolicy).(*iampb.Policy)
		}
		return nil
	})
	return out, err
}

func (v *service) SetIamPolicy(_ context.Context, req *iampb.SetIamPolicyRequest) (*iampb.Policy, error) {
	var out *iampb.Policy
	err := v.withQueue(req.GetResource(), func(q *queue) error {
		p := proto.Clone(req.GetPolicy()).(*iampb.Policy)
		if p == nil {
			p = &iampb.Policy{}
		}
		p.Etag = []byte(strconv.FormatInt(v.s.clock.Now().UnixNano(), 36))
		q.iamPolicy = p
		out = proto.Clone(p).(*iampb.Policy)
		return nil
	})
	return out, err
}

func (v *service) TestIamPermissions(_ context.Context, req *iampb.TestIamPermissionsRequest) (*iampb.TestIamPermissionsResponse, error) {
	qn, err := parseQueueName(req.GetResource())
	if err != nil {
		return nil, grpcErr(err)
	}
	if _, err := v.s.lookupQueue(qn.String()); err != nil {
		return &iampb.TestIamPermissionsResponse{}, nil
	}
	return &iampb.TestIamPermissionsResponse{Permissions: req.GetPermissions()}, nil
}

// ---- tasks ----

// viewOf returns a copy of t as seen through view v.
func viewOf(t *pb.Task, v pb.Task_View) *pb.Task {
	out := proto.Clone(t).(*pb.Task)
	if v != pb.Task_FULL {
		v = pb.Task_BASIC
		if hr := out.GetHttpRequest(); hr != nil {
			hr.Body = nil
		}
	}
	out.View = v
	return out
}

func (v *service) ListTasks(_ context.Context, req *pb.ListTasksRequest) (*pb.ListTasksResponse, error) {
	n, err := pageSize(req.GetPageSize(), maxTaskPageSize)
	if err != nil {
		return nil, grpcErr(err)
	}
	after, err := decodePageToken(req.GetPageToken(), "")
	if err != nil {
		return nil, grpcErr(err)
	}
	resp := &pb.ListTasksResponse{}
	err = v.withQueue(req.GetParent(), func(q *queue) error {
		ids := make([]string, 0, len(q.tasks))
		for id := range q.tasks {
			if id > after {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		if len(ids) > n {
			ids = ids[:n]
			resp.NextPageToken = encodePageToken("", ids[n-1])
		}
		for _, id := range ids {
			resp.Tasks = append(resp.Tasks, viewOf(q.tasks[id].pb, req.GetResponseView()))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// withTask parses a task name and runs f under its queue's lock with the
// task, which must exist.
func (v *service) withTask(name string, f func(q *queue, t *task) error) error {
	tn, err := parseTaskName(name)
	if err != nil {
		return grpcErr(err)
	}
	return v.withQueue(tn.queueName.String(), func(q *queue) error {
		t := q.tasks[tn.task]
		if t == nil {
			return fmt.Errorf("%w: task %s", errNotFound, tn)
		}
		return f(q, t)
	})
}

func (v *service) GetTask(_ context.Context, req *pb.GetTaskRequest) (*pb.Task, error) {
	var out *pb.Task
	err := v.withTask(req.GetName(), func(_ *queue, t *task) error {
		out = viewOf(t.pb, req.GetResponseView())
		return nil
	})
	return out, err
}

func (v *service) DeleteTask(_ context.Context, req *pb.DeleteTaskRequest) (*emptypb.Empty, error) {
	err := v.withTask(req.GetName(), func(q *queue, t *task) error {
		q.removeLocked(t, v.s.clock.Now())
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

func (v *service) RunTask(_ context.Context, req *pb.RunTaskRequest) (*pb.Task, error) {
	var out *pb.Task
	err := v.withTask(req.GetName(), func(q *queue, t *task) error {
		now := v.s.clock.Now()
		q.unreadyLocked(t)
		t.pb.ScheduleTime = timestamppb.New(now.Truncate(time.Microsecond))
		q.startLocked(t, now) // regardless of state, rate limits and running attempts
		out = viewOf(t.pb, req.GetResponseView())
		return nil
	})
	return out, err
}

func (v *service) CreateTask(_ context.Context, req *pb.CreateTaskRequest) (*pb.Task, error) {
	t, err := v.s.createTask(req)
	return t, grpcErr(err)
}

// checkHTTPRequest validates a task's HttpRequest; ht is the queue's
// http_target, which may supply the URL.
func checkHTTPRequest(hr *pb.HttpRequest, ht *pb.HttpTarget) error {
	if hr.GetUrl() != "" || ht.GetUriOverride().GetHost() == "" {
		if err := checkTaskURL(hr.GetUrl()); err != nil {
			return err
		}
	}
	switch m := hr.GetHttpMethod(); m {
	case pb.HttpMethod_HTTP_METHOD_UNSPECIFIED, pb.HttpMethod_POST, pb.HttpMethod_PUT, pb.HttpMethod_PATCH:
	default:
		if len(hr.GetBody()) > 0 {
			return invalidf("http_request.body is allowed only for POST, PUT and PATCH, not %s", m)
		}
	}
	size := 0
	for k, val := range hr.GetHeaders() {
		size += len(k) + len(val)
	}
	if size >= maxHeaderBytes {
		return invalidf("http_request.headers must be smaller than 80KB")
	}
	if o := hr.GetOidcToken(); o != nil && o.GetServiceAccountEmail() == "" {
		return invalidf("http_request.oidc_token.service_account_email is required")
	}
	if o := hr.GetOauthToken(); o != nil && o.GetServiceAccountEmail() == "" {
		return invalidf("http_request.oauth_token.service_account_email is required")
	}
	return nil
}

// createTask validates req, adds the task to its queue and returns it as the
// request's response_view shows it.
func (s *Server) createTask(req *pb.CreateTaskRequest) (*pb.Task, error) {
	qn, err := parseQueueName(req.GetParent())
	if err != nil {
		return nil, err
	}
	in := req.GetTask()
	if in == nil {
		return nil, invalidf("task is required")
	}
	var id string
	if in.GetName() != "" {
		tn, err := parseTaskName(in.GetName())
		if err != nil {
			return nil, err
		}
		if tn.queueName != qn {
			return nil, invalidf("task name %s is not in queue %s", tn, qn)
		}
		id = tn.task
	}
	switch in.MessageType.(type) {
	case *pb.Task_HttpRequest:
	case *pb.Task_AppEngineHttpRequest:
		return nil, status.Error(codes.Unimplemented, "the emulator dispatches only HTTP tasks (http_request), not App Engine tasks")
	default:
		return nil, invalidf("task.http_request is required")
	}
	if dd := in.GetDispatchDeadline(); dd != nil {
		if err := dd.CheckValid(); err != nil {
			return nil, invalidf("dispatch_deadline: %v", err)
		}
		if d := dd.AsDuration(); d < minDispatchDeadline || d > maxDispatchDeadline {
			return nil, invalidf("dispatch_deadline must be between %v and %v, got %v", minDispatchDeadline, maxDispatchDeadline, d)
		}
	}
	if err := checkRetryConfig(in.GetRetryConfig()); err != nil {
		return nil, err
	}
	if size := proto.Size(in); size > maxTaskSize {
		return nil, invalidf("task size %d bytes exceeds the maximum of %d", size, maxTaskSize)
	}
	q, err := s.lookupQueue(qn.String())
	if err != nil {
		return nil, err
	}

	q.mu.Lock()
	defer q.mu.Unlock()
	if q.deleted {
		return nil, fmt.Errorf("%w: queue %s", errNotFound, qn)
	}
	if err := checkHTTPRequest(in.GetHttpRequest(), q.cfg.HttpTarget); err != nil {
		return nil, err
	}
	now := s.clock.Now()
	sched := now
	if st := in.GetScheduleTime(); st != nil {
		if err := st.CheckValid(); err != nil {
			return nil, invalidf("schedule_time: %v", err)
		}
		if t := st.AsTime(); t.After(now) {
			if t.Sub(now) > maxScheduleAhead {
				return nil, invalidf("schedule_time must be at most %v in the future", maxScheduleAhead)
			}
			sched = t
		}
	}
	if id != "" {
		if q.tasks[id] != nil || q.tombstonedLocked(id, now) {
			return nil, fmt.Errorf("%w: the task cannot be created because a task with this name existed too recently or exists: %s", errAlreadyExists, in.GetName())
		}
	} else {
		for id == "" || q.tasks[id] != nil || q.tombs[id] != (time.Time{}) {
			id = strconv.FormatUint(rand.Uint64(), 10)
		}
	}

	stored := proto.Clone(in).(*pb.Task)
	stored.Name = taskName{queueName: qn, task: id}.String()
	stored.ScheduleTime = timestamppb.New(sched.Truncate(time.Microsecond))
	stored.CreateTime = timestamppb.New(now.Truncate(time.Second))
	if stored.DispatchDeadline != nil {
		stored.DispatchDeadline = truncateDuration(stored.DispatchDeadline.AsDuration(), time.Millisecond)
	} else {
		stored.DispatchDeadline = durationpb.New(defaultDispatchDeadline)
	}
	stored.DispatchCount, stored.ResponseCount = 0, 0
	stored.FirstAttempt, stored.LastAttempt, stored.View = nil, nil, pb.Task_VIEW_UNSPECIFIED
	q.seq++
	t := &task{id: id, pb: stored, seq: q.seq, index: -1}
	q.tasks[id] = t
	q.addLocked(t)
	return viewOf(stored, req.GetResponseView()), nil
}
