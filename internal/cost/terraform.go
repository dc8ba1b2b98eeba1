package cost

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Function is one function's sizing.
type Function struct {
	Memory       string  // e.g. "512Mi"
	CPU          float64 // vCPUs
	MinInstances int
	// Concurrency is the most requests an instance serves at once.
	Concurrency int
	// Billing is how Cloud Run bills the function: Request (the
	// default, "") or Instance (Defaults.At resolves functions_billing).
	Billing string
}

// The billing settings of a function (functions_billing; Auto picks the
// cheaper at the declared rate).
const (
	Request  = "request"
	Instance = "instance"
	Auto     = "auto"
)

// BilledFunctions are the functions functions_billing applies to.
var BilledFunctions = []string{"api", "callbacks"}

// MemoryGiB is the function's memory in GiB.
func (f Function) MemoryGiB() (float64, error) {
	m := regexp.MustCompile(`^([0-9]+)(Mi|Gi|M|G)$`).FindStringSubmatch(f.Memory)
	if m == nil {
		return 0, fmt.Errorf("cost: memory %q", f.Memory)
	}
	n, _ := strconv.ParseFloat(m[1], 64)
	switch m[2] {
	case "Mi":
		return n / 1024, nil
	case "Gi":
		return n, nil
	case "M":
		return n * 1e6 / (1 << 30), nil
	default:
		return n * 1e9 / (1 << 30), nil
	}
}

// Defaults are the Terraform defaults the bill depends on.
type Defaults struct {
	Functions map[string]Function // api, callbacks, sweeper, jobs
	// SweepTicksPerHour is the Cloud Scheduler cadence (sweep_schedule).
	SweepTicksPerHour float64
	// TraceSampling is the default trace sampling ratio (1 when Terraform
	// declares none).
	TraceSampling float64
	// TopicRetentionDays is topic_message_retention.
	TopicRetentionDays float64
	// RetentionDays is how long terminal tasks are kept (0: forever). The
	// bill prices what the recorded documents' TTL fields say; this is
	// shown beside it.
	RetentionDays float64
	// SchedulerJobs counts google_cloud_scheduler_job resources.
	SchedulerJobs int
	// SigningKeyVersions counts the signing-key secret's active versions.
	SigningKeyVersions int
	// NoOKRequestLogs are the functions whose successful requests' Cloud
	// Run request logs a logging exclusion drops by default (main.tf,
	// exclude_ok_request_logs): they are not ingested, not billed.
	NoOKRequestLogs map[string]bool
	// NoOKSubmitRequestLogs are the functions whose successful submits'
	// request logs (POST /v1/tasks, /v1/tasks:batch) an exclusion drops by
	// default, their other requests' kept: Traffic.SubmitRequests of their
	// invocations are not billed a request log.
	NoOKSubmitRequestLogs map[string]bool
	// FirestoreLocation is firestore_location (no default: "" unless a
	// var file sets it), FirestoreDatabase firestore_database.
	FirestoreLocation, FirestoreDatabase string
	// AlertsEnabled is alerts_enabled; AlertConditions counts the
	// conditions of modules/alerts' alert policies (each for_each
	// instance's), priced when AlertsEnabled (and for the target with
	// them on).
	AlertsEnabled   bool
	AlertConditions int
	// DeclaredRate is expected_lifecycles_per_second, the steady rate the
	// deployment declares (0: not declared); Billing is functions_billing
	// (Auto, Request or Instance; Auto when not declared).
	DeclaredRate float64
	Billing      string
	// BreakEven is Terraform's local.billing_break_even, by function: the
	// declared rate from which Auto picks instance-based billing (kept
	// equal to the program's BreakEven by TestTerraformBreakEven).
	// NeededPerRate is local.instances_per_lifecycle_rate: the instances a
	// function needs per lifecycle a second, from which max_instances is
	// sized (kept equal to NeededPerLifecycleRate).
	BreakEven, NeededPerRate map[string]float64
	// VarFiles are the var files read over the root module's defaults.
	VarFiles []string
}

// At is d with the functions' billing resolved for a deployment that
// declares rate lifecycles a second: functions_billing's setting, or
// under Auto instance-based billing for a function whose break-even
// (BreakEven) the rate reaches, request-based otherwise (and when no
// break-even is known).
func (d Defaults) At(rate float64) Defaults {
	fs := make(map[string]Function, len(d.Functions))
	for name, f := range d.Functions {
		fs[name] = f
	}
	for _, name := range BilledFunctions {
		f, ok := fs[name]
		if !ok {
			continue
		}
		switch be, known := d.BreakEven[name]; {
		case d.Billing == Instance || d.Billing == Request:
			f.Billing = d.Billing
		case known && rate >= be:
			f.Billing = Instance
		default:
			f.Billing = Request
		}
		fs[name] = f
	}
	d.Functions = fs
	return d
}

// Billings says how d bills each of BilledFunctions: "api request,
// callbacks instance".
func (d Defaults) Billings() string {
	var parts []string
	for _, name := range BilledFunctions {
		b := d.Functions[name].Billing
		if b == "" {
			b = Request
		}
		parts = append(parts, name+" "+b)
	}
	return strings.Join(parts, ", ")
}

// DefaultDatabase is the Firestore database the free quota applies to.
const DefaultDatabase = "(default)"

var (
	funcBlock   = regexp.MustCompile(`(?s)\n\s*(\w+)\s*=\s*optional\(object\(\{(.*?)\}\),\s*\{\}\)`)
	optionalArg = regexp.MustCompile(`(\w+)\s*=\s*optional\(\w+,\s*"?([^")]*)"?\)`)
)

// ReadDefaults reads the defaults from the Terraform root module in dir,
// then the var files (as terraform -var-file, the last one winning): of
// the variables the bill depends on, a var file's top-level scalar
// assignment replaces the default (the functions' sizing is read from
// the defaults only).
func ReadDefaults(dir string, varFiles ...string) (Defaults, error) {
	d := Defaults{Functions: map[string]Function{}, TraceSampling: 1, SigningKeyVersions: 1, VarFiles: varFiles}
	vars, err := os.ReadFile(filepath.Join(dir, "variables.tf"))
	if err != nil {
		return d, fmt.Errorf("cost: %w", err)
	}
	src := string(vars)
	tfs, _ := filepath.Glob(filepath.Join(dir, "*.tf"))
	var srcs []string // every .tf file's text, for variables declared outside variables.tf
	for _, p := range tfs {
		b, err := os.ReadFile(p)
		if err != nil {
			return d, fmt.Errorf("cost: %w", err)
		}
		srcs = append(srcs, string(b))
	}
	set := map[string]string{}
	for _, f := range varFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return d, fmt.Errorf("cost: %w", err)
		}
		for _, m := range tfvarsScalar.FindAllStringSubmatch(string(b), -1) {
			set[m[1]] = strings.Trim(m[2], `"`)
		}
	}
	// value is variable name's value: a var file's, or its default.
	value := func(name string) (string, bool) {
		if v, ok := set[name]; ok {
			return v, v != "null"
		}
		for _, s := range srcs {
			if v, ok := variableDefault(s, name); ok {
				return v, true
			}
		}
		return "", false
	}
	fn, ok := variableBody(src, "functions")
	if !ok {
		return d, fmt.Errorf("cost: variables.tf declares no functions variable")
	}
	for _, m := range funcBlock.FindAllStringSubmatch(fn, -1) {
		f := Function{}
		for _, a := range optionalArg.FindAllStringSubmatch(m[2], -1) {
			switch a[1] {
			case "memory":
				f.Memory = a[2]
			case "cpu":
				if f.CPU, err = parseCPU(a[2]); err != nil {
					return d, err
				}
			case "min_instances":
				f.MinInstances, _ = strconv.Atoi(a[2])
			case "concurrency":
				f.Concurrency, _ = strconv.Atoi(a[2])
			}
		}
		d.Functions[m[1]] = f
	}
	for _, name := range []string{"api", "callbacks", "sweeper"} {
		if _, ok := d.Functions[name]; !ok {
			return d, fmt.Errorf("cost: variables.tf: no default sizing for function %s", name)
		}
	}
	sched, ok := value("sweep_schedule")
	if !ok {
		return d, fmt.Errorf("cost: variables.tf: no sweep_schedule default")
	}
	if d.SweepTicksPerHour, err = ticksPerHour(sched); err != nil {
		return d, err
	}
	ret, ok := value("topic_message_retention")
	if !ok {
		return d, fmt.Errorf("cost: variables.tf: no topic_message_retention default")
	}
	secs, err := strconv.ParseFloat(strings.TrimSuffix(ret, "s"), 64)
	if err != nil {
		return d, fmt.Errorf("cost: topic_message_retention %q: %w", ret, err)
	}
	d.TopicRetentionDays = secs / 86400
	// Optional: declared once the cuts land.
	for _, name := range []string{"trace_sampling_ratio", "trace_sampling", "trace_sample_ratio"} {
		if v, ok := value(name); ok {
			if d.TraceSampling, err = strconv.ParseFloat(v, 64); err != nil {
				return d, fmt.Errorf("cost: %s %q: %w", name, v, err)
			}
		}
	}
	for _, name := range []string{"retention_days", "task_retention", "retention"} {
		if v, ok := value(name); ok {
			if d.RetentionDays, err = parseDays(v); err != nil {
				return d, err
			}
		}
	}
	d.FirestoreLocation, _ = value("firestore_location")
	if d.FirestoreDatabase, ok = value("firestore_database"); !ok {
		d.FirestoreDatabase = DefaultDatabase
	}
	d.AlertsEnabled = func() bool { v, ok := value("alerts_enabled"); return ok && v == "true" }()
	if d.AlertConditions, err = alertConditions(filepath.Join(dir, "modules", "alerts")); err != nil && d.AlertsEnabled {
		return d, err
	}
	d.Billing = Auto
	if v, ok := value("functions_billing"); ok {
		if v != Auto && v != Request && v != Instance {
			return d, fmt.Errorf("cost: functions_billing %q: want auto, request or instance", v)
		}
		d.Billing = v
	}
	if v, ok := value("expected_lifecycles_per_second"); ok {
		if d.DeclaredRate, err = strconv.ParseFloat(v, 64); err != nil || d.DeclaredRate <= 0 {
			return d, fmt.Errorf("cost: expected_lifecycles_per_second %q: want a rate above 0", v)
		}
	}
	for _, s := range srcs {
		for local, into := range map[string]*map[string]float64{"billing_break_even": &d.BreakEven, "instances_per_lifecycle_rate": &d.NeededPerRate} {
			m := regexp.MustCompile(`(?s)\n\s*` + local + `\s*=\s*\{(.*?)\}`).FindStringSubmatch(s)
			if m == nil {
				continue
			}
			*into = map[string]float64{}
			for _, kv := range regexp.MustCompile(`(\w+)\s*=\s*([0-9.eE+-]+)`).FindAllStringSubmatch(m[1], -1) {
				n, err := strconv.ParseFloat(kv[2], 64)
				if err != nil {
					return d, fmt.Errorf("cost: local.%s.%s %q: %w", local, kv[1], kv[2], err)
				}
				(*into)[kv[1]] = n
			}
		}
	}
	for _, b := range srcs {
		d.SchedulerJobs += strings.Count(b, `resource "google_cloud_scheduler_job"`)
		for _, m := range exclusionBlock.FindAllStringSubmatch(b, -1) {
			body := m[1]
			gate := countGate.FindStringSubmatch(body)
			if gate != nil {
				if v, ok := value(gate[1]); !ok || v != "true" {
					continue // off by default
				}
			}
			if !strings.Contains(body, "httpRequest.status<400") || !strings.Contains(body, "run.googleapis.com%2Frequests") {
				continue
			}
			excluded := &d.NoOKRequestLogs
			if narrower.MatchString(body) {
				if !excludesSubmits(body) {
					continue // some successful requests, not the submits: all priced
				}
				excluded = &d.NoOKSubmitRequestLogs
			}
			for _, f := range excludedFunction.FindAllStringSubmatch(body, -1) {
				if *excluded == nil {
					*excluded = map[string]bool{}
				}
				(*excluded)[f[1]] = true
			}
		}
	}
	if d.SchedulerJobs == 0 {
		return d, fmt.Errorf("cost: %s declares no Cloud Scheduler job", dir)
	}
	return d, nil
}

// tfvarsScalar is a var file's top-level assignment of a string, number
// or bool (an object or a list is not read).
var tfvarsScalar = regexp.MustCompile(`(?m)^(\w+)\s*=\s*("[^"\n]*"|[0-9.]+|true|false|null)\s*(?:#.*)?$`)

var (
	alertPolicy = regexp.MustCompile(`resource "google_monitoring_alert_policy" "\w+" \{`)
	forEachList = regexp.MustCompile(`for_each\s*=\s*toset\(local\.(\w+)\)`)
	conditions  = regexp.MustCompile(`(?m)^\s*conditions \{`)
)

// alertConditions counts the conditions of the alert policies in the
// module in dir: each policy's conditions blocks, times its for_each
// instances (a toset of a local list).
func alertConditions(dir string) (int, error) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.tf"))
	var src string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, fmt.Errorf("cost: %w", err)
		}
		src += string(b) + "\n"
	}
	idx := alertPolicy.FindAllStringIndex(src, -1)
	if len(idx) == 0 {
		return 0, fmt.Errorf("cost: alerts_enabled, but %s declares no google_monitoring_alert_policy", dir)
	}
	n := 0
	for i, at := range idx {
		end := len(src)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		body := src[at[0]:end]
		each := 1
		if m := forEachList.FindStringSubmatch(body); m != nil {
			l := regexp.MustCompile(`(?s)\b` + m[1] + `\s*=\s*\[(.*?)\]`).FindStringSubmatch(src)
			if l == nil {
				return 0, fmt.Errorf("cost: %s: local.%s is not a list", dir, m[1])
			}
			each = strings.Count(l[1], `"`) / 2
		}
		n += each * len(conditions.FindAllStringIndex(body, -1))
	}
	return n, nil
}

// excludesSubmits reports whether an exclusion's filter, narrowed by
// method or URL, keeps the submits in: POST (or any method), and a URL
// pattern (a regular expression, as Cloud Logging's are RE2) that matches
// both submit URLs.
func excludesSubmits(body string) bool {
	if m := filterMethod.FindStringSubmatch(body); m != nil && !strings.EqualFold(m[1], "POST") {
		return false
	}
	m := filterURL.FindStringSubmatch(body)
	if m == nil {
		return false // narrowed some other way: not modelled
	}
	re, err := regexp.Compile(m[1])
	if err != nil {
		return false
	}
	for _, u := range []string{"https://servo-api-abc-ew.a.run.app/v1/tasks", "https://servo-api-abc-ew.a.run.app/v1/tasks:batch"} {
		if !re.MatchString(u) {
			return false
		}
	}
	return true
}

// variableBody is the text of variable name's block.
func variableBody(src, name string) (string, bool) {
	i := strings.Index(src, `variable "`+name+`" {`)
	if i < 0 {
		return "", false
	}
	rest := src[i:]
	if j := strings.Index(rest[1:], "\nvariable \""); j >= 0 {
		rest = rest[:j+1]
	}
	return rest, true
}

var (
	// exclusionBlock is a google_logging_project_exclusion's body (up to
	// the first line that closes a top-level block).
	exclusionBlock   = regexp.MustCompile(`(?s)resource "google_logging_project_exclusion" "\w+" \{(.*?)\n\}`)
	countGate        = regexp.MustCompile(`count\s*=\s*var\.(\w+)\s*\?\s*1\s*:\s*0`)
	excludedFunction = regexp.MustCompile(`module\.function\["(\w+)"\]\.service_name`)
	// narrower is a filter term on the request's method or URL; filterMethod
	// and filterURL read them (the HCL string escapes the quotes).
	narrower     = regexp.MustCompile(`httpRequest\.(requestMethod|requestUrl)`)
	filterMethod = regexp.MustCompile(`httpRequest\.requestMethod\s*=\s*\\"(\w+)\\"`)
	filterURL    = regexp.MustCompile(`httpRequest\.requestUrl\s*=~\s*\\"([^"\\]*)\\"`)
)

var defaultLine = regexp.MustCompile(`(?m)^  default\s*=\s*"?([^"\n]*)"?\s*$`)

// variableDefault is variable name's scalar default.
func variableDefault(src, name string) (string, bool) {
	body, ok := variableBody(src, name)
	if !ok {
		return "", false
	}
	m := defaultLine.FindStringSubmatch(body)
	if m == nil || m[1] == "null" {
		return "", false
	}
	return m[1], true
}

func parseCPU(s string) (float64, error) {
	if m, ok := strings.CutSuffix(s, "m"); ok {
		n, err := strconv.ParseFloat(m, 64)
		return n / 1000, err
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("cost: cpu %q: %w", s, err)
	}
	return n, nil
}

// parseDays reads days "30" or "30d", hours "720h" or seconds "2592000s".
func parseDays(s string) (float64, error) {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return n, nil
	}
	for suffix, per := range map[string]float64{"d": 1, "h": 1.0 / 24, "s": 1.0 / 86400} {
		if v, ok := strings.CutSuffix(s, suffix); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("cost: retention %q: %w", s, err)
			}
			return n * per, nil
		}
	}
	return 0, fmt.Errorf("cost: retention %q: want a number with d, h or s", s)
}

// ticksPerHour reads a cron schedule of the forms "* * * * *" and
// "*/N * * * *".
func ticksPerHour(cron string) (float64, error) {
	f := strings.Fields(cron)
	if len(f) != 5 || f[1] != "*" {
		return 0, fmt.Errorf("cost: sweep_schedule %q: only minute schedules are modelled", cron)
	}
	if f[0] == "*" {
		return 60, nil
	}
	if n, ok := strings.CutPrefix(f[0], "*/"); ok {
		if k, err := strconv.Atoi(n); err == nil && k > 0 {
			return 60 / float64(k), nil
		}
	}
	return 0, fmt.Errorf("cost: sweep_schedule %q: only minute schedules are modelled", cron)
}
