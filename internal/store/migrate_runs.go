package store

import (
	"context"
	"maps"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/servo-dev/servo/internal/task"
)

// runsStep is schema 4's step: every run document moves from its
// sequential name (runs/{runId}.{tenantKey}, or runs/{runId} before runs
// were per tenant) to runDocID's hash-prefixed one, with its due shard,
// which ListRuns' sharded queries need. Legacy names (run_…) sort after
// every hash-prefixed one (hex digits): the scan starts at them and reads
// nothing else.
var runsStep = migrateStep{name: "runs", coll: RunsCollection, version: 4, from: task.RunIDPrefix, each: moveRun}

// moveRun moves one legacy run document, in one commit: the new document
// created (exists=false) with the fields read and its due shard, the old
// one deleted on the condition that it is still the version read. When a
// submit already wrote the new name (its LastSubmitAt is then the later),
// only the old one is deleted; when a process of the old layout rewrote
// the old one meanwhile, it is read again.
func moveRun(ctx context.Context, s *Store, d *pb.Document, dry bool) (int, error) {
	f := d.GetFields()
	run, tenant := f["runId"].GetStringValue(), f["tenantId"].GetStringValue()
	if !task.ValidID(run, task.RunIDPrefix) || d.GetName() == s.tenantRunName(tenant, run) {
		return 0, nil // not a run document of the legacy layout
	}
	if dry {
		return 1, nil
	}
	to := s.tenantRunName(tenant, run)
	for try := 0; ; try++ {
		fields := maps.Clone(d.GetFields())
		fields["dueShard"] = intVal(DueShardOf(run, s.shards))
		create := &pb.Write{
			Operation:       &pb.Write_Update{Update: &pb.Document{Name: to, Fields: fields}},
			CurrentDocument: &pb.Precondition{ConditionType: &pb.Precondition_Exists{Exists: false}},
		}
		_, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{create, deleteWrite(d)}})
		if status.Code(err) == codes.AlreadyExists {
			_, err = s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{deleteWrite(d)}})
		}
		if err == nil {
			return 1, nil
		}
		if !lostRace(err) || try >= 10 {
			return 0, err
		}
		docs, _, err := s.batchGet(ctx, []string{d.GetName()}, nil)
		if err != nil {
			return 0, err
		}
		if d = docs[d.GetName()]; d == nil {
			return 0, nil // moved meanwhile (another migrate)
		}
	}
}
