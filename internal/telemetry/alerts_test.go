package telemetry

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// emitted is one metric as Cloud Monitoring stores it when it arrives over
// OTLP through the Telemetry API (the Managed Service for Prometheus
// mapping: https://docs.cloud.google.com/stackdriver/docs/reference/telemetry/v1.metrics).
type emitted struct {
	name      string // the instrument's
	unit      string
	kind      string // counter, gauge or histogram: the type's suffix
	valueType string // DOUBLE or DISTRIBUTION
	// labels are the attribute keys of its points: its metric labels.
	labels map[string]bool
}

// MonitoringType is the metric type of e in Cloud Monitoring.
func (e emitted) monitoringType() string {
	return "prometheus.googleapis.com/" + e.name + "/" + e.kind
}

// emittedMetrics records one of everything the code records and collects
// it: the instruments as the exporters see them.
func emittedMetrics(t *testing.T) map[string]emitted {
	t.Helper()
	reader := metric.NewManualReader()
	mp := metric.NewMeterProvider(metric.WithReader(reader))
	install(noop.NewTracerProvider(), mp)
	t.Cleanup(func() { install(otel.GetTracerProvider(), otel.GetMeterProvider()) })
	ctx := context.Background()
	now := time.Now()
	RecordTransitions(ctx, []task.Transition{{From: api.Running, To: api.Failed, Worker: "w", Outcome: api.OutcomeZombie, NextAttempt: 2, DeadLetter: true}})
	started := now
	RecordStarted(ctx, task.Result{Attempt: &task.Attempt{CreatedAt: now.Add(-time.Second), StartedAt: &started},
		Transitions: []task.Transition{{From: api.Queued, To: api.Running}}})
	RecordCallback(ctx, "heartbeat", 200, "committed", time.Millisecond, 2)
	RecordSubmit(ctx, SubmitCreated, 1)
	RecordSweep(ctx, "lease", SweepApplied, &now, now)
	RecordPass(ctx, PassOK, now, []PassDuty{{Name: "lease", Due: 1, MaxLag: time.Second}})
	RecordOutbox(ctx, 1, time.Second)
	RecordQueued(ctx, map[string]time.Duration{"w": time.Minute})
	RecordPublishFailure(ctx, PublishAfterCommit, "NotFound", 1)
	RecordAPI(ctx, "GET", "/v1/health", 200, time.Millisecond)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]emitted{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			e := emitted{name: m.Name, unit: m.Unit, valueType: "DOUBLE", labels: map[string]bool{}}
			var sets []attribute.Set
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				e.kind = map[bool]string{true: "counter", false: "gauge"}[d.IsMonotonic]
				sets = attrSets(d.DataPoints)
			case metricdata.Sum[float64]:
				e.kind = map[bool]string{true: "counter", false: "gauge"}[d.IsMonotonic]
				sets = attrSets(d.DataPoints)
			case metricdata.Gauge[int64]:
				e.kind, sets = "gauge", attrSets(d.DataPoints)
			case metricdata.Gauge[float64]:
				e.kind, sets = "gauge", attrSets(d.DataPoints)
			case metricdata.Histogram[int64]:
				e.kind, e.valueType = "histogram", "DISTRIBUTION"
				sets = histogramAttrSets(d.DataPoints)
			case metricdata.Histogram[float64]:
				e.kind, e.valueType = "histogram", "DISTRIBUTION"
				sets = histogramAttrSets(d.DataPoints)
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
			for _, set := range sets {
				for _, kv := range set.ToSlice() {
					e.labels[string(kv.Key)] = true
				}
			}
			out[e.monitoringType()] = e
		}
	}
	return out
}

func attrSets[N int64 | float64](dps []metricdata.DataPoint[N]) []attribute.Set {
	var out []attribute.Set
	for _, dp := range dps {
		out = append(out, dp.Attributes)
	}
	return out
}

func histogramAttrSets[N int64 | float64](dps []metricdata.HistogramDataPoint[N]) []attribute.Set {
	var out []attribute.Set
	for _, dp := range dps {
		out = append(out, dp.Attributes)
	}
	return out
}

// aligners and reducers Cloud Monitoring accepts, by the kind of the
// series (https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.alertPolicies#Aligner):
// a counter (CUMULATIVE DOUBLE) is aligned by delta or rate, a gauge by
// min/max/mean, a distribution (CUMULATIVE DISTRIBUTION) by delta or a
// percentile; REDUCE_MAX/MIN need numbers.
var (
	alignersFor = map[string][]string{
		"counter":   {"ALIGN_DELTA", "ALIGN_RATE", "ALIGN_NEXT_OLDER"},
		"gauge":     {"ALIGN_MAX", "ALIGN_MIN", "ALIGN_MEAN", "ALIGN_NEXT_OLDER", "ALIGN_SUM", "ALIGN_COUNT"},
		"histogram": {"ALIGN_DELTA", "ALIGN_PERCENTILE_99", "ALIGN_PERCENTILE_95", "ALIGN_PERCENTILE_50", "ALIGN_PERCENTILE_05"},
	}
	reducersFor = map[string][]string{
		"DOUBLE":       {"REDUCE_SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_MEAN", "REDUCE_COUNT"},
		"DISTRIBUTION": {"REDUCE_SUM", "REDUCE_PERCENTILE_99", "REDUCE_PERCENTILE_95", "REDUCE_PERCENTILE_50", "REDUCE_COUNT"},
	}
	// builtIn are Google's own metric types the policies may read.
	builtIn = map[string]string{"run.googleapis.com/request_count": "cloud_run_revision"}
)

var (
	metricTypeRE   = regexp.MustCompile(`metric\.type\s*=\s*"([^"]+)"`)
	resourceTypeRE = regexp.MustCompile(`resource\.type\s*=\s*"([^"]+)"`)
	mqlMetricRE    = regexp.MustCompile(`\|\s*metric\s+'([^']+)'`)
	mqlFetchRE     = regexp.MustCompile(`fetch\s+([a-z_]+)`)
	// groupByRE is a group-by field on a metric label: the Telemetry API
	// keeps an attribute's key, dots included, as its label's
	// (metric.label."servo.worker").
	groupByRE = regexp.MustCompile(`^metric\.label\."([a-zA-Z_][a-zA-Z0-9_.]*)"$`)
)

// condition is one alert condition as terraform/ declares it.
type condition struct {
	where                    string
	filter, aligner, reducer string
	thresholdVar             string
	mql                      string
	absent                   bool
	groupBy                  []string
}

// TestAlertPoliciesMatchTheMetrics reads every alert condition in
// terraform/ (every .tf file) and checks it against what the code emits:
// each metric type exists with its kind, the resource type is the one
// the Telemetry API writes (prometheus_target), the aligner and reducer
// suit the kind and value type (no ALIGN_MAX on a distribution, no
// ALIGN_RATE on a gauge), and a threshold in seconds watches a metric in
// seconds, a threshold per minute a count. Nothing may still read the
// Cloud Monitoring exporter's workload.googleapis.com types.
func TestAlertPoliciesMatchTheMetrics(t *testing.T) {
	have := emittedMetrics(t)
	conds := readConditions(t, filepath.Join("..", "..", "terraform"))
	if len(conds) < 5 {
		t.Fatalf("found %d alert conditions in terraform/, want at least 5", len(conds))
	}
	for _, c := range conds {
		text := c.filter + c.mql
		if strings.Contains(text, "workload.googleapis.com/") {
			t.Errorf("%s: %q reads the deprecated exporter's workload.googleapis.com types", c.where, text)
		}
		if c.mql != "" {
			m, r := mqlMetricRE.FindStringSubmatch(c.mql), mqlFetchRE.FindStringSubmatch(c.mql)
			if m == nil || r == nil || builtIn[m[1]] != r[1] {
				t.Errorf("%s: MQL reads %v on %v, not one of Google's metrics the policies know (%v)", c.where, m, r, builtIn)
			}
			continue
		}
		mt, rt := metricTypeRE.FindStringSubmatch(c.filter), resourceTypeRE.FindStringSubmatch(c.filter)
		if mt == nil || rt == nil {
			t.Errorf("%s: filter %q names no metric.type and resource.type", c.where, c.filter)
			continue
		}
		e, ok := have[mt[1]]
		if !ok {
			if _, ok := builtIn[mt[1]]; !ok {
				t.Errorf("%s: metric type %s is not emitted (the code emits %v)", c.where, mt[1], keys(have))
			}
			continue
		}
		if rt[1] != "prometheus_target" {
			t.Errorf("%s: resource.type %q, but the Telemetry API writes %s on prometheus_target", c.where, rt[1], mt[1])
		}
		if !contains(alignersFor[e.kind], c.aligner) {
			t.Errorf("%s: aligner %q does not apply to %s (a %s, %s); use one of %v", c.where, c.aligner, mt[1], e.kind, e.valueType, alignersFor[e.kind])
		}
		if c.reducer != "" && !contains(reducersFor[e.valueType], c.reducer) {
			t.Errorf("%s: reducer %q does not apply to %s values; use one of %v", c.where, c.reducer, e.valueType, reducersFor[e.valueType])
		}
		for _, g := range c.groupBy {
			m := groupByRE.FindStringSubmatch(g)
			switch {
			case m == nil:
				t.Errorf("%s: group_by_fields %q is not metric.label.\"<attribute>\"", c.where, g)
			case !e.labels[m[1]]:
				t.Errorf("%s: groups by %q, but %s has no attribute %s (it has %v)", c.where, g, mt[1], m[1], e.labels)
			}
		}
		switch {
		case strings.HasSuffix(c.thresholdVar, "_seconds") && e.unit != "s":
			t.Errorf("%s: threshold %s is in seconds, %s is in %q", c.where, c.thresholdVar, mt[1], e.unit)
		case (strings.HasSuffix(c.thresholdVar, "_per_minute") || strings.HasSuffix(c.thresholdVar, "_passes")) &&
			(e.kind != "counter" || !strings.HasPrefix(e.unit, "{")):
			t.Errorf("%s: threshold %s counts, %s is a %s in %q", c.where, c.thresholdVar, mt[1], e.kind, e.unit)
		case !c.absent && c.thresholdVar == "":
			t.Errorf("%s: threshold is not a variable whose name gives its unit (…_seconds, …_per_minute, …_passes)", c.where)
		}
	}
}

// readConditions parses every .tf file under dir and returns the
// conditions of its google_monitoring_alert_policy resources.
func readConditions(t *testing.T, dir string) []condition {
	t.Helper()
	var out []condition
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".tf") || strings.Contains(path, ".terraform") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, diags := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
		if diags.HasErrors() {
			t.Fatalf("%s: %v", path, diags)
		}
		for _, b := range f.Body.(*hclsyntax.Body).Blocks {
			if b.Type != "resource" || len(b.Labels) != 2 || b.Labels[0] != "google_monitoring_alert_policy" {
				continue
			}
			for _, cb := range b.Body.Blocks {
				if cb.Type != "conditions" {
					continue
				}
				for _, kb := range cb.Body.Blocks {
					c := condition{where: path + ": " + b.Labels[1] + "/" + kb.Type, absent: kb.Type == "condition_absent"}
					c.filter = literal(t, c.where, kb.Body.Attributes["filter"])
					c.mql = template(kb.Body.Attributes["query"])
					if a := kb.Body.Attributes["threshold_value"]; a != nil {
						for _, v := range a.Expr.Variables() {
							if v.RootName() == "var" && len(v) > 1 {
								c.thresholdVar = v[1].(hcl.TraverseAttr).Name
							}
						}
					}
					for _, ab := range kb.Body.Blocks {
						if ab.Type == "aggregations" {
							c.aligner = literal(t, c.where, ab.Body.Attributes["per_series_aligner"])
							c.reducer = literal(t, c.where, ab.Body.Attributes["cross_series_reducer"])
							c.groupBy = literalList(t, c.where, ab.Body.Attributes["group_by_fields"])
						}
					}
					out = append(out, c)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// literal is a string attribute's value; it must not depend on variables.
func literal(t *testing.T, where string, a *hclsyntax.Attribute) string {
	t.Helper()
	if a == nil {
		return ""
	}
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() || v.Type() != cty.String {
		t.Errorf("%s: %s is not a literal string (the test must be able to read it): %v", where, a.Name, diags)
		return ""
	}
	return v.AsString()
}

// literalList is a list-of-strings attribute's value, which must not
// depend on variables.
func literalList(t *testing.T, where string, a *hclsyntax.Attribute) []string {
	t.Helper()
	if a == nil {
		return nil
	}
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() || !(v.Type().IsTupleType() || v.Type().IsListType()) {
		t.Errorf("%s: %s is not a literal list (the test must be able to read it): %v", where, a.Name, diags)
		return nil
	}
	var out []string
	for _, e := range v.AsValueSlice() {
		if e.Type() != cty.String {
			t.Errorf("%s: %s holds a %s, not a string", where, a.Name, e.Type().FriendlyName())
			continue
		}
		out = append(out, e.AsString())
	}
	return out
}

// template is an attribute's source text (an MQL heredoc with variables).
func template(a *hclsyntax.Attribute) string {
	if a == nil {
		return ""
	}
	var b strings.Builder
	if tpl, ok := a.Expr.(*hclsyntax.TemplateExpr); ok {
		for _, p := range tpl.Parts {
			if l, ok := p.(*hclsyntax.LiteralValueExpr); ok && l.Val.Type() == cty.String {
				b.WriteString(l.Val.AsString())
			} else {
				b.WriteString("?")
			}
		}
	}
	return b.String()
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func keys(m map[string]emitted) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestAlertRunbookAnchors: every runbook link in an alert policy's
// documentation names a section (or anchor) of docs/operations.md.
func TestAlertRunbookAnchors(t *testing.T) {
	tf, err := os.ReadFile(filepath.Join("..", "..", "terraform", "modules", "alerts", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(doc), -1) {
		a := strings.ToLower(m[1])
		a = regexp.MustCompile(`[^a-z0-9 -]`).ReplaceAllString(a, "")
		anchors[strings.ReplaceAll(a, " ", "-")] = true
	}
	for _, m := range regexp.MustCompile(`<a id="([^"]+)"`).FindAllStringSubmatch(string(doc), -1) {
		anchors[m[1]] = true
	}
	links := regexp.MustCompile(`\$\{local\.runbook\}#([a-z0-9-]+)`).FindAllStringSubmatch(string(tf), -1)
	if len(links) == 0 {
		t.Fatal("no runbook links in terraform/modules/alerts/main.tf")
	}
	for _, l := range links {
		if !anchors[l[1]] {
			t.Errorf("runbook link #%s: no such section in docs/operations.md", l[1])
		}
	}
}

// TestNoDeprecatedGoogleExporters: Google's Cloud Monitoring and Cloud
// Trace exporters for Go, deprecated and archived after 2027-01-01, are
// not in go.mod: metrics and spans go over OTLP.
func TestNoDeprecatedGoogleExporters(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"opentelemetry-operations-go/exporter/metric", "opentelemetry-operations-go/exporter/trace"} {
		if strings.Contains(string(mod), m) {
			t.Errorf("go.mod requires %s, deprecated: export over OTLP to the Telemetry API", m)
		}
	}
}
