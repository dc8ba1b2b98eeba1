package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/task"
)

// clientFlags are the flags every client command takes.
type clientFlags struct {
	api  string
	json bool
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.api, "api", os.Getenv(client.APIEnv), "control API base URL (default $"+client.APIEnv+")")
	fs.BoolVar(&c.json, "json", false, "print JSON for scripts")
}

func (c *clientFlags) client(ctx context.Context) (*client.Client, error) {
	if c.api == "" {
		return nil, usageErr("no API: pass --api URL or set %s (servo dev prints it)", client.APIEnv)
	}
	return client.New(ctx, c.api)
}

// parse parses flags that may come before or after positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageErr("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// apiErr maps API errors to exit codes.
func apiErr(err error) error {
	var ae *client.APIError
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

func printJSON(raw []byte) {
	os.Stdout.Write(raw)
	if len(raw) > 0 && raw[len(raw)-1] != '\n' {
		fmt.Println()
	}
}

func cmdSubmit(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	file := fs.String("f", "", "task JSON file ('-' for stdin); flags override its fields")
	tenant := fs.String("tenant", "", "tenantId")
	workspace := fs.String("workspace", "", "workspaceId")
	run := fs.String("run", "", "runId (generated when empty)")
	key := fs.String("key", "", "taskKey")
	asset := fs.String("asset", "", "assetId")
	worker := fs.String("worker", "", "worker name")
	payload := fs.String("payload", "", "payload JSON")
	deadline := fs.String("deadline", "", "deadline (RFC 3339)")
	idem := fs.String("idempotency-key", "", "idempotencyKey")
	hbInterval := fs.Duration("heartbeat-interval", 0, "heartbeatIntervalMs as a duration")
	hbTimeout := fs.Duration("heartbeat-timeout", 0, "heartbeatTimeoutMs as a duration")
	grace := fs.Duration("cancel-grace", 0, "cancelGracePeriodMs as a duration")
	maxAttempts := fs.Int("max-attempts", 0, "retry.maxAttempts")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	body := map[string]any{}
	if *file != "" {
		var raw []byte
		var err error
		if *file == "-" {
			raw, err = io.ReadAll(os.Stdin)
		} else {
			raw, err = os.ReadFile(*file)
		}
		if err != nil {
			return usageErr("read %s: %v", *file, err)
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			return usageErr("%s is not a JSON object: %v", *file, err)
		}
	}
	set := func(k, v string) {
		if v != "" {
			body[k] = v
		}
	}
	set("tenantId", *tenant)
	set("workspaceId", *workspace)
	set("runId", *run)
	set("taskKey", *key)
	set("assetId", *asset)
	set("worker", *worker)
	set("deadline", *deadline)
	set("idempotencyKey", *idem)
	if *payload != "" {
		if !json.Valid([]byte(*payload)) {
			return usageErr("--payload must be JSON")
		}
		body["payload"] = json.RawMessage(*payload)
	}
	for k, d := range map[string]time.Duration{"heartbeatIntervalMs": *hbInterval, "heartbeatTimeoutMs": *hbTimeout, "cancelGracePeriodMs": *grace} {
		if d > 0 {
			body[k] = d.Milliseconds()
		}
	}
	if *maxAttempts > 0 {
		r, _ := body["retry"].(map[string]any)
		if r == nil {
			r = map[string]any{}
		}
		r["maxAttempts"] = *maxAttempts
		body["retry"] = r
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
	if cf.json {
		printJSON(out)
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tRUN\tATTEMPT\tSTATE")
	fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", res.TaskID, res.RunID, res.Attempt, res.State)
	return tw.Flush()
}

func cmdGet(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("usage: servo get ID")
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	t, raw, err := c.Get(ctx, pos[0])
	if err != nil {
		return apiErr(err)
	}
	if cf.json {
		printJSON(raw)
		return nil
	}
	printTask(os.Stdout, &t)
	return nil
}

func printTask(w io.Writer, t *client.Task) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Task:\t%s\n", t.TaskID)
	fmt.Fprintf(tw, "Run:\t%s\n", t.RunID)
	fmt.Fprintf(tw, "Tenant/workspace:\t%s / %s\n", t.TenantID, t.WorkspaceID)
	fmt.Fprintf(tw, "Key / asset:\t%s / %s\n", t.TaskKey, dash(t.AssetID))
	fmt.Fprintf(tw, "Worker:\t%s\n", t.Worker)
	fmt.Fprintf(tw, "State:\t%s\n", t.State)
	if t.Reason != "" {
		fmt.Fprintf(tw, "Reason:\t%s\n", t.Reason)
	}
	fmt.Fprintf(tw, "Attempt:\t%d of %d\n", t.Attempt, t.Retry.MaxAttempts)
	fmt.Fprintf(tw, "Created:\t%s\n", t.CreatedAt.Format(time.RFC3339))
	tw.Flush()
	if len(t.Attempts) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ATTEMPT\tOUTCOME\tWORKER\tSTARTED\tENDED\tPROGRESS\tMESSAGE / ERROR")
	for _, a := range t.Attempts {
		msg := a.Message
		if a.Error != nil {
			msg = string(a.Error.Category) + ": " + a.Error.Message
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Attempt, dash(string(a.Outcome)), dash(a.WorkerID),
			clock(a.StartedAt), clock(a.CompletedAt), pct(a.ProgressPct), dash(oneLine(msg)))
	}
	tw.Flush()
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

func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

func cmdList(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	run := fs.String("run", "", "only this run")
	state := fs.String("state", "", "only this state")
	tenant := fs.String("tenant", "", "only this tenant")
	limit := fs.Int("page-size", 0, "page size (JSON output prints one page)")
	token := fs.String("page-token", "", "page token (JSON output)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *state != "" && !task.State(strings.ToUpper(*state)).Valid() {
		return usageErr("--state must be one of %v", task.States)
	}
	q := url.Values{}
	for k, v := range map[string]string{"runId": *run, "state": strings.ToUpper(*state), "tenantId": *tenant, "pageToken": *token} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if *limit > 0 {
		q.Set("pageSize", fmt.Sprint(*limit))
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	if cf.json {
		_, raw, err := c.List(ctx, q)
		if err != nil {
			return apiErr(err)
		}
		printJSON(raw)
		return nil
	}
	tasks, err := c.ListAll(ctx, q)
	if err != nil {
		return apiErr(err)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tRUN\tKEY\tWORKER\tSTATE\tATTEMPT\tREASON")
	for _, t := range tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", t.TaskID, t.RunID, t.TaskKey, t.Worker, t.State, t.Attempt, dash(t.Reason))
	}
	return tw.Flush()
}

func cmdCancel(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	reason := fs.String("reason", task.ReasonUserRequested, "cancel reason handed to the worker")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("usage: servo cancel ID [--reason R]")
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	t, raw, err := c.Cancel(ctx, pos[0], *reason)
	if err != nil {
		return apiErr(err)
	}
	if cf.json {
		printJSON(raw)
		return nil
	}
	fmt.Printf("%s is %s\n", t.TaskID, t.State)
	return nil
}
