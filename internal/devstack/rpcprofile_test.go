package devstack_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/store"

	"github.com/servo-dev/servo/internal/benchworker"
	"github.com/servo-dev/servo/internal/servotest"
)

// shapeCounter counts Firestore RPCs by method and shape: a query's
// collection and filtered fields, a commit's written collections.
type shapeCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *shapeCounter) add(k string) {
	c.mu.Lock()
	c.n[k]++
	c.mu.Unlock()
}

func (c *shapeCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.n
	c.n = map[string]int{}
	return out
}

// filterShape names a filter's fields and operators.
func filterShape(f *pb.StructuredQuery_Filter) string {
	switch ft := f.GetFilterType().(type) {
	case *pb.StructuredQuery_Filter_CompositeFilter:
		var parts []string
		for _, g := range ft.CompositeFilter.GetFilters() {
			parts = append(parts, filterShape(g))
		}
		return strings.Join(parts, ",")
	case *pb.StructuredQuery_Filter_FieldFilter:
		return ft.FieldFilter.GetField().GetFieldPath() + " " + ft.FieldFilter.GetOp().String()
	case *pb.StructuredQuery_Filter_UnaryFilter:
		return ft.UnaryFilter.GetField().GetFieldPath() + " " + ft.UnaryFilter.GetOp().String()
	}
	return ""
}

func queryShape(q *pb.StructuredQuery) string {
	var from []string
	for _, c := range q.GetFrom() {
		from = append(from, c.GetCollectionId())
	}
	return strings.Join(from, ",") + " [" + filterShape(q.GetWhere()) + "]"
}

func docCollection(name string) string {
	_, rest, _ := strings.Cut(name, "/documents/")
	parts := strings.Split(rest, "/")
	var cols []string
	for i := 0; i < len(parts); i += 2 {
		cols = append(cols, parts[i])
	}
	return strings.Join(cols, "/")
}

func (c *shapeCounter) shape(method string, req any) string {
	m := method[strings.LastIndex(method, "/")+1:]
	switch r := req.(type) {
	case *pb.RunQueryRequest:
		return m + " " + queryShape(r.GetStructuredQuery())
	case *pb.RunAggregationQueryRequest:
		return m + " " + queryShape(r.GetStructuredAggregationQuery().GetStructuredQuery())
	case *pb.CommitRequest:
		var cols []string
		for _, w := range r.GetWrites() {
			name := w.GetUpdate().GetName()
			if name == "" {
				name = w.GetDelete()
			}
			cols = append(cols, docCollection(name))
		}
		slices.Sort(cols)
		if r.GetTransaction() != nil {
			m += "(tx)"
		}
		return m + " " + strings.Join(cols, "+")
	case *pb.BatchGetDocumentsRequest:
		var cols []string
		for _, d := range r.GetDocuments() {
			cols = append(cols, docCollection(d))
		}
		slices.Sort(cols)
		if r.GetTransaction() != nil || r.GetNewTransaction() != nil {
			m += "(tx)"
		}
		return m + " " + strings.Join(cols, "+")
	case *pb.GetDocumentRequest:
		return m + " " + docCollection(r.GetName())
	}
	return m
}

func (c *shapeCounter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.add(c.shape(method, req))
	return invoker(ctx, method, req, reply, cc, opts...)
}

// shapeStream counts a streaming call by its first request's shape.
type shapeStream struct {
	grpc.ClientStream
	c      *shapeCounter
	method string
	once   sync.Once
}

func (s *shapeStream) SendMsg(m any) error {
	s.once.Do(func() { s.c.add(s.c.shape(s.method, m)) })
	return s.ClientStream.SendMsg(m)
}

func (c *shapeCounter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &shapeStream{ClientStream: s, c: c, method: method}, nil
}

// emulatorPID finds the Java process listening at host's port.
func emulatorPID(host string) int {
	_, port, _ := strings.Cut(host, ":")
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/cmdline")
		if err != nil {
			continue
		}
		cl := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cl, "java") && strings.Contains(cl, "--port="+port) {
			pid, _ := strconv.Atoi(filepath.Base(d))
			return pid
		}
	}
	return 0
}

func printShapes(b *testing.B, title string, n map[string]int, per float64, unit string) {
	keys := make([]string, 0, len(n))
	total := 0
	for k, v := range n {
		keys = append(keys, k)
		total += v
	}
	slices.SortFunc(keys, func(a, c string) int { return n[c] - n[a] })
	b.Logf("%s: %.2f RPCs %s", title, float64(total)/per, unit)
	for _, k := range keys {
		b.Logf("  %8.2f  %s", float64(n[k])/per, k)
	}
}

// BenchmarkDevRPCs counts the Firestore RPCs of a local stack (servo dev's
// configuration: a sweep every second) by method and shape (a query's
// collection and filters, a commit's collections), idle for 10 s and then
// under a workload like BenchmarkDevWorkload's (cmd/servo): 100 tasks that
// each send benchworker.Beats heartbeats 100 ms apart
// (SERVO_BENCH_HEARTBEATS, default 1), 8 submitters, a worker running 8 at
// a time. It logs the RPCs per idle second and per task, and each
// emulator's CPU time (alone, idle under the stack, per task). Run it with
// -benchtime=1x -v.
func BenchmarkDevRPCs(b *testing.B) {
	const tasks, submitters, workers = 100, 8, 8
	sc := &shapeCounter{n: map[string]int{}}
	w := benchworker.Start(b, workers)
	fsPID, psPID := emulatorPID(emulatortest.FirestoreHost(b)), emulatorPID(emulatortest.PubSubHost(b))
	fs0, ps0 := servotest.CPUSeconds(fsPID), servotest.CPUSeconds(psPID)
	time.Sleep(5 * time.Second)
	b.Logf("emulators alone: firestore %.1f ms/s, pubsub %.1f ms/s", (servotest.CPUSeconds(fsPID)-fs0)*1000/5, (servotest.CPUSeconds(psPID)-ps0)*1000/5)
	for i := 0; i < b.N; i++ {
		s, err := devstack.Start(context.Background(), devstack.Options{
			Addr: "127.0.0.1:0", Project: fmt.Sprintf("%s-%d", emulatortest.ProjectID(b), i), ReuseEmulators: true,
			Workers: map[string]string{benchworker.Name: w.URL},
			StoreOptions: []store.Option{store.WithClientOptions(
				option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(sc.unary)),
				option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(sc.stream)))},
		})
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(3 * time.Second) // the start-up's work
		sc.take()
		fs0, ps0 := servotest.CPUSeconds(fsPID), servotest.CPUSeconds(psPID)
		const idle = 10
		time.Sleep(idle * time.Second)
		printShapes(b, "idle", sc.take(), idle, "per second")
		b.Logf("idle CPU: firestore %.1f ms/s, pubsub %.1f ms/s", (servotest.CPUSeconds(fsPID)-fs0)*1000/idle, (servotest.CPUSeconds(psPID)-ps0)*1000/idle)

		fs0, ps0 = servotest.CPUSeconds(fsPID), servotest.CPUSeconds(psPID)
		_, _, elapsed := w.Run(b, func(body []byte) error {
			res, err := http.Post(s.URL+"/v1/tasks", "application/json", bytes.NewReader(body))
			if err != nil {
				return err
			}
			res.Body.Close()
			if res.StatusCode != http.StatusCreated {
				return fmt.Errorf("submit: %d", res.StatusCode)
			}
			return nil
		}, tasks, submitters, 5*time.Minute)
		time.Sleep(1500 * time.Millisecond) // the last events and sweeps
		printShapes(b, "workload", sc.take(), tasks, "per task")
		b.Logf("workload: %.1f tasks/s; CPU per task: firestore %.1f ms, pubsub %.1f ms", tasks/elapsed.Seconds(),
			(servotest.CPUSeconds(fsPID)-fs0)*1000/tasks, (servotest.CPUSeconds(psPID)-ps0)*1000/tasks)
		s.Close()
	}
}
