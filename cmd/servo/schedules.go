package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"
	_ "time/tzdata" // the schedules' time zones wherever servo runs

	"github.com/spf13/cobra"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/client"
)

// newSchedulesCmd is `servo schedules`: the control API's schedules
// (/v1/schedules), tasks submitted on a cron or an interval.
func newSchedulesCmd() *cobra.Command {
	return group("schedules", "Create, show, pause, trigger, backfill and delete schedules (recurring tasks)",
		`  servo schedules create --id nightly --tenant acme --workspace ws --cron '0 2 * * *' --timezone Europe/Berlin \
      --worker example --task-key nightly --payload '{"partitions": 8}'
  servo schedules list --tenant acme
  servo schedules get nightly --tenant acme
  servo schedules pause nightly --tenant acme --note "until the migration is done"
  servo schedules backfill nightly --tenant acme --from 2030-01-01T00:00:00Z --to 2030-01-07T23:59:59Z`,
		newSchedulesCreateCmd(), newSchedulesListCmd(), newSchedulesGetCmd(),
		newSchedulesPauseCmd(true), newSchedulesPauseCmd(false),
		newSchedulesTriggerCmd(), newSchedulesBackfillCmd(), newSchedulesDeleteCmd())
}

// scheduleRef is what a command about one schedule takes besides its ID:
// the client flags and --tenant (a schedule id is unique per tenant).
type scheduleRef struct {
	cf     clientFlags
	tenant string
}

func (r *scheduleRef) register(cmd *cobra.Command) {
	r.cf.register(cmd.Flags())
	cmd.Flags().StringVar(&r.tenant, "tenant", "", "the schedule's tenantId (required: a schedule id is unique per tenant)")
}

// client checks --tenant and returns the API's client.
func (r *scheduleRef) client(cmd *cobra.Command) (*client.Client, error) {
	if r.tenant == "" {
		return nil, usageErr("%s needs --tenant: a schedule id is unique per tenant\n%s", cmd.CommandPath(), shortUsage(cmd))
	}
	return r.cf.client(cmd.Context())
}

// err names the schedule in an API error and maps it to an exit code.
func (r *scheduleRef) err(id string, err error) error {
	return apiErr(fmt.Errorf("schedule %q of tenant %q: %w", id, r.tenant, err))
}

// printValue prints v as JSON (--json).
func printValue(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return printJSON(w, b)
}

func newSchedulesCreateCmd() *cobra.Command {
	var cf clientFlags
	var file, id, tenant, workspace, cron, timezone, startAt, endAt, worker, key, payload, overlap, note string
	var every, jitter, catchup time.Duration
	var paused bool
	cmd := &cobra.Command{
		Use:   "create [-f schedule.json] [flags]",
		Short: "Create a schedule",
		Long: `Create a schedule (POST /v1/schedules): a task submitted at every fire time
of a cron expression in a time zone (--cron, --timezone) or every --every,
between --start-at and --end-at. The body is the JSON object of -f (a
schedule request: scheduleId, tenantId, workspaceId, spec, task, overlap,
catchupWindowMs, paused, note), with the flags given overriding its fields;
without -f the flags make the whole body. --cron replaces the file's
everyMs and --every its cron.

--overlap says what a fire does while an earlier fire's task runs: SKIP
(default), BUFFER_ONE, ALLOW_ALL or CANCEL_OTHER. Fires missed while Servo
was down or the schedule paused are made when no older than
--catchup-window (default 1m). An id the tenant already has is a conflict
(exit 4). Prints the schedule and its next fire.`,
		Example: `  servo schedules create --id nightly --tenant acme --workspace ws --cron '0 2 * * *' --timezone Europe/Berlin \
      --worker example --task-key nightly --payload '{"partitions": 8}'
  servo schedules create --id poll --tenant acme --workspace ws --every 5m --jitter 30s --worker example --task-key poll
  servo schedules create -f schedule.json --paused --note "starts after the launch"`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			var req api.ScheduleRequest
			if file != "" {
				raw, err := readFileArg(cmd, file)
				if err != nil {
					return err
				}
				dec := json.NewDecoder(bytes.NewReader(raw))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&req); err != nil {
					return usageErr("%s is not a schedule request (JSON as POST /v1/schedules takes): %v", file, err)
				}
			}
			f := cmd.Flags()
			for _, s := range []struct {
				flag string
				dst  *string
				v    string
			}{
				{"id", &req.ScheduleID, id}, {"tenant", &req.TenantID, tenant}, {"workspace", &req.WorkspaceID, workspace},
				{"timezone", &req.Spec.TimeZone, timezone}, {"start-at", &req.Spec.StartAt, startAt}, {"end-at", &req.Spec.EndAt, endAt},
				{"worker", &req.Task.Worker, worker}, {"task-key", &req.Task.TaskKey, key},
				{"overlap", &req.Overlap, strings.ToUpper(overlap)}, {"note", &req.Note, note},
			} {
				if f.Changed(s.flag) {
					*s.dst = s.v
				}
			}
			switch {
			case f.Changed("cron") && f.Changed("every"):
				return usageErr("give --cron or --every, not both")
			case f.Changed("cron"):
				req.Spec.Cron, req.Spec.EveryMs = cron, 0
			case f.Changed("every"):
				if every.Milliseconds() <= 0 {
					return usageErr("--every must be a positive duration such as 30s or 1h")
				}
				req.Spec.Cron, req.Spec.EveryMs = "", every.Milliseconds()
			}
			if f.Changed("jitter") {
				if jitter < 0 {
					return usageErr("--jitter must not be negative")
				}
				req.Spec.JitterMs = jitter.Milliseconds()
			}
			if f.Changed("catchup-window") {
				if catchup < 0 {
					return usageErr("--catchup-window must not be negative")
				}
				ms := catchup.Milliseconds()
				req.CatchupWindowMs = &ms
			}
			if f.Changed("paused") {
				req.Paused = paused
			}
			if f.Changed("payload") {
				if !json.Valid([]byte(payload)) {
					return usageErr("--payload must be JSON")
				}
				req.Task.Payload = json.RawMessage(payload)
			}
			c, err := cf.client(ctx)
			if err != nil {
				return err
			}
			s, err := c.CreateSchedule(ctx, req)
			if err != nil {
				return apiErr(err)
			}
			w := cmd.OutOrStdout()
			if cf.json {
				return printValue(w, s)
			}
			return printSchedule(w, &s)
		},
	}
	f := cmd.Flags()
	cf.register(f)
	f.StringVarP(&file, "file", "f", "", "schedule request JSON file ('-' for stdin); flags override its fields")
	f.StringVar(&id, "id", "", "scheduleId: 1 to 128 letters, digits, '.', '_' or '-', unique in the tenant")
	f.StringVar(&tenant, "tenant", "", "tenantId")
	f.StringVar(&workspace, "workspace", "", "workspaceId")
	f.StringVar(&cron, "cron", "", "spec.cron: five fields (minute hour day-of-month month day-of-week) or @hourly, @daily, …")
	f.DurationVar(&every, "every", 0, "spec.everyMs as a duration: fire at this interval instead of a cron")
	f.StringVar(&timezone, "timezone", "", "spec.timezone: the IANA time zone the cron is read in (default UTC)")
	f.StringVar(&startAt, "start-at", "", "spec.startAt (RFC 3339): no fire before")
	f.StringVar(&endAt, "end-at", "", "spec.endAt (RFC 3339): no fire after")
	f.DurationVar(&jitter, "jitter", 0, "spec.jitterMs as a duration: delay each fire's task by a deterministic amount below it")
	f.StringVar(&worker, "worker", "", "task.worker: the worker name (one the API is configured with)")
	f.StringVar(&key, "task-key", "", "task.taskKey of every fire's task")
	f.StringVar(&payload, "payload", "", "task.payload JSON handed to the worker")
	f.StringVar(&overlap, "overlap", "", "SKIP (default), BUFFER_ONE, ALLOW_ALL or CANCEL_OTHER: a fire while an earlier fire's task runs")
	f.DurationVar(&catchup, "catchup-window", 0, "catchupWindowMs as a duration: missed fires younger than this are made late (default 1m)")
	f.BoolVar(&paused, "paused", false, "create the schedule paused")
	f.StringVar(&note, "note", "", "a note, such as why the schedule is paused")
	return cmd
}

func newSchedulesListCmd() *cobra.Command {
	var cf clientFlags
	var tenant, token string
	var pageSize int
	cmd := &cobra.Command{
		Use:   "list [--tenant T]",
		Short: "List schedules",
		Long: `List schedules (GET /v1/schedules), every page, one row each: spec, overlap
policy, whether paused, next fire (UTC), fires made and note. Without
--tenant, the schedules of every tenant you may view. With --json one API
page is printed as is, with its nextPageToken for --page-token.`,
		Example: `  servo schedules list --tenant acme
  servo schedules list --json --page-size 50 --page-token "$TOKEN"`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if pageSize < 0 || pageSize > 200 {
				return usageErr("--page-size must be from 1 to 200")
			}
			q := url.Values{}
			for k, v := range map[string]string{"tenantId": tenant, "pageToken": token} {
				if v != "" {
					q.Set(k, v)
				}
			}
			if pageSize > 0 {
				q.Set("pageSize", fmt.Sprint(pageSize))
			}
			c, err := cf.client(ctx)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if cf.json {
				page, err := c.ListSchedules(ctx, q)
				if err != nil {
					return apiErr(err)
				}
				return printValue(w, page)
			}
			var all []api.Schedule
			for {
				page, err := c.ListSchedules(ctx, q)
				if err != nil {
					return apiErr(err)
				}
				all = append(all, page.Schedules...)
				if page.NextPageToken == "" {
					break
				}
				q.Set("pageToken", page.NextPageToken)
			}
			if len(all) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no schedules")
				return nil
			}
			t := newTable("SCHEDULE", "TENANT", "SPEC", "OVERLAP", "PAUSED", "NEXT FIRE (UTC)", "FIRES", "NOTE").shrink(7, 2, 0)
			for _, s := range all {
				next := "-"
				if s.NextFireAt != nil {
					next = s.NextFireAt.UTC().Format(time.RFC3339)
				}
				t.add(s.ScheduleID, s.TenantID, specString(s.Spec), s.Overlap, yesNo(s.Paused), next, fmt.Sprint(s.Fires), dash(s.Note))
			}
			return t.write(w, termOf(w))
		},
	}
	f := cmd.Flags()
	cf.register(f)
	f.StringVar(&tenant, "tenant", "", "only this tenant's schedules")
	f.IntVar(&pageSize, "page-size", 0, "schedules per API page (1 to 200; default: the API's)")
	f.StringVar(&token, "page-token", "", "start at this page token (from --json's nextPageToken)")
	return cmd
}

func newSchedulesGetCmd() *cobra.Command {
	var r scheduleRef
	cmd := &cobra.Command{
		Use:   "get ID --tenant T",
		Short: "Show a schedule, its next fires and its recent fires",
		Long: `Show a schedule (GET /v1/schedules/{id}?tenantId=): its spec, task, overlap
policy, catch-up window, whether it is paused and its note, its next fire
times in its time zone and in UTC, and its recent fires, newest first, with
their outcome, task and the task's state now.`,
		Example: `  servo schedules get nightly --tenant acme
  servo schedules get nightly --tenant acme --json | jq .recentFires`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := r.client(cmd)
			if err != nil {
				return err
			}
			s, err := c.GetSchedule(cmd.Context(), r.tenant, args[0])
			if err != nil {
				return r.err(args[0], err)
			}
			w := cmd.OutOrStdout()
			if r.cf.json {
				return printValue(w, s)
			}
			return printSchedule(w, &s)
		},
	}
	r.register(cmd)
	return cmd
}

// newSchedulesPauseCmd is `servo schedules pause` (pause) or `unpause`.
func newSchedulesPauseCmd(pause bool) *cobra.Command {
	var r scheduleRef
	var note string
	cmd := &cobra.Command{
		Use:   "pause ID --tenant T [--note N]",
		Short: "Pause a schedule: it makes no fires until unpaused",
		Long: `Pause a schedule (PATCH /v1/schedules/{id}?tenantId= with paused true and,
with --note, the note saying why). A paused schedule makes no fires; trigger
and backfill still do. Once unpaused, the fires missed meanwhile are made
when no older than its catch-up window, the others recorded MISSED.`,
		Example: `  servo schedules pause nightly --tenant acme --note "until the migration is done"`,
		Args:    exactArgs("ID"),
	}
	if !pause {
		cmd.Use = "unpause ID --tenant T"
		cmd.Short = "Unpause a schedule: it fires again"
		cmd.Long = `Unpause a schedule (PATCH /v1/schedules/{id}?tenantId= with paused false).
The fires missed while it was paused are made when no older than its
catch-up window, the others recorded MISSED. Its note is left as it is.`
		cmd.Example = `  servo schedules unpause nightly --tenant acme`
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := r.client(cmd)
		if err != nil {
			return err
		}
		p := api.SchedulePatch{Paused: &pause}
		if cmd.Flags().Changed("note") {
			p.Note = &note
		}
		s, err := c.UpdateSchedule(cmd.Context(), r.tenant, args[0], p)
		if err != nil {
			return r.err(args[0], err)
		}
		w := cmd.OutOrStdout()
		if r.cf.json {
			return printValue(w, s)
		}
		if s.Paused {
			msg := fmt.Sprintf("schedule %s of tenant %s paused", s.ScheduleID, s.TenantID)
			if s.Note != "" {
				msg += ": " + s.Note
			}
			_, err = fmt.Fprintln(w, oneLineOf(msg))
			return err
		}
		next := "none (past its end)"
		if s.NextFireAt != nil {
			next = s.NextFireAt.UTC().Format(time.RFC3339)
		}
		_, err = fmt.Fprintf(w, "schedule %s of tenant %s unpaused; next fire %s\n", s.ScheduleID, s.TenantID, next)
		return err
	}
	r.register(cmd)
	if pause {
		cmd.Flags().StringVar(&note, "note", "", "the schedule's note: why it is paused (shown by get and list)")
	}
	return cmd
}

func newSchedulesTriggerCmd() *cobra.Command {
	var r scheduleRef
	var overlap string
	cmd := &cobra.Command{
		Use:   "trigger ID --tenant T [--overlap P]",
		Short: "Fire a schedule now, once",
		Long: `Fire a schedule now (POST /v1/schedules/{id}:trigger?tenantId=), paused or
not, as its overlap policy (or --overlap) says: the fire's task is created
at once (STARTED, with its task id), or the fire is SKIPPED or BUFFERED
while an earlier fire's task runs. Prints the fires made.`,
		Example: `  servo schedules trigger nightly --tenant acme
  servo schedules trigger nightly --tenant acme --overlap ALLOW_ALL`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := r.client(cmd)
			if err != nil {
				return err
			}
			res, err := c.TriggerSchedule(cmd.Context(), r.tenant, args[0], api.TriggerRequest{Overlap: strings.ToUpper(overlap)})
			if err != nil {
				return r.err(args[0], err)
			}
			w := cmd.OutOrStdout()
			if r.cf.json {
				return printValue(w, res)
			}
			return printFires(w, res.Fires, false)
		},
	}
	r.register(cmd)
	cmd.Flags().StringVar(&overlap, "overlap", "", "this fire's overlap policy instead of the schedule's: SKIP, BUFFER_ONE, ALLOW_ALL or CANCEL_OTHER")
	return cmd
}

func newSchedulesBackfillCmd() *cobra.Command {
	var r scheduleRef
	var from, to, overlap string
	cmd := &cobra.Command{
		Use:   "backfill ID --tenant T --from TIME --to TIME [--overlap P]",
		Short: "Make a schedule's fires of a past range",
		Long: fmt.Sprintf(`Make every fire of a schedule from --from to --to (RFC 3339, both inclusive,
not in the future), oldest first (POST /v1/schedules/{id}:backfill?tenantId=),
as its overlap policy (or --overlap) says: SKIP, the default, skips a fire
while an earlier fire's task runs, so that only the first starts; ALLOW_ALL
starts them all. At most %d fires at once. Prints the fires made.`, api.MaxBackfillFires),
		Example: `  servo schedules backfill nightly --tenant acme --from 2030-01-01T00:00:00Z --to 2030-01-07T23:59:59Z
  servo schedules backfill nightly --tenant acme --from 2030-01-01T00:00:00+01:00 --to 2030-01-02T00:00:00+01:00 --overlap ALLOW_ALL`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" || to == "" {
				return usageErr("%s needs --from and --to (RFC 3339 times)\n%s", cmd.CommandPath(), shortUsage(cmd))
			}
			c, err := r.client(cmd)
			if err != nil {
				return err
			}
			res, err := c.BackfillSchedule(cmd.Context(), r.tenant, args[0], api.BackfillRequest{From: from, To: to, Overlap: strings.ToUpper(overlap)})
			if err != nil {
				return r.err(args[0], err)
			}
			w := cmd.OutOrStdout()
			if r.cf.json {
				return printValue(w, res)
			}
			if err := printFires(w, res.Fires, false); err != nil {
				return err
			}
			_, err = fmt.Fprintln(w, firesSummary(res.Fires))
			return err
		},
	}
	r.register(cmd)
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the range's start (RFC 3339, inclusive)")
	f.StringVar(&to, "to", "", "the range's end (RFC 3339, inclusive, not in the future)")
	f.StringVar(&overlap, "overlap", "", "these fires' overlap policy instead of the schedule's: SKIP, BUFFER_ONE, ALLOW_ALL or CANCEL_OTHER")
	return cmd
}

func newSchedulesDeleteCmd() *cobra.Command {
	var r scheduleRef
	cmd := &cobra.Command{
		Use:   "delete ID --tenant T",
		Short: "Delete a schedule",
		Long: `Delete a schedule (DELETE /v1/schedules/{id}?tenantId=): it makes no more
fires. The tasks of its fires are left as they are (servo cancel ends one).
With --json nothing is printed.`,
		Example: `  servo schedules delete nightly --tenant acme`,
		Args:    exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := r.client(cmd)
			if err != nil {
				return err
			}
			if err := c.DeleteSchedule(cmd.Context(), r.tenant, args[0]); err != nil {
				return r.err(args[0], err)
			}
			if r.cf.json {
				return nil
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "schedule %s of tenant %s deleted\n", args[0], r.tenant)
			return err
		},
	}
	r.register(cmd)
	return cmd
}

// specString is a spec in brief: `cron "0 2 * * *" in Europe/Berlin` or
// `every 5m0s`.
func specString(sp api.ScheduleSpec) string {
	if sp.Cron == "" {
		return "every " + (time.Duration(sp.EveryMs) * time.Millisecond).String()
	}
	return fmt.Sprintf("cron %q in %s", sp.Cron, zoneName(sp.TimeZone))
}

func zoneName(tz string) string {
	if tz == "" {
		return "UTC"
	}
	return tz
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// printSchedule prints a schedule: its fields, its next fire times (in
// its time zone and UTC) and its recent fires.
func printSchedule(w io.Writer, s *api.Schedule) error {
	ms := func(n int64) string { return (time.Duration(n) * time.Millisecond).String() }
	fields := []struct{ k, v string }{
		{"Schedule:", s.ScheduleID},
		{"Tenant/workspace:", s.TenantID + " / " + s.WorkspaceID},
		{"Spec:", specString(s.Spec)},
	}
	add := func(k, v string) { fields = append(fields, struct{ k, v string }{k, v}) }
	if s.Spec.StartAt != "" {
		add("Starts:", s.Spec.StartAt)
	}
	if s.Spec.EndAt != "" {
		add("Ends:", s.Spec.EndAt)
	}
	if s.Spec.JitterMs > 0 {
		add("Jitter:", "up to "+ms(s.Spec.JitterMs))
	}
	add("Task:", fmt.Sprintf("worker %s, key %s", s.Task.Worker, s.Task.TaskKey))
	if len(s.Task.Payload) > 0 {
		var b bytes.Buffer
		if json.Compact(&b, s.Task.Payload) != nil {
			b.Reset()
			b.Write(s.Task.Payload)
		}
		add("Payload:", b.String())
	}
	add("Overlap:", s.Overlap)
	add("Catch-up window:", ms(s.CatchupWindowMs))
	add("Paused:", yesNo(s.Paused))
	if s.Note != "" {
		add("Note:", s.Note)
	}
	add("Fires:", fmt.Sprintf("%d started, %d skipped, %d missed", s.Fires, s.Skipped, s.Missed))
	add("Created:", s.CreatedAt.Format(time.RFC3339))
	for _, f := range fields {
		if _, err := fmt.Fprintf(w, "%-18s%s\n", f.k, oneLineOf(f.v)); err != nil {
			return err
		}
	}
	ti := termOf(w)
	next := s.NextFires
	if len(next) == 0 && s.NextFireAt != nil {
		next = []time.Time{*s.NextFireAt}
	}
	fmt.Fprintln(w)
	if len(next) == 0 {
		fmt.Fprintln(w, "No next fire: the schedule is past its end.")
	} else {
		if s.Paused {
			fmt.Fprintln(w, "While paused the schedule makes none of these fires; once unpaused, those older than its catch-up window are recorded MISSED.")
		}
		tz := zoneName(s.Spec.TimeZone)
		loc, err := time.LoadLocation(tz)
		if err != nil || loc == time.UTC {
			t := newTable("NEXT FIRE (UTC)")
			for _, at := range next {
				t.add(at.UTC().Format(time.RFC3339))
			}
			if err := t.write(w, ti); err != nil {
				return err
			}
		} else {
			t := newTable("NEXT FIRE ("+tz+")", "UTC")
			for _, at := range next {
				t.add(at.In(loc).Format("Mon 2006-01-02 15:04:05 MST"), at.UTC().Format(time.RFC3339))
			}
			if err := t.write(w, ti); err != nil {
				return err
			}
		}
	}
	fmt.Fprintln(w)
	if len(s.RecentFires) == 0 {
		_, err := fmt.Fprintln(w, "No fires yet.")
		return err
	}
	return printFires(w, s.RecentFires, true)
}

// printFires prints fires as a table; withState adds the state of each
// fire's task (a schedule's GET has it).
func printFires(w io.Writer, fires []api.ScheduleFire, withState bool) error {
	head := []string{"AT (UTC)", "KIND", "OUTCOME", "TASK"}
	if withState {
		head = append(head, "STATE")
	}
	t := newTable(append(head, "MESSAGE")...).shrink(len(head), 3)
	if withState {
		t.colorState(4)
	}
	for _, f := range fires {
		msg := f.Message
		if f.Outcome == api.FireMissed && f.Count > 0 {
			m := fmt.Sprintf("%d fires", f.Count)
			if f.Until != nil {
				m += " up to " + f.Until.UTC().Format(time.RFC3339)
			}
			msg = strings.TrimSuffix(m+"; "+msg, "; ")
		}
		row := []string{f.At.UTC().Format(time.RFC3339), f.Kind, f.Outcome, dash(f.TaskID)}
		if withState {
			row = append(row, dash(string(f.State)))
		}
		t.add(append(row, dash(msg))...)
	}
	return t.write(w, termOf(w))
}

// firesSummary counts fires by outcome: "5 fires: 1 STARTED, 4 SKIPPED".
func firesSummary(fires []api.ScheduleFire) string {
	var order []string
	n := map[string]int{}
	for _, f := range fires {
		if n[f.Outcome] == 0 {
			order = append(order, f.Outcome)
		}
		n[f.Outcome]++
	}
	parts := make([]string, len(order))
	for i, o := range order {
		parts[i] = fmt.Sprintf("%d %s", n[o], o)
	}
	noun := "fires"
	if len(fires) == 1 {
		noun = "fire"
	}
	return fmt.Sprintf("%d %s: %s", len(fires), noun, strings.Join(parts, ", "))
}
