package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pinnedImage: a builder image with a version tag (digits) or a digest,
// never a floating tag (latest, emulators, none).
var pinnedImage = regexp.MustCompile(`^[^@:]+(:[^@]*[0-9][^@]*|@sha256:[0-9a-f]{64})$`)

// Every builder image is pinned by version or digest.
func TestCloudBuildImagesPinned(t *testing.T) {
	cb := loadCloudBuild(t)
	for i, step := range cb.steps {
		name, _ := step["name"].(string)
		resolved, _, _ := cb.substitute(name)
		tag := resolved[strings.LastIndex(resolved, "/")+1:]
		if !pinnedImage.MatchString(resolved) || strings.HasSuffix(tag, ":latest") {
			t.Errorf("step %s: builder image %q (%s) is not pinned by version or digest", stepID(i, step), name, resolved)
		}
	}
}

// The build refuses an uncommitted tree before anything else, and runs
// every check of .ci/run before the first deploying step (an apply, a
// push, or a stage of deploy/pipeline.sh other than check and init).
func TestCloudBuildChecksBeforeDeploy(t *testing.T) {
	cb := loadCloudBuild(t)
	text := func(i int) string {
		s, _, _ := cb.substitute(strings.Join(stringsIn(cb.steps[i]), "\n"))
		return s
	}
	if len(cb.steps) == 0 || !strings.Contains(text(0), "git status --porcelain") || !strings.Contains(text(0), "exit 1") {
		t.Fatalf("the first step must refuse a tree with uncommitted changes (git status --porcelain)")
	}
	firstDeploy := len(cb.steps)
	for i := range cb.steps {
		s := text(i)
		if strings.Contains(s, "apply") || strings.Contains(s, "\npush\n") || strings.HasSuffix(s, "\npush") || deploying(cb.steps[i]) {
			firstDeploy = i
			break
		}
	}
	before := ""
	for i := range firstDeploy {
		before += text(i) + "\n"
	}

	ci, err := os.ReadFile(filepath.Join(repoRoot(t), ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	// The checks .ci/run makes, and how each shows in cloudbuild.yaml.
	checks := map[string]string{"gofmt -l": "gofmt -l"}
	for _, line := range strings.Split(string(ci), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "go ") {
			checks[line] = line
		}
		if strings.Contains(line, "tf-check") {
			checks["tf-check (terraform fmt)"] = "terraform fmt -check -recursive"
		}
	}
	if len(checks) < 4 {
		t.Fatalf(".ci/run: found only %v", checks)
	}
	for what, want := range checks {
		if !strings.Contains(before, want) {
			t.Errorf(".ci/run's %q does not run before the first deploying step (want %q in cloudbuild.yaml)", what, want)
		}
	}
}
