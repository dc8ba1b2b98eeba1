package deploy

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// cloudBuild is cloudbuild.yaml, parsed.
type cloudBuild struct {
	doc           map[string]any
	steps         []map[string]any
	substitutions map[string]string
}

func loadCloudBuild(t *testing.T) cloudBuild {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "cloudbuild.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := parseYAML(string(src))
	if err != nil {
		t.Fatalf("cloudbuild.yaml: %v", err)
	}
	doc, ok := v.(map[string]any)
	if !ok {
		t.Fatal("cloudbuild.yaml: the document must be a mapping")
	}
	cb := cloudBuild{doc: doc, substitutions: map[string]string{}}
	steps, ok := doc["steps"].([]any)
	if !ok || len(steps) == 0 {
		t.Fatal("cloudbuild.yaml: no steps")
	}
	for i, s := range steps {
		m, ok := s.(map[string]any)
		if !ok {
			t.Fatalf("cloudbuild.yaml: step %d is not a mapping", i)
		}
		cb.steps = append(cb.steps, m)
	}
	if subs, ok := doc["substitutions"]; ok {
		m, ok := subs.(map[string]any)
		if !ok {
			t.Fatal("cloudbuild.yaml: substitutions must be a mapping")
		}
		for k, v := range m {
			s, ok := v.(string)
			if !ok {
				t.Fatalf("cloudbuild.yaml: substitution %s must be a string", k)
			}
			cb.substitutions[k] = s
		}
	}
	return cb
}

// stepID names a step in messages.
func stepID(i int, s map[string]any) string {
	if id, ok := s["id"].(string); ok {
		return id
	}
	return "#" + strconv.Itoa(i)
}

// stringsIn returns every string in v, depth first.
func stringsIn(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, e := range v {
			out = append(out, stringsIn(e)...)
		}
		return out
	case map[string]any:
		var out []string
		for _, k := range keysOf(v) {
			out = append(out, stringsIn(v[k])...)
		}
		return out
	}
	return nil
}

// Cloud Build's default substitutions that every build has, including one
// started by hand with gcloud builds submit (COMMIT_SHA, SHORT_SHA,
// BRANCH_NAME... exist only for triggered builds, so they are refused).
var builtinSubstitutions = map[string]string{
	"PROJECT_ID":            "my-project",
	"PROJECT_NUMBER":        "123456789012",
	"BUILD_ID":              "0123abcd-0000-0000-0000-000000000000",
	"LOCATION":              "global",
	"SERVICE_ACCOUNT_EMAIL": "builder@my-project.iam.gserviceaccount.com",
	"SERVICE_ACCOUNT":       "projects/my-project/serviceAccounts/builder@my-project.iam.gserviceaccount.com",
}

// substitutionRE finds $$ (an escaped $), ${NAME} and $NAME; a lone "${"
// that is not a well-formed reference is caught as bad.
var substitutionRE = regexp.MustCompile(`\$\$|\$\{([A-Za-z0-9_]+)\}|\$([A-Za-z_][A-Za-z0-9_]*)|\$\{`)

// substitute replaces substitutions with their values (declared defaults,
// placeholder values for the built-ins) and returns the names used and the
// malformed or unknown references.
func (cb cloudBuild) substitute(s string) (out string, used, bad []string) {
	out = substitutionRE.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$" // what the step sees
		}
		sub := substitutionRE.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		if name == "" {
			bad = append(bad, m)
			return m
		}
		used = append(used, name)
		if v, ok := cb.substitutions[name]; ok {
			return v
		}
		if v, ok := builtinSubstitutions[name]; ok {
			return v
		}
		bad = append(bad, m)
		return m
	})
	return out, used, bad
}

var userSubstitutionRE = regexp.MustCompile(`^_[A-Z0-9_]+$`)

// TestCloudBuildSubstitutions: every substitution used is declared (or is a
// default one every build has), every declared one is used, user-defined
// ones start with "_", and shell variables are escaped as $$VAR. Cloud
// Build's default MUST_MATCH substitution option fails a build on either
// mistake, after it has already run the steps before.
func TestCloudBuildSubstitutions(t *testing.T) {
	cb := loadCloudBuild(t)
	for name := range cb.substitutions {
		if !userSubstitutionRE.MatchString(name) {
			t.Errorf("substitution %s: user-defined substitutions are _UPPER_CASE", name)
		}
	}
	used := map[string]bool{}
	for _, key := range keysOf(cb.doc) {
		if key == "substitutions" {
			continue
		}
		for _, s := range stringsIn(cb.doc[key]) {
			_, u, bad := cb.substitute(s)
			for _, n := range u {
				used[n] = true
			}
			for _, b := range bad {
				t.Errorf("%s: %q is neither a declared substitution nor a default one; write $$ for a shell variable (in %q)", key, b, s)
			}
		}
	}
	for name := range cb.substitutions {
		if !used[name] {
			t.Errorf("substitution %s is declared but never used", name)
		}
	}
	if !used["_TF_STATE_BUCKET"] {
		t.Errorf("the Terraform state bucket must be the _TF_STATE_BUCKET substitution")
	}
}

var (
	flagPrefixRE = regexp.MustCompile(`^-{1,2}[A-Za-z0-9][A-Za-z0-9_-]*=`)
	tokenSplitRE = regexp.MustCompile(`[\s;|&()'"<>]+`)
	redirectRE   = regexp.MustCompile(`[0-9]*>>?&?\s*[^\s;|&)]+`)
	fileSuffixRE = regexp.MustCompile(`(^|/)(Dockerfile[^/]*|[^/]+\.(tfvars|tf|ya?ml|json|sh|go|mod|sum))$`)
)

// referencedPaths returns the repository paths a step names (relative to
// the repository root): its dir, and every token of its arguments, script
// and entrypoint that looks like a path in the repository: it contains a
// slash (and is not a host name, URL, image, variable, flag, Go pattern or
// absolute path outside /workspace) or has a file name we build with.
// Targets of shell redirections (> file) are outputs and are skipped.
func referencedPaths(cb cloudBuild, step map[string]any) []string {
	dir, _ := step["dir"].(string)
	dir, _, _ = cb.substitute(dir)
	var out []string
	if dir != "" {
		out = append(out, path.Clean(dir))
	}
	var texts []string
	for _, k := range []string{"args", "script", "entrypoint"} {
		texts = append(texts, stringsIn(step[k])...)
	}
	for _, text := range texts {
		text, _, _ = cb.substitute(text)
		text = redirectRE.ReplaceAllString(text, " ") // files a step writes are not references
		for _, tok := range tokenSplitRE.Split(text, -1) {
			tok = flagPrefixRE.ReplaceAllString(tok, "")
			if strings.HasPrefix(tok, "/workspace/") {
				tok = strings.TrimPrefix(tok, "/workspace/")
			}
			tok = strings.TrimPrefix(tok, "./")
			switch {
			case tok == "" || tok == "." || strings.HasPrefix(tok, "-") || strings.HasPrefix(tok, "/"),
				strings.ContainsAny(tok, "$*={}:@"), strings.Contains(tok, "..."):
				continue
			}
			first, _, hasSlash := strings.Cut(tok, "/")
			if hasSlash && strings.Contains(first, ".") && first != "." && !strings.HasPrefix(first, ".") {
				continue // github.com/..., gcr.io/..., us-docker.pkg.dev/...
			}
			if !hasSlash && !fileSuffixRE.MatchString(tok) {
				continue
			}
			out = append(out, path.Clean(path.Join(dir, tok)))
		}
	}
	sort.Strings(out)
	return out
}

// TestCloudBuildReferencedFiles: every file or directory a step names
// exists in the repository: a missing Dockerfile or tfvars fails here, not
// half an hour into a build.
func TestCloudBuildReferencedFiles(t *testing.T) {
	cb := loadCloudBuild(t)
	root := repoRoot(t)
	found := map[string]bool{}
	for i, step := range cb.steps {
		for _, p := range referencedPaths(cb, step) {
			found[p] = true
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
				t.Errorf("step %s names %s, which does not exist in the repository", stepID(i, step), p)
			}
		}
	}
	// The paths the pipeline cannot work without must have been recognised
	// (this guards the extraction itself).
	for _, want := range []string{"examples/worker/Dockerfile", "terraform", "terraform/examples/dev.tfvars"} {
		if !found[want] {
			t.Errorf("no step names %s (found %v)", want, keysOf(found))
		}
	}
}

// TestCloudBuildSteps: known keys only, unique ids, and the pipeline's
// stages in order: vet and test, the image, then terraform plan and apply.
func TestCloudBuildSteps(t *testing.T) {
	cb := loadCloudBuild(t)
	topKeys := map[string]bool{"steps": true, "substitutions": true, "options": true, "timeout": true,
		"images": true, "availableSecrets": true, "serviceAccount": true, "logsBucket": true, "tags": true}
	for k := range cb.doc {
		if !topKeys[k] {
			t.Errorf("unknown top-level key %q", k)
		}
	}
	stepKeys := map[string]bool{"name": true, "id": true, "args": true, "entrypoint": true, "dir": true,
		"env": true, "secretEnv": true, "waitFor": true, "volumes": true, "timeout": true, "script": true,
		"allowFailure": true, "allowExitCodes": true, "automapSubstitutions": true}
	ids := map[string]int{}
	for i, step := range cb.steps {
		for k := range step {
			if !stepKeys[k] {
				t.Errorf("step %s: unknown key %q", stepID(i, step), k)
			}
		}
		if name, _ := step["name"].(string); name == "" {
			t.Errorf("step %d: no builder image (name)", i)
		}
		id, _ := step["id"].(string)
		if id == "" {
			t.Errorf("step %d: give every step an id", i)
		} else if _, dup := ids[id]; dup {
			t.Errorf("step id %q is used twice", id)
		}
		ids[id] = i
		if _, ok := step["waitFor"]; ok {
			t.Errorf("step %s: waitFor would break the order this test relies on", id)
		}
	}

	// first returns the index of the first step whose resolved name and
	// arguments contain every one of parts.
	first := func(parts ...string) int {
		for i, step := range cb.steps {
			text, _, _ := cb.substitute(strings.Join(stringsIn(step), "\n"))
			all := true
			for _, p := range parts {
				all = all && strings.Contains(text, p)
			}
			if all {
				return i
			}
		}
		return -1
	}
	stages := []struct {
		what  string
		parts []string
	}{
		{"go vet", []string{"go vet ./..."}},
		{"go test", []string{"go test ./..."}},
		{"terraform init with the state bucket", []string{"terraform init", "bucket=" + cb.substitutions["_TF_STATE_BUCKET"]}},
		{"the service agents created with gcloud", []string{"google-cloud-cli", "service-identity.sh pubsub.googleapis.com", "service-identity.sh eventarc.googleapis.com"}},
		{"docker build of the example worker", []string{"gcr.io/cloud-builders/docker", "build", "examples/worker/Dockerfile"}},
		{"docker push", []string{"gcr.io/cloud-builders/docker", "push"}},
		{"terraform plan", []string{"hashicorp/terraform", "plan", "-out=tfplan"}},
		{"terraform plan leaving the agents to that step", []string{"hashicorp/terraform", "plan", "-var=create_service_identities=false"}},
		{"terraform apply of the plan", []string{"hashicorp/terraform", "apply", "tfplan"}},
	}
	prev := -1
	for _, s := range stages {
		i := first(s.parts...)
		switch {
		case i < 0:
			t.Errorf("no step does %s (%q)", s.what, s.parts)
		case i < prev:
			t.Errorf("%s (step %s) runs before the previous stage", s.what, stepID(i, cb.steps[i]))
		default:
			prev = i
		}
	}

	// The image pushed is the one built and the one Terraform deploys.
	build, push, plan := first("build", "examples/worker/Dockerfile"), first("docker", "push"), first("plan", "-out=tfplan")
	if build >= 0 && push >= 0 && plan >= 0 {
		tag := ""
		args := stringsIn(cb.steps[build]["args"])
		for i, a := range args {
			if a == "-t" && i+1 < len(args) {
				tag = args[i+1]
			}
		}
		if tag == "" {
			t.Fatal("the worker image build has no -t tag")
		}
		if !strings.Contains(strings.Join(stringsIn(cb.steps[push]["args"]), " "), tag) {
			t.Errorf("docker push does not push %s", tag)
		}
		if !strings.Contains(strings.Join(stringsIn(cb.steps[plan]["args"]), " "), `worker_images={example="`+tag+`"}`) {
			t.Errorf("terraform plan does not deploy %s as the example worker (worker_images)", tag)
		}
	}
}
