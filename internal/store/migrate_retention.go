package store

import (
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
)

// Schema step 3, retention (retention.go): documents written before it
// have no expireAt, and Firestore's TTL would keep them forever. The
// steps give every ended task, ended attempt record and run document the
// expiry the current code would have stamped:
//
//	tasks     ended (endedAt set): endedAt + the tenant's retention
//	attempts  ended (an outcome): completedAt (else now) + the longest
//	          retention configured (the attempt's tenant is on its task,
//	          which the step does not read)
//	runs      lastSubmitAt + the tenant's retention
//
// A running task and its running attempt are left alone: the commit that
// ends them stamps them.
var retentionSteps = []migrateStep{
	{name: "retention-tasks", coll: TasksCollection, version: 3, fix: fixTaskExpiry},
	{name: "retention-attempts", coll: AttemptsCollection, version: 3, group: true, fix: fixAttemptExpiry},
	{name: "retention-runs", coll: RunsCollection, version: 3, fix: fixRunExpiry},
}

// hasExpiry reports whether a document has a TTL timestamp.
func hasExpiry(f map[string]*pb.Value) bool { return f["expireAt"].GetTimestampValue() != nil }

func fixTaskExpiry(s *Store, d *pb.Document, _ map[string]Run) map[string]*pb.Value {
	f := d.GetFields()
	end := f["endedAt"].GetTimestampValue()
	if hasExpiry(f) || end == nil {
		return nil
	}
	return map[string]*pb.Value{"expireAt": timeValue(end.AsTime().Add(s.retentionFor(f["tenantId"].GetStringValue())))}
}

func fixAttemptExpiry(s *Store, d *pb.Document, _ map[string]Run) map[string]*pb.Value {
	f := d.GetFields()
	if hasExpiry(f) || f["outcome"].GetStringValue() == "" {
		return nil
	}
	end := time.Now().UTC()
	if c := f["completedAt"].GetTimestampValue(); c != nil {
		end = c.AsTime()
	}
	return map[string]*pb.Value{"expireAt": timeValue(end.Add(s.longestRetention()))}
}

func fixRunExpiry(s *Store, d *pb.Document, _ map[string]Run) map[string]*pb.Value {
	f := d.GetFields()
	at := f["lastSubmitAt"].GetTimestampValue()
	if hasExpiry(f) || at == nil {
		return nil
	}
	return map[string]*pb.Value{"expireAt": timeValue(at.AsTime().Add(s.retentionFor(f["tenantId"].GetStringValue())))}
}

// longestRetention is the longest retention of any tenant.
func (s *Store) longestRetention() time.Duration {
	d := s.retentionFor("")
	if p := s.counters.Policy(); p != nil {
		for name := range p.Tenants {
			d = max(d, s.retentionFor(name))
		}
	}
	return d
}
