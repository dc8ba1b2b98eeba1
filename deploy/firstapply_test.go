package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// A first apply into an empty project converges in one run (issue 56,
// item 5): Firestore's index operations are chained and given room, the
// APIs and the IAM grants are waited for, and the service-agent script
// tells a missing login and a missing permission from an agent not ready
// yet. And the Terraform half of item 4: lowering due_shards is warned of
// where Terraform can see the deployed value.

// firestoreChains is the most index operations of each kind that may run
// at once: the number of depends_on chains in modules/firestore.
var firestoreChains = map[string]int{
	"google_firestore_index": 3,
	"google_firestore_field": 4,
}

// minTimeouts are the least timeouts of every index and field operation
// (the provider's default, 20 minutes, also bounds its 409 retries and an
// index build).
var minTimeouts = map[string]time.Duration{
	"create": time.Hour,
	"update": time.Hour,
	"delete": 20 * time.Minute,
}

// TestFirestoreOperationTimeouts: every composite index and field
// configuration has generous timeouts.
func TestFirestoreOperationTimeouts(t *testing.T) {
	mods := loadTerraform(t)
	n := 0
	for typ := range firestoreChains {
		for _, r := range mods.resources(typ) {
			n++
			var timeouts *hclsyntax.Block
			for _, b := range r.block.Body.Blocks {
				if b.Type == "timeouts" {
					timeouts = b
				}
			}
			if timeouts == nil {
				t.Errorf("%s: no timeouts block: the provider's 20 minutes also bound its retries of Firestore's 409s and the index build", r.where())
				continue
			}
			for op, least := range minTimeouts {
				s, err := attrString(timeouts, op)
				if err != nil {
					t.Errorf("%s: timeouts: %v", r.where(), err)
					continue
				}
				d, err := time.ParseDuration(s)
				if err != nil || d < least {
					t.Errorf("%s: timeouts.%s = %q, want a duration of at least %s", r.where(), op, s, least)
				}
			}
		}
	}
	if n < 50 {
		t.Fatalf("only %d google_firestore_index and google_firestore_field resources found", n)
	}
}

// TestFirestoreCreationChains: the index operations on the database run in
// a bounded number of chains (each resource depends_on the one before it),
// so that no more than firestoreChains of a kind run at once, whatever
// Terraform's -parallelism.
func TestFirestoreCreationChains(t *testing.T) {
	mods := loadTerraform(t)
	for typ, most := range firestoreChains {
		t.Run(typ, func(t *testing.T) {
			blocks := map[string]tfBlock{}
			for _, r := range mods.resources(typ) {
				if r.file.rel[:strings.LastIndex(r.file.rel, "/")] != "terraform/modules/firestore" {
					t.Errorf("%s: Firestore indexes and fields belong in modules/firestore, in its chains", r.where())
				}
				blocks[r.block.Labels[1]] = r
			}
			prev := map[string]string{} // name => the one it waits for
			next := map[string][]string{}
			var heads []string
			for name, r := range blocks {
				deps := dependsOnAddrs(t, r)
				switch {
				case len(deps) == 0:
					heads = append(heads, name)
				case len(deps) == 1 && strings.HasPrefix(deps[0], typ+"."):
					p := strings.TrimPrefix(deps[0], typ+".")
					if _, ok := blocks[p]; !ok {
						t.Errorf("%s: depends_on %s, which does not exist", r.where(), deps[0])
						continue
					}
					prev[name] = p
					next[p] = append(next[p], name)
				default:
					t.Errorf("%s: depends_on %v: want exactly one %s, the one before it in its chain (or none, for the first of a chain)", r.where(), deps, typ)
				}
			}
			sort.Strings(heads)
			if len(heads) == 0 || len(heads) > most {
				t.Errorf("%d chains of %s (first: %v), want 1 to %d: a %s without depends_on starts at once, beside every other chain; add it at the end of a chain (depends_on = [the resource above it])",
					len(heads), typ, heads, most, typ)
			}
			for p, ns := range next {
				if len(ns) > 1 {
					sort.Strings(ns)
					t.Errorf("%s.%s is followed by %d resources (%v): they would run at once; a chain has one successor", typ, p, len(ns), ns)
				}
			}
			// Every resource reaches a chain's first, without a loop.
			for name := range blocks {
				seen := map[string]bool{}
				for n := name; ; n = prev[n] {
					if seen[n] {
						t.Errorf("%s.%s: its depends_on chain loops", typ, name)
						break
					}
					seen[n] = true
					if _, ok := prev[n]; !ok {
						break
					}
				}
			}
		})
	}
}

// dependsOnAddrs returns the addresses in a block's depends_on.
func dependsOnAddrs(t *testing.T, b tfBlock) []string {
	t.Helper()
	a, ok := b.block.Body.Attributes["depends_on"]
	if !ok {
		return nil
	}
	tuple, ok := a.Expr.(*hclsyntax.TupleConsExpr)
	if !ok {
		t.Fatalf("%s: depends_on is not a list", b.where())
	}
	var out []string
	for _, e := range tuple.Exprs {
		out = append(out, b.text(e))
	}
	return out
}

// localExec returns the command of a block's creation-time local-exec
// provisioner ("" when it has none).
func localExec(b tfBlock) string {
	for _, p := range b.block.Body.Blocks {
		if p.Type != "provisioner" || len(p.Labels) != 1 || p.Labels[0] != "local-exec" {
			continue
		}
		if w, ok := p.Body.Attributes["when"]; ok && b.text(w.Expr) == "destroy" {
			continue
		}
		if c, ok := p.Body.Attributes["command"]; ok {
			return b.text(c.Expr)
		}
	}
	return ""
}

// checkWaitVariable checks a wait's variable: a whole number of seconds,
// 0 allowed (no wait), with a positive default.
func checkWaitVariable(t *testing.T, mods tfModules, name string) {
	t.Helper()
	for _, v := range mods.blocks("terraform", "variable") {
		if v.addr() != name {
			continue
		}
		d, ok, err := attrLiteral(v.block, "default")
		if !ok || err != nil || !d.Type().Equals(cty.Number) || d.LessThanOrEqualTo(cty.Zero).True() {
			t.Errorf("%s: want a literal default number of seconds above 0", v.where())
		}
		for _, b := range v.block.Body.Blocks {
			if b.Type == "validation" {
				if c := v.text(b.Body.Attributes["condition"].Expr); strings.Contains(c, "var."+name+" >= 0") {
					return
				}
			}
		}
		t.Errorf("%s: no validation that it is >= 0", v.where())
		return
	}
	t.Errorf("no variable %s", name)
}

// tfGraph is the root module's dependencies: node ("TYPE.NAME",
// "module.NAME", "data.TYPE.NAME", "local.NAME") => what its expressions
// and depends_on refer to.
type tfGraph map[string]map[string]bool

func rootGraph(mods tfModules) tfGraph {
	g := tfGraph{}
	add := func(node string, body *hclsyntax.Body) {
		if g[node] == nil {
			g[node] = map[string]bool{}
		}
		for _, ref := range bodyRefs(body) {
			g[node][ref] = true
		}
	}
	for _, f := range mods["terraform"] {
		for _, b := range f.body.Blocks {
			switch b.Type {
			case "resource":
				add(strings.Join(b.Labels, "."), b.Body)
			case "module":
				add("module."+b.Labels[0], b.Body)
			case "data":
				add("data."+strings.Join(b.Labels, "."), b.Body)
			case "locals":
				for name, a := range b.Body.Attributes {
					add("local."+name, &hclsyntax.Body{Attributes: hclsyntax.Attributes{name: a}})
				}
			}
		}
	}
	return g
}

// bodyRefs returns the objects a body's expressions refer to, nested
// blocks included.
func bodyRefs(body *hclsyntax.Body) []string {
	var out []string
	for _, a := range body.Attributes {
		for _, tr := range hclsyntax.Variables(a.Expr) {
			if ref := refAddr(tr); ref != "" {
				out = append(out, ref)
			}
		}
	}
	for _, b := range body.Blocks {
		out = append(out, bodyRefs(b.Body)...)
	}
	return out
}

// refAddr is the object a traversal refers to ("" for variables, each,
// path and the like).
func refAddr(tr hcl.Traversal) string {
	attr := func(i int) string {
		if i < len(tr) {
			if a, ok := tr[i].(hcl.TraverseAttr); ok {
				return a.Name
			}
		}
		return ""
	}
	switch root := tr.RootName(); root {
	case "var", "each", "count", "path", "terraform", "self":
		return ""
	case "local", "module":
		return root + "." + attr(1)
	case "data":
		return "data." + attr(1) + "." + attr(2)
	default:
		return root + "." + attr(1)
	}
}

// closure returns everything node depends on, directly or not.
func (g tfGraph) closure(node string) map[string]bool {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(n string) {
		for dep := range g[n] {
			if !seen[dep] {
				seen[dep] = true
				walk(dep)
			}
		}
	}
	walk(node)
	return seen
}

// apiWaitGaps are the Google resources of the root module known to depend
// on no API yet, and why they are listed; the test fails when one of them
// does, so that the list only shrinks.
var apiWaitGaps = map[string]string{}

// TestTerraformAPIWait: each API, once enabled, waits
// api_enable_wait_seconds before Terraform counts it created, and every
// Google resource and module of the root module depends on the APIs.
func TestTerraformAPIWait(t *testing.T) {
	mods := loadTerraform(t)
	apis := mods.resource("google_project_service", "apis")
	if apis == nil {
		t.Fatal("no google_project_service.apis")
	}
	if cmd := localExec(*apis); !strings.Contains(cmd, "sleep ${var.api_enable_wait_seconds}") {
		t.Errorf("%s: no creation-time local-exec provisioner running sleep ${var.api_enable_wait_seconds} (got %q): what depends on the APIs starts the moment they are enabled", apis.where(), cmd)
	}
	checkWaitVariable(t, mods, "api_enable_wait_seconds")

	g := rootGraph(mods)
	checked := 0
	for _, f := range mods["terraform"] {
		for _, b := range f.body.Blocks {
			var node string
			switch {
			case b.Type == "resource" && strings.HasPrefix(b.Labels[0], "google_") && b.Labels[0] != "google_project_service":
				node = strings.Join(b.Labels, ".")
			case b.Type == "module":
				node = "module." + b.Labels[0]
			default:
				continue
			}
			checked++
			if _, gap := apiWaitGaps[node]; gap {
				if g.closure(node)["google_project_service.apis"] {
					t.Errorf("%s now depends on google_project_service.apis: remove it from apiWaitGaps", node)
				}
				continue
			}
			if !g.closure(node)["google_project_service.apis"] {
				t.Errorf("%s: depends on google_project_service.apis neither directly nor through what it refers to: it may be created before its API is enabled and has propagated", tfBlock{f, b}.where())
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d Google resources and modules checked", checked)
	}
}

// TestTerraformIAMPropagationWait: the functions wait for the IAM grants
// their builds and revisions use, and for them to propagate, instead of a
// second apply.
func TestTerraformIAMPropagationWait(t *testing.T) {
	mods := loadTerraform(t)
	wait := mods.resource("terraform_data", "iam_propagation")
	if wait == nil {
		t.Fatal("no terraform_data.iam_propagation: a first apply's function builds race the grants they need")
	}
	if cmd := localExec(*wait); !strings.Contains(cmd, "sleep ${var.iam_propagation_wait_seconds}") {
		t.Errorf("%s: no local-exec provisioner running sleep ${var.iam_propagation_wait_seconds} (got %q)", wait.where(), cmd)
	}
	if a, ok := wait.block.Body.Attributes["triggers_replace"]; !ok || !strings.Contains(wait.text(a.Expr), "local.grants") {
		t.Errorf("%s: triggers_replace must follow local.grants (wait again when the grants change, not at every apply)", wait.where())
	}
	checkWaitVariable(t, mods, "iam_propagation_wait_seconds")

	deps := map[string]bool{}
	for _, d := range dependsOnAddrs(t, *wait) {
		deps[d] = true
	}
	g := rootGraph(mods)
	grants := 0
	for _, r := range mods.blocks("terraform", "resource") {
		if !iamResource.MatchString(r.block.Labels[0]) || g.closure(r.addr())["module.function"] {
			continue // a grant on a function comes after it
		}
		grants++
		if !deps[r.addr()] {
			t.Errorf("%s: terraform_data.iam_propagation does not depend on it: the functions may build or start before it has propagated", r.where())
		}
	}
	if grants < 10 {
		t.Fatalf("only %d IAM resources found", grants)
	}
	for _, b := range mods.blocks("terraform", "module") {
		if b.block.Labels[0] == "function" && !strings.Contains(dependsOn(b), "terraform_data.iam_propagation") {
			t.Errorf("%s does not depend on terraform_data.iam_propagation", b.where())
		}
	}
	// README.md no longer sends the operator to apply again.
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "terraform", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	first := section(string(readme), "### First apply into an empty project")
	for _, want := range []string{"api_enable_wait_seconds", "iam_propagation_wait_seconds", "service_identity_wait_seconds"} {
		if !strings.Contains(first, want) {
			t.Errorf("terraform/README.md, \"First apply into an empty project\", does not name %s", want)
		}
	}
	if regexp.MustCompile(`(?i)apply\s+again`).MatchString(first) {
		t.Error("terraform/README.md, \"First apply into an empty project\", still tells to apply again")
	}
}

// section returns a Markdown section, from its heading to the next heading
// of the same or a higher level.
func section(doc, heading string) string {
	i := strings.Index(doc, heading+"\n")
	if i < 0 {
		return ""
	}
	level := strings.Index(heading, " ")
	rest := doc[i+len(heading):]
	for _, line := range regexp.MustCompile(`(?m)^#{1,6} `).FindAllStringIndex(rest, -1) {
		if line[1]-line[0]-1 <= level {
			return doc[i : i+len(heading)+line[0]]
		}
	}
	return doc[i:]
}

// TestTerraformDueShardsCheck: a plan that lowers due_shards below the
// deployed sweeper's warns, naming what to do; the data source reads at
// plan time (it depends on no managed resource) and a first apply (no
// sweeper) passes.
func TestTerraformDueShardsCheck(t *testing.T) {
	mods := loadTerraform(t)
	var check *tfBlock
	for _, b := range mods.blocks("terraform", "check") {
		if b.block.Labels[0] == "due_shards_not_lowered" {
			check = &b
		}
	}
	if check == nil {
		t.Fatal(`no check "due_shards_not_lowered" in terraform/: lowering due_shards is planned without a word`)
	}
	var data, assert *hclsyntax.Block
	for _, b := range check.block.Body.Blocks {
		switch b.Type {
		case "data":
			data = b
		case "assert":
			assert = b
		}
	}
	if data == nil || data.Labels[0] != "google_cloudfunctions2_function" || assert == nil {
		t.Fatalf("%s: want a scoped data \"google_cloudfunctions2_function\" and an assert", check.where())
	}
	// The function it reads is the sweeper Terraform deploys.
	name := check.text(data.Body.Attributes["name"].Expr)
	_, fns := mods.local(t, "terraform", "functions")
	items, err := objectItems(fns)
	if err != nil {
		t.Fatal(err)
	}
	sweeper, err := objectItems(items["sweeper"])
	if err != nil {
		t.Fatal(err)
	}
	if got := check.text(sweeper["name"]); got != name {
		t.Errorf("%s: reads the function %s, but the sweeper is %s", check.where(), name, got)
	}
	// Read at plan time: the data source refers to no managed resource (a
	// data source that depends on one with pending changes is read after
	// the apply, when it would see the new value).
	g := rootGraph(mods)
	node := "check." + check.block.Labels[0]
	g[node] = map[string]bool{}
	for _, ref := range bodyRefs(data.Body) {
		g[node][ref] = true
	}
	for dep := range g.closure(node) {
		if !strings.HasPrefix(dep, "local.") {
			t.Errorf("%s: the data source depends on %s: it would be read after the apply, not from the deployed function", check.where(), dep)
		}
	}
	cond := check.text(assert.Body.Attributes["condition"].Expr)
	for _, want := range []string{"var.due_shards >=", `environment_variables["SERVO_DUE_SHARDS"]`, "try("} {
		if !strings.Contains(cond, want) {
			t.Errorf("%s: condition %s lacks %s", check.where(), cond, want)
		}
	}
	msg := check.text(assert.Body.Attributes["error_message"].Expr)
	for _, want := range []string{"servo migrate", "--due-shards ${var.due_shards}", "refuse to start", "at least"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%s: error_message does not say %q: %s", check.where(), want, msg)
		}
	}
	// The value it compares is the one the functions get.
	_, env := mods.local(t, "terraform", "function_env")
	envItems, err := objectItems(env)
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := envItems["SERVO_DUE_SHARDS"]; !ok || check.text(e) != "tostring(var.due_shards)" {
		t.Error("local.function_env: SERVO_DUE_SHARDS is not tostring(var.due_shards)")
	}
}

// fakeGcloud is a stand-in gcloud: it logs its arguments to calls; `beta
// services identity create` gives the answers of the file answers in turn
// ("ok", or a failure's message, \n for new lines; the last repeats);
// `auth print-access-token` succeeds when the file token exists; `auth
// list` prints the file account.
const fakeGcloud = `#!/usr/bin/env bash
dir=$(dirname "$0")
echo "$*" >> "$dir/calls"
case "$1 $2" in
"auth print-access-token")
  if [ -f "$dir/token" ]; then echo ya29.fake; exit 0; fi
  echo "ERROR: (gcloud.auth.print-access-token) You do not currently have an active account selected." >&2
  exit 1 ;;
"auth list")
  [ -f "$dir/account" ] && cat "$dir/account"
  exit 0 ;;
"beta services")
  n=$(grep -c '^beta services identity create' "$dir/calls")
  answer=$(sed -n "${n}p" "$dir/answers")
  [ -n "$answer" ] || answer=$(tail -n 1 "$dir/answers")
  if [ "$answer" = ok ]; then echo service-123@gcp-sa-pubsub.iam.gserviceaccount.com; exit 0; fi
  printf '%b\n' "$answer" >&2
  exit 1 ;;
esac
echo "fake gcloud: unexpected $*" >&2
exit 2
`

// TestServiceIdentityScriptAnswers: the service-agent script retries only
// what waiting may mend. A missing login and a missing permission stop it
// at once, naming the remedy.
func TestServiceIdentityScriptAnswers(t *testing.T) {
	script := filepath.Join(repoRoot(t), "terraform", "scripts", "service-identity.sh")
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash is needed to run the script Terraform runs:", err)
	}
	const create = "beta services identity create --service=pubsub.googleapis.com --project=my-proj --format=value(email)"
	notReady := `ERROR: (gcloud.beta.services.identity.create) PERMISSION_DENIED: Cloud Pub/Sub API has not been used in project 123456789012 before or it is disabled. Enable it by visiting https://console.developers.google.com/apis/api/pubsub.googleapis.com/overview?project=123456789012 then retry. If you enabled this API recently, wait a few minutes for the action to propagate to our systems and retry.\n- '@type': type.googleapis.com/google.rpc.ErrorInfo\n  reason: SERVICE_DISABLED`
	noLogin := `ERROR: (gcloud.beta.services.identity.create) You do not currently have an active account selected.\nPlease run:\n\n  $ gcloud auth login\n\nto obtain new credentials.`
	expired := `ERROR: (gcloud.beta.services.identity.create) There was a problem refreshing your current auth tokens: Reauthentication failed. cannot prompt during non-interactive execution.\nPlease run:\n\n  $ gcloud auth login`
	odd := `ERROR: (gcloud.beta.services.identity.create) something this script has never seen`
	denied := `ERROR: (gcloud.beta.services.identity.create) PERMISSION_DENIED: Permission denied to generate service identity for service [pubsub.googleapis.com]`
	quota := `ERROR: (gcloud.beta.services.identity.create) PERMISSION_DENIED: Caller does not have required permission to use project my-proj. Grant the caller the roles/serviceusage.serviceUsageConsumer role, or a custom role with the serviceusage.services.use permission`
	notLoggedIn := []string{"gcloud has no usable credentials", "not an agent that is not ready yet", "gcloud auth login", "gcloud auth application-default", "CLOUDSDK_AUTH_ACCESS_TOKEN", "build's service account", "create_service_identities = false"}
	permission := []string{"permission denied creating the pubsub.googleapis.com service agent of my-proj as alice@example.com", "roles/serviceusage.serviceUsageConsumer", "--member=user:alice@example.com", "serviceusage.services.use", "create_service_identities = false"}
	tests := []struct {
		name     string
		answers  []string
		token    bool
		wantOK   bool
		creates  int // identity create calls
		tokens   int // auth print-access-token calls
		stderr   []string
		noStderr string
	}{
		{"created at once", []string{"ok"}, true, true, 1, 0, nil, "not ready"},
		{"not ready once, then created", []string{notReady, "ok"}, true, true, 2, 0, []string{"not ready yet (try 1 of 4)", "SERVICE_DISABLED"}, "credentials"},
		{"an unknown answer, credentials: retried", []string{odd, "ok"}, true, true, 2, 1, []string{"not ready yet (try 1 of 4)"}, "credentials"},
		{"not ready for good", []string{notReady}, true, false, 4, 0, []string{"failed 4 times; the last answer:"}, "credentials"},
		{"not logged in", []string{noLogin}, false, false, 1, 0, notLoggedIn, "not ready yet (try"},
		{"login expired", []string{expired}, true, false, 1, 0, notLoggedIn, "not ready yet (try"},
		{"an unknown answer, no credentials", []string{odd}, false, false, 1, 1, append(notLoggedIn, "never seen"), "not ready yet (try"},
		{"permission denied", []string{denied}, true, false, 1, 0, append(permission, "Permission denied to generate"), "not ready yet (try"},
		{"quota project permission denied", []string{quota}, true, false, 1, 0, permission, "not ready yet (try"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{
				"gcloud":  fakeGcloud,
				"answers": strings.Join(tc.answers, "\n") + "\n",
				"account": "alice@example.com\n",
			}
			if tc.token {
				files["token"] = ""
			}
			for name, content := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			// A retry pauses 0 s here; a script that retried what it must
			// not shows in the calls, and a stuck one in the deadline.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bash, script, "pubsub.googleapis.com", "my-proj", "0")
			cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin", "SERVO_IDENTITY_ATTEMPTS=4", "SERVO_IDENTITY_PAUSE=0", "HOME=" + dir}
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if ctx.Err() != nil {
				t.Fatalf("the script ran for more than 30 s\nstderr: %s", stderr.String())
			}
			if (err == nil) != tc.wantOK {
				t.Fatalf("exit: %v, want ok=%v\nstdout: %s\nstderr: %s", err, tc.wantOK, stdout.String(), stderr.String())
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
				}
			}
			if tc.noStderr != "" && strings.Contains(stderr.String(), tc.noStderr) {
				t.Errorf("stderr says %q:\n%s", tc.noStderr, stderr.String())
			}
			b, err := os.ReadFile(filepath.Join(dir, "calls"))
			if err != nil {
				t.Fatal(err)
			}
			creates, tokens := 0, 0
			for _, c := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				switch {
				case c == create:
					creates++
				case c == "auth print-access-token":
					tokens++
				case strings.HasPrefix(c, "auth list"):
				default:
					t.Errorf("unexpected gcloud %s", c)
				}
			}
			if creates != tc.creates || tokens != tc.tokens {
				t.Errorf("gcloud calls: %d identity create, %d print-access-token; want %d and %d\n%s", creates, tokens, tc.creates, tc.tokens, b)
			}
			if tc.wantOK && !strings.Contains(stdout.String(), "service-123@gcp-sa-pubsub.iam.gserviceaccount.com") {
				t.Errorf("stdout %q does not name the agent", stdout.String())
			}
		})
	}
}
