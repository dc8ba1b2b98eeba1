package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/store"
)

// TestRunDocumentEveryFromAPIInstances: Terraform gives every function
// SERVO_RUN_DOCUMENT_EVERY = max(60 s, 2 s × the api's max_instances),
// the interval store.RunDocumentEveryFor computes for that many
// processes, so that a run submitted into from every api instance has its
// document written about once every 2 s, not once a minute by each
// (docs/scale.md, the run document's row).
func TestRunDocumentEveryFromAPIInstances(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "terraform", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	const want = `SERVO_RUN_DOCUMENT_EVERY = "${max(60, 2 * local.function_max_instances.api)}s"`
	if !strings.Contains(string(b), want) {
		t.Fatalf("terraform/main.tf does not set %s", want)
	}
	for _, n := range []int{1, 20, 30, 31, 840} {
		if got, tf := store.RunDocumentEveryFor(n), time.Duration(max(60, 2*n))*time.Second; got != tf {
			t.Errorf("%d api instances: store.RunDocumentEveryFor = %v, Terraform's formula %v", n, got, tf)
		}
	}
}
