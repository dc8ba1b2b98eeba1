package store

import (
	"cmp"
	"context"
	"maps"
	"sync"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// RPCCounter counts what the store sends to and receives from Firestore,
// through gRPC client interceptors: RPCs by method (e.g. "Commit",
// "BatchGetDocuments"; a streaming RPC counts once per call), documents read
// and written, and the encoded bytes of every message each way. Pass it to
// New with WithRPCCounter.
type RPCCounter struct {
	mu       sync.Mutex
	counts   map[string]int
	received map[string]int64
	written  map[string]int // writes by collection id
	usage    Usage
}

// Usage is what an RPCCounter saw.
type Usage struct {
	// RPCs is the number of calls.
	RPCs int
	// DocsRead counts documents returned by BatchGetDocuments (found),
	// RunQuery and GetDocument.
	DocsRead int
	// DocsWritten counts the writes of Commit requests, deletes apart.
	DocsWritten int
	// DocsDeleted counts the deletes of Commit requests (Firestore bills
	// a delete apart from, and cheaper than, a write).
	DocsDeleted int
	// DocsMissing counts the names BatchGetDocuments looked up and did not
	// find (whether Firestore bills them as reads, its pricing page does
	// not say).
	DocsMissing int
	// IndexEntries counts the index entries those writes make in
	// production, as IndexEntries models them.
	IndexEntries int
	// BytesSent and BytesReceived are the encoded sizes of the request and
	// response messages (protobuf; the wire adds a few bytes of framing).
	BytesSent, BytesReceived int
}

// NewRPCCounter returns an empty counter.
func NewRPCCounter() *RPCCounter {
	return &RPCCounter{counts: map[string]int{}, received: map[string]int64{}, written: map[string]int{}}
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
	c.usage.RPCs++
	c.mu.Unlock()
}

// sent and received account one message each way.
func (c *RPCCounter) sent(m any) {
	msg, ok := m.(proto.Message)
	if !ok {
		return
	}
	n, writes, deletes, entries := proto.Size(msg), 0, 0, 0
	var colls []string
	if r, ok := msg.(*pb.CommitRequest); ok {
		for _, w := range r.GetWrites() {
			if w.GetDelete() != "" {
				deletes++
				continue
			}
			writes++
			entries += IndexEntries(w)
			colls = append(colls, collectionOf(cmp.Or(w.GetUpdate().GetName(), w.GetDelete(), w.GetTransform().GetDocument())))
		}
	}
	c.mu.Lock()
	for _, coll := range colls {
		c.written[coll]++
	}
	c.usage.BytesSent += n
	c.usage.DocsWritten += writes
	c.usage.DocsDeleted += deletes
	c.usage.IndexEntries += entries
	c.mu.Unlock()
}

func (c *RPCCounter) recv(method string, m any) {
	msg, ok := m.(proto.Message)
	if !ok {
		return
	}
	n, docs, missing := proto.Size(msg), 0, 0
	switch r := msg.(type) {
	case *pb.BatchGetDocumentsResponse:
		if r.GetFound() != nil {
			docs = 1
		}
		if r.GetMissing() != "" {
			missing = 1
		}
	case *pb.RunQueryResponse:
		if r.GetDocument() != nil {
			docs = 1
		}
	case *pb.Document:
		docs = 1
	}
	c.mu.Lock()
	c.usage.BytesReceived += n
	c.usage.DocsRead += docs
	c.usage.DocsMissing += missing
	c.received[shortMethod(method)] += int64(n)
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
	c.sent(req)
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err == nil {
		c.recv(method, reply)
	}
	return err
}

func (c *RPCCounter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	c.add(method)
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &countedStream{ClientStream: s, c: c, method: method}, nil
}

// countedStream accounts the messages of a streaming call.
type countedStream struct {
	grpc.ClientStream
	c      *RPCCounter
	method string
}

func (s *countedStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err == nil {
		s.c.sent(m)
	}
	return err
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		s.c.recv(s.method, m)
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

// Usage returns what the counter saw since it was made or reset.
func (c *RPCCounter) Usage() Usage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.usage
}

// DocsWrittenIn is how many of the writes counted were to documents of
// the collection (or subcollection) with the id coll, e.g.
// AttemptsCollection.
func (c *RPCCounter) DocsWrittenIn(coll string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.written[coll]
}

// Total is the number of RPCs counted.
func (c *RPCCounter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.usage.RPCs
}

// Reset sets every count to zero.
func (c *RPCCounter) Reset() {
	c.mu.Lock()
	c.counts = map[string]int{}
	c.received = map[string]int64{}
	c.written = map[string]int{}
	c.usage = Usage{}
	c.mu.Unlock()
}
