package store

import (
	"context"
	"maps"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// RPCCounter counts Firestore RPCs by method (e.g. "Commit",
// "BatchGetDocuments") through gRPC client interceptors, and the bytes of
// the responses received. Pass it to New with WithRPCCounter. Streaming RPCs
// count once per call.
type RPCCounter struct {
	mu       sync.Mutex
	counts   map[string]int
	received map[string]int64
}

// NewRPCCounter returns an empty counter.
func NewRPCCounter() *RPCCounter {
	return &RPCCounter{counts: map[string]int{}, received: map[string]int64{}}
}

func shortMethod(method string) string {
	if i := lastSlash(method); i >= 0 {
		return method[i+1:]
	}
	return method
}

func (c *RPCCounter) add(method string) {
	c.mu.Lock()
	c.counts[shortMethod(method)]++
	c.mu.Unlock()
}

// addReceived counts the encoded size of a response message.
func (c *RPCCounter) addReceived(method string, m any) {
	pm, ok := m.(proto.Message)
	if !ok {
		return
	}
	n := int64(proto.Size(pm))
	c.mu.Lock()
	c.received[shortMethod(method)] += n
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
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err == nil {
		c.addReceived(method, reply)
	}
	return err
}

func (c *RPCCounter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	c.add(method)
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &countingStream{ClientStream: cs, c: c, method: method}, nil
}

// countingStream counts the bytes of the messages a stream receives.
type countingStream struct {
	grpc.ClientStream
	c      *RPCCounter
	method string
}

func (s *countingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		s.c.addReceived(s.method, m)
	}
	return err
}

// Counts returns a copy of the counts by method.
func (c *RPCCounter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// ReceivedBytes returns the encoded size of the responses received, by
// method (for a streaming RPC, every message of the stream).
func (c *RPCCounter) ReceivedBytes() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.received)
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
	c.received = map[string]int64{}
	c.mu.Unlock()
}
