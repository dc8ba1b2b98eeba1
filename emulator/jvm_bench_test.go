package emulator

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	firestoreapi "cloud.google.com/go/firestore/apiv1"
	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/servo-dev/servo/internal/servotest"
)

// BenchmarkJVMOptions measures what the Firestore emulator's JIT
// compilers cost once it runs: the emulator's own CPU time per transaction
// (a read and a commit, as a heartbeat does) under JVMOptions (the client
// compiler only) and under the same options with both compilers, each on
// an emulator of its own, warmed up first with 3 000 transactions of each
// kind. Two documents: one small field, and one shaped like a task (30
// fields and a map, read through a field mask, 3 fields updated).
//
//	go test ./emulator -run '^$' -bench JVMOptions -benchtime 2000x
func BenchmarkJVMOptions(b *testing.B) {
	base := slices.Clone(JVMOptions)
	defer func() { JVMOptions = base }()
	both := slices.DeleteFunc(slices.Clone(base), func(s string) bool { return strings.HasPrefix(s, "-XX:TieredStopAtLevel") })
	for _, v := range []struct {
		name string
		opts []string
	}{{"options=servo", base}, {"options=both-compilers", both}} {
		JVMOptions = v.opts
		p, err := Start(context.Background(), Firestore)
		if err != nil {
			b.Fatal(err)
		}
		fs, err := servotest.FirestoreClient(context.Background(), p.Host)
		if err != nil {
			p.Stop()
			b.Fatal(err)
		}
		db := "projects/jvm-bench/databases/(default)"
		small, shaped := newTx(fs, db, "bench/small", 1), newTx(fs, db, "bench/task", 30)
		for range 3000 { // warm up: the JIT compilers settle
			if err := small(); err != nil {
				b.Fatal(err)
			}
			if err := shaped(); err != nil {
				b.Fatal(err)
			}
		}
		for _, doc := range []struct {
			name string
			tx   func() error
		}{{"doc=small", small}, {"doc=task-shaped", shaped}} {
			b.Run(v.name+"/"+doc.name, func(b *testing.B) {
				cpu0, t0 := servotest.GroupCPUSeconds(p.pgid), time.Now()
				for b.Loop() {
					if err := doc.tx(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric((servotest.GroupCPUSeconds(p.pgid)-cpu0)*1000/float64(b.N), "emulator-cpu-ms/tx")
				b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "tx/s")
			})
		}
		fs.Close()
		p.Stop()
	}
}

// newTx returns one read-write transaction on doc, created with fields
// scalar fields and a map: a masked read of all but one field, then a
// commit updating 3 of them.
func newTx(fs *firestoreapi.Client, db, doc string, fields int) func() error {
	name := db + "/documents/" + doc
	all := map[string]*pb.Value{}
	var mask []string
	for i := range fields {
		k := "f" + strconv.Itoa(i)
		all[k] = &pb.Value{ValueType: &pb.Value_StringValue{StringValue: fmt.Sprintf("value %d of the document", i)}}
		mask = append(mask, k)
	}
	if fields > 1 {
		all["live"] = &pb.Value{ValueType: &pb.Value_MapValue{MapValue: &pb.MapValue{Fields: map[string]*pb.Value{
			"attempt": {ValueType: &pb.Value_IntegerValue{IntegerValue: 1}}, "workerId": {ValueType: &pb.Value_StringValue{StringValue: "w1"}},
		}}}}
		mask = append(mask[:len(mask)-1], "live.attempt", "live.workerId")
	}
	created := false
	n := 0
	return func() error {
		ctx := context.Background()
		if !created {
			if _, err := fs.Commit(ctx, &pb.CommitRequest{Database: db, Writes: []*pb.Write{{Operation: &pb.Write_Update{Update: &pb.Document{Name: name, Fields: all}}}}}); err != nil {
				return err
			}
			created = true
		}
		n++
		w := &pb.Write{Operation: &pb.Write_Update{Update: &pb.Document{Name: name, Fields: map[string]*pb.Value{
			"f0": {ValueType: &pb.Value_IntegerValue{IntegerValue: int64(n)}},
		}}}}
		if fields > 1 {
			w.GetUpdate().Fields["f1"] = &pb.Value{ValueType: &pb.Value_TimestampValue{TimestampValue: timestamppb.Now()}}
			w.GetUpdate().Fields["live"] = &pb.Value{ValueType: &pb.Value_MapValue{MapValue: &pb.MapValue{Fields: map[string]*pb.Value{
				"workerId": {ValueType: &pb.Value_StringValue{StringValue: "w" + strconv.Itoa(n)}}}}}}
			w.UpdateMask = &pb.DocumentMask{FieldPaths: []string{"f0", "f1", "live.workerId"}}
			return servotest.ReadCommit(ctx, fs, db, name, mask, w)
		}
		return servotest.ReadCommit(ctx, fs, db, name, nil, w)
	}
}
