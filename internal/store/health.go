package store

import (
	"context"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"github.com/servo-dev/servo/api"
)

// MetaCollection holds Servo's own small status documents (not tasks).
const MetaCollection = "meta"

// SweeperDocID is the id of the document in MetaCollection that records
// the sweeper's latest pass.
const SweeperDocID = "sweeper"

func (s *Store) sweeperName() string { return s.docs + "/" + MetaCollection + "/" + SweeperDocID }

// RecordSweep writes st as the latest pass (one commit of one document;
// Passes is incremented, whatever st.Passes holds).
func (s *Store) RecordSweep(ctx context.Context, st api.SweepStatus) error {
	st.LastPassAt = st.LastPassAt.UTC()
	w := setWrite(s.sweeperName(), st, false)
	delete(w.GetUpdate().Fields, "passes")
	w.UpdateMask = &pb.DocumentMask{FieldPaths: []string{"lastPassAt", "passMs", "duties", "redriveErrors"}}
	w.UpdateTransforms = []*pb.DocumentTransform_FieldTransform{{
		FieldPath:     "passes",
		TransformType: &pb.DocumentTransform_FieldTransform_Increment{Increment: &pb.Value{ValueType: &pb.Value_IntegerValue{IntegerValue: 1}}},
	}}
	if _, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{w}}); err != nil {
		return wrap("record sweep", err)
	}
	return nil
}

// LastSweep reads the latest pass; found is false when no pass was ever
// recorded.
func (s *Store) LastSweep(ctx context.Context) (st api.SweepStatus, found bool, err error) {
	found, err = s.getDoc(ctx, s.sweeperName(), &st)
	if err != nil {
		return api.SweepStatus{}, false, wrap("read sweeper status", err)
	}
	return st, found, nil
}
