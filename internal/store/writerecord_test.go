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
		"dueShard": num(3), "state": str("RUNNING"), "leaseExpiresAt": ts(time.Minute), "createdAt": ts(0)})}, nil, "", "", "")
	// A heartbeat: the lease only, through a mask.
	r.record([]*pb.Write{set(map[string]*pb.Value{"leaseExpiresAt": ts(2 * time.Minute)}, "leaseExpiresAt")}, nil, "", "", "")
	// The same lease again: no entry changes.
	r.record([]*pb.Write{set(map[string]*pb.Value{"leaseExpiresAt": ts(2 * time.Minute)}, "leaseExpiresAt")}, nil, "", "", "")
	r.record([]*pb.Write{{Operation: &pb.Write_Delete{Delete: task}}}, nil, "", "", "")
	w := r.Writes()
	if len(w) != 4 {
		t.Fatalf("%d writes recorded, want 4", len(w))
	}
	indexes := func(rw RecordedWrite) []string {
		var out []string
		for _, e := range rw.Entries {
			if !e.Removed {
				out = append(out, e.Index)
			}
		}
		return out
	}
	removed := func(rw RecordedWrite) []string {
		var out []string
		for _, e := range rw.Entries {
			if e.Removed {
				out = append(out, e.Index)
			}
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
		{"delete", w[3], false, nil}, // removes, writes nothing
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
	// Removed: the heartbeat's old lease (a changed value), nothing by the
	// unchanged one, every entry of the deleted document, of the task it
	// was for.
	if got := removed(w[1]); !slices.Equal(got, []string{lease}) || w[1].Entries[0].Removed || !w[1].Entries[1].Removed || w[1].Entries[1].Value != w[0].Entries[0].Value {
		t.Errorf("heartbeat: removed %q (%+v); want the old lease's entry", got, w[1].Entries)
	}
	if got := removed(w[2]); got != nil {
		t.Errorf("unchanged heartbeat removed %q", got)
	}
	if got, want := removed(w[3]), indexes(w[0]); !slices.Equal(got, want) || w[3].TaskID != "task_1" {
		t.Errorf("delete of task %q: removed %q; want every entry %q", w[3].TaskID, got, want)
	}
}

// TestWriteRecorderClearsAndExpires: a cleared value (a masked field
// without a value) removes its entries and the composite entries that
// need it; a whole-document write removes the fields it no longer has;
// a document with a TTL field expires (Expiries) with every entry it
// still has, in the order documents expire.
func TestWriteRecorderClearsAndExpires(t *testing.T) {
	str := func(s string) *pb.Value { return &pb.Value{ValueType: &pb.Value_StringValue{StringValue: s}} }
	num := func(n int64) *pb.Value { return &pb.Value{ValueType: &pb.Value_IntegerValue{IntegerValue: n}} }
	ts := func(d time.Duration) *pb.Value {
		return &pb.Value{ValueType: &pb.Value_TimestampValue{TimestampValue: timestamppb.New(time.Unix(1e9, 0).Add(d))}}
	}
	name := func(id string) string { return "projects/p/databases/(default)/documents/tasks/" + id }
	set := func(doc string, f map[string]*pb.Value, mask ...string) *pb.Write {
		w := &pb.Write{Operation: &pb.Write_Update{Update: &pb.Document{Name: name(doc), Fields: f}}}
		if mask != nil {
			w.UpdateMask = &pb.DocumentMask{FieldPaths: mask}
		}
		return w
	}
	lease := "tasks(dueShard,state,leaseExpiresAt)"
	r := NewWriteRecorder()
	r.record([]*pb.Write{set("a", map[string]*pb.Value{"taskId": str("a"), "dueShard": num(1), "state": str("RUNNING"), "leaseExpiresAt": ts(time.Minute), "worker": str("x")})}, nil, "", "", "")
	// Ended: the lease cleared through the mask, the state changed.
	r.record([]*pb.Write{set("a", map[string]*pb.Value{"state": str("SUCCEEDED")}, "state", "leaseExpiresAt")}, nil, "", "", "")
	// Rewritten whole without its worker, with a TTL.
	r.record([]*pb.Write{set("a", map[string]*pb.Value{"taskId": str("a"), "dueShard": num(1), "state": str("SUCCEEDED"), "expireAt": ts(2 * time.Hour)})}, nil, "", "", "")
	r.record([]*pb.Write{set("b", map[string]*pb.Value{"taskId": str("b"), "dueShard": num(2), "state": str("SUCCEEDED"), "expireAt": ts(time.Hour)})}, nil, "", "", "")
	w := r.Writes()
	has := func(rw RecordedWrite, index string, rm bool) bool {
		return slices.ContainsFunc(rw.Entries, func(e RecordedEntry) bool { return e.Index == index && e.Removed == rm })
	}
	if !has(w[1], lease, true) || has(w[1], lease, false) || !has(w[1], "tasks.state ASCENDING", true) || !has(w[1], "tasks.state ASCENDING", false) {
		t.Errorf("ended: %+v; want the lease entry removed, not written, and the state's replaced", w[1].Entries)
	}
	if !has(w[2], "tasks.worker ASCENDING", true) || has(w[2], "tasks.state ASCENDING", false) {
		t.Errorf("rewritten: %+v; want the worker's entries removed and nothing unchanged rewritten", w[2].Entries)
	}
	exp := r.Expiries()
	if len(exp) != 2 || exp[0].Doc != "tasks/b" || exp[1].Doc != "tasks/a" || !exp[0].Expiry || !exp[0].Delete || exp[1].TaskID != "a" ||
		!exp[1].At.Equal(time.Unix(1e9, 0).Add(2*time.Hour)) {
		t.Fatalf("expiries %+v; want b then a, in expiry order", exp)
	}
	if !has(exp[1], "tasks.__name__", true) || !has(exp[1], "tasks.state ASCENDING", true) || !has(exp[1], "tasks(dueShard,state,taskId)", true) || has(exp[1], lease, true) {
		t.Errorf("a's expiry removes %+v; want its name, state and listing entries (its lease is gone)", exp[1].Entries)
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
