package deploy

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
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
	for _, want := range []string{"examples/worker/Dockerfile", "terraform", "deploy/pipeline.sh", "cmd/servo"} {
		if !found[want] {
			t.Errorf("no step names %s (found %v)", want, keysOf(found))
		}
	}
}

// TestCloudBuildSteps: known keys only, unique ids, and the pipeline's
// stages in order: the settings, vet and test, the image, then
// deploy/pipeline.sh's stages in docs/operations.md's upgrade order.
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
	// stage returns the index of the step that runs deploy/pipeline.sh's
	// stage name.
	stage := func(name string) int {
		for i, step := range cb.steps {
			if slices.Contains(pipelineStages(step), name) {
				return i
			}
		}
		return -1
	}
	stages := []struct {
		what  string
		parts []string // in one step's resolved text, or
		stage string   // deploy/pipeline.sh's stage
	}{
		{what: "the settings checked", stage: "check"},
		{what: "go vet", parts: []string{"go vet ./..."}},
		{what: "go test", parts: []string{"go test ./..."}},
		{what: "the servo CLI built from this tree", parts: []string{"golang:", "go build -o", "./cmd/servo"}},
		{what: "terraform init with the state bucket", stage: "init"},
		{what: "the image repository", stage: "repository"},
		{what: "the service agents created with gcloud", parts: []string{"google-cloud-cli", "service-identity.sh pubsub.googleapis.com", "service-identity.sh eventarc.googleapis.com"}},
		{what: "docker build of the example worker", parts: []string{"gcr.io/cloud-builders/docker", "build", "examples/worker/Dockerfile"}},
		{what: "docker push", parts: []string{"gcr.io/cloud-builders/docker", "push"}},
		// docs/operations.md, "Upgrade": indexes, migrate with the new
		// build's CLI, then deploy; the plan before the migration, so that
		// a build whose plan fails migrates nothing.
		{what: "the Firestore indexes applied", stage: "indexes"},
		{what: "terraform plan", stage: "plan"},
		{what: "servo migrate", stage: "migrate"},
		{what: "terraform apply of the plan", stage: "apply"},
		{what: "servo doctor", stage: "doctor"},
	}
	prev := -1
	for _, s := range stages {
		i, how := first(s.parts...), fmt.Sprintf("%q", s.parts)
		if s.stage != "" {
			i, how = stage(s.stage), "deploy/pipeline.sh "+s.stage
		}
		switch {
		case i < 0:
			t.Errorf("no step does %s (%s)", s.what, how)
		case i < prev:
			t.Errorf("%s (step %s) runs before the previous stage", s.what, stepID(i, cb.steps[i]))
		default:
			prev = i
		}
	}

	// The image pushed is the one built and the one Terraform deploys.
	build, push, plan := first("build", "examples/worker/Dockerfile"), first("docker", "push"), stage("plan")
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
		if !slices.Contains(stringsIn(cb.steps[plan]["env"]), `WORKER_IMAGES={example="`+tag+`"}`) {
			t.Errorf("terraform plan does not deploy %s as the example worker (WORKER_IMAGES)", tag)
		}
	}
}

// pipelineStages returns the stages of deploy/pipeline.sh a step runs (the
// script is the entrypoint's first argument), or nil.
func pipelineStages(step map[string]any) []string {
	args := stringsIn(step["args"])
	if len(args) < 2 || args[0] != "deploy/pipeline.sh" {
		return nil
	}
	return args[1:]
}

// deploying reports whether a step of deploy/pipeline.sh changes the
// deployment (any stage but check and init).
func deploying(step map[string]any) bool {
	for _, s := range pipelineStages(step) {
		if s != "check" && s != "init" {
			return true
		}
	}
	return false
}

// withSubstitutions is cb as a build started with values for (some of)
// its substitutions.
func (cb cloudBuild) withSubstitutions(values map[string]string) cloudBuild {
	subs := map[string]string{}
	for k, v := range cb.substitutions {
		subs[k] = v
	}
	for k, v := range values {
		subs[k] = v
	}
	cb.substitutions = subs
	return cb
}

// runStep runs step i of cb, a deploy/pipeline.sh step, in the rig: its
// env resolved, the rig's fake servo in place of the build's, plus extra.
func (r *pipelineRig) runStep(t *testing.T, cb cloudBuild, i int, extra map[string]string) (stderr string, code int) {
	t.Helper()
	env := map[string]string{}
	for _, e := range stringsIn(cb.steps[i]["env"]) {
		e, _, bad := cb.substitute(e)
		if len(bad) > 0 {
			t.Fatalf("step %s: env %q: %v", stepID(i, cb.steps[i]), e, bad)
		}
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	env["SERVO"] = filepath.Join(r.bin, "servo")
	for k, v := range extra {
		env[k] = v
	}
	return r.run(t, env, pipelineStages(cb.steps[i])...)
}

// testBuild is cloudbuild.yaml started with every required substitution,
// and a var file for it (PROJECT_ID is the placeholder every build has).
func testBuild(t *testing.T) (cloudBuild, string) {
	cb := loadCloudBuild(t).withSubstitutions(map[string]string{
		"_TF_STATE_BUCKET": "servo-test-tfstate",
		"_TF_STATE_PREFIX": "servo/test",
		"_AR_REPOSITORY":   "servo-test",
		"_TF_VAR_FILE":     "env.tfvars",
		"_REGION":          "europe-west1",
	})
	return cb, strings.Replace(testVarFile, `"servo-test-project"`, `"`+builtinSubstitutions["PROJECT_ID"]+`"`, 1)
}

// TestCloudBuildRequiredSettings: the substitutions deploy/pipeline.sh
// needs have no default; every step of the script gets them, the same
// way; and the first, right after the clean-tree check, refuses a build
// started without any one of them (exit 2, naming it).
func TestCloudBuildRequiredSettings(t *testing.T) {
	cb := loadCloudBuild(t)
	var steps []int
	for i, step := range cb.steps {
		if pipelineStages(step) != nil {
			steps = append(steps, i)
		}
	}
	if len(steps) == 0 {
		t.Fatal("no step runs deploy/pipeline.sh")
	}
	check := steps[0]
	if !slices.Equal(pipelineStages(cb.steps[check]), []string{"check"}) || check != 1 {
		t.Errorf("step 1 (right after clean-tree) must be deploy/pipeline.sh check, before the slow steps; it is %s", stepID(check, cb.steps[check]))
	}
	env := stringsIn(cb.steps[check]["env"])
	for _, i := range steps {
		step := cb.steps[i]
		if e := stringsIn(step["env"]); !slices.Equal(e, env) {
			t.Errorf("step %s: env %q differs from the check's %q: every stage must see the settings checked", stepID(i, step), e, env)
		}
		if ep, _ := step["entrypoint"].(string); ep != "sh" {
			t.Errorf("step %s: entrypoint %q: run the script with sh, without a shell line around it", stepID(i, step), ep)
		}
		if _, ok := step["dir"]; ok {
			t.Errorf("step %s: the script finds terraform/ itself; no dir", stepID(i, step))
		}
	}
	for _, req := range pipelineRequired {
		ref := "${" + req.substitution + "}"
		if _, builtin := builtinSubstitutions[req.substitution]; builtin {
			ref = "$" + req.substitution
		} else if v, ok := cb.substitutions[req.substitution]; !ok || v != "" {
			t.Errorf("substitution %s: declared %v with %q: it must be declared with no default (\"\")", req.substitution, ok, v)
		}
		if !slices.Contains(env, req.env+"="+ref) {
			t.Errorf("the pipeline's steps do not set %s=%s", req.env, ref)
		}
	}

	for _, req := range pipelineRequired {
		if _, builtin := builtinSubstitutions[req.substitution]; builtin {
			continue
		}
		t.Run(req.substitution, func(t *testing.T) {
			cb, varFile := testBuild(t)
			r := newPipelineRig(t, varFile)
			if stderr, code := r.runStep(t, cb, check, nil); code != 0 {
				t.Fatalf("with every substitution: exit %d\n%s", code, stderr)
			}
			cb = cb.withSubstitutions(map[string]string{req.substitution: ""})
			stderr, code := r.runStep(t, cb, check, nil)
			if code != 2 || !strings.Contains(stderr, req.substitution) {
				t.Errorf("without %s: exit %d, want 2 naming it\n%s", req.substitution, code, stderr)
			}
		})
	}
}

// TestCloudBuildPipeline runs every deploy/pipeline.sh step of
// cloudbuild.yaml in order against the fakes: the commands are the
// pipeline's, with the build's settings and image, and a failing servo
// doctor fails its step, the build's last, whose status nothing swallows.
func TestCloudBuildPipeline(t *testing.T) {
	cb, varFile := testBuild(t)
	r := newPipelineRig(t, varFile)
	swallow := regexp.MustCompile(`\|\|\s*(true|:)(\s|$)|set \+e`)
	for i, step := range cb.steps {
		for _, s := range stringsIn(step) {
			if swallow.MatchString(s) {
				t.Errorf("step %s swallows a failure: %q", stepID(i, step), s)
			}
		}
	}
	doctor := -1
	for i, step := range cb.steps {
		if pipelineStages(step) == nil {
			continue
		}
		if stderr, code := r.runStep(t, cb, i, nil); code != 0 {
			t.Fatalf("step %s: exit %d\n%s", stepID(i, step), code, stderr)
		}
		if slices.Contains(pipelineStages(step), "doctor") {
			doctor = i
		}
	}
	image := "europe-west1-docker.pkg.dev/my-project/servo-test/example-worker:" + builtinSubstitutions["BUILD_ID"]
	vars := "-var-file=" + r.tfDir + "/env.tfvars -var=project_id=my-project -var=region=europe-west1 -var=artifact_repository=servo-test" +
		` -var=create_service_identities=false -var=worker_images={example="` + image + `"}`
	want := []string{
		"terraform init -input=false -reconfigure -backend-config=bucket=servo-test-tfstate -backend-config=prefix=servo/test",
		"terraform apply -input=false -auto-approve -target=google_artifact_registry_repository.images " + vars,
		"terraform apply -input=false -auto-approve -target=module.firestore " + vars,
		"terraform plan -input=false -out=tfplan " + vars,
		"servo migrate --project my-project --database servo-test-db",
		"terraform apply -input=false tfplan",
		"servo doctor --api https://servo-api-test.a.run.app --project my-project --database servo-test-db --topic tst-task-events --worker example",
	}
	var got []string
	for _, c := range r.calls(t) {
		if !strings.HasPrefix(c, "terraform output ") {
			got = append(got, c)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("the build's commands:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	pushed, _, _ := cb.substitute("${_REGION}-docker.pkg.dev/$PROJECT_ID/${_AR_REPOSITORY}/example-worker:$BUILD_ID")
	if pushed != image {
		t.Errorf("the test's image %s is not the build's %s", image, pushed)
	}

	// The doctor's status fails the build.
	if doctor < 0 {
		t.Fatal("no step runs deploy/pipeline.sh doctor")
	}
	if doctor != len(cb.steps)-1 {
		t.Errorf("servo doctor (step %s) must be the build's last step", stepID(doctor, cb.steps[doctor]))
	}
	for _, k := range []string{"allowFailure", "allowExitCodes"} {
		if _, ok := cb.steps[doctor][k]; ok {
			t.Errorf("step %s: %s would let a failing doctor pass the build", stepID(doctor, cb.steps[doctor]), k)
		}
	}
	stderr, code := r.runStep(t, cb, doctor, map[string]string{"FAKE_DOCTOR_FAILURES": "100", "DOCTOR_ATTEMPTS": "1"})
	if code == 0 {
		t.Errorf("step %s passed with a failing servo doctor\n%s", stepID(doctor, cb.steps[doctor]), stderr)
	}

	// The servo the steps run is the one the build compiles, in the volume
	// they mount.
	var servo string
	for _, e := range stringsIn(cb.steps[doctor]["env"]) {
		if v, ok := strings.CutPrefix(e, "SERVO="); ok {
			servo = v
		}
	}
	built := false
	for _, step := range cb.steps {
		text := strings.Join(stringsIn(step["args"]), "\n")
		if servo != "" && strings.Contains(text, "go build -o "+servo+" ./cmd/servo") {
			built = true
			for _, s := range []map[string]any{step, cb.steps[doctor]} {
				if !strings.Contains(strings.Join(stringsIn(s["volumes"]), " "), path.Dir(servo)) {
					t.Errorf("step %s does not mount %s", stringsIn(s["id"]), path.Dir(servo))
				}
			}
		}
	}
	if !built {
		t.Errorf("no step builds the servo the pipeline runs (SERVO=%s) with go build -o %s ./cmd/servo", servo, servo)
	}
}
