package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/faults"
)

// TestMutants is the mutation check: each planted bug of faults.Mutants
// is applied to a copy of the module, servo dev is built from it, and the
// mutant's focused run of the harness must report a violation. The
// mutants marked CI run in `go test ./...`; -faults.long runs them all,
// each after the same focused run against the unmutated servo dev, which
// must report none. The output lists each mutant and what caught it.
func TestMutants(t *testing.T) {
	var summary []string
	defer func() { t.Log("mutation check:\n" + strings.Join(summary, "\n")) }()
	for _, m := range faults.Mutants {
		if !m.CI && !*long {
			summary = append(summary, fmt.Sprintf("  %-32s not run (run by -faults.long)", m.Name))
			continue
		}
		t.Run(m.Name, func(t *testing.T) {
			defer func() {
				if t.Failed() && (len(summary) == 0 || !strings.Contains(summary[len(summary)-1], m.Name)) {
					summary = append(summary, fmt.Sprintf("  %-32s FAILED (see above)", m.Name))
				}
			}()
			if *long {
				if res := runMutant(t, m, servoBin); len(res.Violations) > 0 {
					t.Fatalf("the focused run of mutant %s reports %d violations without the mutant:\n%s",
						m.Name, len(res.Violations), faults.Report(res.History, res.Violations))
				}
			}
			dir := t.TempDir()
			if err := faults.CopyModule("../..", dir); err != nil {
				t.Fatal(err)
			}
			if err := m.Apply(dir); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			bin, err := faults.Build(ctx, dir, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			res := runMutant(t, m, bin)
			if len(res.Violations) == 0 {
				summary = append(summary, fmt.Sprintf("  %-32s NOT CAUGHT", m.Name))
				t.Fatalf("mutant %s: the harness reports no violation\n%s", m.Name, res.Report())
			}
			c := faults.Catch(m, res)
			summary = append(summary, "  "+c.String())
			t.Logf("mutant %s caught; the first violation:\n%s", m.Name, faults.Report(res.History, res.Violations[:1]))
			if !c.ByItsGuarantee {
				t.Fatalf("mutant %s was caught only by %v, none of them an invariant of the guarantees it breaks (faults.Guarantees)", m.Name, slices.Sorted(maps.Keys(c.By)))
			}
		})
	}
}

// runMutant runs m's focused schedule against the servo command bin.
func runMutant(t *testing.T, m faults.Mutant, bin string) *faults.Result {
	t.Helper()
	cfg := faults.Config{
		Firestore: emulatortest.Emulator(t, emulator.Firestore), PubSub: emulatortest.Emulator(t, emulator.PubSub),
		Binary: bin, Addr: freeAddr(t), Project: emulatortest.ProjectID(t), LogDir: logDir(t),
		Seed: 1, Tasks: m.Tasks, Rate: 2, Modes: m.Modes, Schedule: m.Schedule, SweepEvery: m.SweepEvery, Priority: m.Priority,
		Drain: 2 * time.Minute, Progress: testWriter{t},
	}
	res, err := faults.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + res.Report())
	return res
}

// TestEveryMutantCompiles: each mutant's edits still find their snippets
// in today's code, and the mutated packages compile (go build -overlay:
// the mutated files stand in for the originals, nothing is copied). A
// move of the code a mutant targets (a file split, a rename) fails here,
// in seconds, instead of in the long mode's mutation run.
func TestEveryMutantCompiles(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range faults.Mutants {
		t.Run(m.Name, func(t *testing.T) {
			files, err := m.Mutated(root)
			if err != nil {
				t.Fatal(err)
			}
			overlay := map[string]map[string]string{"Replace": {}}
			pkgs := map[string]bool{}
			for rel, b := range files {
				path := filepath.Join(t.TempDir(), filepath.Base(rel))
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
				overlay["Replace"][filepath.Join(root, filepath.FromSlash(rel))] = path
				pkgs["./"+filepath.ToSlash(filepath.Dir(rel))] = true
			}
			js, _ := json.Marshal(overlay)
			ov := filepath.Join(t.TempDir(), "overlay.json")
			if err := os.WriteFile(ov, js, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("go", append([]string{"build", "-overlay", ov}, slices.Sorted(maps.Keys(pkgs))...)...)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("mutant %s does not compile: %v\n%s", m.Name, err, out)
			}
		})
	}
}
