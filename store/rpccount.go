package store

import (
	"context"
	"maps"
	"sync"

	"google.golang.org/grpc"
)

// RPCCounter counts Firestore RPCs by method (e.g. "Commit",
// "BatchGetDocuments") through gRPC client interceptors. Pass it to New with
// WithRPCCounter. Streaming RPCs count once per call.
type RPCCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

// NewRPCCounter returns an empty counter.
func NewRPCCounter() *RPCCounter { return &RPCCounter{counts: map[string]int{}} }

func (c *RPCCounter) add(method string) {
	if i := lastSlash(method); i >= 0 {
		method = method[i+1:]
	}
	c.mu.Lock()
	c.counts[method]++
	c.mu.Unlock()
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

func (c *RPCCounter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.add(method)
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *RPCCounter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	c.add(method)
	return streamer(ctx, desc, cc, method, opts...)
}

// Counts returns a copy of the counts by method.
func (c *RPCCounter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// Total is the number of RPCs counted.
func (c *RPCCounter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.counts {
		n += v
	}
	return n
}

// Reset sets every count to zero.
func (c *RPCCounter) Reset() {
	c.mu.Lock()
	c.counts = map[string]int{}
	c.mu.Unlock()
}
