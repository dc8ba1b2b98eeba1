package store

import (
	"testing"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
)

func TestIndexEntries(t *testing.T) {
	str := func(s string) *pb.Value { return &pb.Value{ValueType: &pb.Value_StringValue{StringValue: s}} }
	num := func(n int64) *pb.Value { return &pb.Value{ValueType: &pb.Value_IntegerValue{IntegerValue: n}} }
	mp := func(f map[string]*pb.Value) *pb.Value {
		return &pb.Value{ValueType: &pb.Value_MapValue{MapValue: &pb.MapValue{Fields: f}}}
	}
	arr := func(vs ...*pb.Value) *pb.Value {
		return &pb.Value{ValueType: &pb.Value_ArrayValue{ArrayValue: &pb.ArrayValue{Values: vs}}}
	}
	const task = "projects/p/databases/(default)/documents/tasks/task_1"
	const attempt = task + "/attempts/1"
	set := func(name string, f map[string]*pb.Value, mask ...string) *pb.Write {
		w := &pb.Write{Operation: &pb.Write_Update{Update: &pb.Document{Name: name, Fields: f}}}
		if mask != nil {
			w.UpdateMask = &pb.DocumentMask{FieldPaths: mask}
		}
		return w
	}
	tests := []struct {
		name string
		w    *pb.Write
		want int
	}{
		{"leaf fields, two entries each", set(task, map[string]*pb.Value{"tenantId": str("a"), "colour": num(1)}), 4},
		{"exempt fields count nothing", set(task, map[string]*pb.Value{"payload": str("x"), "updatedAt": str("t"), "live": mp(map[string]*pb.Value{"message": str("m")})}), 0},
		{"an exempt map exempts its subfields", set(task, map[string]*pb.Value{"timing": mp(map[string]*pb.Value{"heartbeatIntervalMs": num(1)}), "attempt": num(1)}), 0},
		{"map subfields recursively", set(attempt, map[string]*pb.Value{"worker": mp(map[string]*pb.Value{"a": str("x"), "b": mp(map[string]*pb.Value{"c": num(1)})})}), 4},
		{"an array: one entry per element", set(task, map[string]*pb.Value{"tags": arr(str("a"), str("b"), str("c"))}), 3},
		{"a composite index the document has all fields of",
			set(task, map[string]*pb.Value{"dueShard": num(3), "state": str("RUNNING"), "leaseExpiresAt": str("t")}), 2 + 2 + 1},
		{"masked update: masked fields and the composite indexes naming them",
			set(task, map[string]*pb.Value{"leaseExpiresAt": str("t"), "colour": num(2), "live": mp(map[string]*pb.Value{"x": str("y")})}, "leaseExpiresAt", "live.x", "colour"), 2 + 1},
		{"masked delete writes nothing", set(task, nil, "tenantId"), 0},
		{"a delete writes no entry", &pb.Write{Operation: &pb.Write_Delete{Delete: task}}, 0},
		{"TTL fields are exempt", set("projects/p/databases/(default)/documents/outbox/e1", map[string]*pb.Value{"expireAt": str("t")}), 0},
		{"an increment counts its field", &pb.Write{Operation: &pb.Write_Update{Update: &pb.Document{Name: "projects/p/databases/(default)/documents/meta/sweeper"}},
			UpdateMask: &pb.DocumentMask{}, UpdateTransforms: []*pb.DocumentTransform_FieldTransform{{FieldPath: "passes"}}}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IndexEntries(tc.w); got != tc.want {
				t.Errorf("IndexEntries = %d, want %d", got, tc.want)
			}
		})
	}
}
