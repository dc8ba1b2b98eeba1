package telemetry

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"
)

type rpcTallyKey struct{}

// CountRPCs returns ctx carrying a tally of the gRPC calls made with it
// through a client that has the RPC interceptors (the store's Firestore
// client has them), and the tally. It adds no call of its own.
func CountRPCs(ctx context.Context) (context.Context, *atomic.Int64) {
	n := new(atomic.Int64)
	return context.WithValue(ctx, rpcTallyKey{}, n), n
}

func tally(ctx context.Context) {
	if n, ok := ctx.Value(rpcTallyKey{}).(*atomic.Int64); ok {
		n.Add(1)
	}
}

// UnaryRPCTally and StreamRPCTally are gRPC client interceptors that count
// each call in the tally of its context (CountRPCs), if any.
func UnaryRPCTally(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	tally(ctx)
	return invoker(ctx, method, req, reply, cc, opts...)
}

// StreamRPCTally: see UnaryRPCTally.
func StreamRPCTally(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	tally(ctx)
	return streamer(ctx, desc, cc, method, opts...)
}
