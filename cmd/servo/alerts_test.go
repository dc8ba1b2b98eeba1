package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/events"
)

// scrape returns servo dev's /metrics.
func scrape(t *testing.T, base string) string {
	t.Helper()
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// sum adds the values of the series of a Prometheus metric whose labels
// match labels (a regexp); found is false when there is none.
func sum(text, name, labels string) (total float64, found bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{([^}]*)\} ([0-9.e+-]+)$`)
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		if ok, _ := regexp.MatchString(labels, m[1]); ok {
			v, _ := strconv.ParseFloat(m[2], 64)
			total, found = total+v, true
		}
	}
	return total, found
}

// The alert conditions of terraform/modules/alerts, evaluated on servo
// dev's /metrics (the same instruments, Prometheus-named).
const (
	passesType          = "prometheus.googleapis.com/servo.sweeper.passes/counter"
	passesProm          = "servo_sweeper_passes_total"
	deadLettersType     = "prometheus.googleapis.com/servo.dead_letters/counter"
	deadLettersProm     = "servo_dead_letters_total"
	publishFailuresType = "prometheus.googleapis.com/servo.events.publish_failures/counter"
	publishFailuresProm = "servo_events_publish_failures_total"
	outboxAgeType       = "prometheus.googleapis.com/servo.outbox.oldest_age/gauge"
	outboxAgeProm       = "servo_outbox_oldest_age_seconds"
	queuedAgeType       = "prometheus.googleapis.com/servo.queued.oldest_age/gauge"
	queuedAgeProm       = "servo_queued_oldest_age_seconds"
)

// readsGrouped fails the test unless terraform/modules/alerts reads each
// metric type of types, grouped by the label group (when not empty).
func readsGrouped(t *testing.T, group string, types ...string) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "terraform", "modules", "alerts", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range types {
		i := strings.Index(string(src), `\"`+typ+`\"`)
		if i < 0 {
			t.Fatalf("terraform/modules/alerts no longer reads %s: update this test with it", typ)
		}
		// The condition's aggregations follow its filter.
		cond, _, _ := strings.Cut(string(src[i:]), "documentation {")
		if group != "" && !strings.Contains(cond, `group_by_fields      = ["metric.label.\"`+group+`\""]`) {
			t.Fatalf("terraform/modules/alerts reads %s without grouping by %s: update this test", typ, group)
		}
	}
}

// silent is the "sweeper not running" policy: no pass series (the absent
// condition) or fewer than one pass added over the window (the threshold
// condition).
func silent(before, after string) bool {
	b, _ := sum(before, passesProm, "")
	a, found := sum(after, passesProm, "")
	return !found || a-b < 1
}

// TestAlertConditionsAgainstServoDev exercises each policy's condition once
// against servo dev: with the sweeper running, its pass series is in
// /metrics from the first pass (every duty too) and, with a task running,
// the silence condition does not hold; with `servo dev --no-sweeper` it
// holds; a dead letter (a DATA_QUALITY failure) makes the dead-letter
// condition hold for its reason, NON_RETRYABLE; and with the events topic
// gone and no sweeper (Pub/Sub down stops the sweeper too), the
// publish-failures condition holds from the API's and the callbacks'
// publishes while the outbox gauge, the sweeper's, says nothing.
func TestAlertConditionsAgainstServoDev(t *testing.T) {
	readsGrouped(t, "", passesType, outboxAgeType)
	readsGrouped(t, "servo.reason", deadLettersType)
	readsGrouped(t, "servo.cause", publishFailuresType)
	const window = 3 * time.Second

	t.Run("sweeper running", func(t *testing.T) {
		base := startServoDev(t, "--sweep-every", "200ms")
		deadline := time.Now().Add(time.Minute)
		var first string
		for {
			first = scrape(t, base)
			if _, ok := sum(first, passesProm, `servo_result="ok"`); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s in /metrics within a minute:\n%s", passesProm, first)
			}
			time.Sleep(200 * time.Millisecond)
		}
		for _, duty := range []string{"deadline", "cancel", "lease", "dispatch"} {
			if _, ok := sum(first, "servo_sweeper_due_total", `servo_duty="`+duty+`"`); !ok {
				t.Errorf("no servo_sweeper_due_total for duty %s after the first pass", duty)
			}
			if _, ok := sum(first, "servo_sweeper_max_lag_seconds", `servo_duty="`+duty+`"`); !ok {
				t.Errorf("no servo_sweeper_max_lag_seconds for duty %s after the first pass", duty)
			}
		}
		if v, ok := sum(first, "servo_sweeper_last_pass_time_seconds", ""); !ok || v < 1e9 {
			t.Errorf("servo_sweeper_last_pass_time_seconds %v (%v), want a Unix time", v, ok)
		}
		// Idle, the local sweeper rests (a pass every
		// devstack.RestFallback, under a minute, as production's
		// once-a-minute tick); with work it sweeps every --sweep-every.
		c, err := client.New(base)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Submit(context.Background(), []byte(`{"tenantId":"oncall","workspaceId":"ws","taskKey":"busy","worker":"example",
			"payload":{"partitions":4,"partitionMs":500},"heartbeatIntervalMs":200,"heartbeatTimeoutMs":2000}`)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(window)
		if silent(first, scrape(t, base)) {
			t.Errorf("the sweeper-silence condition holds while the sweeper has work")
		}
	})

	t.Run("--no-sweeper, a dead letter, the events topic gone", func(t *testing.T) {
		project := emulatortest.ProjectID(t)
		base := startServoDev(t, "--no-sweeper", "--project", project) // the last --project counts
		before := scrape(t, base)
		time.Sleep(window)
		after := scrape(t, base)
		if !silent(before, after) {
			t.Errorf("the sweeper-silence condition does not hold with --no-sweeper:\n%s", after)
		}
		dl0, _ := sum(after, deadLettersProm, "")
		c, err := client.New(base)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		sub, _, err := c.Submit(ctx, []byte(`{"tenantId":"oncall","workspaceId":"ws","taskKey":"poison","worker":"example","payload":{"invalid":true}}`))
		if err != nil {
			t.Fatal(err)
		}
		v, err := waitFinal(ctx, c, sub.TaskID, time.Minute)
		if err != nil || v.State != api.Failed {
			t.Fatalf("task %s: %s %s, %v; want FAILED", sub.TaskID, v.State, v.Reason, err)
		}
		dl1, found := sum(scrape(t, base), deadLettersProm, `servo_reason="NON_RETRYABLE",servo_worker="example"`)
		if !found || dl1-dl0 < 1 {
			t.Errorf("dead-letter condition: %s{servo_reason=\"NON_RETRYABLE\"} went %v → %v, want it to grow", deadLettersProm, dl0, dl1)
		}

		// Pub/Sub gone for the events, the sweeper not running.
		ps, err := pubsub.NewClient(ctx, project)
		if err != nil {
			t.Fatal(err)
		}
		defer ps.Close()
		if err := ps.TopicAdminClient.DeleteTopic(ctx, &pubsubpb.DeleteTopicRequest{Topic: "projects/" + project + "/topics/" + events.DefaultEventsTopic}); err != nil {
			t.Fatal(err)
		}
		failing := `servo_cause="NotFound",servo_op="publish"`
		pf0, _ := sum(scrape(t, base), publishFailuresProm, failing)
		sub, _, err = c.Submit(ctx, []byte(`{"tenantId":"oncall","workspaceId":"ws","taskKey":"topic-gone","worker":"example","payload":{"partitions":1,"partitionMs":10}}`))
		if err != nil {
			t.Fatal(err)
		}
		if v, err := waitFinal(ctx, c, sub.TaskID, time.Minute); err != nil || v.State != api.Succeeded {
			t.Fatalf("task %s: %s %s, %v; want SUCCEEDED", sub.TaskID, v.State, v.Reason, err)
		}
		var m string
		for end := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			m = scrape(t, base)
			// SUBMITTED, ENQUEUED, STARTED, SUCCEEDED: each not published.
			if pf, _ := sum(m, publishFailuresProm, failing); pf-pf0 >= 4 || time.Now().After(end) {
				break
			}
		}
		if pf, found := sum(m, publishFailuresProm, failing); !found || pf-pf0 < 4 {
			t.Errorf("publish-failures condition: %s{%s} went %v → %v, want 4 more (one per transition)", publishFailuresProm, failing, pf0, pf)
		}
		if age, _ := sum(m, outboxAgeProm, ""); age > 0 {
			t.Errorf("%s = %v without a sweeper: who records it?", outboxAgeProm, age)
		}
	})
}

// TestAlertConditionsOutboxAndLag exercises the remaining policies'
// conditions against servo dev. Outbox backlog: with the events topic
// gone, every transition stays in the outbox and
// servo_outbox_oldest_age_seconds grows pass after pass (the condition
// holds once it passes outbox_age_seconds). Sweeper lag: a task whose
// deadline falls between two passes is handled late, and the deadline
// duty's servo_sweeper_max_lag_seconds says by how much (the condition
// holds once it passes sweeper_lag_seconds): here a task whose worker never
// answers, waiting QUEUED until its deadline. Oldest queued task: another
// task of that worker (start timeouts of 2 s), without a deadline, waits
// QUEUED, its deliveries refused; the sweeper's delivery probes see it,
// and servo_queued_oldest_age_seconds{servo_worker="nobody"} grows (the
// condition holds, for that worker, once its max passes
// queued_age_seconds).
func TestAlertConditionsOutboxAndLag(t *testing.T) {
	readsGrouped(t, "", outboxAgeType, "prometheus.googleapis.com/servo.sweeper.max_lag/gauge")
	readsGrouped(t, "servo.worker", queuedAgeType)
	ctx := context.Background()
	project := emulatortest.ProjectID(t)
	// A worker nobody answers for: its task waits QUEUED until its deadline.
	// A start timeout of 2 s: the delivery probes come every few passes.
	base := startServoDev(t, "--sweep-every", "2s", "--start-timeout", "2s", "--project", project, // the last --project counts
		"--worker", "nobody=http://"+freeAddr(t))
	ps, err := pubsub.NewClient(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	topic := "projects/" + project + "/topics/" + events.DefaultEventsTopic
	if err := ps.TopicAdminClient.DeleteTopic(ctx, &pubsubpb.DeleteTopicRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(base)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second).UTC().Format(time.RFC3339Nano)
	if _, _, err := c.Submit(ctx, []byte(`{"tenantId":"oncall","workspaceId":"ws","taskKey":"late","worker":"nobody",
		"payload":{},"deadline":"`+deadline+`"}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Submit(ctx, []byte(`{"tenantId":"oncall","workspaceId":"ws","taskKey":"waits","worker":"nobody","payload":{}}`)); err != nil {
		t.Fatal(err)
	}
	const age, lag = outboxAgeProm, "servo_sweeper_max_lag_seconds"
	var ages, queued []float64
	var lagged float64
	// Scraped more often than the passes: the lag gauge is the last pass's.
	for end := time.Now().Add(time.Minute); time.Now().Before(end) && (len(ages) < 3 || lagged == 0 || len(queued) < 2); time.Sleep(200 * time.Millisecond) {
		m := scrape(t, base)
		if v, ok := sum(m, age, ""); ok && v > 0 && (len(ages) == 0 || v > ages[len(ages)-1]) {
			ages = append(ages, v)
		}
		if v, ok := sum(m, lag, `servo_duty="deadline"`); ok && v > lagged {
			lagged = v
		}
		if v, ok := sum(m, queuedAgeProm, `servo_worker="nobody"`); ok && v > 0 && (len(queued) == 0 || v > queued[len(queued)-1]) {
			queued = append(queued, v)
		}
	}
	if len(queued) < 2 {
		t.Errorf("oldest-queued condition: %s{servo_worker=\"nobody\"} did not grow over two delivery probes (%v)", queuedAgeProm, queued)
	}
	if len(ages) < 3 {
		t.Errorf("outbox condition: %s did not grow over three passes (%v)", age, ages)
	}
	if lagged <= 0 {
		t.Errorf("lag condition: %s{servo_duty=\"deadline\"} stayed 0 for a task handled between passes", lag)
	}
}

// waitFinal polls the task until it ends or limit passes (a test helper:
// servo doctor waits with waitCanary).
func waitFinal(ctx context.Context, c *client.Client, id string, limit time.Duration) (api.Task, error) {
	deadline := time.Now().Add(limit)
	for {
		v, _, err := c.Get(ctx, id)
		if err == nil && v.State.Terminal() {
			return v, nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return v, err
			}
			if v.State == api.Queued && v.Delivery != nil {
				return v, fmt.Errorf("still %s after %s: %s", v.State, limit, deliveryText(v.Delivery))
			}
			return v, fmt.Errorf("still %s after %s", v.State, limit)
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
