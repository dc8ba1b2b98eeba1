package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/faults"
)

var allMutants = flag.Bool("scale.mutants", false, "run every planted hot spot of the model's mutation check, not only those marked CI")

// counterWrite is a Go expression: a write of meta/submits, a counter
// every submit bumps.
const counterWrite = `&pb.Write{Operation: &pb.Write_Update{Update: &pb.Document{Name: s.docs + "/meta/submits", Fields: map[string]*pb.Value{"n": {ValueType: &pb.Value_IntegerValue{IntegerValue: 1}}}}}}`

// scaleMutant is a hot spot planted in a copy of the module (faults.Edit:
// each snippet found exactly once) that the model must report: exit code
// Exit, and Names in its output.
type scaleMutant struct {
	name  string
	edits []faults.Edit
	exit  int
	names string
	// over, when set, is a row (section and name) the output must show
	// over its limit.
	over string
	ci   bool
}

// stampThenDelete is a Go statement: before DeleteDelivered's delete,
// each delivered entry's nextTryAt stamped with the time, in a commit
// of its own (a "delivered at" mark): one more entry in the outbox's due
// range, which alone stays under its limit, and one more removed.
const stampThenDelete = `stamps := make([]*pb.Write, 0, len(eventIDs))
	for _, id := range eventIDs {
		stamps = append(stamps, &pb.Write{Operation: &pb.Write_Update{Update: &pb.Document{Name: s.outboxName(id), Fields: map[string]*pb.Value{"nextTryAt": {ValueType: &pb.Value_TimestampValue{TimestampValue: timestamppb.Now()}}}}},
			UpdateMask: &pb.DocumentMask{FieldPaths: []string{"nextTryAt"}}, CurrentDocument: &pb.Precondition{ConditionType: &pb.Precondition_Exists{Exists: true}}})
	}
	_, _ = s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: stamps})
`

var scaleMutants = []scaleMutant{
	{
		// Task documents named by their ULIDs, in creation order.
		name: "sequential-task-names",
		edits: []faults.Edit{{File: "internal/store/names.go",
			Old: "\treturn hex.EncodeToString(sum[:2]) + \"_\" + id\n",
			New: "\treturn hex.EncodeToString(sum[:0]) + \"0000_\" + id\n"}},
		exit: 1, names: "| index | tasks.__name__ (monotonic)", ci: true,
	},
	{
		// A global counter bumped in each submit's commit.
		name: "counter-in-the-task-commit",
		edits: []faults.Edit{{File: "internal/store/create.go",
			Old: "\t\tres, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes})\n\t\tif err != nil {\n",
			New: "\t\twrites = append(writes, " + counterWrite + ")\n\t\tres, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes})\n\t\tif err != nil {\n"}},
		exit: 1, names: "| document | meta/submits | meta/submits | global |", ci: true,
	},
	{
		// The same counter in a commit of its own, after the submit's: no
		// task's, no schedule's, no cause's.
		name: "counter-in-its-own-commit",
		edits: []faults.Edit{{File: "internal/store/create.go",
			Old: "\t\tcase err == nil:\n\t\t\ts.keepWritten(writes, res)\n",
			New: "\t\tcase err == nil:\n\t\t\ts.keepWritten(writes, res)\n\t\t\t_, _ = s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{" + counterWrite + "}})\n"}},
		exit: 2, names: "no cause (store.WithCause) wrote meta/submits, from github.com/servo-dev/servo/internal/dispatcher.",
	},
	{
		// An indexed time rounded to the second on every task.
		name: "second-rounded-timestamp",
		edits: []faults.Edit{{File: "internal/store/create.go",
			Old: "\twrites := []*pb.Write{setWrite(s.taskName(nt.ID), nt, true)}\n",
			New: "\twrites := []*pb.Write{setWrite(s.taskName(nt.ID), nt, true)}\n\twrites[0].GetUpdate().Fields[\"updatedSec\"] = &pb.Value{ValueType: &pb.Value_TimestampValue{TimestampValue: timestamppb.New(nt.CreatedAt.Truncate(time.Second))}}\n"},
			{File: "internal/store/create.go", Old: "import (\n", New: "import (\n\t\"google.golang.org/protobuf/types/known/timestamppb\"\n"}},
		exit: 1, names: "| index | tasks.updatedSec (asc + desc) (monotonic)",
	},
	{
		// An outbox without delete counting would pass: each delivered
		// entry stamped, then deleted. Its writes into the due range
		// (two an entry) stay under the limit at the peak; with the old
		// value's entry the stamp removes and the delete's, four an
		// entry, the range is over.
		name: "outbox-stamped-then-deleted",
		edits: []faults.Edit{{File: "internal/store/outbox.go",
			Old: "\t_, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes})\n\treturn wrap(\"delete delivered\", err)\n",
			New: "\t" + stampThenDelete + "\t_, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes})\n\treturn wrap(\"delete delivered\", err)\n"},
			{File: "internal/store/outbox.go", Old: "import (\n", New: "import (\n\t\"google.golang.org/protobuf/types/known/timestamppb\"\n"}},
		exit: 1, names: "| index | outbox(dueShard,delivered,nextTryAt) (monotonic) |", over: "index outbox(dueShard,delivered,nextTryAt)",
	},
}

// TestModelMutants is the model's mutation check: each planted hot spot
// is applied to a copy of the module, and the command, run there on a
// small recording, must report it (the row, or the unattributed commit's
// code). The ones marked CI run in `go test ./...`; -scale.mutants runs
// them all.
func TestModelMutants(t *testing.T) {
	for _, m := range scaleMutants {
		t.Run(m.name, func(t *testing.T) {
			if !m.ci && !*allMutants {
				t.Logf("run by -scale.mutants")
				return
			}
			dir := t.TempDir()
			if err := faults.CopyModule("../..", dir); err != nil {
				t.Fatal(err)
			}
			if err := (faults.Mutant{Name: m.name, Edits: m.edits}).Apply(dir); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "go", "run", "./bench/scale", "-tasks", "30", "-recorded-schedules", "0",
				"-run-size", "1", "-project", emulatortest.ProjectID(t)) // each task its own run: no run document (TestScaleCommand's runs are batched)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			// go run reports the program's exit status as its own 1 and
			// says "exit status N".
			if code != 0 {
				code = exitStatus(string(out), code)
			}
			overRow := true
			if m.over != "" {
				section, name, _ := strings.Cut(m.over, " ")
				overRow = regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(section) + ` \| ` + regexp.QuoteMeta(name) + ` .*\*\*OVER\*\* \|$`).MatchString(string(out))
			}
			if code != m.exit || !strings.Contains(string(out), m.names) || !overRow {
				t.Fatalf("mutant %s: exit %d, want %d with %q in the output (over: %q):\n%s", m.name, code, m.exit, m.names, m.over, out)
			}
			t.Logf("mutant %s caught: exit %d, %q", m.name, code, m.names)
		})
	}
}

// exitStatus is the program's exit status as `go run` prints it ("exit
// status N"), else code.
func exitStatus(out string, code int) int {
	var n int
	if i := strings.LastIndex(out, "exit status "); i >= 0 {
		if _, err := fmt.Sscanf(out[i:], "exit status %d", &n); err == nil {
			return n
		}
	}
	return code
}
