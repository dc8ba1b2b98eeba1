package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"golang.org/x/mod/modfile"

	"github.com/servo-dev/servo/internal/store"
)

// The Terraform module is checked by reading it, not by running Terraform:
// CI has no provider registry. Each test names what it protects.

// TestTerraformVersions: the Terraform and provider constraints Servo is
// validated against, and no other provider.
func TestTerraformVersions(t *testing.T) {
	mods := loadTerraform(t)
	wantProviders := map[string][2]string{ // name => source, version
		"google":  {"hashicorp/google", ">= 7.0, < 8.0"},
		"archive": {"hashicorp/archive", ">= 2.5, < 3.0"},
		"random":  {"hashicorp/random", ">= 3.6, < 4.0"},
	}
	for _, dir := range mods.dirs() {
		t.Run(dir, func(t *testing.T) {
			var tfs []tfBlock
			for _, b := range mods.blocks(dir, "terraform") {
				if b.file.rel == "terraform/backend.tf" {
					continue // a deployment's own backend, git-ignored (README.md)
				}
				for _, inner := range b.block.Body.Blocks {
					if inner.Type == "backend" || inner.Type == "cloud" {
						t.Errorf("%s: no backend in the module: it must plan offline after init -backend=false", b.where())
					}
				}
				tfs = append(tfs, b)
			}
			if len(tfs) != 1 {
				t.Fatalf("want one terraform block, found %d", len(tfs))
			}
			tf := tfs[0]
			rv, hasRV, err := attrLiteral(tf.block, "required_version")
			if dir == "terraform" {
				if !hasRV || err != nil || rv.AsString() != ">= 1.5.7" {
					t.Errorf("%s: required_version must be \">= 1.5.7\"", tf.where())
				}
			} else if hasRV {
				t.Errorf("%s: a submodule must not constrain the Terraform version (the root does)", tf.where())
			}
			var rp *hclsyntax.Block
			for _, b := range tf.block.Body.Blocks {
				if b.Type == "required_providers" {
					rp = b
				}
			}
			if rp == nil {
				t.Fatalf("%s: no required_providers", tf.where())
			}
			for name, attr := range rp.Body.Attributes {
				want, known := wantProviders[name]
				if !known {
					t.Errorf("%s: provider %q is not allowed (only google, archive, random)", tf.where(), name)
					continue
				}
				v, err := literal(attr.Expr)
				if err != nil || !v.Type().IsObjectType() {
					t.Errorf("%s: provider %s: want {source, version} literal", tf.where(), name)
					continue
				}
				if !v.Type().HasAttribute("source") || v.GetAttr("source").AsString() != want[0] {
					t.Errorf("%s: provider %s: source must be %q", tf.where(), name, want[0])
				}
				hasVersion := v.Type().HasAttribute("version")
				switch {
				case dir == "terraform" && (!hasVersion || v.GetAttr("version").AsString() != want[1]):
					t.Errorf("%s: provider %s: version must be %q", tf.where(), name, want[1])
				case dir != "terraform" && hasVersion:
					t.Errorf("%s: provider %s: a submodule must not constrain versions (the root does)", tf.where(), name)
				}
			}
			if dir == "terraform" && len(rp.Body.Attributes) != len(wantProviders) {
				t.Errorf("%s: want exactly providers %v", tf.where(), keysOf(wantProviders))
			}
		})
	}
	for _, p := range mods.blocks("", "provider") {
		if p.file.rel != "terraform/providers.tf" {
			t.Errorf("%s: provider blocks belong in terraform/providers.tf only", p.where())
		}
	}
}

// TestTerraformVariables: every variable of every module has a type and a
// description; in the root module every variable that is not a bool is
// validated.
func TestTerraformVariables(t *testing.T) {
	mods := loadTerraform(t)
	vars := mods.blocks("", "variable")
	if len(vars) == 0 {
		t.Fatal("no variables found")
	}
	for _, v := range vars {
		t.Run(v.file.rel+"/"+v.addr(), func(t *testing.T) {
			typ, ok := v.block.Body.Attributes["type"]
			if !ok {
				t.Errorf("%s: no type", v.where())
			}
			desc, err := attrString(v.block, "description")
			if err != nil || strings.TrimSpace(desc) == "" {
				t.Errorf("%s: needs a non-empty literal description", v.where())
			}
			if filepath.Dir(v.file.rel) != "terraform" || !ok {
				return
			}
			validated := false
			for _, b := range v.block.Body.Blocks {
				validated = validated || b.Type == "validation"
			}
			if v.text(typ.Expr) != "bool" && !validated {
				t.Errorf("%s: root variables other than bools need a validation block", v.where())
			}
		})
	}
}

// TestTerraformVariableDefaults: the defaults the Go side relies on.
func TestTerraformVariableDefaults(t *testing.T) {
	mods := loadTerraform(t)
	defaults := map[string]cty.Value{}
	for _, v := range mods.blocks("terraform", "variable") {
		if d, ok, err := attrLiteral(v.block, "default"); ok && err == nil {
			defaults[v.addr()] = d
		}
	}
	// The topics default to "<name_prefix>-…", the names of earlier
	// versions with the default prefix "servo".
	if d := defaults["name_prefix"]; d.IsNull() || d.AsString() != "servo" {
		t.Errorf(`variable name_prefix: want literal default "servo"`)
	}
	b, topics := mods.local(t, "terraform", "topics")
	for _, want := range []string{
		`events = coalesce(var.events_topic, "${var.name_prefix}-task-events")`,
		`dead_letter = coalesce(var.dead_letter_topic, "${var.name_prefix}-dead-letter")`,
		`sweep = coalesce(var.sweep_topic, "${var.name_prefix}-sweep")`,
	} {
		if got := strings.Join(strings.Fields(b.text(topics)), " "); !strings.Contains(got, want) {
			t.Errorf("local.topics: want %s, got %s", want, got)
		}
	}
	for _, tc := range []struct{ variable, want string }{
		{"firestore_database", "(default)"},
		{"sweep_every", "15s"},
		{"start_timeout", "10m"},
	} {
		t.Run(tc.variable, func(t *testing.T) {
			d, ok := defaults[tc.variable]
			if !ok || d.IsNull() || !d.Type().Equals(cty.String) || d.AsString() != tc.want {
				t.Errorf("variable %s: want literal default %q", tc.variable, tc.want)
			}
		})
	}
}

// TestTerraformExampleTfvars: the example sets only variables that exist and
// every variable that has no default.
func TestTerraformExampleTfvars(t *testing.T) {
	mods := loadTerraform(t)
	root := repoRoot(t)
	declared, required := map[string]bool{}, map[string]bool{}
	for _, v := range mods.blocks("terraform", "variable") {
		declared[v.addr()] = true
		if _, ok := v.block.Body.Attributes["default"]; !ok {
			required[v.addr()] = true
		}
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
			for name, a := range attrs {
				if !declared[name] {
					t.Errorf("%s:%d: %s is not a variable of terraform/", path, a.SrcRange.Start.Line, name)
				}
				if _, err := literal(a.Expr); err != nil {
					t.Errorf("%s:%d: %s: %v", path, a.SrcRange.Start.Line, name, err)
				}
			}
			for name := range required {
				if _, ok := attrs[name]; !ok {
					t.Errorf("%s does not set the required variable %s", path, name)
				}
			}
		})
	}
}

// indexKey renders a composite index for comparison.
func indexKey(collection string, fields []store.IndexField) string {
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = f.Path + " " + f.Order
	}
	return collection + ": " + strings.Join(parts, ", ")
}

// TestTerraformFirestoreIndexes: Terraform declares exactly store.Indexes:
// same collections, same fields in the same order, same directions.
func TestTerraformFirestoreIndexes(t *testing.T) {
	mods := loadTerraform(t)
	var want, got []string
	for _, ix := range store.Indexes {
		want = append(want, indexKey(ix.Collection, ix.Fields))
	}
	for _, r := range mods.resources("google_firestore_index") {
		if _, ok := r.block.Body.Attributes["for_each"]; ok {
			t.Errorf("%s: spell indexes out, without for_each, so that this test reads what is deployed", r.where())
		}
		if _, ok := r.block.Body.Attributes["count"]; ok {
			t.Errorf("%s: spell indexes out, without count", r.where())
		}
		collection, err := attrString(r.block, "collection")
		if err != nil {
			t.Errorf("%s: %v", r.where(), err)
			continue
		}
		if scope, ok, _ := attrLiteral(r.block, "query_scope"); ok && scope.AsString() != "COLLECTION" {
			t.Errorf("%s: query_scope must be COLLECTION (store.Index is collection-scoped)", r.where())
		}
		var fields []store.IndexField
		for _, b := range r.block.Body.Blocks {
			switch b.Type {
			case "dynamic":
				t.Errorf("%s: dynamic blocks are not allowed in indexes", r.where())
			case "fields":
				path, err1 := attrString(b, "field_path")
				order, err2 := attrString(b, "order")
				if err1 != nil || err2 != nil {
					t.Errorf("%s: every fields block needs literal field_path and order", r.where())
					continue
				}
				fields = append(fields, store.IndexField{Path: path, Order: order})
			}
		}
		got = append(got, indexKey(collection, fields))
	}
	missing, extra := diffSets(want, got)
	for _, m := range missing {
		t.Errorf("index in store.Indexes but not in Terraform: %s", m)
	}
	for _, e := range extra {
		t.Errorf("index in Terraform but not in store.Indexes: %s", e)
	}
}

// TestTerraformFirestoreFields: a TTL policy on exactly the fields of
// store.TTLFields, a single-field index exemption on exactly those of
// store.FieldExemptions, and every configured field exempted from
// single-field indexing (an empty index_config).
func TestTerraformFirestoreFields(t *testing.T) {
	mods := loadTerraform(t)
	var wantTTL, gotTTL, wantExempt, gotExempt []string
	for _, f := range store.TTLFields {
		wantTTL = append(wantTTL, f.Collection+"."+f.Path)
	}
	for _, f := range store.FieldExemptions {
		wantExempt = append(wantExempt, f.Collection+"."+f.Path)
	}
	for _, r := range mods.resources("google_firestore_field") {
		collection, err1 := attrString(r.block, "collection")
		field, err2 := attrString(r.block, "field")
		if err1 != nil || err2 != nil {
			t.Errorf("%s: collection and field must be literals", r.where())
			continue
		}
		ttl, exempt := false, false
		for _, b := range r.block.Body.Blocks {
			ttl = ttl || b.Type == "ttl_config"
			exempt = exempt || (b.Type == "index_config" && len(b.Body.Attributes) == 0 && len(b.Body.Blocks) == 0)
		}
		if !exempt {
			t.Errorf("%s: a google_firestore_field must exempt its field from single-field indexing (index_config {})", r.where())
		}
		if ttl {
			gotTTL = append(gotTTL, collection+"."+field)
		} else {
			gotExempt = append(gotExempt, collection+"."+field)
		}
	}
	for _, c := range []struct {
		what, list string
		want, got  []string
	}{
		{"TTL policy", "store.TTLFields", wantTTL, gotTTL},
		{"single-field index exemption", "store.FieldExemptions", wantExempt, gotExempt},
	} {
		missing, extra := diffSets(c.want, c.got)
		for _, m := range missing {
			t.Errorf("%s in %s but not in Terraform: %s", c.what, c.list, m)
		}
		for _, e := range extra {
			t.Errorf("%s in Terraform but not in %s: %s", c.what, c.list, e)
		}
	}
}

// wantRoles is each component's least privilege: the roles its code uses,
// as "role on target" (targets as in terraform/iam.tf). It is written from
// the components' needs, not from the Terraform:
//   - api: Firestore (tasks), the signing keys, enqueue and cancel (delete)
//     Cloud Tasks tasks with the invoker's OIDC identity (actAs), publish
//     events and dead letters, and stream events to people through a
//     temporary subscription per stream (custom role on the project,
//     subscriber on the events topic);
//   - callbacks and sweeper: the same without deleting tasks; all three
//     publish attempts to the pull pools' topics;
//   - claim: Firestore, the signing keys, receive and acknowledge the
//     pools' messages, publish events and dead letters;
//   - api, callbacks, sweeper and claim: export spans to Cloud Trace and
//     metrics to Cloud Monitoring (package telemetry);
//   - scheduler: publish ticks; tasks-invoker: call the workers;
//   - sweep-trigger: push ticks to the sweeper; fn-build: build the source;
//   - jobs (the jobs dispatch): Firestore, the signing keys (verifies the
//     envelope's token), run the job worker's Cloud Run Job with overrides,
//     list and cancel its executions (custom role, on the jobs only); the
//     sweeper and the callbacks cancel the executions of attempts a timer
//     ended; tasks-invoker calls the jobs dispatch.
var wantRoles = map[string][]string{
	"api": {
		"roles/datastore.user on database",
		"roles/secretmanager.secretAccessor on secret",
		"roles/cloudtasks.enqueuer on queues",
		"roles/cloudtasks.taskDeleter on queues",
		"roles/iam.serviceAccountUser on sa:tasks-invoker",
		"roles/pubsub.publisher on topic:events",
		"roles/pubsub.publisher on topic:dead_letter",
		"roles/telemetry.tracesWriter on project",
		"roles/telemetry.metricsWriter on project",
		"roles/pubsub.publisher on pool-topics",
		"roles/pubsub.subscriber on topic:events",
		"custom:servoEventStreamer on project",
	},
	"callbacks": {
		"roles/datastore.user on database",
		"roles/secretmanager.secretAccessor on secret",
		"roles/cloudtasks.enqueuer on queues",
		"roles/iam.serviceAccountUser on sa:tasks-invoker",
		"roles/pubsub.publisher on topic:events",
		"roles/pubsub.publisher on topic:dead_letter",
		"roles/telemetry.tracesWriter on project",
		"roles/telemetry.metricsWriter on project",
		"roles/pubsub.publisher on pool-topics",
		"custom:servoJobCanceller on jobs",
	},
	"sweeper": {
		"roles/datastore.user on database",
		"roles/secretmanager.secretAccessor on secret",
		"roles/cloudtasks.enqueuer on queues",
		"roles/iam.serviceAccountUser on sa:tasks-invoker",
		"roles/pubsub.publisher on topic:events",
		"roles/pubsub.publisher on topic:dead_letter",
		"roles/telemetry.tracesWriter on project",
		"roles/telemetry.metricsWriter on project",
		"roles/pubsub.publisher on pool-topics",
		"custom:servoJobCanceller on jobs",
		"roles/pubsub.viewer on topic:events",
		"custom:servoStreamCleaner on project",
	},
	"claim": {
		"roles/datastore.user on database",
		"roles/secretmanager.secretAccessor on secret",
		"roles/pubsub.subscriber on pool-subscriptions",
		"roles/pubsub.publisher on topic:events",
		"roles/pubsub.publisher on topic:dead_letter",
		"roles/telemetry.tracesWriter on project",
		"roles/telemetry.metricsWriter on project",
	},
	"scheduler":     {"roles/pubsub.publisher on topic:sweep"},
	"tasks-invoker": {"roles/run.invoker on worker-services", "roles/run.invoker on function:jobs"},
	"sweep-trigger": {"roles/run.invoker on function:sweeper"},
	"fn-build": {
		"roles/logging.logWriter on project",
		"roles/storage.objectViewer on bucket",
		"roles/artifactregistry.writer on repo",
	},
	"jobs": {
		"roles/datastore.user on database",
		"roles/secretmanager.secretAccessor on secret",
		"custom:servoJobDispatcher on jobs",
		"roles/telemetry.tracesWriter on project",
		"roles/telemetry.metricsWriter on project",
	},
}

// grant is one row of local.grants.
type grant struct{ sa, role, on string }

func loadGrants(t *testing.T, mods tfModules) []grant {
	t.Helper()
	_, expr := mods.local(t, "terraform", "grants")
	v, err := literal(expr)
	if err != nil || !(v.Type().IsTupleType() || v.Type().IsListType()) {
		t.Fatalf("local.grants must be a literal list of {sa, role, on}: %v", err)
	}
	var out []grant
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if !e.Type().IsObjectType() || len(e.Type().AttributeTypes()) != 3 ||
			!e.Type().HasAttribute("sa") || !e.Type().HasAttribute("role") || !e.Type().HasAttribute("on") {
			t.Fatalf("local.grants: every row must be exactly {sa, role, on}")
		}
		out = append(out, grant{e.GetAttr("sa").AsString(), e.GetAttr("role").AsString(), e.GetAttr("on").AsString()})
	}
	return out
}

// TestTerraformServiceAccountRoles: each service account holds exactly the
// roles of wantRoles, on the targets listed there.
func TestTerraformServiceAccountRoles(t *testing.T) {
	mods := loadTerraform(t)
	_, saExpr := mods.local(t, "terraform", "service_accounts")
	accounts, err := objectItems(saExpr)
	if err != nil {
		t.Fatalf("local.service_accounts: %v", err)
	}
	if missing, extra := diffSets(keysOf(wantRoles), keysOf(accounts)); len(missing)+len(extra) > 0 {
		t.Errorf("service accounts: missing %v, not in this test's table %v (add the new component's roles to wantRoles)", missing, extra)
	}
	got := map[string][]string{}
	for _, g := range loadGrants(t, mods) {
		if _, ok := accounts[g.sa]; !ok {
			t.Errorf("grant %s %s on %s: no such service account", g.sa, g.role, g.on)
		}
		got[g.sa] = append(got[g.sa], g.role+" on "+g.on)
	}
	for _, sa := range keysOf(wantRoles) {
		t.Run(sa, func(t *testing.T) {
			missing, extra := diffSets(wantRoles[sa], got[sa])
			for _, m := range missing {
				t.Errorf("%s lacks %s", sa, m)
			}
			for _, e := range extra {
				t.Errorf("%s holds %s, which its component does not use (or it is granted twice)", sa, e)
			}
		})
	}
}

var primitiveRole = regexp.MustCompile(`roles/(owner|editor|viewer)\b`)

// TestTerraformNoPrimitiveRoles: owner, editor and viewer appear nowhere.
func TestTerraformNoPrimitiveRoles(t *testing.T) {
	mods := loadTerraform(t)
	for _, dir := range mods.dirs() {
		for _, f := range mods[dir] {
			for i, line := range strings.Split(string(f.src), "\n") {
				if primitiveRole.MatchString(line) {
					t.Errorf("%s:%d: primitive role: %s", f.rel, i+1, strings.TrimSpace(line))
				}
			}
		}
	}
	custom := jobCustomRoles(t, mods)
	for _, g := range loadGrants(t, mods) {
		if id, ok := strings.CutPrefix(g.role, "custom:"); ok {
			if _, declared := custom[id]; !declared {
				t.Errorf("grant %s %s: no such custom role in terraform/jobs.tf", g.sa, g.role)
			}
			continue
		}
		if primitiveRole.MatchString(g.role) || !strings.HasPrefix(g.role, "roles/") {
			t.Errorf("grant %s %s: want a predefined, non-primitive role", g.sa, g.role)
		}
	}
}

// jobCustomRoles reads the custom roles of terraform/jobs.tf
// (google_project_iam_custom_role.job): id → permissions.
func jobCustomRoles(t *testing.T, mods tfModules) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range mods.blocks("terraform", "resource") {
		if r.addr() != "google_project_iam_custom_role.job" {
			continue
		}
		roles, err := objectItems(r.block.Body.Attributes["for_each"].Expr)
		if err != nil {
			t.Fatalf("%s: for_each must be a literal object: %v", r.where(), err)
		}
		for id, expr := range roles {
			items, err := objectItems(expr)
			if err != nil {
				t.Fatalf("%s: %s: %v", r.where(), id, err)
			}
			v, err := literal(items["permissions"])
			if err != nil {
				t.Fatalf("%s: %s.permissions: %v", r.where(), id, err)
			}
			for it := v.ElementIterator(); it.Next(); {
				_, p := it.Element()
				out[id] = append(out[id], p.AsString())
			}
		}
	}
	return out
}

// TestTerraformJobRoles: the jobs dispatch may run the job with overrides,
// find and cancel its executions, and nothing else (not update or delete
// the job, as roles/run.developer could); the sweeper and the callbacks
// may only cancel executions.
func TestTerraformJobRoles(t *testing.T) {
	want := map[string][]string{
		"servoJobDispatcher": {"run.jobs.run", "run.jobs.runWithOverrides", "run.executions.get", "run.executions.list", "run.executions.cancel"},
		"servoJobCanceller":  {"run.executions.cancel"},
		"servoEventStreamer": {"pubsub.subscriptions.create", "pubsub.subscriptions.get", "pubsub.subscriptions.consume", "pubsub.subscriptions.delete"},
		"servoStreamCleaner": {"pubsub.subscriptions.delete"},
	}
	got := jobCustomRoles(t, loadTerraform(t))
	if len(got) != len(want) {
		t.Fatalf("custom roles %v, want %v", keysOf(got), keysOf(want))
	}
	for id, perms := range want {
		missing, extra := diffSets(perms, got[id])
		if len(missing)+len(extra) > 0 {
			t.Errorf("%s: missing %v, extra %v", id, missing, extra)
		}
	}
}

var iamResource = regexp.MustCompile(`^google_.*_iam_(member|binding|policy|audit_config)$`)

// TestTerraformIAMResources: the only IAM resources are the expansions of
// local.grants (one per target kind) and the two invoker bindings of the
// functions, all in terraform/iam.tf, all additive (_iam_member).
func TestTerraformIAMResources(t *testing.T) {
	mods := loadTerraform(t)
	grantResources := map[string]string{ // address => target kind it expands
		"google_project_iam_member.grant":                       "project",
		"google_project_iam_member.grant_database":              "database",
		"google_secret_manager_secret_iam_member.grant":         "secret",
		"google_pubsub_topic_iam_member.grant":                  "topic",
		"google_service_account_iam_member.grant":               "sa",
		"google_cloud_tasks_queue_iam_member.grant":             "queues",
		"google_cloud_run_v2_service_iam_member.grant_worker":   "worker-services",
		"google_cloud_run_v2_service_iam_member.grant_function": "function",
		"google_artifact_registry_repository_iam_member.grant":  "repo",
		"google_storage_bucket_iam_member.grant":                "bucket",
		"google_pubsub_topic_iam_member.grant_pool":             "pool-topics",
		"google_pubsub_subscription_iam_member.grant_pool":      "pool-subscriptions",
		"google_cloud_run_v2_job_iam_member.grant":              "jobs",
	}
	invokers := map[string]struct{ function, member string }{
		"google_cloud_run_v2_service_iam_member.api_invoker":      {`module.function["api"]`, "each.value"},
		"google_cloud_run_v2_service_iam_member.callbacks_public": {`module.function["callbacks"]`, `"allUsers"`},
		"google_cloud_run_v2_service_iam_member.claim_invoker":    {`module.function["claim"]`, `"serviceAccount:${each.value}"`},
	}
	// The Pub/Sub service agent's grants for dead-lettering, per pool.
	deadLetterAgent := map[string]string{
		"google_pubsub_topic_iam_member.pool_dead_letter_agent":        `"roles/pubsub.publisher"`,
		"google_pubsub_subscription_iam_member.pool_dead_letter_agent": `"roles/pubsub.subscriber"`,
	}
	seen := map[string]bool{}
	for _, r := range mods.blocks("", "resource") {
		if !iamResource.MatchString(r.block.Labels[0]) {
			continue
		}
		addr := r.addr()
		seen[addr] = true
		if r.file.rel != "terraform/iam.tf" {
			t.Errorf("%s: IAM grants belong in terraform/iam.tf", r.where())
		}
		if !strings.HasSuffix(r.block.Labels[0], "_iam_member") {
			t.Errorf("%s: use additive _iam_member resources; bindings and policies overwrite grants made elsewhere", r.where())
		}
		attrs := r.block.Body.Attributes
		text := func(name string) string {
			if a, ok := attrs[name]; ok {
				return r.text(a.Expr)
			}
			return ""
		}
		if kind, ok := grantResources[addr]; ok {
			if !strings.Contains(text("for_each"), `local.grants_by_kind["`+kind+`"]`) {
				t.Errorf("%s: for_each must expand local.grants_by_kind[%q]", r.where(), kind)
			}
			// Project grants may name jobs.tf's custom roles ("custom:<id>").
			customRole := `startswith(each.value.role, "custom:") ? google_project_iam_custom_role.job[trimprefix(each.value.role, "custom:")].name : each.value.role`
			if role := text("role"); role != "each.value.role" && (kind != "project" || role != customRole) {
				t.Errorf("%s: role must be each.value.role", r.where())
			}
			if text("member") != "google_service_account.component[each.value.sa].member" {
				t.Errorf("%s: member must be google_service_account.component[each.value.sa].member", r.where())
			}
			continue
		}
		if role, ok := deadLetterAgent[addr]; ok {
			if text("role") != role || !strings.Contains(text("member"), "@gcp-sa-pubsub.iam.gserviceaccount.com") || text("for_each") != "var.pull_pools" {
				t.Errorf("%s: want %s for the Pub/Sub service agent, per pull pool", r.where(), role)
			}
			continue
		}
		inv, ok := invokers[addr]
		if !ok {
			t.Errorf("%s: unexpected IAM resource: grants to Servo's accounts go in local.grants", r.where())
			continue
		}
		if text("role") != `"roles/run.invoker"` || text("member") != inv.member || !strings.HasPrefix(text("name"), inv.function+".") {
			t.Errorf("%s: want roles/run.invoker for %s on %s", r.where(), inv.member, inv.function)
		}
	}
	for addr := range grantResources {
		if !seen[addr] {
			t.Errorf("missing IAM resource %s", addr)
		}
	}
	for addr := range invokers {
		if !seen[addr] {
			t.Errorf("missing IAM resource %s", addr)
		}
	}
	// Every kind of target used in local.grants is expanded by a resource.
	kinds := map[string]bool{}
	for _, k := range grantResources {
		kinds[k] = true
	}
	for _, g := range loadGrants(t, mods) {
		if kind, _, _ := strings.Cut(g.on, ":"); !kinds[kind] {
			t.Errorf("grant %s %s on %s: no resource expands target kind %q", g.sa, g.role, g.on, kind)
		}
	}
	// allUsers and allAuthenticatedUsers: only the callbacks, on purpose.
	public := regexp.MustCompile(`"(allUsers|allAuthenticatedUsers)"`)
	for _, dir := range mods.dirs() {
		for _, f := range mods[dir] {
			if n := len(public.FindAll(f.src, -1)); n > 0 && !(f.rel == "terraform/iam.tf" && n == 1) {
				t.Errorf("%s: allUsers/allAuthenticatedUsers may appear once, for the callbacks function", f.rel)
			}
		}
	}
}

// TestTerraformFunctions: the four entry points of package functions, the
// sweeper's Pub/Sub trigger, and the environment the functions read.
func TestTerraformFunctions(t *testing.T) {
	mods := loadTerraform(t)
	_, fnExpr := mods.local(t, "terraform", "functions")
	fns, err := objectItems(fnExpr)
	if err != nil {
		t.Fatalf("local.functions: %v", err)
	}
	for _, tc := range []struct {
		key, entryPoint string
		pubsub          bool
	}{
		{"api", "ServoAPI", false},
		{"callbacks", "ServoCallbacks", false},
		{"sweeper", "ServoSweeper", true},
		{"claim", "ServoClaim", false},
		{"jobs", "ServoJobs", false},
	} {
		t.Run(tc.key, func(t *testing.T) {
			expr, ok := fns[tc.key]
			if !ok {
				t.Fatalf("local.functions has no %q", tc.key)
			}
			items, err := objectItems(expr)
			if err != nil {
				t.Fatalf("local.functions.%s: %v", tc.key, err)
			}
			if ep, err := literal(items["entry_point"]); err != nil || ep.AsString() != tc.entryPoint {
				t.Errorf("local.functions.%s.entry_point must be %q", tc.key, tc.entryPoint)
			}
			p, ok := items["pubsub"]
			if !ok {
				t.Fatalf("local.functions.%s has no pubsub", tc.key)
			}
			v, err := literal(p)
			isNull := err == nil && v.IsNull()
			if tc.pubsub == isNull {
				t.Errorf("local.functions.%s.pubsub: want a Pub/Sub trigger: %v", tc.key, tc.pubsub)
			}
		})
	}
	if len(fns) != 5 {
		t.Errorf("local.functions: want exactly api, callbacks, sweeper, claim, jobs; have %v", keysOf(fns))
	}

	// The environment of package functions (docs/configuration.md); the key ring
	// comes from Secret Manager.
	wantEnv := []string{
		"SERVO_PROJECT", "SERVO_FIRESTORE_DATABASE", "SERVO_NAME_PREFIX", "SERVO_CALLBACK_BASE_URL", "SERVO_WORKERS",
		"SERVO_EVENTS_TOPIC", "SERVO_DEAD_LETTER_TOPIC", "SERVO_SWEEP_EVERY", "SERVO_START_TIMEOUT",
		"SERVO_DUE_SHARDS", "SERVO_RETENTION_DAYS", "SERVO_RUN_DOCUMENT_EVERY", "SERVO_CLAIM_AUDIENCE", "SERVO_TOKEN_KEYS_SECRET", "SERVO_JOBS_DISPATCH_URL", "SERVO_JOBS_CONTAINER", "SERVO_ACCESS", "SERVO_QUOTAS",
		"SERVO_IAP_AUDIENCE", "SERVO_API_AUDIENCE", "SERVO_SWEEP_EARLY_END", "SERVO_TRACE_SAMPLE_RATIO", "SERVO_TRACE_SLOW", "SERVO_LOG_HEARTBEATS", "SERVO_LOG_STARTED",
	}
	_, envExpr := mods.local(t, "terraform", "function_env")
	env, err := objectItems(envExpr)
	if err != nil {
		t.Fatalf("local.function_env: %v", err)
	}
	if missing, extra := diffSets(wantEnv, keysOf(env)); len(missing)+len(extra) > 0 {
		t.Errorf("local.function_env: missing %v, unexpected %v", missing, extra)
	}
	var call *tfBlock
	for _, m := range mods.blocks("terraform", "module") {
		if m.addr() == "function" {
			call = &m
		}
	}
	if call == nil {
		t.Fatal(`no module "function"`)
	}
	secretEnv, ok := call.block.Body.Attributes["secret_environment"]
	if !ok {
		t.Fatal(`module "function": no secret_environment`)
	}
	secrets, err := objectItems(secretEnv.Expr)
	if err != nil || len(secrets) != 1 || secrets["SERVO_TOKEN_KEYS"] == nil {
		t.Fatalf(`module "function": secret_environment must mount exactly SERVO_TOKEN_KEYS`)
	}
	// Not pinned: a rotation reaches the functions without a redeploy, and
	// running instances re-read the secret SERVO_TOKEN_KEYS_SECRET names.
	mount, err := objectItems(secrets["SERVO_TOKEN_KEYS"])
	if v, lerr := literal(mount["version"]); err != nil || lerr != nil || v.Type() != cty.String || v.AsString() != "latest" {
		t.Errorf(`module "function": SERVO_TOKEN_KEYS must mount version "latest"`)
	}
	// The API checks its callers' ID tokens against its own URLs: without
	// them it accepts no Google ID token (issue 48).
	if got := call.text(env["SERVO_API_AUDIENCE"]); got != `join(",", local.api_audiences)` {
		t.Errorf("local.function_env: SERVO_API_AUDIENCE must be the API's audiences, got %s", got)
	}
	if got := call.text(env["SERVO_TOKEN_KEYS_SECRET"]); got != `"projects/${var.project_id}/secrets/${module.signing_keys.secret_id}"` {
		t.Errorf("local.function_env: SERVO_TOKEN_KEYS_SECRET must name the ring's secret as projects/P/secrets/S, got %s", got)
	}
}

// TestTerraformFunctionRuntime: the default Go runtime is at least the Go
// version go.mod declares; otherwise the buildpack's toolchain would be
// older than the module needs.
func TestTerraformFunctionRuntime(t *testing.T) {
	mods := loadTerraform(t)
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mf, err := modfile.ParseLax("go.mod", data, nil)
	if err != nil || mf.Go == nil {
		t.Fatalf("go.mod: no go directive (%v)", err)
	}
	parts := strings.Split(mf.Go.Version, ".")
	if len(parts) < 2 || parts[0] != "1" {
		t.Fatalf("go.mod: unexpected go version %q", mf.Go.Version)
	}
	modMinor, _ := strconv.Atoi(parts[1])
	for _, v := range mods.blocks("terraform", "variable") {
		if v.addr() != "functions_runtime" {
			continue
		}
		d, err := attrString(v.block, "default")
		if err != nil {
			t.Fatalf("functions_runtime: %v", err)
		}
		minor, err := strconv.Atoi(strings.TrimPrefix(d, "go1"))
		if !strings.HasPrefix(d, "go1") || err != nil {
			t.Fatalf("functions_runtime default %q is not a Go runtime ID", d)
		}
		if minor < modMinor {
			t.Errorf("functions_runtime default %s is older than go.mod's go %s", d, mf.Go.Version)
		}
		return
	}
	t.Fatal("no variable functions_runtime")
}

// A data source that reads from Google fails a plan without network access
// (CI's offline plan) and a first plan into a project whose APIs are not
// enabled yet: there is none.
func TestTerraformNoGoogleDataSources(t *testing.T) {
	for _, b := range loadTerraform(t).blocks("", "data") {
		if strings.HasPrefix(b.block.Labels[0], "google_") {
			t.Errorf("%s reads from Google at plan time: derive the value from a managed resource or a variable", b.where())
		}
	}
}
