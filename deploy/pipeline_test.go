package deploy

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// deploy/pipeline.sh runs here with a fake terraform and a fake servo on
// PATH: shell scripts that log their arguments (tab-separated, one call a
// line) and answer the three outputs the pipeline reads. Nothing touches
// the network or a cloud.

const fakeTerraform = `#!/bin/sh
{ printf terraform; for a in "$@"; do printf '\t%s' "$a"; done; printf '\n'; } >>"$FAKE_LOG"
[ "${FAKE_TERRAFORM_FAIL:-}" != "$1" ] || exit 1
if [ "$1" = output ]; then
  case "$2 $3" in
  "-raw control_api_url") printf 'https://servo-api-test.a.run.app' ;;
  "-raw firestore_database") printf 'servo-test-db' ;;
  "-json topics") printf '{"dead_letter":"tst-dead-letter","events":"tst-task-events","sweep":"tst-sweep"}\n' ;;
  *) echo "fake terraform: no output $2 $3" >&2; exit 1 ;;
  esac
fi
`

const fakeServo = `#!/bin/sh
{ printf servo; for a in "$@"; do printf '\t%s' "$a"; done; printf '\n'; } >>"$FAKE_LOG"
[ "${FAKE_SERVO_FAIL:-}" != "$1" ] || exit 1
if [ "$1" = doctor ]; then
  n=$(( $(cat "$FAKE_LOG.doctor" 2>/dev/null || echo 0) + 1 ))
  echo "$n" >"$FAKE_LOG.doctor"
  if [ "$n" -le "${FAKE_DOCTOR_FAILURES:-0}" ]; then
    echo "api  fail  GET /v1/health 403" && exit 1
  fi
fi
`

// pipelineRequired are the settings deploy/pipeline.sh refuses to run
// without, and the Cloud Build substitution each comes from.
var pipelineRequired = []struct{ env, substitution string }{
	{"PROJECT_ID", "PROJECT_ID"},
	{"REGION", "_REGION"},
	{"TF_STATE_BUCKET", "_TF_STATE_BUCKET"},
	{"TF_STATE_PREFIX", "_TF_STATE_PREFIX"},
	{"AR_REPOSITORY", "_AR_REPOSITORY"},
	{"VAR_FILE", "_TF_VAR_FILE"},
}

// pipelineRig is a temporary directory with the fakes in bin/, their log,
// a Terraform directory (the script writes backend.tf there) and a var
// file.
type pipelineRig struct {
	bin, log, tfDir string
}

func newPipelineRig(t *testing.T, varFile string) *pipelineRig {
	t.Helper()
	dir := t.TempDir()
	r := &pipelineRig{bin: filepath.Join(dir, "bin"), log: filepath.Join(dir, "calls.log"), tfDir: filepath.Join(dir, "terraform")}
	for _, d := range []string{r.bin, r.tfDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, src := range map[string]string{"terraform": fakeTerraform, "servo": fakeServo} {
		if err := os.WriteFile(filepath.Join(r.bin, name), []byte(src), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(r.tfDir, "env.tfvars"), []byte(varFile), 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

// testVarFile agrees with testSettings.
const testVarFile = `project_id          = "servo-test-project"
region              = "europe-west1" # the deployment's
firestore_location  = "eur3"
firestore_database  = "servo-test-db"
`

// testSettings are a complete environment for the rig's var file.
func testSettings() map[string]string {
	return map[string]string{
		"PROJECT_ID":      "servo-test-project",
		"REGION":          "europe-west1",
		"TF_STATE_BUCKET": "servo-test-tfstate",
		"TF_STATE_PREFIX": "servo/test",
		"AR_REPOSITORY":   "servo-test",
		"VAR_FILE":        "env.tfvars",
	}
}

// run runs deploy/pipeline.sh with args in an environment of settings and
// the rig's (PATH with the fakes first, the rig's Terraform directory, no
// pause between doctor runs) and nothing else of the test's environment.
func (r *pipelineRig) run(t *testing.T, settings map[string]string, args ...string) (stderr string, code int) {
	t.Helper()
	env := map[string]string{
		"PATH":                 r.bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"FAKE_LOG":             r.log,
		"TERRAFORM_DIR":        r.tfDir,
		"DOCTOR_RETRY_SECONDS": "0",
	}
	for k, v := range settings {
		env[k] = v
	}
	cmd := exec.Command(filepath.Join(repoRoot(t), "deploy", "pipeline.sh"), args...)
	for _, k := range keysOf(env) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	}
	t.Fatalf("deploy/pipeline.sh: %v", err)
	return "", 0
}

// calls are the fakes' calls so far, each as its words joined by spaces.
func (r *pipelineRig) calls(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(r.log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		out = append(out, strings.ReplaceAll(l, "\t", " "))
	}
	return out
}

// TestPipelineRefusesWithoutSettings: each required setting, unset or
// empty (an empty Cloud Build substitution), stops the script with exit
// 2 and its name before any command runs; so do all of them at once.
func TestPipelineRefusesWithoutSettings(t *testing.T) {
	for _, req := range pipelineRequired {
		for _, how := range []string{"unset", "empty"} {
			t.Run(req.env+"/"+how, func(t *testing.T) {
				r := newPipelineRig(t, testVarFile)
				s := testSettings()
				if how == "unset" {
					delete(s, req.env)
				} else {
					s[req.env] = ""
				}
				for _, args := range [][]string{nil, {"check"}, {"doctor"}} {
					stderr, code := r.run(t, s, args...)
					if code != 2 {
						t.Errorf("%v without %s: exit %d, want 2\n%s", args, req.env, code, stderr)
					}
					if !strings.Contains(stderr, req.env+" is not set") || !strings.Contains(stderr, req.substitution) {
						t.Errorf("%v without %s: the message names neither it nor %s:\n%s", args, req.env, req.substitution, stderr)
					}
				}
				if c := r.calls(t); len(c) > 0 {
					t.Errorf("commands ran without %s: %q", req.env, c)
				}
			})
		}
	}
	r := newPipelineRig(t, testVarFile)
	stderr, code := r.run(t, map[string]string{})
	if code != 2 {
		t.Errorf("no settings: exit %d, want 2", code)
	}
	for _, req := range pipelineRequired {
		if !strings.Contains(stderr, req.env) {
			t.Errorf("no settings: %s is not named:\n%s", req.env, stderr)
		}
	}
}

// TestPipelineOrder: with no stage the script runs docs/operations.md's
// upgrade order, each command with the environment's settings: init
// against the environment's state, the indexes, the plan, servo migrate
// on the applied database, the plan's apply, and servo doctor against the
// applied API, events topic and database.
func TestPipelineOrder(t *testing.T) {
	r := newPipelineRig(t, testVarFile)
	stderr, code := r.run(t, testSettings())
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	vars := "-var-file=" + r.tfDir + "/env.tfvars -var=project_id=servo-test-project -var=region=europe-west1 -var=artifact_repository=servo-test"
	want := []string{
		"terraform init -input=false -reconfigure -backend-config=bucket=servo-test-tfstate -backend-config=prefix=servo/test",
		"terraform apply -input=false -auto-approve -target=module.firestore " + vars,
		"terraform plan -input=false -out=tfplan " + vars,
		"terraform output -raw firestore_database",
		"servo migrate --project servo-test-project --database servo-test-db",
		"terraform apply -input=false tfplan",
		"terraform output -raw control_api_url",
		"terraform output -raw firestore_database",
		"terraform output -json topics",
		"servo doctor --api https://servo-api-test.a.run.app --project servo-test-project --database servo-test-db --topic tst-task-events --worker example",
	}
	if got := r.calls(t); !slices.Equal(got, want) {
		t.Errorf("commands:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	b, err := os.ReadFile(filepath.Join(r.tfDir, "backend.tf"))
	if err != nil || !strings.Contains(string(b), `backend "gcs" {}`) {
		t.Errorf("init did not declare the GCS backend in the Terraform directory: %q, %v", b, err)
	}
}

// TestPipelineStages: stages run alone and in the order given, and the
// optional settings reach the commands (the repository stage is Cloud
// Build's, before its image build).
func TestPipelineStages(t *testing.T) {
	r := newPipelineRig(t, testVarFile)
	s := testSettings()
	s["VAR_FILE"] = filepath.Join(r.tfDir, "env.tfvars") // absolute
	s["WORKER_IMAGES"] = `{example="europe-west1-docker.pkg.dev/servo-test-project/servo-test/example-worker:b1"}`
	s["CREATE_SERVICE_IDENTITIES"] = "false"
	s["DOCTOR_WORKER"] = "mine"
	s["DOCTOR_PAYLOAD"] = `{"n": 1}`
	if stderr, code := r.run(t, s, "repository", "doctor"); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	got := r.calls(t)
	if len(got) != 5 || !strings.HasPrefix(got[0], "terraform apply -input=false -auto-approve -target=google_artifact_registry_repository.images -var-file=") ||
		!strings.HasSuffix(got[0], ` -var=create_service_identities=false -var=worker_images={example="europe-west1-docker.pkg.dev/servo-test-project/servo-test/example-worker:b1"}`) {
		t.Fatalf("commands:\n  %s", strings.Join(got, "\n  "))
	}
	raw, _ := os.ReadFile(r.log)
	if !strings.Contains(string(raw), "\t--worker\tmine\t--payload={\"n\": 1}\n") {
		t.Errorf("doctor's worker and payload: %q", raw)
	}
	if stderr, code := r.run(t, testSettings(), "plan", "nonsense"); code != 2 || !strings.Contains(stderr, "unknown stage nonsense") {
		t.Errorf("an unknown stage: exit %d, want 2\n%s", code, stderr)
	}
	if len(r.calls(t)) != 5 {
		t.Errorf("an unknown stage ran commands: %q", r.calls(t)[5:])
	}
}

// TestPipelineDoctorFails: a failing servo doctor fails the script (after
// DOCTOR_ATTEMPTS runs), and one that passes on a later run does not.
func TestPipelineDoctorFails(t *testing.T) {
	doctorRuns := func(calls []string) (n int) {
		for _, c := range calls {
			if strings.HasPrefix(c, "servo doctor ") {
				n++
			}
		}
		return n
	}
	r := newPipelineRig(t, testVarFile)
	s := testSettings()
	s["FAKE_DOCTOR_FAILURES"] = "100"
	s["DOCTOR_ATTEMPTS"] = "2"
	stderr, code := r.run(t, s)
	if code == 0 {
		t.Fatalf("the script passed with a failing doctor:\n%s", stderr)
	}
	if n := doctorRuns(r.calls(t)); n != 2 {
		t.Errorf("doctor ran %d times, want 2 (DOCTOR_ATTEMPTS)", n)
	}
	if !strings.Contains(stderr, "servo doctor failed") {
		t.Errorf("the failure is not reported:\n%s", stderr)
	}

	r = newPipelineRig(t, testVarFile)
	s["FAKE_DOCTOR_FAILURES"] = "1"
	if stderr, code := r.run(t, s, "doctor"); code != 0 {
		t.Errorf("doctor passing on its second run: exit %d\n%s", code, stderr)
	}
	if n := doctorRuns(r.calls(t)); n != 2 {
		t.Errorf("doctor ran %d times, want 2", n)
	}
}

// TestPipelineStopsAtTheFirstFailure: a failed plan migrates nothing, and
// a failed migration deploys nothing.
func TestPipelineStopsAtTheFirstFailure(t *testing.T) {
	for _, tc := range []struct{ fake, value, after string }{
		{"FAKE_TERRAFORM_FAIL", "plan", "servo migrate"},
		{"FAKE_SERVO_FAIL", "migrate", "terraform apply -input=false tfplan"},
		{"FAKE_TERRAFORM_FAIL", "init", "terraform apply"},
	} {
		r := newPipelineRig(t, testVarFile)
		s := testSettings()
		s[tc.fake] = tc.value
		stderr, code := r.run(t, s)
		if code == 0 {
			t.Errorf("%s=%s: the script passed\n%s", tc.fake, tc.value, stderr)
		}
		for _, c := range r.calls(t) {
			if strings.HasPrefix(c, tc.after) {
				t.Errorf("%s=%s: %q ran after the failure", tc.fake, tc.value, c)
			}
		}
	}
}

// TestPipelineVarFileMustAgree: a var file that names another project,
// region or repository than the settings is refused before any command,
// rather than silently overridden; one that leaves them out is not.
func TestPipelineVarFileMustAgree(t *testing.T) {
	for _, tc := range []struct{ name, varFile string }{
		{"project_id", strings.Replace(testVarFile, `"servo-test-project"`, `"my-servo-dev"`, 1)},
		{"region", strings.Replace(testVarFile, `"europe-west1"`, `"us-central1"`, 1)},
		{"artifact_repository", testVarFile + "artifact_repository = \"servo\"\n"},
	} {
		r := newPipelineRig(t, tc.varFile)
		stderr, code := r.run(t, testSettings())
		if code != 2 || !strings.Contains(stderr, "sets "+tc.name+" = ") {
			t.Errorf("a var file with another %s: exit %d, want 2 naming it\n%s", tc.name, code, stderr)
		}
		if c := r.calls(t); len(c) > 0 {
			t.Errorf("a var file with another %s: commands ran: %q", tc.name, c)
		}
	}
	r := newPipelineRig(t, "firestore_location = \"eur3\"\nartifact_repository = \"servo-test\"\n")
	if stderr, code := r.run(t, testSettings(), "check"); code != 0 {
		t.Errorf("a var file that agrees or says nothing: exit %d\n%s", code, stderr)
	}
	s := testSettings()
	s["VAR_FILE"] = "missing.tfvars"
	if stderr, code := r.run(t, s, "check"); code != 2 || !strings.Contains(stderr, "missing.tfvars") {
		t.Errorf("a missing var file: exit %d, want 2 naming it\n%s", code, stderr)
	}
}

// TestPipelineScriptDocumentsItsSettings: the settings the script checks
// (need NAME) are the ones this test and its header know.
func TestPipelineScriptDocumentsItsSettings(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "pipeline.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var need, want []string
	for _, l := range strings.Split(string(src), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "need" {
			need = append(need, f[1])
		}
	}
	for _, req := range pipelineRequired {
		want = append(want, req.env)
		if !strings.Contains(string(src), "#   "+req.env+" ") {
			t.Errorf("the header does not describe %s", req.env)
		}
	}
	sort.Strings(need)
	sort.Strings(want)
	if !slices.Equal(need, want) {
		t.Errorf("pipeline.sh requires %v; the tests know %v", need, want)
	}
	if fi, err := os.Stat(filepath.Join(repoRoot(t), "deploy", "pipeline.sh")); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("deploy/pipeline.sh is not executable: %v", err)
	}
}
