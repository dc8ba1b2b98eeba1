package store

import (
	"context"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
)

// MetaCollection holds Servo's own small status documents (not tasks).
const MetaCollection = "meta"

// SweeperDocID is the id of the document in MetaCollection that records
// the sweeper's latest pass.
const SweeperDocID = "sweeper"

// SweepDuty is what one duty of a sweeper pass did.
type SweepDuty struct {
	// Due is the number of due tasks the duty's query returned.
	Due int `firestore:"due" json:"due"`
	// Applied is the number of committed transitions or re-drives.
	Applied int `firestore:"applied" json:"applied"`
	// Errors counts failed transactions and queries.
	Errors int `firestore:"errors" json:"errors"`
	// MaxLagMs is the longest time between a handled task's due time and
	// its transaction (0 when nothing was applied).
	MaxLagMs int64 `firestore:"maxLagMs" json:"maxLagMs"`
}

// SweepStatus is the document meta/sweeper: the latest sweeper pass, written
// once at the end of every pass (one write per pass, Every apart: far below
// a document's sustained write rate). Operators, `servo doctor` and the
// dashboard read it to tell whether the sweeper is alive and keeping up.
type SweepStatus struct {
	// LastPassAt is when the latest pass ended.
	LastPassAt time.Time `firestore:"lastPassAt" json:"lastPassAt"`
	// PassMs is how long that pass took.
	PassMs int64 `firestore:"passMs" json:"passMs"`
	// Passes counts the passes recorded since the document was created
	// (an increment, so that concurrent sweeper instances do not lose
	// counts).
	Passes int64 `firestore:"passes" json:"passes"`
	// Duties holds each duty's figures by duty name (deadline, cancel,
	// lease, dispatch).
	Duties map[string]SweepDuty `firestore:"duties" json:"duties"`
	// RedriveErrors is 1 when the pass's outbox re-drive failed.
	RedriveErrors int `firestore:"redriveErrors" json:"redriveErrors"`
}

func (s *Store) sweeperName() string { return s.docs + "/" + MetaCollection + "/" + SweeperDocID }

// RecordSweep writes st as the latest pass (one commit of one document;
// Passes is incremented, whatever st.Passes holds).
func (s *Store) RecordSweep(ctx context.Context, st SweepStatus) error {
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
func (s *Store) LastSweep(ctx context.Context) (st SweepStatus, found bool, err error) {
	found, err = s.getDoc(ctx, s.sweeperName(), &st)
	if err != nil {
		return SweepStatus{}, false, wrap("read sweeper status", err)
	}
	return st, found, nil
}
