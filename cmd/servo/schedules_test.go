package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/devstack"
)

// servo schedules against the local stack, one schedule's life: created
// (a cron in a time zone; another from a file with flags overriding it;
// the same id in another tenant), listed, shown with its next fires in
// its zone and in UTC, paused with a note and unpaused, triggered (a
// STARTED fire whose task carries the schedule's id), backfilled, and
// deleted; the API's errors name the schedule and the field.
func TestSchedulesCommand(t *testing.T) {
	st := startStack(t)
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return st.cli(append([]string{"schedules"}, args...)...)
	}
	ok := func(args ...string) string {
		t.Helper()
		out, errOut, code := cli(args...)
		if code != 0 {
			t.Fatalf("servo schedules %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	getJSON := func(tenant, id string) api.Schedule {
		t.Helper()
		var s api.Schedule
		if out := ok("get", id, "--tenant", tenant, "--json"); json.Unmarshal([]byte(out), &s) != nil {
			t.Fatalf("get --json: %s", out)
		}
		return s
	}
	line := func(out, re string) {
		t.Helper()
		if !regexp.MustCompile(`(?m)` + re).MatchString(out) {
			t.Errorf("no line matching %q in:\n%s", re, out)
		}
	}
	payload := `{"partitions": 1, "partitionMs": 10}`
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}

	// create: a cron in a time zone.
	out := ok("create", "--id", "nightly", "--tenant", "acme", "--workspace", "ws", "--cron", "0 9 * * *", "--timezone", "Europe/Berlin",
		"--worker", devstack.ExampleWorker, "--task-key", "nightly", "--payload", payload)
	line(out, `^Schedule:\s+nightly$`)
	line(out, `^Spec:\s+cron "0 9 \* \* \*" in Europe/Berlin$`)
	line(out, `^Payload:\s+\{"partitions":1,"partitionMs":10\}$`)

	// get: ten next fires, each at 09:00 in Berlin, shown there and in UTC.
	s := getJSON("acme", "nightly")
	if len(s.NextFires) != api.ScheduleNextFires || s.Overlap != api.OverlapSkip || s.Paused {
		t.Fatalf("get --json: %+v", s)
	}
	out = ok("get", "nightly", "--tenant", "acme")
	line(out, `^NEXT FIRE \(Europe/Berlin\)\s+UTC$`)
	line(out, `^No fires yet\.$`)
	for _, at := range s.NextFires {
		if b := at.In(berlin); b.Hour() != 9 || b.Minute() != 0 {
			t.Errorf("next fire %v is %v in Berlin", at, b)
		}
		line(out, `^`+regexp.QuoteMeta(at.In(berlin).Format("Mon 2006-01-02 15:04:05 MST"))+`\s+`+regexp.QuoteMeta(at.UTC().Format(time.RFC3339))+`$`)
	}

	// create -f: the flags override the file's fields, --every its cron.
	file := filepath.Join(t.TempDir(), "poll.json")
	if err := os.WriteFile(file, []byte(`{"scheduleId": "poll", "tenantId": "acme", "workspaceId": "ws", "spec": {"cron": "@hourly"},
		"task": {"worker": "`+devstack.ExampleWorker+`", "taskKey": "poll", "payload": `+payload+`}, "overlap": "SKIP", "note": "from the file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ok("create", "-f", file, "--every", "30s", "--overlap", "allow_all", "--paused", "--catchup-window", "5m")
	if p := getJSON("acme", "poll"); p.Spec.Cron != "" || p.Spec.EveryMs != 30000 || p.Overlap != api.OverlapAllowAll || !p.Paused ||
		p.CatchupWindowMs != 300000 || p.Note != "from the file" || p.Task.TaskKey != "poll" {
		t.Errorf("created from the file with flags: %+v", p)
	}
	// The same id in another tenant is another schedule.
	ok("create", "--id", "nightly", "--tenant", "globex", "--workspace", "ws", "--every", "1h", "--worker", devstack.ExampleWorker, "--task-key", "k")
	line(ok("get", "nightly", "--tenant", "globex"), `^Spec:\s+every 1h0m0s$`)

	// list: a tenant's schedules, or every tenant's.
	for _, c := range []struct {
		args []string
		want []string // rows: schedule and tenant
	}{
		{[]string{"--tenant", "acme"}, []string{"nightly +acme", "poll +acme"}},
		{nil, []string{"nightly +acme", "poll +acme", "nightly +globex"}},
		{[]string{"--tenant", "initech"}, nil},
	} {
		out, errOut, code := cli(append([]string{"list"}, c.args...)...)
		rows := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || (len(c.want) == 0) != (out == "") || (out != "" && len(rows) != len(c.want)+1) {
			t.Errorf("list %v: exit %d, %d rows, want %d:\n%s%s", c.args, code, len(rows)-1, len(c.want), out, errOut)
		}
		if len(c.want) == 0 && !strings.Contains(errOut, "no schedules") {
			t.Errorf("list %v: stderr %q", c.args, errOut)
		}
		for _, w := range c.want {
			line(out, `^`+w+` `)
		}
	}
	line(ok("list", "--tenant", "acme"), `^poll +acme +every 30s +ALLOW_ALL +yes +\S+ +0 +from the file$`)
	var page api.SchedulesResponse
	if out := ok("list", "--tenant", "acme", "--json", "--page-size", "1"); json.Unmarshal([]byte(out), &page) != nil ||
		len(page.Schedules) != 1 || page.NextPageToken == "" {
		t.Errorf("list --json --page-size 1: %s", out)
	}

	// pause with a note, then unpause.
	for _, c := range []struct {
		args   []string
		out    string // a line of its output
		paused bool
	}{
		{[]string{"pause", "nightly", "--tenant", "acme", "--note", "db migration, back on Monday"},
			`^schedule nightly of tenant acme paused: db migration, back on Monday$`, true},
		{[]string{"unpause", "nightly", "--tenant", "acme"}, `^schedule nightly of tenant acme unpaused; next fire \S+Z$`, false},
	} {
		line(ok(c.args...), c.out)
		out := ok("get", "nightly", "--tenant", "acme")
		line(out, `^Paused:\s+`+yesNo(c.paused)+`$`)
		line(out, `^Note:\s+db migration, back on Monday$`) // unpause leaves the note
		if c.paused {
			line(out, `^While paused the schedule makes none of these fires`)
		}
		if s := getJSON("acme", "nightly"); s.Paused != c.paused {
			t.Errorf("after %v: paused %v", c.args, s.Paused)
		}
	}

	// trigger: one STARTED fire, made at once; its task is the schedule's.
	var fired api.FireResponse
	if out := ok("trigger", "nightly", "--tenant", "acme", "--json"); json.Unmarshal([]byte(out), &fired) != nil || len(fired.Fires) != 1 ||
		fired.Fires[0].Outcome != api.FireStarted || fired.Fires[0].Kind != api.FireByTrigger || !strings.HasPrefix(fired.Fires[0].TaskID, "task_") {
		t.Fatalf("trigger --json: %s", out)
	}
	triggered := fired.Fires[0].TaskID
	var tk api.Task
	if out := strings.TrimSpace(func() string { o, _, _ := st.cli("get", triggered, "--json"); return o }()); json.Unmarshal([]byte(out), &tk) != nil ||
		tk.ScheduleID != "nightly" || tk.TenantID != "acme" || tk.TaskKey != "nightly" || tk.ScheduledFireAt == nil {
		t.Fatalf("servo get %s --json: %s", triggered, out)
	}
	// A paused schedule fires on trigger too (table output).
	out = ok("trigger", "poll", "--tenant", "acme")
	line(out, `^AT \(UTC\) +KIND +OUTCOME +TASK +MESSAGE$`)
	line(out, `^\S+Z +TRIGGER +STARTED +task_\S+ +-$`)
	st.waitState(triggered, api.Succeeded) // nothing of nightly's runs: SKIP below starts its first fire

	// backfill: every fire time of a past range, in the schedule's zone
	// (09:00 in Berlin is 08:00Z in winter, 07:00Z in summer).
	for _, c := range []struct {
		name, from, to, overlap string
		json                    bool
		want                    []string // fire times and outcomes
		summary                 string
	}{
		{"three winter days", "2024-01-01T00:00:00Z", "2024-01-03T23:59:59Z", "ALLOW_ALL", true,
			[]string{"2024-01-01T08:00:00Z STARTED", "2024-01-02T08:00:00Z STARTED", "2024-01-03T08:00:00Z STARTED"}, ""},
		{"across the spring change", "2024-03-30T00:00:00+01:00", "2024-04-01T09:00:00+02:00", "allow_all", true,
			[]string{"2024-03-30T08:00:00Z STARTED", "2024-03-31T07:00:00Z STARTED", "2024-04-01T07:00:00Z STARTED"}, ""},
		{"the schedule's SKIP: the first starts, the others skip", "2024-06-01T00:00:00Z", "2024-06-03T23:59:59Z", "", false,
			[]string{"2024-06-01T07:00:00Z STARTED", "2024-06-02T07:00:00Z SKIPPED", "2024-06-03T07:00:00Z SKIPPED"}, "3 fires: 1 STARTED, 2 SKIPPED"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"backfill", "nightly", "--tenant", "acme", "--from", c.from, "--to", c.to}
			if c.overlap != "" {
				args = append(args, "--overlap", c.overlap)
			}
			if c.json {
				args = append(args, "--json")
			}
			out := ok(args...)
			if !c.json {
				for _, w := range c.want {
					at, outcome, _ := strings.Cut(w, " ")
					line(out, `^`+regexp.QuoteMeta(at)+` +BACKFILL +`+outcome+` +(task_\S+|-) +-$`)
				}
				line(out, `^`+regexp.QuoteMeta(c.summary)+`$`)
				return
			}
			var r api.FireResponse
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			var got []string
			for _, f := range r.Fires {
				got = append(got, f.At.UTC().Format(time.RFC3339)+" "+f.Outcome)
				if f.Kind != api.FireByBackfill || (f.Outcome == api.FireStarted) != (f.TaskID != "") {
					t.Errorf("fire %+v", f)
				}
			}
			if strings.Join(got, ", ") != strings.Join(c.want, ", ") {
				t.Errorf("fires %q, want %q", got, c.want)
			}
		})
	}

	// get: the recent fires, newest first, with their tasks' states.
	out = ok("get", "nightly", "--tenant", "acme")
	line(out, `^AT \(UTC\) +KIND +OUTCOME +TASK +STATE +MESSAGE$`)
	line(out, `^\S+Z +TRIGGER +STARTED +`+triggered+` +SUCCEEDED +-$`)
	line(out, `^2024-06-02T07:00:00Z +BACKFILL +SKIPPED +- +- +-$`)
	line(out, `^Fires:\s+8 started, 2 skipped, 0 missed$`)
	if s := getJSON("acme", "nightly"); len(s.RecentFires) != api.ScheduleRecentFires || !s.RecentFires[0].At.Equal(time.Date(2024, 6, 3, 7, 0, 0, 0, time.UTC)) {
		t.Errorf("recent fires: %+v", s.RecentFires)
	}

	// Errors: the usage's (exit 2) and the API's, naming the schedule or
	// the field.
	for _, c := range []struct {
		name string
		args []string
		code int
		want []string // in stderr
	}{
		{"bad cron", []string{"create", "--id", "bad", "--tenant", "acme", "--workspace", "ws", "--cron", "61 * * * *", "--worker", devstack.ExampleWorker, "--task-key", "k"},
			exitFailure, []string{"400 invalid_request (spec.cron): "}},
		{"cron of six fields", []string{"create", "--id", "bad", "--tenant", "acme", "--workspace", "ws", "--cron", "0 0 9 * * *", "--worker", devstack.ExampleWorker, "--task-key", "k"},
			exitFailure, []string{"(spec.cron): want five fields"}},
		{"id taken", []string{"create", "--id", "nightly", "--tenant", "acme", "--workspace", "ws", "--every", "1h", "--worker", devstack.ExampleWorker, "--task-key", "k"},
			exitConflict, []string{"409 schedule_exists", `tenant "acme" already has a schedule "nightly"`}},
		{"cron and every", []string{"create", "--id", "x", "--cron", "@daily", "--every", "1h"}, exitUsage, []string{"give --cron or --every, not both"}},
		{"payload not JSON", []string{"create", "--id", "x", "--payload", "{"}, exitUsage, []string{"--payload must be JSON"}},
		{"file with an unknown field", []string{"create", "-f", writeFile(t, `{"scheduleId": "x", "overlp": "SKIP"}`)}, exitUsage, []string{`unknown field "overlp"`}},
		{"no tenant", []string{"get", "nightly"}, exitUsage, []string{"servo schedules get needs --tenant", "Usage: servo schedules get ID --tenant T"}},
		{"no ID", []string{"pause", "--tenant", "acme"}, exitUsage, []string{"servo schedules pause wants ID"}},
		{"backfill without --to", []string{"backfill", "nightly", "--tenant", "acme", "--from", "2024-01-01T00:00:00Z"}, exitUsage, []string{"needs --from and --to"}},
		{"backfill into the future", []string{"backfill", "nightly", "--tenant", "acme", "--from", "2024-01-01T00:00:00Z", "--to", "2999-01-01T00:00:00Z"},
			exitFailure, []string{`schedule "nightly" of tenant "acme": 400 invalid_request (to): must not be in the future`}},
		{"another tenant's id", []string{"get", "poll", "--tenant", "globex"}, exitNotFound, []string{`schedule "poll" of tenant "globex": 404 schedule_not_found`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := cli(c.args...)
			if code != c.code || out != "" {
				t.Errorf("exit %d, want %d; stdout %q; stderr:\n%s", code, c.code, out, errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
		})
	}

	// delete: then get is not found, naming the schedule; globex's
	// nightly is another schedule and stays.
	line(ok("delete", "nightly", "--tenant", "acme"), `^schedule nightly of tenant acme deleted$`)
	for _, args := range [][]string{{"get", "nightly", "--tenant", "acme"}, {"delete", "nightly", "--tenant", "acme"}, {"trigger", "nightly", "--tenant", "acme"}} {
		if _, errOut, code := cli(args...); code != exitNotFound || !strings.Contains(errOut, `servo: schedule "nightly" of tenant "acme": 404 schedule_not_found: no such schedule`) {
			t.Errorf("%v after delete: exit %d, %s", args, code, errOut)
		}
	}
	ok("get", "nightly", "--tenant", "globex")
	// The fires' tasks stay.
	if _, errOut, code := st.cli("get", triggered); code != 0 {
		t.Errorf("get %s after delete: exit %d %s", triggered, code, errOut)
	}
}

// writeFile writes s to a file of t's and returns its path.
func writeFile(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f.json")
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
