package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// resource returns the resource block typ.name of any module (nil if
// none).
func (m tfModules) resource(typ, name string) *tfBlock {
	for _, b := range m.resources(typ) {
		if b.block.Labels[1] == name {
			return &b
		}
	}
	return nil
}

// dependsOn returns the source text of a block's depends_on list ("" when
// it has none).
func dependsOn(b tfBlock) string {
	a, ok := b.block.Body.Attributes["depends_on"]
	if !ok {
		return ""
	}
	return b.text(a.Expr)
}

// TestTerraformServiceIdentities checks that the first apply into an empty
// project creates the Pub/Sub and Eventarc service agents explicitly, and
// that whatever grants them a role or uses them waits for them.
func TestTerraformServiceIdentities(t *testing.T) {
	mods := loadTerraform(t)
	ident := mods.resource("terraform_data", "service_identity")
	if ident == nil {
		t.Fatal("no terraform_data.service_identity: the Pub/Sub and Eventarc service agents are left to Google's lazy creation")
	}
	forEach := ident.text(ident.block.Body.Attributes["for_each"].Expr)
	for _, svc := range []string{"pubsub.googleapis.com", "eventarc.googleapis.com"} {
		if !strings.Contains(forEach, `"`+svc+`"`) {
			t.Errorf("%s: for_each %s does not create the %s agent", ident.where(), forEach, svc)
		}
	}
	if !strings.Contains(forEach, "var.create_service_identities") {
		t.Errorf("%s: for_each %s ignores var.create_service_identities", ident.where(), forEach)
	}
	var command string
	for _, p := range ident.block.Body.Blocks {
		if p.Type == "provisioner" && len(p.Labels) == 1 && p.Labels[0] == "local-exec" {
			if a, ok := p.Body.Attributes["command"]; ok {
				command = ident.text(a.Expr)
			}
		}
	}
	if !strings.Contains(command, "scripts/service-identity.sh") || !strings.Contains(command, "var.service_identity_wait_seconds") {
		t.Errorf("%s: local-exec command %q does not run scripts/service-identity.sh with the wait", ident.where(), command)
	}
	if !strings.Contains(dependsOn(*ident), "google_project_service.apis") {
		t.Errorf("%s: does not wait for the APIs to be enabled", ident.where())
	}

	// Everything granting a role to a service agent, and the functions (the
	// sweeper's Eventarc trigger), depends on the agents.
	users := 0
	for _, b := range mods.blocks("terraform", "resource") {
		m, ok := b.block.Body.Attributes["member"]
		if !ok || !strings.Contains(b.text(m.Expr), "@gcp-sa-") {
			continue
		}
		users++
		if !strings.Contains(dependsOn(b), "terraform_data.service_identity") {
			t.Errorf("%s grants a service agent a role without depends_on = [terraform_data.service_identity]", b.where())
		}
	}
	if users == 0 {
		t.Error("no grant to a service agent found: the test no longer sees the dead-letter grants")
	}
	for _, b := range mods.blocks("terraform", "module") {
		if b.block.Labels[0] == "function" && !strings.Contains(dependsOn(b), "terraform_data.service_identity") {
			t.Errorf("%s (the sweeper's Eventarc trigger) does not depend on terraform_data.service_identity", b.where())
		}
	}
}

// TestServiceIdentityScript runs scripts/service-identity.sh against a
// stand-in gcloud that records its arguments.
func TestServiceIdentityScript(t *testing.T) {
	script := filepath.Join(repoRoot(t), "terraform", "scripts", "service-identity.sh")
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash is needed to run the script Terraform runs:", err)
	}
	tests := []struct {
		name     string
		failures int  // answers that fail before one succeeds (-1: no gcloud)
		wantOK   bool // exit status 0
		calls    int
		stderr   string
	}{
		{"created at once", 0, true, 1, ""},
		{"api not ready twice", 2, true, 3, "not ready yet (try 2 of 4)"},
		{"never ready", 10, false, 4, "failed 4 times; the last answer:\nPERMISSION_DENIED try 4"},
		{"no gcloud", -1, false, 0, "gcloud is not installed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "calls")
			if tc.failures >= 0 {
				fake := `#!/usr/bin/env bash
echo "$*" >> ` + log + `
n=$(wc -l < ` + log + `)
if [ "$n" -le ` + strconv.Itoa(tc.failures) + ` ]; then echo "PERMISSION_DENIED try $n" >&2; exit 1; fi
echo service-123@gcp-sa-pubsub.iam.gserviceaccount.com
`
				if err := os.WriteFile(filepath.Join(dir, "gcloud"), []byte(fake), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(bash, script, "pubsub.googleapis.com", "my-proj", "0")
			// PATH holds the stand-in first, then what the script needs (a
			// real gcloud there is shadowed); without the stand-in, only
			// the empty directory (the script fails on bash builtins).
			path := dir + ":/usr/bin:/bin"
			if tc.failures < 0 {
				path = dir
			}
			cmd.Env = []string{"PATH=" + path, "SERVO_IDENTITY_ATTEMPTS=4", "SERVO_IDENTITY_PAUSE=0"}
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if (err == nil) != tc.wantOK {
				t.Fatalf("exit: %v, want ok=%v\nstdout: %s\nstderr: %s", err, tc.wantOK, stdout.String(), stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr %q does not say %q", stderr.String(), tc.stderr)
			}
			var calls []string
			if b, err := os.ReadFile(log); err == nil {
				calls = strings.Split(strings.TrimSpace(string(b)), "\n")
			}
			if len(calls) != tc.calls {
				t.Fatalf("gcloud called %d times (%q), want %d", len(calls), calls, tc.calls)
			}
			for _, c := range calls {
				if c != "beta services identity create --service=pubsub.googleapis.com --project=my-proj --format=value(email)" {
					t.Errorf("gcloud %s: want the identity of pubsub.googleapis.com in my-proj", c)
				}
			}
			if tc.wantOK && !strings.Contains(stdout.String(), "service-123@gcp-sa-pubsub.iam.gserviceaccount.com") {
				t.Errorf("stdout %q does not name the agent", stdout.String())
			}
		})
	}
}

// submitURLs is the pattern of the api's submit URLs in the exclusion
// ok_submit_requests (Cloud Logging's regular expressions are RE2, as Go's).
const submitURLs = `^(https?://[^/?#]+)?/v1/tasks(:batch)?([?].*)?$`

// TestTerraformRequestLogExclusion: the callbacks function's successful
// request logs and the api function's successful submits' are excluded
// from Cloud Logging by default (one ~1 KB ingestion per callback or
// submit, docs/cost.md), failed ones and the api's other requests' kept,
// and the exclusions are named per environment.
func TestTerraformRequestLogExclusion(t *testing.T) {
	mods := loadTerraform(t)
	common := []string{`run.googleapis.com%2Frequests`, `httpRequest.status<400`, `cloud_run_revision`}
	for _, c := range []struct {
		resource string
		want     []string // in the filter, besides common
	}{
		{"ok_callback_requests", []string{`module.function["callbacks"].service_name`}},
		{"ok_submit_requests", []string{`module.function["api"].service_name`, `httpRequest.requestMethod=\"POST\"`,
			`httpRequest.requestUrl=~\"` + submitURLs + `\"`}},
	} {
		ex := mods.resource("google_logging_project_exclusion", c.resource)
		if ex == nil {
			t.Errorf("no google_logging_project_exclusion.%s", c.resource)
			continue
		}
		attr := func(name string) string {
			a, ok := ex.block.Body.Attributes[name]
			if !ok {
				t.Fatalf("%s: no %s", ex.where(), name)
			}
			return ex.text(a.Expr)
		}
		if c := attr("count"); c != "var.exclude_ok_request_logs ? 1 : 0" {
			t.Errorf("%s: count %s, want it gated by var.exclude_ok_request_logs", ex.where(), c)
		}
		if n := attr("name"); !strings.Contains(n, "var.name_prefix") {
			t.Errorf("%s: name %s is not derived from name_prefix", ex.where(), n)
		}
		filter := attr("filter")
		for _, want := range append(common, c.want...) {
			if !strings.Contains(filter, want) {
				t.Errorf("%s: filter %s lacks %s", ex.where(), filter, want)
			}
		}
	}
	// The submits' URL pattern: submits, and nothing else the api serves.
	re := regexp.MustCompile(submitURLs)
	for url, submit := range map[string]bool{
		"https://servo-api-abc-ew.a.run.app/v1/tasks":       true,
		"https://servo-api-abc-ew.a.run.app/v1/tasks:batch": true,
		"https://servo-api-abc-ew.a.run.app/v1/tasks?x=1":   true,
		"/v1/tasks": true,
		"https://servo-api-abc-ew.a.run.app/v1/tasks/task_01/cancel":       false,
		"https://servo-api-abc-ew.a.run.app/v1/runs/run_01/cancel":         false,
		"https://servo-api-abc-ew.a.run.app/v1/tasks/x/cancel?r=/v1/tasks": false,
		"https://servo-api-abc-ew.a.run.app/admin/v1/tasks":                false,
		"https://servo-api-abc-ew.a.run.app/v1/tasksx":                     false,
	} {
		if re.MatchString(url) != submit {
			t.Errorf("submit pattern on %s: %v, want %v", url, !submit, submit)
		}
	}
	for _, v := range mods.blocks("terraform", "variable") {
		if v.block.Labels[0] == "exclude_ok_request_logs" {
			if d, ok, _ := attrLiteral(v.block, "default"); !ok || !d.True() {
				t.Errorf("%s: default is not true", v.where())
			}
			return
		}
	}
	t.Error("no variable exclude_ok_request_logs")
}
