package quota

import (
	"context"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"github.com/servo-dev/servo/api"
)

// Tx is the store's transaction in progress, as quota reads it. Quota
// never writes through it: it returns its writes to the store, which
// commits them with the transition's own.
type Tx interface {
	// Get reads the named documents in the transaction, in one RPC; a
	// document that does not exist is absent from the map.
	Get(ctx context.Context, names []string) (map[string]*pb.Document, error)
}

// DB is what quota needs of the database outside transactions: the usage
// query, and the repair's recounts and rewrites.
type DB interface {
	// Query runs q over the database's root collections and calls each
	// for every document it returns.
	Query(ctx context.Context, q *pb.StructuredQuery, each func(*pb.Document) error) error
	// CountTasks counts, with one aggregation query, the task documents
	// where selects.
	CountTasks(ctx context.Context, where *pb.StructuredQuery_Filter) (int64, error)
	// Sum counts, with aggregation queries, the documents q selects and
	// sums each of fields over them (a missing or non-integer value adds
	// nothing): Firestore bills one read per 1 000 index entries, not one
	// per document.
	Sum(ctx context.Context, q *pb.StructuredQuery, fields []string) (count int64, sums []int64, err error)
	// Commit commits writes in one commit outside any transaction.
	Commit(ctx context.Context, writes []*pb.Write) error
}

func fieldFilter(path string, op pb.StructuredQuery_FieldFilter_Operator, v *pb.Value) *pb.StructuredQuery_Filter {
	return &pb.StructuredQuery_Filter{FilterType: &pb.StructuredQuery_Filter_FieldFilter{FieldFilter: &pb.StructuredQuery_FieldFilter{
		Field: &pb.StructuredQuery_FieldReference{FieldPath: path}, Op: op, Value: v}}}
}

func and(filters ...*pb.StructuredQuery_Filter) *pb.StructuredQuery_Filter {
	if len(filters) == 1 {
		return filters[0]
	}
	return &pb.StructuredQuery_Filter{FilterType: &pb.StructuredQuery_Filter_CompositeFilter{CompositeFilter: &pb.StructuredQuery_CompositeFilter{
		Op: pb.StructuredQuery_CompositeFilter_AND, Filters: filters}}}
}

func strVal(s string) *pb.Value { return &pb.Value{ValueType: &pb.Value_StringValue{StringValue: s}} }

func intVal(n int) *pb.Value {
	return &pb.Value{ValueType: &pb.Value_IntegerValue{IntegerValue: int64(n)}}
}

func boolVal(b bool) *pb.Value { return &pb.Value{ValueType: &pb.Value_BooleanValue{BooleanValue: b}} }

func statesVal(states []api.State) *pb.Value {
	vals := make([]*pb.Value, len(states))
	for i, st := range states {
		vals[i] = strVal(string(st))
	}
	return &pb.Value{ValueType: &pb.Value_ArrayValue{ArrayValue: &pb.ArrayValue{Values: vals}}}
}
