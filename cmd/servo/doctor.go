package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/googleapis/gax-go/v2"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// doctorHealthTimeout is how long servo doctor waits for GET /v1/health:
// longer than the API's own bound on its Firestore read (5 s), so that a
// Firestore outage is named by the API's 503, and short enough to leave
// the canary its time.
const doctorHealthTimeout = 15 * time.Second

// doctorPubSubTimeout bounds the subscription doctor creates on the events
// topic, its first Pub/Sub call: a Pub/Sub that does not answer within it
// is reported as unreachable (the client's own bound is 60 s).
const doctorPubSubTimeout = 10 * time.Second

// doctorReserve is the part of --timeout (at most a tenth of it) kept
// after the canary's and the topic's waits for what follows them: the
// canary's cancel, its events, its cleanup and the deliveries row, so that
// the whole run ends within --timeout.
const doctorReserve = 10 * time.Second

// doctorCancelTimeout bounds the cancel of a canary that did not succeed.
const doctorCancelTimeout = 10 * time.Second

// doctorCancelReason is the reason doctor gives when it cancels a canary
// that did not succeed.
const doctorCancelReason = "servo_doctor_canary_failed"

// doctorCheck is one row of servo doctor's table.
type doctorCheck struct {
	Name   string `json:"check"`
	Result string `json:"result"` // pass, FAIL or skip
	Detail string `json:"detail"`
}

// Results of a check.
const (
	checkPass = "pass"
	checkFail = "FAIL"
	checkSkip = "skip"
)

type doctorOptions struct {
	worker, payload, tenant string
	project, topic          string
	timeout, sweeperMaxAge  time.Duration
	noPubSub                bool
	keepCanary              bool
	database                string
}

func newDoctorCmd() *cobra.Command {
	var cf clientFlags
	o := doctorOptions{}
	cmd := &cobra.Command{
		Use:   "doctor [--api URL] [--worker NAME] [--timeout D]",
		Short: "Check a deployment or the local stack from the outside",
		Long: `Check a Servo deployment (or servo dev) from the outside, the way a user
sees it, and print a pass/fail table:

  api        GET /v1/health answers 200 within 15s (reachable, this caller
             authorised, Firestore answering: the API bounds its read to 5s
             and a 503 is reported as "Firestore unavailable")
  sweeper    the last sweeper pass (GET /v1/health) is at most --sweeper-max-age old
  identity   the API verifies its callers' identities as configured (GET
             /v1/health names no identity problem, such as an unset
             SERVO_API_AUDIENCE, which leaves it accepting no Google ID token)
  canary     a task submitted to --worker reaches SUCCEEDED within --timeout.
             It fails as soon as it is QUEUED with failing deliveries
             (Cloud Tasks could not deliver it; the sweeper first asks a
             quarter of the start timeout, at most 30s, after the enqueue):
             worker "W" unreachable: STATUS: ERROR (N tries)
  events     the API records the canary's transitions (/v1/tasks/{id}/events),
             ending in the canary's state
  topic      the canary's last event (SUCCEEDED; CANCELLED for a canary
             doctor cancelled) arrives on the events topic (with
             PUBSUB_EMULATOR_HOST or Google credentials and --project;
             skipped otherwise, or with --no-pubsub). A Pub/Sub that does
             not answer within 10s is reported as "Pub/Sub unreachable"
  cleanup    a canary that passed is deleted from Firestore (its task and
             attempt documents; with FIRESTORE_EMULATOR_HOST or Google
             credentials with roles/datastore.user and --project; skipped
             otherwise, or with --keep-canary). A canary that failed is
             first cancelled when it has not ended, so that nothing of it
             is left to fail later as a dead letter (under an access policy
             cancelling needs the operator role on --tenant; without it the
             row names the command); one whose worker is unreachable is
             then deleted, any other kept for inspection.
  deliveries none of the oldest 500 QUEUED tasks shows failing deliveries

The canary is a task of tenant --tenant in a workspace of its own
(doctor-<random>), with --payload for the worker. Under an access policy
the caller needs the submitter role on --tenant. The run ends within
--timeout (at least the api check's 15s when the API does not answer).
Exit 0 when every check passes or is skipped, 1 when any fails (cleanup
is never a failure).`,
		Example: `  servo doctor --api http://127.0.0.1:8080
  servo doctor --api https://servo-api-xyz.a.run.app --project my-project --worker example`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(cmd.Context())
			if err != nil {
				return err
			}
			checks := runDoctor(cmd.Context(), c, o)
			out := cmd.OutOrStdout()
			if cf.json {
				b, _ := json.MarshalIndent(checks, "", "  ")
				fmt.Fprintf(out, "%s\n", b)
			} else {
				printChecks(out, checks)
			}
			var failed []string
			for _, ch := range checks {
				if ch.Result == checkFail {
					failed = append(failed, ch.Name)
				}
			}
			if len(failed) > 0 {
				return &exitError{exitFailure, fmt.Errorf("doctor: failed: %s", strings.Join(failed, ", "))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	cf.register(f)
	f.StringVar(&o.worker, "worker", devstack.ExampleWorker, "worker the canary task is submitted to")
	f.StringVar(&o.payload, "payload", `{"partitions":1,"partitionMs":10}`, "the canary's payload (JSON)")
	f.StringVar(&o.tenant, "tenant", "servo-doctor", "the canary's tenant")
	f.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long the whole run may take (the canary's wait and the topic's end within it)")
	f.DurationVar(&o.sweeperMaxAge, "sweeper-max-age", 3*time.Minute, "the oldest acceptable last sweeper pass")
	f.StringVar(&o.project, "project", "", "project of the events topic (default $SERVO_PROJECT, $GOOGLE_CLOUD_PROJECT, or "+devstack.DefaultProject+" with PUBSUB_EMULATOR_HOST)")
	f.StringVar(&o.topic, "topic", events.DefaultEventsTopic, "events topic")
	f.BoolVar(&o.noPubSub, "no-pubsub", false, "skip the events topic check")
	f.BoolVar(&o.keepCanary, "keep-canary", false, "keep the canary task (by default one that passed, or whose worker is unreachable, is deleted)")
	f.StringVar(&o.database, "database", "(default)", "Firestore database of the deployment, for the canary's cleanup")
	return cmd
}

func printChecks(w io.Writer, checks []doctorCheck) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
	for _, ch := range checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", ch.Name, ch.Result, ch.Detail)
	}
	tw.Flush()
}

// runDoctor runs every check; a check whose prerequisite failed is a FAIL
// saying so.
func runDoctor(ctx context.Context, c *client.Client, o doctorOptions) (checks []doctorCheck) {
	add := func(name, result, format string, args ...any) {
		checks = append(checks, doctorCheck{name, result, fmt.Sprintf(format, args...)})
	}
	// The canary's and the topic's waits end doctorReserve (at most a
	// tenth of --timeout) before the run's end.
	reserve := min(o.timeout/10, doctorReserve)
	waitEnd := time.Now().Add(o.timeout - reserve)

	// 1. API and 2. sweeper: GET /v1/health, whose Firestore read the API
	// bounds to 5 s: a 503 within doctorHealthTimeout names Firestore.
	// 7. Deliveries, the last row whatever returns first.
	apiUp, why := false, "the API did not answer"
	defer func() {
		if !apiUp {
			add("deliveries", checkFail, "unknown: %s", why)
			return
		}
		result, detail := deliveriesCheck(ctx, c)
		add("deliveries", result, "%s", detail)
	}()
	var health api.HealthResponse
	hctx, cancel := context.WithTimeout(ctx, doctorHealthTimeout)
	_, status, err := c.Do(hctx, http.MethodGet, "/v1/health", nil, &health)
	timedOut := hctx.Err() != nil && ctx.Err() == nil
	cancel()
	apiUp = err == nil && status == http.StatusOK
	var apiErr *api.Error
	storeDown := status == http.StatusServiceUnavailable && errors.As(err, &apiErr) && apiErr.Code == api.CodeUnavailable
	switch {
	case apiUp:
		add("api", checkPass, "GET /v1/health 200, server time %s", health.ServerTime.Format(time.RFC3339))
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		add("api", checkFail, "GET /v1/health %d: this caller is not authorised (roles/run.invoker, var.api_invokers; "+
			"under an access policy also a role in it: docs/operations.md, \"Smoke test\")", status)
	case status == http.StatusServiceUnavailable && errors.As(err, &apiErr) && (apiErr.Code == api.CodeMisconfigured || apiErr.Code == api.CodeSecretUnavailable):
		why = "the API cannot start (" + apiErr.Code + ")"
		add("api", checkFail, "the API cannot start: GET /v1/health 503 %s: %s (runbook: A configuration or secret error)", apiErr.Code, apiErr.Message)
	case storeDown:
		why = "Firestore is unavailable"
		add("api", checkFail, "Firestore unavailable: GET /v1/health 503 %s (runbook: Firestore unavailable)", apiErr.Message)
	case timedOut:
		why = "the API did not answer in time"
		add("api", checkFail, "GET /v1/health: no answer within %s (the API, its cold start or its network path is stuck; a Firestore outage answers 503 sooner)", doctorHealthTimeout)
	default:
		add("api", checkFail, "GET /v1/health: %s", describeErr(status, err))
	}
	switch {
	case !apiUp:
		add("sweeper", checkFail, "unknown: %s", why)
	case health.Sweeper == nil:
		add("sweeper", checkFail, "no sweeper pass was ever recorded (is the scheduler job or the sweeper function running?)")
	case time.Duration(health.Sweeper.AgeMs)*time.Millisecond > o.sweeperMaxAge:
		add("sweeper", checkFail, "last pass %s ago (at %s), more than %s", time.Duration(health.Sweeper.AgeMs)*time.Millisecond,
			health.Sweeper.LastPassAt.Format(time.RFC3339), o.sweeperMaxAge)
	default:
		add("sweeper", checkPass, "last pass %s ago", (time.Duration(health.Sweeper.AgeMs) * time.Millisecond).Round(time.Millisecond))
	}
	switch {
	case !apiUp:
		add("identity", checkFail, "unknown: %s", why)
	case len(health.Identity.Problems) > 0:
		add("identity", checkFail, "%s", strings.Join(health.Identity.Problems, "; "))
	case len(health.Identity.Accepts) == 0:
		add("identity", checkPass, "no identity verifier (open policy, anonymous callers)")
	default:
		add("identity", checkPass, "accepts %s", strings.Join(health.Identity.Accepts, ", "))
	}
	if !apiUp {
		for _, name := range []string{"canary", "events", "topic"} {
			add(name, checkFail, "not run: %s", why)
		}
		add("cleanup", checkSkip, "no canary")
		return checks
	}

	// The events topic subscription exists before the canary is submitted.
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	workspace := "doctor-" + hex.EncodeToString(suffix[:])
	topic, topicSkip := o.openTopic(ctx, workspace)
	if topic != nil {
		defer topic.close()
	}

	// 3. Canary.
	body, _ := json.Marshal(map[string]any{
		"tenantId": o.tenant, "workspaceId": workspace, "taskKey": "canary", "worker": o.worker,
		"payload": json.RawMessage(o.payload), "idempotencyKey": workspace,
	})
	started := time.Now()
	sub, _, err := c.Submit(ctx, body)
	if err != nil {
		var denied *api.Error
		if errors.As(err, &denied) && denied.Status == http.StatusForbidden {
			add("canary", checkFail, "submit to worker %q: %v (under an access policy this caller needs the submitter role on tenant %q)", o.worker, err, o.tenant)
		} else {
			add("canary", checkFail, "submit to worker %q: %v", o.worker, err)
		}
		add("events", checkFail, "not run: no canary")
		if topic != nil && topic.unreachable {
			add("topic", checkFail, "%v", topic.err)
		} else {
			add("topic", checkFail, "not run: no canary")
		}
		add("cleanup", checkSkip, "no canary")
		return checks
	}
	passed := true
	var end canaryEnd
	defer func() {
		// 6. The canary's documents, once every check of it is done.
		result, detail := end.cleanup(ctx, o, sub.TaskID, passed)
		add("cleanup", result, "%s", detail)
	}()
	fail := func(name, format string, args ...any) {
		passed = false
		add(name, checkFail, format, args...)
	}
	final, err := waitCanary(ctx, c, sub.TaskID, o.worker, waitEnd)
	var unreachable *workerUnreachableError
	switch {
	case errors.As(err, &unreachable):
		fail("canary", "%v; canary %s QUEUED for %s (runbook: A worker that is down)", err, sub.TaskID, time.Since(started).Round(100*time.Millisecond))
	case err != nil:
		fail("canary", "%s: %v", sub.TaskID, err)
	case final.State != api.Succeeded:
		fail("canary", "%s ended %s %s after %d attempt(s)", sub.TaskID, final.State, final.Reason, final.Attempt)
	default:
		add("canary", checkPass, "%s SUCCEEDED on worker %s in %s", sub.TaskID, o.worker, time.Since(started).Round(time.Millisecond))
	}
	if !passed {
		// Nothing of a failed canary is left to end later (a
		// DISPATCH_TIMEOUT, a dead letter): cancelled unless it ended.
		end = cancelCanary(ctx, c, final, unreachable != nil)
		if end.task.TaskID != "" {
			final = end.task
		}
	}

	// 4. Recorded events: they end in the canary's state (SUCCEEDED, or
	// the state a failed canary was left in).
	evs, err := c.TaskEvents(ctx, sub.TaskID)
	var states []string
	for _, e := range evs {
		states = append(states, string(e.To))
	}
	want := api.Succeeded
	if !passed && final.State != "" {
		want = final.State
	}
	switch {
	case err != nil:
		fail("events", "GET /v1/tasks/%s/events: %v", sub.TaskID, err)
	case len(evs) == 0 || evs[len(evs)-1].To != want:
		fail("events", "recorded transitions %v, want them to end %s", states, want)
	default:
		add("events", checkPass, "%d transitions recorded: %s", len(evs), strings.Join(states, " → "))
	}

	// 5. Events topic: the canary's last event arrives.
	switch {
	case topic == nil:
		add("topic", checkSkip, "%s", topicSkip)
	case topic.unreachable:
		fail("topic", "%v", topic.err)
	case topic.err != nil:
		fail("topic", "%s: %v", topic.name, topic.err)
	default:
		// At least half the reserve: a canary that waited until waitEnd
		// was cancelled since, and its CANCELLED event is on its way.
		until := waitEnd
		if soon := time.Now().Add(reserve / 2); until.Before(soon) {
			until = soon
		}
		if err := topic.waitEvent(ctx, sub.TaskID, want, until); err != nil {
			fail("topic", "%s: %v", topic.name, err)
		} else {
			add("topic", checkPass, "%s event received on %s", want, topic.name)
		}
	}
	return checks
}

// workerUnreachableError is a canary QUEUED while Cloud Tasks reports its
// deliveries to the worker failing (api.Delivery).
type workerUnreachableError struct {
	worker   string
	delivery api.Delivery
}

func (e *workerUnreachableError) Error() string {
	d := e.delivery
	s := fmt.Sprintf("worker %q unreachable: %s", e.worker, d.LastStatus)
	if d.LastError != "" {
		s += ": " + d.LastError
	}
	return oneLineOf(fmt.Sprintf("%s (%d tries)", s, d.Attempts))
}

// deliveryFailing says whether Cloud Tasks reported the last delivery of
// a QUEUED task failed.
func deliveryFailing(d *api.Delivery) bool {
	return d != nil && d.LastStatus != "" && d.LastStatus != "OK"
}

// waitCanary polls the canary until it ends, until it is QUEUED with
// failing deliveries (a *workerUnreachableError: the sweeper's delivery
// probe, docs/contract.md §5.4, found Cloud Tasks failing to deliver it),
// or until `until`; it returns the last state read.
func waitCanary(ctx context.Context, c *client.Client, id, worker string, until time.Time) (api.Task, error) {
	began := time.Now()
	for {
		v, _, err := c.Get(ctx, id)
		switch {
		case err == nil && v.State.Terminal():
			return v, nil
		case err == nil && v.State == api.Queued && deliveryFailing(v.Delivery):
			return v, &workerUnreachableError{worker: worker, delivery: *v.Delivery}
		}
		if !time.Now().Before(until) {
			waited := time.Since(began).Round(100 * time.Millisecond)
			switch {
			case err != nil:
				return v, err
			case v.State == api.Queued && v.Delivery != nil:
				return v, fmt.Errorf("still %s after %s: %s", v.State, waited, deliveryText(v.Delivery))
			case v.State == api.Queued:
				probe := task.DeliveryProbe(api.Timing{StartTimeoutMs: v.StartTimeoutMs}.WithDefaults())
				return v, fmt.Errorf("still %s after %s, no failing delivery reported (the sweeper first asks Cloud Tasks %s after the enqueue: a longer --timeout shows whether the worker is reachable)", v.State, waited, probe)
			}
			return v, fmt.Errorf("still %s after %s", v.State, waited)
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(min(200*time.Millisecond, time.Until(until))):
		}
	}
}

// canaryEnd is what became of a canary that did not succeed: cancelled
// (task, the state the cancel left it in) or not (err says why), and
// whether its worker was unreachable (then it is deleted like a canary
// that passed).
type canaryEnd struct {
	tried, unreachable bool
	task               api.Task
	err                error
}

// cancelCanary cancels a canary that did not succeed unless it ended: one
// left QUEUED would end FAILED DISPATCH_TIMEOUT after its re-drives, a dead
// letter; one RUNNING beyond --timeout is told to stop.
func cancelCanary(ctx context.Context, c *client.Client, t api.Task, unreachable bool) canaryEnd {
	e := canaryEnd{unreachable: unreachable, task: t}
	if t.TaskID == "" || t.State.Terminal() {
		return e
	}
	e.tried = true
	cctx, cancel := context.WithTimeout(ctx, doctorCancelTimeout)
	defer cancel()
	v, _, err := c.Cancel(cctx, t.TaskID, doctorCancelReason)
	var conflict *api.Error
	if errors.As(err, &conflict) && conflict.Status == http.StatusConflict {
		// Ended meanwhile: nothing to cancel.
		v, _, err = c.Get(cctx, t.TaskID)
		e.tried = false
	}
	if err != nil {
		e.err = err
		return e
	}
	e.task = v
	return e
}

// cleanup is the cleanup row: a canary that passed, or one whose worker
// was unreachable and is now CANCELLED, is deleted (cleanupCanary); any
// other is kept for inspection, cancelled first when it had not ended.
func (e canaryEnd) cleanup(ctx context.Context, o doctorOptions, id string, passed bool) (result, detail string) {
	cancelled := ""
	if e.tried && e.err == nil {
		cancelled = "cancelled and "
		if e.task.State != api.Cancelled {
			cancelled = fmt.Sprintf("cancel requested (%s) and ", e.task.State)
		}
	}
	switch {
	case passed:
		return o.cleanupCanary(ctx, id, "")
	case e.err != nil:
		how := ""
		var denied *api.Error
		if errors.As(e.err, &denied) && denied.Status == http.StatusForbidden {
			how = fmt.Sprintf(" (under an access policy cancelling needs the operator role on tenant %q)", o.tenant)
		}
		return checkSkip, fmt.Sprintf("%s left %s: could not cancel it: %v%s; cancel it (servo cancel %s), or it may end FAILED later, a dead letter", id, e.task.State, e.err, how, id)
	case e.unreachable && e.task.State.Terminal():
		return o.cleanupCanary(ctx, id, cancelled)
	default:
		return checkSkip, fmt.Sprintf("%s %skept for inspection: a check of it failed", id, cancelled)
	}
}

// doctorQueuedPage is how many QUEUED tasks the deliveries check reads.
const doctorQueuedPage = 500

// deliveriesCheck reads the oldest QUEUED tasks (one page) and fails when
// Cloud Tasks reported failing deliveries for any of them (api.Delivery):
// a row per worker, with its number of such tasks and the last error.
func deliveriesCheck(ctx context.Context, c *client.Client) (result, detail string) {
	q := url.Values{"state": {string(api.Queued)}, "pageSize": {fmt.Sprint(doctorQueuedPage)}}
	page, _, err := c.List(ctx, q)
	if err != nil {
		var e *api.Error
		if errors.As(err, &e) && (e.Status == http.StatusForbidden || e.Field == "tenantId") {
			return checkSkip, fmt.Sprintf("GET /v1/tasks?state=QUEUED: %v", err)
		}
		return checkFail, fmt.Sprintf("GET /v1/tasks?state=QUEUED: %v", err)
	}
	type failing struct {
		tasks int
		last  api.Delivery
	}
	byWorker := map[string]*failing{}
	for _, t := range page.Tasks {
		d := t.Delivery
		if !deliveryFailing(d) {
			continue
		}
		f := byWorker[t.Worker]
		if f == nil {
			f = &failing{}
			byWorker[t.Worker] = f
		}
		f.tasks++
		if f.last.CheckedAt.Before(d.CheckedAt) {
			f.last = *d
		}
	}
	more := ""
	if page.NextPageToken != "" {
		more = fmt.Sprintf(" (the oldest %d read)", len(page.Tasks))
	}
	if len(byWorker) == 0 {
		return checkPass, fmt.Sprintf("no QUEUED task with failing deliveries among %d%s", len(page.Tasks), more)
	}
	var rows []string
	for _, w := range slices.Sorted(maps.Keys(byWorker)) {
		f := byWorker[w]
		rows = append(rows, fmt.Sprintf("worker %s: %d QUEUED task(s), %s", w, f.tasks, deliveryText(&f.last)))
	}
	return checkFail, fmt.Sprintf("%s%s (is the worker running and reachable from Cloud Tasks?)", strings.Join(rows, "; "), more)
}

func describeErr(status int, err error) string {
	if err != nil {
		return err.Error()
	}
	return "status " + strconv.Itoa(status)
}

// doctorTopic is a temporary subscription to the events topic, filtered
// on the canary's workspace.
type doctorTopic struct {
	ps   *pubsub.Client
	name string // the topic
	sub  string
	err  error // why there is no subscription
	// unreachable: Pub/Sub did not answer (err says "Pub/Sub
	// unreachable: …"), rather than refusing the subscription.
	unreachable bool
}

// openTopic subscribes to the events topic when Pub/Sub is reachable; the
// string says why the check is skipped otherwise.
func (o doctorOptions) openTopic(ctx context.Context, workspace string) (*doctorTopic, string) {
	if o.noPubSub {
		return nil, "--no-pubsub"
	}
	project := firstNonEmpty(o.project, os.Getenv("SERVO_PROJECT"), os.Getenv("GOOGLE_CLOUD_PROJECT"))
	if project == "" && os.Getenv("PUBSUB_EMULATOR_HOST") != "" {
		project = devstack.DefaultProject
	}
	if project == "" {
		return nil, "no project: pass --project (or set PUBSUB_EMULATOR_HOST for the local stack)"
	}
	ps, err := pubsub.NewClient(ctx, project)
	if err != nil {
		return nil, "no Pub/Sub client: " + err.Error()
	}
	t := &doctorTopic{ps: ps, name: events.TopicName(project, o.topic), sub: events.SubscriptionName(project, "servo-"+workspace)}
	// The first call to Pub/Sub, bounded: the client retries UNAVAILABLE
	// (a refused connection) for up to 60 s, and a frozen Pub/Sub never
	// answers. The retryer keeps the last error, which a deadline hides.
	sctx, cancel := context.WithTimeout(ctx, doctorPubSubTimeout)
	defer cancel()
	var last error
	_, err = ps.SubscriptionAdminClient.CreateSubscription(sctx, &pubsubpb.Subscription{
		Name: t.sub, Topic: t.name, AckDeadlineSeconds: 10,
		Filter:                   "attributes." + events.AttrWorkspaceID + " = " + strconv.Quote(workspace),
		MessageRetentionDuration: durationpb.New(10 * time.Minute),
		ExpirationPolicy:         &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(24 * time.Hour)},
	}, gax.WithRetry(func() gax.Retryer {
		return lastErrRetryer{gax.OnCodes([]codes.Code{codes.Unknown, codes.Aborted, codes.Unavailable},
			gax.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Multiplier: 1.3}), &last}
	}))
	if err != nil {
		ps.Close()
		// A FAIL rather than a skip: Pub/Sub was configured but unusable.
		return subscribeFailure(t.name, err, last, ctx.Err() == nil && sctx.Err() != nil), ""
	}
	return t, ""
}

// lastErrRetryer is a gax.Retryer that keeps the last error it retried.
type lastErrRetryer struct {
	gax.Retryer
	last *error
}

func (r lastErrRetryer) Retry(err error) (time.Duration, bool) {
	pause, retry := r.Retryer.Retry(err)
	if retry {
		*r.last = err
	}
	return pause, retry
}

// subscribeFailure is the topic check's failure when the subscription
// could not be created: Pub/Sub unreachable when it did not answer
// (UNAVAILABLE: a refused connection; no answer within
// doctorPubSubTimeout, timedOut), else errNoSubscription for NOT_FOUND and
// PERMISSION_DENIED, else the error.
func subscribeFailure(topic string, err, last error, timedOut bool) *doctorTopic {
	t := &doctorTopic{name: topic}
	code := status.Code(err)
	switch {
	case timedOut || code == codes.DeadlineExceeded || code == codes.Unavailable:
		t.unreachable = true
		detail := err.Error()
		switch {
		case (timedOut || code == codes.DeadlineExceeded) && last != nil:
			detail = fmt.Sprintf("%v (retried for %s)", last, doctorPubSubTimeout)
		case timedOut || code == codes.DeadlineExceeded:
			detail = fmt.Sprintf("no answer within %s", doctorPubSubTimeout)
		}
		where := "pubsub.googleapis.com"
		if h := os.Getenv("PUBSUB_EMULATOR_HOST"); h != "" {
			where = "PUBSUB_EMULATOR_HOST=" + h
		}
		t.err = fmt.Errorf("Pub/Sub unreachable: %s (%s; subscribing to %s)", detail, where, topic)
	case code == codes.NotFound || code == codes.PermissionDenied:
		t.err = fmt.Errorf("%w: %v", errNoSubscription, err)
	default:
		t.err = fmt.Errorf("could not subscribe to the topic: %v", err)
	}
	return t
}

func (t *doctorTopic) close() {
	if t.ps == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = t.ps.SubscriptionAdminClient.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: t.sub})
	t.ps.Close()
}

// cleanupCanary deletes the canary's task document and its attempt
// records (its outbox entries and idempotency key expire by Firestore's
// TTL policies), when Firestore is reachable: the emulator, or --project
// with Google credentials allowed to delete (roles/datastore.user).
//
// note ("" or "cancelled and ") says what doctor did to it before.
func (o doctorOptions) cleanupCanary(ctx context.Context, taskID, note string) (result, detail string) {
	it := taskID + " " + note // the row's subject: "task_… cancelled and "
	if o.keepCanary {
		return checkSkip, it + "kept (--keep-canary)"
	}
	project := firstNonEmpty(o.project, os.Getenv("SERVO_PROJECT"), os.Getenv("GOOGLE_CLOUD_PROJECT"))
	if project == "" && os.Getenv(store.EmulatorHostEnv) != "" {
		project = devstack.DefaultProject
	}
	if project == "" {
		return checkSkip, it + "left in place: no project (pass --project, or --keep-canary)"
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fs, err := firestore.NewClientWithDatabase(ctx, project, o.database)
	if err != nil {
		return checkSkip, fmt.Sprintf("%sleft in place: no Firestore client: %v", it, err)
	}
	defer fs.Close()
	doc := fs.Collection(store.TasksCollection).Doc(store.TaskDocID(taskID))
	if _, err := doc.Get(ctx); err != nil {
		// Not found: another project or database than the API's.
		return checkSkip, fmt.Sprintf("%sleft in place: not read in project %s, database %s: %v (check --project, --database)", it, project, o.database, err)
	}
	attempts, err := doc.Collection(store.AttemptsCollection).DocumentRefs(ctx).GetAll()
	if err == nil {
		bw := fs.BulkWriter(ctx)
		var jobs []*firestore.BulkWriterJob
		for _, a := range append(attempts, doc) {
			j, jerr := bw.Delete(a)
			if jerr != nil {
				err = jerr
				break
			}
			jobs = append(jobs, j)
		}
		bw.End()
		for _, j := range jobs {
			if _, jerr := j.Results(); jerr != nil && err == nil {
				err = jerr
			}
		}
	}
	if err != nil {
		return checkSkip, fmt.Sprintf("%sleft in place: %v (deleting it needs roles/datastore.user, or pass --keep-canary)", it, err)
	}
	return checkPass, fmt.Sprintf("%sdeleted (task and %d attempt record(s))", it, len(attempts))
}

var errNoSubscription = errors.New("could not subscribe to the topic (does it exist, and may this caller subscribe?)")

// waitEvent receives until the task's event entering state arrives, or
// until `until`.
func (t *doctorTopic) waitEvent(ctx context.Context, taskID string, state api.State, until time.Time) error {
	if t.ps == nil {
		return t.err
	}
	began := time.Now()
	rctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	var found atomic.Bool
	err := t.ps.Subscriber(t.sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		if m.Attributes[events.AttrTaskID] == taskID && m.Attributes[events.AttrState] == string(state) {
			found.Store(true)
			cancel()
		}
	})
	if found.Load() {
		return nil
	}
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("no %s event for %s within %s", state, taskID, time.Since(began).Round(100*time.Millisecond))
}
