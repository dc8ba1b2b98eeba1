package deploy

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/servo-dev/servo/internal/events"
)

// TestExampleTfvarsWorkerPassesTheSmokeTest: the example deployment's
// workers run Servo's example worker (examples/worker, the image
// cloudbuild.yaml builds as example-worker), in the Artifact Registry
// repository Terraform creates for the example's project and region, so
// that the documented smoke test (servo doctor --worker example, whose
// canary is a partitions payload) passes against it; Google's hello
// sample answers no callback and would fail it.
func TestExampleTfvarsWorkerPassesTheSmokeTest(t *testing.T) {
	root := repoRoot(t)
	cb, err := os.ReadFile(filepath.Join(root, "cloudbuild.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cb), "examples/worker/Dockerfile") || !strings.Contains(string(cb), "/example-worker:") {
		t.Fatal("cloudbuild.yaml no longer builds examples/worker as example-worker: update this test")
	}
	matches, _ := filepath.Glob(filepath.Join(root, "terraform", "examples", "*.tfvars"))
	if len(matches) == 0 {
		t.Fatal("no terraform/examples/*.tfvars")
	}
	for _, path := range matches {
		t.Run(filepath.Base(path), func(t *testing.T) {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, diags := hclsyntax.ParseConfig(src, path, hcl.Pos{Line: 1, Column: 1})
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			attrs := f.Body.(*hclsyntax.Body).Attributes
			str := func(name, def string) string {
				if a, ok := attrs[name]; ok {
					if v, err := literal(a.Expr); err == nil && v.Type() == cty.String {
						return v.AsString()
					}
				}
				return def
			}
			// The repository's name defaults to name_prefix (main.tf).
			repo := str("region", "") + "-docker.pkg.dev/" + str("project_id", "") + "/" + str("artifact_repository", str("name_prefix", "servo")) + "/example-worker:"
			wa, ok := attrs["workers"]
			if !ok {
				t.Fatal("no workers")
			}
			workers, err := literal(wa.Expr)
			if err != nil {
				t.Fatal(err)
			}
			if !workers.Type().IsObjectType() || !workers.Type().HasAttribute("example") {
				t.Fatalf("workers has no \"example\", the smoke test's default --worker")
			}
			for name, w := range workers.AsValueMap() {
				img := w.GetAttr("image").AsString()
				if !strings.HasPrefix(img, repo) {
					t.Errorf("worker %s: image %q, want the example worker pushed to %s… (it passes the smoke test)", name, img, repo)
				}
			}
		})
	}
}

// TestDeadLetterInbox: the dead-letter topic has a subscription on call can
// pull from, named as servo dev's local inbox, that a bool variable turns
// off, which keeps messages and never expires.
func TestDeadLetterInbox(t *testing.T) {
	mods := loadTerraform(t)
	var found bool
	for _, r := range mods.resources("google_pubsub_subscription") {
		b := r.block
		if !strings.Contains(r.text(b.Body.Attributes["topic"].Expr), `google_pubsub_topic.topic["dead_letter"]`) {
			continue
		}
		found = true
		// Named as servo dev's inbox with the default name_prefix: the
		// prefix leads the name.
		name := strings.Replace(r.text(b.Body.Attributes["name"].Expr), "${var.name_prefix}", "servo", 1)
		name, err := strconv.Unquote(name)
		if err != nil || name != events.DeadLetterInbox {
			t.Errorf("%s: name %q (%v), want %q (events.DeadLetterInbox, as servo dev)", r.where(), name, err, events.DeadLetterInbox)
		}
		count, ok := b.Body.Attributes["count"]
		if !ok || !strings.Contains(r.text(count.Expr), "var.dead_letter_subscription") {
			t.Errorf("%s: not optional (count on var.dead_letter_subscription)", r.where())
		}
		if _, ok := b.Body.Attributes["message_retention_duration"]; !ok {
			t.Errorf("%s: no message_retention_duration", r.where())
		}
		var never bool
		for _, e := range b.Body.Blocks {
			if e.Type == "expiration_policy" {
				ttl, err := attrString(e, "ttl")
				never = err == nil && ttl == ""
			}
		}
		if !never {
			t.Errorf("%s: needs expiration_policy { ttl = \"\" } (dead letters are rare; the inbox must not expire)", r.where())
		}
	}
	if !found {
		t.Fatal("no subscription on the dead-letter topic (google_pubsub_topic.topic[\"dead_letter\"])")
	}
}
