package store

import (
	"context"
	"sort"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
)

// RunOutboxEntriesOf is RunOutboxEntries restricted, in the query, to the
// entries of tenants' tasks (all tenants when tenants is empty).
func (s *Store) RunOutboxEntriesOf(ctx context.Context, runID string, tenants []string) ([]OutboxEntry, error) {
	if len(tenants) == 0 {
		return s.RunOutboxEntries(ctx, runID)
	}
	q := outboxQuery("runId", runID)
	q.Where = and(q.Where, fieldFilter("tenantId", pb.StructuredQuery_FieldFilter_IN, stringsVal(tenants)))
	out, err := s.queryOutbox(ctx, q)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].TaskID != out[j].TaskID {
			return out[i].TaskID < out[j].TaskID
		}
		return out[i].Seq < out[j].Seq
	})
	return out, wrap("run outbox entries", err)
}

func stringsVal(ss []string) *pb.Value {
	vals := make([]*pb.Value, len(ss))
	for i, s := range ss {
		vals[i] = strVal(s)
	}
	return &pb.Value{ValueType: &pb.Value_ArrayValue{ArrayValue: &pb.ArrayValue{Values: vals}}}
}
