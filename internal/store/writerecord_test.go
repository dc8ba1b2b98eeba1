package store

import (
	"fmt"
	"slices"
	"testing"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestWriteRecorder(t *testing.T) {
	str := func(s string) *pb.Value { return &pb.Value{ValueType: &pb.Value_StringValue{StringValue: s}} }
	num := func(n int64) *pb.Value { return &pb.Value{ValueType: &pb.Value_IntegerValue{IntegerValue: n}} }
	ts := func(d time.Duration) *pb.Value {
		return &pb.Value{ValueType: &pb.Value_TimestampValue{TimestampValue: timestamppb.New(time.Unix(1e9, 0).Add(d))}}
	}
	const task = "projects/p/databases/(default)/documents/tasks/task_1"
	set := func(f map[string]*pb.Value, mask ...string) *pb.Write {
		w := &pb.Write{Operation: &pb.Write_Update{Update: &pb.Document{Name: task, Fields: f}}}
		if mask != nil {
			w.UpdateMask = &pb.DocumentMask{FieldPaths: mask}
		}
		return w
	}
	lease := "tasks(dueShard,state,leaseExpiresAt)"
	r := NewWriteRecorder()
	r.record([]*pb.Write{set(map[string]*pb.Value{"taskId": str("task_1"), "tenantId": str("acme"), "worker": str("w"),
		"dueShard": num(3), "state": str("RUNNING"), "leaseExpiresAt": ts(time.Minute), "createdAt": ts(0)})}, nil, "", "")
	// A heartbeat: the lease only, through a mask.
	r.record([]*pb.Write{set(map[string]*pb.Value{"leaseExpiresAt": ts(2 * time.Minute)}, "leaseExpiresAt")}, nil, "", "")
	// The same lease again: no entry changes.
	r.record([]*pb.Write{set(map[string]*pb.Value{"leaseExpiresAt": ts(2 * time.Minute)}, "leaseExpiresAt")}, nil, "", "")
	r.record([]*pb.Write{{Operation: &pb.Write_Delete{Delete: task}}}, nil, "", "")
	w := r.Writes()
	if len(w) != 4 {
		t.Fatalf("%d writes recorded, want 4", len(w))
	}
	indexes := func(rw RecordedWrite) []string {
		var out []string
		for _, e := range rw.Entries {
			out = append(out, e.Index)
		}
		return out
	}
	for _, c := range []struct {
		name   string
		got    RecordedWrite
		create bool
		want   []string
	}{
		// createdAt, leaseExpiresAt and taskId are exempt (FieldExemptions):
		// no single-field entries; the name, the lease index and the
		// listing indexes (ascending and descending taskId) are written.
		{"create", w[0], true, []string{"tasks(dueShard,state,leaseExpiresAt)", "tasks(dueShard,state,taskId)", "tasks(dueShard,state,taskId)",
			"tasks(dueShard,taskId)", "tasks(dueShard,taskId)", "tasks(dueShard,tenantId,taskId)", "tasks(dueShard,tenantId,taskId)",
			"tasks(dueShard,worker,taskId)", "tasks(dueShard,worker,taskId)", "tasks.__name__", "tasks.dueShard ASCENDING", "tasks.dueShard DESCENDING",
			"tasks.state ASCENDING", "tasks.state DESCENDING", "tasks.tenantId ASCENDING", "tasks.tenantId DESCENDING", "tasks.worker ASCENDING", "tasks.worker DESCENDING"}},
		{"heartbeat", w[1], false, []string{lease}},
		{"unchanged heartbeat", w[2], false, nil},
		{"delete", w[3], false, nil},
	} {
		if got := indexes(c.got); !slices.Equal(got, c.want) || c.got.Create != c.create {
			t.Errorf("%s: create %v, entries %q; want %v, %q", c.name, c.got.Create, got, c.create, c.want)
		}
	}
	// The heartbeat's entry has the dueShard and state of the document, not
	// of the mask, and the lease sorts after the first.
	hb := w[1].Entries[0]
	if hb.Prefix != `dueShard=3,state="RUNNING"` || w[1].TaskID != "task_1" || w[1].TenantID != "acme" || w[1].Worker != "w" {
		t.Errorf("heartbeat entry %+v of task %q tenant %q worker %q", hb, w[1].TaskID, w[1].TenantID, w[1].Worker)
	}
	if first := w[0].Entries[0]; first.Index != lease || !(first.Value < hb.Value) {
		t.Errorf("lease values do not sort in time order: %q then %q", first.Value, hb.Value)
	}
}

// TestOrderKey checks that the encoding sorts as Firestore sorts values of
// one type.
func TestOrderKey(t *testing.T) {
	var vals []*pb.Value
	for _, n := range []int64{-1 << 40, -5, 0, 3, 1 << 40} {
		vals = append(vals, &pb.Value{ValueType: &pb.Value_IntegerValue{IntegerValue: n}})
	}
	for _, d := range []time.Duration{-time.Hour, 0, time.Nanosecond, time.Second} {
		vals = append(vals, &pb.Value{ValueType: &pb.Value_TimestampValue{TimestampValue: timestamppb.New(time.Unix(1e9, 0).Add(d))}})
	}
	for _, s := range []string{"a", "task_01", "task_02"} {
		vals = append(vals, &pb.Value{ValueType: &pb.Value_StringValue{StringValue: s}})
	}
	for i := 1; i < len(vals); i++ {
		if a, b := orderKey(vals[i-1]), orderKey(vals[i]); !(a < b) {
			t.Errorf("%s does not sort before %s", fmt.Sprint(vals[i-1]), fmt.Sprint(vals[i]))
		}
	}
}
