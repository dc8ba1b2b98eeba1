package store

import (
	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
)

func stringsVal(ss []string) *pb.Value {
	vals := make([]*pb.Value, len(ss))
	for i, s := range ss {
		vals[i] = strVal(s)
	}
	return &pb.Value{ValueType: &pb.Value_ArrayValue{ArrayValue: &pb.ArrayValue{Values: vals}}}
}
