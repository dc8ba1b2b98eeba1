package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestRunbookNamesWhatOperatorsSee: every state, reason, outcome or code
// docs/operations.md names in backticks (an UPPER_SNAKE word) is one the
// API answers (a string constant of package api) or one of Google's, so
// that the runbook does not send on call looking for a value nobody sees
// (LEASE_EXPIRED, the sweeper's event, where tasks say HEARTBEAT_TIMEOUT).
func TestRunbookNamesWhatOperatorsSee(t *testing.T) {
	values := map[string]bool{}
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, filepath.Join("..", "..", "api"), func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		ast.Inspect(p, func(n ast.Node) bool {
			if l, ok := n.(*ast.BasicLit); ok && l.Kind == token.STRING {
				if v, err := strconv.Unquote(l.Value); err == nil {
					values[v] = true
				}
			}
			return true
		})
	}
	// Google's own words the runbook uses: Firestore's and gRPC's codes
	// (Cloud Tasks' delivery status, shown as delivery.lastStatus), index
	// states, Monitoring's aligners and reducers, Cloud Logging's
	// severities.
	google := regexp.MustCompile(`^(ABORTED|FAILED_PRECONDITION|READY|NOT_FOUND|UNAVAILABLE|INTERNAL|DEADLINE_EXCEEDED|WARNING|(ALIGN|REDUCE)_[A-Z0-9_]+)$`)
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, m := range regexp.MustCompile("`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[A-Z]{4,})`").FindAllStringSubmatch(string(doc), -1) {
		w := m[1]
		if strings.HasPrefix(w, "SERVO_") || strings.HasPrefix(w, "OTEL_") || strings.HasSuffix(w, "_HOST") {
			continue // environment variables: configuration.md's
		}
		seen++
		if !values[w] && !google.MatchString(w) {
			t.Errorf("docs/operations.md names `%s`, which the API never answers", w)
		}
	}
	if seen < 5 {
		t.Fatalf("only %d values found in docs/operations.md", seen)
	}
}
