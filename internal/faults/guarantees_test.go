package faults

import (
	"flag"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

var writeContract = flag.Bool("faults.write-contract", false, "rewrite the guarantee table of docs/contract.md §15")

const (
	contractPath = "../../docs/contract.md"
	tableBegin   = "<!-- guarantees: generated from internal/faults.Guarantees; go test ./internal/faults/ -run TestGuarantees -faults.write-contract -->\n"
	tableEnd     = "<!-- /guarantees -->\n"
)

// TestGuarantees: every guarantee has an invariant and a mutant, each of
// them known; every invariant of the checker and every mutant serves a
// guarantee; and docs/contract.md §15 shows the table as the code has it.
func TestGuarantees(t *testing.T) {
	mutants := map[string]bool{}
	for _, m := range Mutants {
		if mutants[m.Name] {
			t.Errorf("mutant %s is defined twice", m.Name)
		}
		mutants[m.Name] = true
	}
	usedInv, usedMut := map[string]bool{}, map[string]bool{}
	for _, g := range Guarantees {
		if len(g.Invariants) == 0 || len(g.Mutants) == 0 {
			t.Errorf("guarantee %q: %d invariants and %d mutants, want at least one of each", g.Promise, len(g.Invariants), len(g.Mutants))
		}
		for _, inv := range g.Invariants {
			if !slices.Contains(Invariants, inv) {
				t.Errorf("guarantee %q: no invariant %q in the checker", g.Promise, inv)
			}
			usedInv[inv] = true
		}
		for _, m := range g.Mutants {
			if !mutants[m] {
				t.Errorf("guarantee %q: no mutant %q in Mutants", g.Promise, m)
			}
			usedMut[m] = true
		}
	}
	for _, inv := range Invariants {
		if !usedInv[inv] {
			t.Errorf("invariant %q judges no guarantee: add it to one in Guarantees", inv)
		}
	}
	for _, m := range Mutants {
		if !usedMut[m.Name] {
			t.Errorf("mutant %q breaks no guarantee: add it to one in Guarantees", m.Name)
		}
	}

	b, err := os.ReadFile(contractPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no guarantee table between %q and %q", contractPath, tableBegin, tableEnd)
	}
	want := doc[:i+len(tableBegin)] + GuaranteeTable() + doc[j:]
	if want == doc {
		return
	}
	if *writeContract {
		if err := os.WriteFile(contractPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/contract.md §15's guarantee table differs from Guarantees; run go test ./internal/faults/ -run TestGuarantees -faults.write-contract. Want:\n%s", GuaranteeTable())
}

// TestCatch: the mutation check's line names the invariants that caught a
// mutant, the submit order of the first task that broke one, and whether
// one of them judges the guarantee the mutant breaks.
func TestCatch(t *testing.T) {
	res := &Result{Elapsed: 33 * time.Second, History: &History{Submits: []Call{
		{Kind: KindSubmit, TaskID: "a"}, {Kind: KindSubmit}, {Kind: KindSubmit, TaskID: "b"}, {Kind: KindSubmit, TaskID: "a"}, {Kind: KindSubmit, TaskID: "c"},
	}}, Violations: []Violation{{Invariant: InvLease, TaskID: "c"}, {Invariant: InvLease, TaskID: "b"}, {Invariant: InvEvents, TaskID: "c"}}}
	c := Catch(Mutant{Name: "outage-credit-off"}, res)
	if c.Nth != 2 || c.Tasks != 3 || !c.ByItsGuarantee || c.By[InvLease] != 2 || c.By[InvEvents] != 1 {
		t.Errorf("%+v: want task 2 of 3, by its guarantee, lease 2 and events 1", c)
	}
	if got, want := c.String(), "caught by events 1, lease 2; first at task 2 of 3 submitted; run 33s"; !strings.Contains(got, want) {
		t.Errorf("%q, want it to contain %q", got, want)
	}
	if c := Catch(Mutant{Name: "token-logged"}, res); c.ByItsGuarantee {
		t.Errorf("token-logged caught by lease and events counts as caught by its guarantee (token-in-log)")
	}
}
