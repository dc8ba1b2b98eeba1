package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/servo-dev/servo/emulator/emulatortest"
)

// strictPair is a strict store and a lax one on the same emulator project.
func strictPair(t *testing.T) (strict, lax *Store) {
	t.Helper()
	var err error
	if strict, err = New(context.Background(), emulatortest.ProjectID(t), WithStrict(true)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { strict.Close() })
	if lax, err = New(context.Background(), strict.Project(), WithStrict(false)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lax.Close() })
	return strict, lax
}

// TestStrictModeIsTheEmulatorDefault: every store a test opens against the
// emulator is strict unless SERVO_STORE_STRICT turns it off; the tests'
// harness and the store name the same log variable.
func TestStrictModeIsTheEmulatorDefault(t *testing.T) {
	for _, c := range []struct {
		env  string
		want bool
	}{{"", true}, {"true", true}, {"false", false}, {"0", false}} {
		t.Setenv(EnvStrict, c.env)
		s, err := New(context.Background(), emulatortest.ProjectID(t))
		if err != nil {
			t.Fatal(err)
		}
		if s.Strict() != c.want {
			t.Errorf("%s=%q: strict %v, want %v", EnvStrict, c.env, s.Strict(), c.want)
		}
		s.Close()
	}
	if StrictLogEnv != emulatortest.StrictLogEnv {
		t.Fatalf("store.StrictLogEnv %q, emulatortest.StrictLogEnv %q", StrictLogEnv, emulatortest.StrictLogEnv)
	}
}

// TestStrictRefusesWhatProductionRefuses: a query no declared index
// serves, a document over a limit and a query over the disjunction limit
// are refused by a strict store with production's status, while the
// emulator (a lax store) takes them: this is what strict mode adds. A
// refused query is logged where the tests' harness looks.
func TestStrictRefusesWhatProductionRefuses(t *testing.T) {
	log := filepath.Join(t.TempDir(), "strict.log")
	t.Setenv(StrictLogEnv, log)
	strict, lax := strictPair(t)
	ctx := context.Background()
	docs := strict.docs

	// A query no index serves: tenant's tasks by creation time.
	unindexed := &pb.StructuredQuery{
		From:    []*pb.StructuredQuery_CollectionSelector{{CollectionId: TasksCollection}},
		Where:   fieldFilter("tenantId", pb.StructuredQuery_FieldFilter_EQUAL, strVal("acme")),
		OrderBy: []*pb.StructuredQuery_Order{{Field: fieldRef("workspaceId"), Direction: pb.StructuredQuery_ASCENDING}},
	}
	nop := func(*pb.Document) error { return nil }
	if err := lax.runQuery(ctx, docs, unindexed, nop); err != nil {
		t.Fatalf("the emulator refused the unindexed query: %v", err)
	}
	err := strict.runQuery(ctx, docs, unindexed, nop)
	if status.Code(errors.Unwrap(errors.Unwrap(err))) != codes.FailedPrecondition && !strings.Contains(err.Error(), "requires an index") {
		t.Fatalf("strict: unindexed query: %v, want FAILED_PRECONDITION naming the index", err)
	}
	if b, _ := os.ReadFile(log); !strings.Contains(string(b), "tasks(tenantId,workspaceId)") {
		t.Fatalf("the refused query is not in the strict log: %q", b)
	}

	// A declared index serves the same filter with its own order.
	indexed := &pb.StructuredQuery{
		From:    []*pb.StructuredQuery_CollectionSelector{{CollectionId: TasksCollection}},
		Where:   and(fieldFilter("dueShard", pb.StructuredQuery_FieldFilter_EQUAL, intVal(3)), fieldFilter("tenantId", pb.StructuredQuery_FieldFilter_EQUAL, strVal("acme"))),
		OrderBy: []*pb.StructuredQuery_Order{{Field: fieldRef("taskId"), Direction: pb.StructuredQuery_DESCENDING}},
	}
	if err := strict.runQuery(ctx, docs, indexed, nop); err != nil {
		t.Fatalf("strict: a query of a declared index: %v", err)
	}

	// Over the disjunction limit: 31 values in an "in" filter.
	vals := make([]*pb.Value, 31)
	for i := range vals {
		vals[i] = intVal(i)
	}
	wide := &pb.StructuredQuery{
		From:  []*pb.StructuredQuery_CollectionSelector{{CollectionId: TasksCollection}},
		Where: fieldFilter("state", pb.StructuredQuery_FieldFilter_IN, &pb.Value{ValueType: &pb.Value_ArrayValue{ArrayValue: &pb.ArrayValue{Values: vals}}}),
	}
	if err := strict.runQuery(ctx, docs, wide, nop); err == nil || !strings.Contains(err.Error(), "disjunctions") {
		t.Fatalf("strict: 31 disjunctions: %v", err)
	}

	// Writes over a limit: each refused as INVALID_ARGUMENT (ErrRejected),
	// before it reaches the emulator.
	nested := strVal("x")
	for range LimitFieldDepth + 1 {
		nested = &pb.Value{ValueType: &pb.Value_MapValue{MapValue: &pb.MapValue{Fields: map[string]*pb.Value{"a": nested}}}}
	}
	longName := docs + "/" + TasksCollection + "/" + strings.Repeat("n", LimitDocumentNameBytes)
	// A task five levels down with ids of 1 000 bytes: its name is 5 031
	// bytes, and an entry of (dueShard, tenantId, taskId) with two
	// indexed strings of 1 500 bytes and more is over 7.5 KiB.
	deepName := docs
	for _, c := range []string{"a", "b", "c", "d", TasksCollection} {
		deepName += "/" + c + "/" + strings.Repeat("n", 1000)
	}
	for _, c := range []struct {
		name string
		doc  *pb.Document
		want string
	}{
		{"a document over 1 MiB", &pb.Document{Name: docs + "/big/one", Fields: map[string]*pb.Value{
			"a": {ValueType: &pb.Value_BytesValue{BytesValue: make([]byte, 600<<10)}},
			"b": {ValueType: &pb.Value_BytesValue{BytesValue: make([]byte, 600<<10)}}}}, "maximum document size"},
		{"a map nested 21 levels", &pb.Document{Name: docs + "/deep/one", Fields: map[string]*pb.Value{"m": nested}}, "nests"},
		{"a name over 6 KiB", &pb.Document{Name: longName, Fields: map[string]*pb.Value{"a": strVal("x")}}, "document name"},
		{"a composite index entry over 7.5 KiB", &pb.Document{Name: deepName,
			Fields: map[string]*pb.Value{"dueShard": intVal(3), "tenantId": strVal(strings.Repeat("t", 2000)), "taskId": strVal(strings.Repeat("i", 2000))}}, "entry of index"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := &pb.Write{Operation: &pb.Write_Update{Update: c.doc}}
			_, err := strict.client.Commit(ctx, &pb.CommitRequest{Database: strict.db, Writes: []*pb.Write{w}})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("strict: %v, want INVALID_ARGUMENT mentioning %q", err, c.want)
			}
			if !errors.Is(wrap("commit", err), ErrRejected) {
				t.Fatalf("wrap: %v, want ErrRejected", wrap("commit", err))
			}
		})
	}
	// Within the limits, the same shapes pass.
	ok := &pb.Document{Name: docs + "/small/one", Fields: map[string]*pb.Value{"a": {ValueType: &pb.Value_BytesValue{BytesValue: make([]byte, 900<<10)}}}}
	if _, err := strict.client.Commit(ctx, &pb.CommitRequest{Database: strict.db, Writes: []*pb.Write{{Operation: &pb.Write_Update{Update: ok}}}}); err != nil {
		t.Fatalf("strict: a 900 KiB document: %v", err)
	}
}

// TestDocumentSize follows Firestore's storage-size rules
// (https://cloud.google.com/firestore/docs/storage-size): the example
// there, a task document of user "Alex", is 147 bytes.
func TestDocumentSize(t *testing.T) {
	doc := &pb.Document{
		Name: "projects/p/databases/(default)/documents/users/jeff/tasks/my_task_id",
		Fields: map[string]*pb.Value{
			"type":        strVal("Personal"),
			"done":        {ValueType: &pb.Value_BooleanValue{BooleanValue: false}},
			"priority":    intVal(1),
			"description": strVal("Learn Cloud Firestore"),
		},
	}
	if got := DocumentSize(doc); got != 147 {
		t.Fatalf("DocumentSize %d, want 147", got)
	}
}

// TestCompositeIndexLimit: the declared composite indexes fit a database.
func TestCompositeIndexLimit(t *testing.T) {
	if n := len(Indexes); n > LimitCompositeIndexes {
		t.Fatalf("%d composite indexes, over Firestore's %d a database", n, LimitCompositeIndexes)
	}
}
