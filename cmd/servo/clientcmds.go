package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/api/idtoken"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/internal/task"
)

// clientFlags are the flags every client command takes.
type clientFlags struct {
	api  string
	json bool
}

func (c *clientFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.api, "api", "", "control API base URL (default $"+client.APIEnv+")")
	fs.BoolVar(&c.json, "json", false, "print JSON for scripts instead of a table")
}

func (c *clientFlags) client(ctx context.Context) (*client.Client, error) {
	api := c.api
	if api == "" {
		api = os.Getenv(client.APIEnv)
	}
	if api == "" {
		return nil, usageErr("no API: pass --api URL or set %s (servo dev prints it)", client.APIEnv)
	}
	cl, err := newClient(ctx, api)
	if err != nil {
		return nil, err
	}
	return withIdentity(ctx, cl)
}

// newClient is a client for the API at base. Against a deployed (HTTPS)
// API it authenticates with an ID token from Application Default
// Credentials; against a loopback address (the local stack) it sends no
// credentials.
func newClient(ctx context.Context, base string) (*client.Client, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "https" || isLoopback(u.Hostname()) {
		return client.New(base) // its own error for a bad URL
	}
	hc, err := idtoken.NewClient(ctx, strings.TrimRight(base, "/"))
	if err != nil {
		return nil, fmt.Errorf("authenticate to %s with Application Default Credentials (run `gcloud auth application-default login`, or use a service account): %w", base, err)
	}
	return client.New(base, client.WithHTTPClient(hc))
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// apiErr maps API errors to exit codes.
func apiErr(err error) error {
	var ae *api.Error
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusNotFound:
			return &exitError{exitNotFound, err}
		case http.StatusConflict:
			return &exitError{exitConflict, err}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			return &exitError{exitFailure, err}
		}
	}
	return err
}

func printJSON(w io.Writer, raw []byte) error {
	if len(raw) > 0 && raw[len(raw)-1] != '\n' {
		raw = append(raw, '\n')
	}
	_, err := w.Write(raw)
	return err
}

func newSubmitCmd() *cobra.Command {
	var cf clientFlags
	var file, tenant, workspace, run, key, asset, worker, payload, deadline, idem string
	var hbInterval, hbTimeout, grace time.Duration
	var maxAttempts, maxTotal, priority int
	var byCategory []string
	var backoff, maxBackoff, startIn time.Duration
	var startAt string
	cmd := &cobra.Command{
		Use:   "submit [-f task.json] [flags]",
		Short: "Submit a task",
		Long: `Submit a task to the control API (POST /v1/tasks). The body is the JSON
object of -f (docs/contract.md §9.2), with the flags given overriding its fields; without
-f the flags make the whole body. Prints the new task's id, run, attempt and
state (or the existing task for a repeated --idempotency-key).`,
		Example: `  servo submit --tenant acme --workspace ws --key k1 --worker example \
      --payload '{"partitions": 20, "partitionMs": 500}'
  servo submit -f task.json --json
  cat task.json | servo submit -f - --max-attempts 5
  servo submit -f task.json --retry-category CONFLICT:attempts=8,backoff=1s,max-backoff=30s
  servo submit --tenant acme --workspace ws --key nightly --worker example --start-at 2030-01-15T02:00:00Z
  servo submit --tenant acme --workspace ws --key later --worker example --start-in 2h`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			body := map[string]any{}
			if file != "" {
				raw, err := readFileArg(cmd, file)
				if err != nil {
					return err
				}
				if err := json.Unmarshal(raw, &body); err != nil {
					return usageErr("%s is not a JSON object: %v", file, err)
				}
			}
			set := func(k, v string) {
				if v != "" {
					body[k] = v
				}
			}
			set("tenantId", tenant)
			set("workspaceId", workspace)
			set("runId", run)
			set("taskKey", key)
			set("assetId", asset)
			set("worker", worker)
			set("deadline", deadline)
			set("idempotencyKey", idem)
			if payload != "" {
				if !json.Valid([]byte(payload)) {
					return usageErr("--payload must be JSON")
				}
				body["payload"] = json.RawMessage(payload)
			}
			switch {
			case startAt != "" && startIn != 0:
				return usageErr("give --start-at or --start-in, not both")
			case startAt != "":
				body["startAt"] = startAt
			case startIn != 0:
				body["startDelayMs"] = startIn.Milliseconds()
			}
			for k, d := range map[string]time.Duration{"heartbeatIntervalMs": hbInterval, "heartbeatTimeoutMs": hbTimeout, "cancelGracePeriodMs": grace} {
				if d > 0 {
					body[k] = d.Milliseconds()
				}
			}
			for k, v := range map[string]int64{"maxAttempts": int64(maxAttempts), "initialBackoffMs": backoff.Milliseconds(), "maxBackoffMs": maxBackoff.Milliseconds()} {
				if v <= 0 {
					continue
				}
				r, _ := body["retry"].(map[string]any)
				if r == nil {
					r = map[string]any{}
				}
				r[k] = v
				body["retry"] = r
			}
			if priority != 0 {
				body["priority"] = priority
			}
			if err := setRetryCategories(body, byCategory, maxTotal); err != nil {
				return err
			}
			c, err := cf.client(ctx)
			if err != nil {
				return err
			}
			raw, _ := json.Marshal(body)
			res, out, err := c.Submit(ctx, raw)
			if err != nil {
				return apiErr(err)
			}
			w := cmd.OutOrStdout()
			if cf.json {
				return printJSON(w, out)
			}
			return printSubmitted(w, res)
		},
	}
	f := cmd.Flags()
	cf.register(f)
	f.StringVarP(&file, "file", "f", "", "task JSON file ('-' for stdin); flags override its fields")
	f.StringVar(&tenant, "tenant", "", "tenantId")
	f.StringVar(&workspace, "workspace", "", "workspaceId")
	f.StringVar(&run, "run", "", "runId (generated when empty)")
	f.StringVar(&key, "key", "", "taskKey")
	f.StringVar(&asset, "asset", "", "assetId")
	f.StringVar(&worker, "worker", "", "worker name (one the API is configured with)")
	f.StringVar(&payload, "payload", "", "payload JSON handed to the worker")
	f.StringVar(&deadline, "deadline", "", "deadline (RFC 3339)")
	f.StringVar(&startAt, "start-at", "", "startAt (RFC 3339): no worker receives the task before (up to a year ahead)")
	f.DurationVar(&startIn, "start-in", 0, "startDelayMs as a duration: start the task this long from now")
	f.StringVar(&idem, "idempotency-key", "", "idempotencyKey: a repeated submit returns the first task")
	f.DurationVar(&hbInterval, "heartbeat-interval", 0, "heartbeatIntervalMs as a duration (default 30s)")
	f.DurationVar(&hbTimeout, "heartbeat-timeout", 0, "heartbeatTimeoutMs as a duration (default max(90s, 3 × interval))")
	f.DurationVar(&grace, "cancel-grace", 0, "cancelGracePeriodMs as a duration (default 30s)")
	f.IntVar(&maxAttempts, "max-attempts", 0, "retry.maxAttempts (default 3)")
	f.DurationVar(&backoff, "retry-backoff", 0, "retry.initialBackoffMs as a duration: the first retry's delay before jitter (default 30s)")
	f.DurationVar(&maxBackoff, "retry-max-backoff", 0, "retry.maxBackoffMs as a duration (default 10m)")
	f.IntVar(&priority, "priority", 0, "priority: 1 (highest) to 5 (lowest), default 3; orders what waits")
	f.IntVar(&maxTotal, "max-total-attempts", 0, "retry.maxTotalAttempts: the attempts whatever their error categories (default the largest maxAttempts in force)")
	f.StringArrayVar(&byCategory, "retry-category", nil, "a category's own retry policy, CATEGORY:attempts=N,backoff=D,coefficient=X,max-backoff=D (each part optional; repeat for more categories): retry.byCategory")
	return cmd
}

// setRetryCategories adds --retry-category and --max-total-attempts to the
// body's retry object.
func setRetryCategories(body map[string]any, specs []string, maxTotal int) error {
	if len(specs) == 0 && maxTotal <= 0 {
		return nil
	}
	r, _ := body["retry"].(map[string]any)
	if r == nil {
		r = map[string]any{}
	}
	if maxTotal > 0 {
		r["maxTotalAttempts"] = maxTotal
	}
	if len(specs) > 0 {
		by, _ := r["byCategory"].(map[string]any)
		if by == nil {
			by = map[string]any{}
		}
		for _, spec := range specs {
			cat, parts, _ := strings.Cut(spec, ":")
			if cat == "" {
				return usageErr("--retry-category %q: want CATEGORY:attempts=N,backoff=D,coefficient=X,max-backoff=D", spec)
			}
			e := map[string]any{}
			for _, kv := range strings.Split(parts, ",") {
				if kv == "" {
					continue
				}
				k, v, _ := strings.Cut(kv, "=")
				var err error
				switch k {
				case "attempts":
					e["maxAttempts"], err = strconv.Atoi(v)
				case "coefficient":
					e["backoffCoefficient"], err = strconv.ParseFloat(v, 64)
				case "backoff", "max-backoff":
					var d time.Duration
					d, err = time.ParseDuration(v)
					e[map[string]string{"backoff": "initialBackoffMs", "max-backoff": "maxBackoffMs"}[k]] = d.Milliseconds()
				default:
					return usageErr("--retry-category %q: unknown part %q (attempts, backoff, coefficient, max-backoff)", spec, k)
				}
				if err != nil {
					return usageErr("--retry-category %q: %s: %v", spec, k, err)
				}
			}
			by[cat] = e
		}
		r["byCategory"] = by
	}
	body["retry"] = r
	return nil
}

func printSubmitted(w io.Writer, res api.SubmitResponse) error {
	t := newTable("TASK", "RUN", "ATTEMPT", "STATE").colorState(3)
	t.add(res.TaskID, res.RunID, fmt.Sprint(res.Attempt), string(res.State))
	return t.write(w, termOf(w))
}

func newGetCmd() *cobra.Command {
	var cf clientFlags
	var withTrace bool
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Show a task and its attempts",
		Long: `Show a task (GET /v1/tasks/{id}): identity, worker, state and reason, the
attempt it is on, the task it reruns (if any), and one row per attempt with
its outcome, worker, times, progress and message or error.`,
		Example: `  servo get task_01HGW5N7XHJM4GX29KZRXQP6N9
  servo get task_01HGW5N7XHJM4GX29KZRXQP6N9 --json | jq .attempts
  servo get task_01HGW5N7XHJM4GX29KZRXQP6N9 --trace`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := cf.client(ctx)
			if err != nil {
				return err
			}
			if withTrace {
				return getTrace(ctx, c, args[0], cmd.OutOrStdout(), cf.json)
			}
			t, raw, err := c.Get(ctx, args[0])
			if err != nil {
				return apiErr(err)
			}
			w := cmd.OutOrStdout()
			if cf.json {
				return printJSON(w, raw)
			}
			return printTask(w, &t)
		},
	}
	cf.register(cmd.Flags())
	cmd.Flags().BoolVar(&withTrace, "trace", false, "show the task's spans as a timeline (servo dev keeps recent spans: GET /v1/tasks/{id}/trace)")
	return cmd
}

func printTask(w io.Writer, t *api.Task) error {
	ti := termOf(w)
	state := string(t.State)
	if ti.color {
		state = colorize(state, t.State)
	}
	fields := []struct{ k, v string }{
		{"Task:", t.TaskID},
		{"Run:", t.RunID},
		{"Tenant/workspace:", t.TenantID + " / " + t.WorkspaceID},
		{"Key / asset:", t.TaskKey + " / " + dash(t.AssetID)},
		{"Worker:", t.Worker},
		{"State:", state},
	}
	if t.Reason != "" {
		fields = append(fields, struct{ k, v string }{"Reason:", t.Reason})
	}
	fields = append(fields, struct{ k, v string }{"Priority:", fmt.Sprintf("%d (1 highest, 5 lowest)", task.PriorityOf(t.Priority))})
	fields = append(fields, struct{ k, v string }{"Attempt:", fmt.Sprintf("%d of %d", t.Attempt, t.Retry.MaxAttempts)})
	if t.Retry.MaxTotalAttempts > 0 || len(t.Retry.ByCategory) > 0 {
		fields = append(fields, struct{ k, v string }{"Retry:", retryText(t.Retry)})
	}
	if t.Delivery != nil {
		fields = append(fields, struct{ k, v string }{"Delivery:", deliveryText(t.Delivery) + " (checked " + t.Delivery.CheckedAt.Local().Format("15:04:05") + ")"})
	}
	if t.RerunOf != "" {
		fields = append(fields, struct{ k, v string }{"Rerun of:", t.RerunOf})
	}
	if t.ScheduleID != "" && t.ScheduledFireAt != nil {
		fields = append(fields, struct{ k, v string }{"Schedule:", t.ScheduleID + " (fire at " + t.ScheduledFireAt.Format(time.RFC3339) + ")"})
	}
	fields = append(fields, struct{ k, v string }{"Created:", t.CreatedAt.Format(time.RFC3339)})
	for i, f := range fields {
		if f.k != "State:" || !ti.color {
			fields[i].v = oneLineOf(f.v)
		}
	}
	for _, f := range fields {
		if _, err := fmt.Fprintf(w, "%-18s%s\n", f.k, f.v); err != nil {
			return err
		}
	}
	if len(t.Attempts) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tb := newTable("ATTEMPT", "OUTCOME", "WORKER", "STARTED", "ENDED", "PROGRESS", "MESSAGE / ERROR").shrink(6, 2)
	for _, a := range t.Attempts {
		msg := a.Message
		if a.Error != nil {
			msg = string(a.Error.Category) + ": " + a.Error.Message
		}
		tb.add(fmt.Sprint(a.Attempt), dash(string(a.Outcome)), dash(a.WorkerID), clock(a.StartedAt), clock(a.CompletedAt), pct(a.ProgressPct), dash(msg))
	}
	return tb.write(w, ti)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clock(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format("15:04:05.000")
}

func pct(p *int) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%d%%", *p)
}

func newListCmd() *cobra.Command {
	var cf clientFlags
	var run, state, tenant, worker, token, order string
	var limit, pageSize int
	var all bool
	cmd := &cobra.Command{
		Use:   "list [flags]",
		Short: "List tasks",
		Long: `List tasks (GET /v1/tasks), oldest first unless --order newest, filtered by
run, state, tenant and worker. On a terminal servo prints --limit tasks (default
50) and, when more match, asks before reading the next page; elsewhere (a
pipe, a file) it prints every task unless --limit is given. --all prints every
task without asking. With --json one API page is printed as is, with its
nextPageToken for --page-token.`,
		Example: `  servo list --state RUNNING
  servo list --run run_01HGW5N7XHJM4GX29KZRXQP6N9 --limit 0
  servo list --worker example --order newest --limit 20
  servo list --json --page-size 100 --page-token "$TOKEN"`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if state != "" && !api.State(strings.ToUpper(state)).Valid() {
				return usageErr("--state must be one of %v", api.States)
			}
			if order != "" && order != "newest" && order != "oldest" {
				return usageErr("--order must be newest or oldest")
			}
			if limit < 0 || pageSize < 0 || pageSize > 500 {
				return usageErr("--limit must be 0 or more, --page-size from 1 to 500")
			}
			q := url.Values{}
			for k, v := range map[string]string{"runId": run, "state": strings.ToUpper(state), "tenantId": tenant, "worker": worker, "order": order, "pageToken": token} {
				if v != "" {
					q.Set(k, v)
				}
			}
			c, err := cf.client(ctx)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if cf.json {
				if pageSize == 0 && limit > 0 {
					pageSize = min(limit, 500)
				}
				if pageSize > 0 {
					q.Set("pageSize", fmt.Sprint(pageSize))
				}
				_, raw, err := c.List(ctx, q)
				if err != nil {
					return apiErr(err)
				}
				return printJSON(w, raw)
			}
			if !cmd.Flags().Changed("limit") && termOf(w).tty {
				limit = 50
			}
			if all {
				limit = 0
			}
			return listPages(ctx, c, q, limit, pageSize, w, cmd.InOrStdin(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	cf.register(f)
	f.StringVar(&run, "run", "", "only this run")
	f.StringVar(&state, "state", "", "only this state (PENDING, QUEUED, RUNNING, CANCELLING, SUCCEEDED, FAILED, CANCELLED)")
	f.StringVar(&tenant, "tenant", "", "only this tenant")
	f.StringVar(&worker, "worker", "", "only tasks for this worker")
	f.StringVar(&order, "order", "", "oldest (default) or newest first")
	f.IntVar(&limit, "limit", 0, "print at most this many tasks, then ask on a terminal whether to read on (0: no limit; default 50 on a terminal, no limit elsewhere)")
	f.BoolVar(&all, "all", false, "print every matching task without asking")
	f.IntVar(&pageSize, "page-size", 0, "tasks per API page (1 to 500; default: the API's)")
	f.StringVar(&token, "page-token", "", "start at this page token (from --json's nextPageToken)")
	return cmd
}

// listPages prints the tasks of q page by page: limit tasks at a time
// (0: all), asking on in (a terminal) whether to read on.
func listPages(ctx context.Context, c *client.Client, q url.Values, limit, pageSize int, w io.Writer, in io.Reader, errOut io.Writer) error {
	ti := termOf(w)
	interactive := ti.tty && isTerminalReader(in)
	if pageSize == 0 && limit > 0 {
		pageSize = min(limit, 500)
	}
	if pageSize > 0 {
		q.Set("pageSize", fmt.Sprint(pageSize))
	}
	var shown, batch int
	header := true
	var buf []api.Task
	next := q.Get("pageToken")
	first := true
	for {
		if len(buf) == 0 {
			if !first && next == "" {
				return nil
			}
			first = false
			if next != "" {
				q.Set("pageToken", next)
			}
			page, _, err := c.List(ctx, q)
			if err != nil {
				return apiErr(err)
			}
			buf, next = page.Tasks, page.NextPageToken
			if len(buf) == 0 {
				if shown == 0 {
					fmt.Fprintln(errOut, "no tasks match")
				}
				return nil
			}
		}
		n := len(buf)
		if limit > 0 {
			n = min(n, limit-batch)
		}
		t := newTable("TASK", "RUN", "KEY", "WORKER", "PRI", "STATE", "ATTEMPT", "REASON").shrink(7, 2, 3, 1).colorState(5)
		for _, tk := range buf[:n] {
			t.add(tk.TaskID, tk.RunID, tk.TaskKey, tk.Worker, fmt.Sprint(task.PriorityOf(tk.Priority)), string(tk.State), fmt.Sprint(tk.Attempt), dash(tk.Reason))
		}
		lines := t.lines(ti)
		if !header {
			lines = lines[1:]
		}
		header = false
		for _, l := range lines {
			if _, err := fmt.Fprintln(w, l); err != nil {
				return err
			}
		}
		buf = buf[n:]
		shown += n
		batch += n
		if limit > 0 && batch >= limit && (len(buf) > 0 || next != "") {
			if !interactive {
				fmt.Fprintf(errOut, "(%d shown; more match: pass --limit 0 or --all for every task, or --json with --page-token)\n", shown)
				return nil
			}
			fmt.Fprintf(errOut, "-- %d shown; Enter for %d more, q to stop -- ", shown, limit)
			var answer string
			fmt.Fscanln(in, &answer)
			if strings.HasPrefix(strings.ToLower(answer), "q") {
				return nil
			}
			batch = 0
		}
	}
}

// isTerminalReader reports whether r is a terminal.
func isTerminalReader(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, tty := termSize(f)
	return tty
}

func newRunsCmd() *cobra.Command {
	var cf clientFlags
	var tenant string
	var limit int
	cmd := &cobra.Command{
		Use:   "runs [flags]",
		Short: "List runs, newest first, with their tasks per state",
		Long: `List runs, newest first (GET /v1/runs), each with how many of its tasks are
in each state (GET /v1/tasks:counts?runId=, count aggregations: no task is
read). A run is listed from its first submit on; runs submitted before Servo
recorded runs are not listed (servo list --run still shows their tasks).`,
		Example: `  servo runs
  servo runs --tenant acme --limit 5
  servo runs --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if limit < 1 || limit > 100 {
				return usageErr("--limit must be from 1 to 100")
			}
			c, err := cf.client(ctx)
			if err != nil {
				return err
			}
			q := url.Values{"pageSize": {fmt.Sprint(limit)}}
			if tenant != "" {
				q.Set("tenantId", tenant)
			}
			runs, err := c.RunsWithCounts(ctx, q)
			if err != nil {
				return apiErr(err)
			}
			w := cmd.OutOrStdout()
			if cf.json {
				enc := json.NewEncoder(w)
				return enc.Encode(map[string]any{"runs": runs})
			}
			if len(runs) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no runs")
				return nil
			}
			t := newTable("RUN", "TENANT", "CREATED", "TOTAL", "PENDING", "QUEUED", "RUNNING", "CANCELLING", "SUCCEEDED", "FAILED", "CANCELLED").shrink(0, 1)
			for _, r := range runs {
				row := []string{r.RunID, r.TenantID, r.CreatedAt.Local().Format("2006-01-02 15:04:05"), fmt.Sprint(r.Total)}
				for _, st := range []api.State{api.Pending, api.Queued, api.Running, api.Cancelling, api.Succeeded, api.Failed, api.Cancelled} {
					row = append(row, fmt.Sprint(r.Counts[st]))
				}
				t.add(row...)
			}
			return t.write(w, termOf(w))
		},
	}
	f := cmd.Flags()
	cf.register(f)
	f.StringVar(&tenant, "tenant", "", "only this tenant's runs")
	f.IntVar(&limit, "limit", 20, "how many runs (1 to 100)")
	return cmd
}

func newCancelCmd() *cobra.Command {
	var cf clientFlags
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel ID [--reason R]",
		Short: "Cancel a task",
		Long: `Cancel a task (POST /v1/tasks/{id}/cancel): a PENDING or QUEUED task is
CANCELLED at once, a RUNNING one becomes CANCELLING and its worker is told on
its next heartbeat. A finished task is a conflict (exit 4).`,
		Example: `  servo cancel task_01HGW5N7XHJM4GX29KZRXQP6N9
  servo cancel task_01HGW5N7XHJM4GX29KZRXQP6N9 --reason superseded`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := cf.client(ctx)
			if err != nil {
				return err
			}
			t, raw, err := c.Cancel(ctx, args[0], reason)
			if err != nil {
				return apiErr(err)
			}
			w := cmd.OutOrStdout()
			if cf.json {
				return printJSON(w, raw)
			}
			_, err = fmt.Fprintf(w, "%s is %s\n", t.TaskID, t.State)
			return err
		},
	}
	cf.register(cmd.Flags())
	cmd.Flags().StringVar(&reason, "reason", api.ReasonUserRequested, "cancel reason handed to the worker")
	return cmd
}

func newRerunCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "rerun ID",
		Short: "Submit a finished task's request again",
		Long: `Submit a new task with the request of a finished (SUCCEEDED, FAILED or
CANCELLED) task: same tenant, workspace, run, key, asset, worker, payload,
resources, timers and retry policy, a new task id and a new idempotency key.
The new task records rerunOf (servo get shows it). A deadline already past is
dropped. A task that has not finished is a conflict (exit 4).`,
		Example: `  servo rerun task_01HGW5N7XHJM4GX29KZRXQP6N9
  servo rerun task_01HGW5N7XHJM4GX29KZRXQP6N9 --json`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := cf.client(ctx)
			if err != nil {
				return err
			}
			orig, _, err := c.Get(ctx, args[0])
			if err != nil {
				return apiErr(err)
			}
			if !orig.State.Terminal() {
				return &exitError{exitConflict, fmt.Errorf("%s is %s: only a finished task can be rerun (cancel it first, or wait)", orig.TaskID, orig.State)}
			}
			res, raw, err := c.Submit(ctx, rerunBody(&orig, time.Now()))
			if err != nil {
				return apiErr(err)
			}
			w := cmd.OutOrStdout()
			if cf.json {
				return printJSON(w, raw)
			}
			return printSubmitted(w, res)
		},
	}
	cf.register(cmd.Flags())
	return cmd
}

// rerunBody is the submit body that reruns orig.
func rerunBody(orig *api.Task, now time.Time) []byte {
	var suffix [8]byte
	_, _ = rand.Read(suffix[:])
	hb, hbt, grace := orig.HeartbeatIntervalMs, orig.HeartbeatTimeoutMs, orig.CancelGracePeriodMs
	retry := orig.Retry
	req := api.SubmitRequest{
		TenantID: orig.TenantID, WorkspaceID: orig.WorkspaceID, RunID: orig.RunID, TaskKey: orig.TaskKey,
		AssetID: orig.AssetID, Worker: orig.Worker, Payload: orig.Payload, Resources: orig.Resources,
		HeartbeatIntervalMs: &hb, HeartbeatTimeoutMs: &hbt, CancelGracePeriodMs: &grace,
		Retry: &api.RetryRequest{MaxAttempts: &retry.MaxAttempts, InitialBackoffMs: &retry.InitialBackoffMs,
			BackoffCoefficient: &retry.BackoffCoefficient, MaxBackoffMs: &retry.MaxBackoffMs},
		IdempotencyKey: "rerun-" + orig.TaskID + "-" + hex.EncodeToString(suffix[:]),
		RerunOf:        orig.TaskID,
	}
	if retry.MaxTotalAttempts > 0 {
		req.Retry.MaxTotalAttempts = &retry.MaxTotalAttempts
	}
	if orig.Priority != 0 {
		req.Priority = &orig.Priority
	}
	for c, e := range retry.ByCategory {
		if req.Retry.ByCategory == nil {
			req.Retry.ByCategory = map[api.Category]*api.CategoryRetryRequest{}
		}
		req.Retry.ByCategory[c] = &api.CategoryRetryRequest{MaxAttempts: &e.MaxAttempts, InitialBackoffMs: &e.InitialBackoffMs,
			BackoffCoefficient: &e.BackoffCoefficient, MaxBackoffMs: &e.MaxBackoffMs}
	}
	if orig.Deadline != nil && orig.Deadline.After(now) {
		req.Deadline = orig.Deadline.Format(time.RFC3339Nano)
	}
	b, _ := json.Marshal(req)
	return b
}

// readFileArg reads a -f/--file argument: the file, or standard input for
// "-" (a usage error when it cannot be read).
func readFileArg(cmd *cobra.Command, file string) ([]byte, error) {
	var raw []byte
	var err error
	if file == "-" {
		raw, err = io.ReadAll(cmd.InOrStdin())
	} else {
		raw, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, usageErr("read %s: %v", file, err)
	}
	return raw, nil
}

// retryText is a task's per-category policies and total, for servo get:
// "CONFLICT 8 attempts, 1s ×2 up to 30s; at most 10 attempts in all".
func retryText(p api.RetryPolicy) string {
	var parts []string
	cats := make([]string, 0, len(p.ByCategory))
	for c := range p.ByCategory {
		cats = append(cats, string(c))
	}
	slices.Sort(cats)
	ms := func(v int64) string { return (time.Duration(v) * time.Millisecond).String() }
	for _, c := range cats {
		e := p.ByCategory[api.Category(c)]
		parts = append(parts, fmt.Sprintf("%s %d attempts, %s ×%g up to %s", c, e.MaxAttempts, ms(e.InitialBackoffMs), e.BackoffCoefficient, ms(e.MaxBackoffMs)))
	}
	parts = append(parts, fmt.Sprintf("at most %d attempts in all", task.TotalAttempts(p)))
	return strings.Join(parts, "; ")
}
