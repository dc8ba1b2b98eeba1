package schedule

import (
	"errors"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const minEvery = 15 * time.Second

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func ptr(s string) *time.Time { t := at(s); return &t }

func compile(t *testing.T, s Spec) *Schedule {
	t.Helper()
	c, err := Compile(s, minEvery)
	if err != nil {
		t.Fatalf("Compile(%+v): %v", s, err)
	}
	return c
}

func TestCompile(t *testing.T) {
	for _, c := range []struct {
		name  string
		spec  Spec
		field string // "" when valid
		msg   string
	}{
		{"neither", Spec{}, "cron", "one of cron or everyMs"},
		{"both", Spec{Cron: "@daily", Every: time.Hour}, "cron", "not both"},
		{"seconds field", Spec{Cron: "0 30 2 * * *"}, "cron", "five fields"},
		{"four fields", Spec{Cron: "30 2 * *"}, "cron", "five fields"},
		{"@every", Spec{Cron: "@every 1h"}, "cron", "everyMs"},
		{"TZ prefix", Spec{Cron: "TZ=Europe/Berlin 0 0 * * *"}, "cron", "timezone"},
		{"TZ prefix alone", Spec{Cron: "CRON_TZ=UTC"}, "cron", "timezone"}, // robfig/cron panics on it
		{"minute out of range", Spec{Cron: "61 * * * *"}, "cron", "above maximum"},
		{"bad name", Spec{Cron: "0 0 * * funday"}, "cron", "funday"},
		{"bad shorthand", Spec{Cron: "@fortnightly"}, "cron", "unrecognized descriptor"},
		{"empty field", Spec{Cron: ", * * * *"}, "cron", "empty field"},
		{"never fires", Spec{Cron: "0 0 30 2 *"}, "cron", "never fires"},
		{"below the sweeper", Spec{Every: 10 * time.Second}, "everyMs", "must be at least 15000 ms (the sweeper's cadence)"},
		{"negative every", Spec{Every: -time.Minute}, "everyMs", "at least 15000 ms"},
		{"sub-ms every", Spec{Every: time.Minute + time.Microsecond}, "everyMs", "whole number of milliseconds"},
		{"unknown zone", Spec{Cron: "@daily", TimeZone: "Mars/Olympus_Mons"}, "timezone", `"Mars/Olympus_Mons"`},
		{"Local zone", Spec{Cron: "@daily", TimeZone: "Local"}, "timezone", `"Local"`},
		{"end at start", Spec{Cron: "@daily", Start: ptr("2026-01-01T00:00:00Z"), End: ptr("2026-01-01T00:00:00Z")}, "endAt", "after startAt"},
		{"end before start", Spec{Every: time.Hour, Start: ptr("2026-02-01T00:00:00Z"), End: ptr("2026-01-01T00:00:00Z")}, "endAt", "after startAt"},
		{"negative jitter", Spec{Cron: "@daily", Jitter: -time.Millisecond}, "jitterMs", "negative"},
		{"jitter over an hour", Spec{Cron: "@daily", Jitter: time.Hour + time.Millisecond}, "jitterMs", "at most 3600000 ms"},
		{"jitter = every", Spec{Every: time.Minute, Jitter: time.Minute}, "jitterMs", "less than 60000 ms"},
		{"jitter over cron gap", Spec{Cron: "*/5 * * * *", Jitter: 5 * time.Minute}, "jitterMs", "less than 300000 ms"},
		{"jitter over hourly", Spec{Cron: "@hourly", Jitter: time.Hour}, "jitterMs", "less than 3600000 ms"},
		{"sub-ms jitter", Spec{Cron: "@daily", Jitter: time.Microsecond}, "jitterMs", "whole number"},

		{"cron in a zone", Spec{Cron: "0 9 * * mon-fri", TimeZone: "America/New_York", Jitter: time.Hour}, "", ""},
		{"every at the minimum", Spec{Every: minEvery, Jitter: minEvery - time.Millisecond}, "", ""},
		{"29 February", Spec{Cron: "0 0 29 2 *"}, "", ""},
		{"shorthands", Spec{Cron: " @annually "}, "", ""},
		{"question mark", Spec{Cron: "0 0 ? * 1"}, "", ""},
		{"bounded", Spec{Every: time.Hour, Start: ptr("2026-01-01T00:00:00Z"), End: ptr("2026-01-01T00:00:00.001Z")}, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Compile(c.spec, minEvery)
			if c.field == "" {
				if err != nil {
					t.Fatalf("Compile: %v", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Compile: %v, want a *FieldError on %s", err, c.field)
			}
			if fe.Field != c.field || !strings.Contains(fe.Message, c.msg) {
				t.Errorf("Compile: %q, want field %s and a message with %q", err, c.field, c.msg)
			}
		})
	}
	for _, s := range []string{"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"} {
		if _, err := Compile(Spec{Cron: s}, minEvery); err != nil {
			t.Errorf("Compile(%s): %v", s, err)
		}
	}
}

// nextCase is a spec, a time, and the fires that successive Next calls
// give from it; done says Next then reports none.
type nextCase struct {
	name string
	spec Spec
	from string
	want []string
	done bool
}

func runNext(t *testing.T, cases []nextCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := compile(t, c.spec)
			from := at(c.from)
			for i, w := range c.want {
				got, ok := s.Next(from)
				if !ok || !got.Equal(at(w)) {
					t.Fatalf("fire %d: Next(%s) = %s, %v; want %s", i, from.Format(time.RFC3339Nano), got.Format(time.RFC3339Nano), ok, w)
				}
				if got.Location() != time.UTC || got.Nanosecond()%int(time.Millisecond) != 0 {
					t.Fatalf("Next = %v, want UTC at ms precision", got)
				}
				from = got
			}
			if got, ok := s.Next(from); ok == c.done {
				t.Errorf("after the fires, Next(%s) = %s, %v; want ok=%v", from, got, ok, !c.done)
			}
		})
	}
}

func TestNext(t *testing.T) {
	runNext(t, []nextCase{
		{name: "@yearly", spec: Spec{Cron: "@yearly"}, from: "2026-05-05T10:00:00Z", want: []string{"2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"}},
		{name: "@annually", spec: Spec{Cron: "@annually"}, from: "2026-12-31T23:59:59.999Z", want: []string{"2027-01-01T00:00:00Z"}},
		{name: "@monthly", spec: Spec{Cron: "@monthly"}, from: "2026-05-05T10:00:00Z", want: []string{"2026-06-01T00:00:00Z", "2026-07-01T00:00:00Z"}},
		{name: "@weekly is Sunday", spec: Spec{Cron: "@weekly"}, from: "2026-05-05T10:00:00Z", want: []string{"2026-05-10T00:00:00Z", "2026-05-17T00:00:00Z"}},
		{name: "@daily in Berlin", spec: Spec{Cron: "@daily", TimeZone: "Europe/Berlin"}, from: "2026-05-05T10:00:00Z", want: []string{"2026-05-05T22:00:00Z", "2026-05-06T22:00:00Z"}},
		{name: "@midnight", spec: Spec{Cron: "@midnight"}, from: "2026-05-05T00:00:00Z", want: []string{"2026-05-06T00:00:00Z"}},
		{name: "@hourly", spec: Spec{Cron: "@hourly"}, from: "2026-05-05T10:30:00Z", want: []string{"2026-05-05T11:00:00Z", "2026-05-05T12:00:00Z"}},
		{name: "strictly after", spec: Spec{Cron: "*/15 * * * *"}, from: "2026-05-05T10:15:00Z", want: []string{"2026-05-05T10:30:00Z"}},
		{name: "just before", spec: Spec{Cron: "*/15 * * * *"}, from: "2026-05-05T10:14:59.999999Z", want: []string{"2026-05-05T10:15:00Z"}},
		{name: "weekdays in New York", spec: Spec{Cron: "0 9 * * mon-fri", TimeZone: "America/New_York"}, from: "2026-05-08T14:00:00Z",
			want: []string{"2026-05-11T13:00:00Z", "2026-05-12T13:00:00Z"}},
		// Both day fields restricted: either matches (the 15th, or a Monday).
		{name: "dom or dow", spec: Spec{Cron: "0 0 15 * 1"}, from: "2026-05-12T00:00:00Z",
			want: []string{"2026-05-15T00:00:00Z", "2026-05-18T00:00:00Z", "2026-05-25T00:00:00Z", "2026-06-01T00:00:00Z", "2026-06-08T00:00:00Z", "2026-06-15T00:00:00Z", "2026-06-22T00:00:00Z"}},
		{name: "dow only", spec: Spec{Cron: "0 0 * * 1"}, from: "2026-05-12T00:00:00Z", want: []string{"2026-05-18T00:00:00Z", "2026-05-25T00:00:00Z"}},
		{name: "dom only", spec: Spec{Cron: "0 0 15 * *"}, from: "2026-05-12T00:00:00Z", want: []string{"2026-05-15T00:00:00Z", "2026-06-15T00:00:00Z"}},
		// A day field starting with "*" is unrestricted (Vixie cron): odd
		// days that are Mondays, not odd days or Mondays.
		{name: "*/2 dom and dow", spec: Spec{Cron: "0 0 */2 * 1"}, from: "2026-05-31T00:00:00Z", want: []string{"2026-06-01T00:00:00Z", "2026-06-15T00:00:00Z", "2026-06-29T00:00:00Z"}},
		{name: "29 February, eight years on", spec: Spec{Cron: "0 0 29 2 *"}, from: "2097-03-01T00:00:00Z", want: []string{"2104-02-29T00:00:00Z"}},
		{name: "start", spec: Spec{Cron: "0 * * * *", Start: ptr("2026-05-05T10:30:00Z")}, from: "2026-05-05T09:00:00Z", want: []string{"2026-05-05T11:00:00Z"}},
		{name: "start is inclusive", spec: Spec{Cron: "0 * * * *", Start: ptr("2026-05-05T11:00:00Z")}, from: "2026-05-01T00:00:00Z", want: []string{"2026-05-05T11:00:00Z"}},
		{name: "end is inclusive", spec: Spec{Cron: "0 * * * *", End: ptr("2026-05-05T12:00:00Z")}, from: "2026-05-05T10:30:00Z",
			want: []string{"2026-05-05T11:00:00Z", "2026-05-05T12:00:00Z"}, done: true},
		{name: "past end", spec: Spec{Cron: "0 * * * *", End: ptr("2026-05-05T12:59:59Z")}, from: "2026-05-05T12:00:00Z", done: true},
		{name: "every, anchored at the epoch", spec: Spec{Every: 7 * time.Minute}, from: "2026-01-01T10:00:00Z", want: []string{"2026-01-01T10:02:00Z", "2026-01-01T10:09:00Z"}},
		{name: "every, on a fire", spec: Spec{Every: 15 * time.Minute}, from: "2026-01-01T10:15:00Z", want: []string{"2026-01-01T10:30:00Z"}},
		{name: "every, before the epoch", spec: Spec{Every: time.Hour}, from: "1969-12-31T22:30:00Z", want: []string{"1969-12-31T23:00:00Z", "1970-01-01T00:00:00Z"}},
		{name: "every, sub-ms time", spec: Spec{Every: 20 * time.Second}, from: "2026-01-01T10:00:19.9995Z", want: []string{"2026-01-01T10:00:20Z"}},
		{name: "every, anchored at start", spec: Spec{Every: 90 * time.Second, Start: ptr("2026-01-01T10:00:00.25Z")}, from: "2025-12-01T00:00:00Z",
			want: []string{"2026-01-01T10:00:00.25Z", "2026-01-01T10:01:30.25Z", "2026-01-01T10:03:00.25Z"}},
		{name: "every, from start", spec: Spec{Every: 90 * time.Second, Start: ptr("2026-01-01T10:00:00.25Z")}, from: "2026-01-01T10:00:00.25Z",
			want: []string{"2026-01-01T10:01:30.25Z"}},
		{name: "every, from within", spec: Spec{Every: 90 * time.Second, Start: ptr("2026-01-01T10:00:00.25Z")}, from: "2026-01-02T00:00:00Z",
			want: []string{"2026-01-02T00:00:00.25Z"}},
		{name: "every, to end", spec: Spec{Every: time.Hour, Start: ptr("2026-01-01T10:00:00Z"), End: ptr("2026-01-01T12:00:00Z")}, from: "2026-01-01T00:00:00Z",
			want: []string{"2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z", "2026-01-01T12:00:00Z"}, done: true},
	})
}

// Europe/Berlin: 2026-03-29 02:00 CET → 03:00 CEST (01:00Z), 2026-10-25
// 03:00 CEST → 02:00 CET (01:00Z). America/New_York: 2026-03-08 02:00
// EST → 03:00 EDT (07:00Z), 2026-11-01 02:00 EDT → 01:00 EST (06:00Z).
func TestDST(t *testing.T) {
	berlin := func(cron string) Spec { return Spec{Cron: cron, TimeZone: "Europe/Berlin"} }
	ny := func(cron string) Spec { return Spec{Cron: cron, TimeZone: "America/New_York"} }
	runNext(t, []nextCase{
		// Spring forward: a wall time that does not exist is skipped.
		{name: "Berlin skipped 02:30", spec: berlin("30 2 * * *"), from: "2026-03-28T01:30:00Z", want: []string{"2026-03-30T00:30:00Z"}},
		{name: "Berlin skipped 02:00", spec: berlin("0 2 * * *"), from: "2026-03-28T01:00:00Z", want: []string{"2026-03-30T00:00:00Z"}},
		{name: "Berlin hourly in spring", spec: berlin("@hourly"), from: "2026-03-28T23:30:00Z",
			want: []string{"2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"}},
		{name: "New York skipped 02:30", spec: ny("30 2 * * *"), from: "2026-03-07T07:30:00Z", want: []string{"2026-03-09T06:30:00Z"}},
		// Fall back: a fixed hour fires once, at the first of the two.
		{name: "Berlin repeated 02:30", spec: berlin("30 2 * * *"), from: "2026-10-24T00:30:00Z",
			want: []string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{name: "Berlin repeated 02:00 and 02:30", spec: berlin("0,30 2 * * *"), from: "2026-10-24T23:50:00Z",
			want: []string{"2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:00:00Z"}},
		{name: "Berlin within the repeat", spec: berlin("30 2 * * *"), from: "2026-10-25T01:10:00Z", want: []string{"2026-10-26T01:30:00Z"}},
		{name: "New York repeated 01:30", spec: ny("30 1 * * *"), from: "2026-10-31T05:30:00Z",
			want: []string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{name: "Berlin repeated, 2040", spec: berlin("30 2 * * *"), from: "2040-10-27T00:30:00Z",
			want: []string{"2040-10-28T00:30:00Z", "2040-10-29T01:30:00Z"}},
		// Lord Howe falls back half an hour: 02:00 +11 → 01:30 +1030 (15:00Z).
		{name: "Lord Howe repeated 01:45", spec: Spec{Cron: "45 1 * * *", TimeZone: "Australia/Lord_Howe"}, from: "2026-04-03T14:45:00Z",
			want: []string{"2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"}},
		// Lord Howe's half-hour changes, which robfig/cron's own Next gets
		// wrong (it steps whole hours): 02:05 is after the repeat.
		{name: "Lord Howe after the repeat", spec: Spec{Cron: "5 2 * * *", TimeZone: "Australia/Lord_Howe"}, from: "2026-04-04T03:53:00Z",
			want: []string{"2026-04-04T15:35:00Z"}},
		{name: "Lord Howe skipped 02:15", spec: Spec{Cron: "15 2 * * *", TimeZone: "Australia/Lord_Howe"}, from: "2026-10-02T15:45:00Z",
			want: []string{"2026-10-04T15:15:00Z"}},
		// Azores falls back at 01:00 +00 → 00:00 -01, repeating midnight's
		// hour.
		{name: "Azores repeated 00:30", spec: Spec{Cron: "30 0 25 10 *", TimeZone: "Atlantic/Azores"}, from: "2026-10-01T00:00:00Z",
			want: []string{"2026-10-25T00:30:00Z", "2027-10-25T00:30:00Z"}},
		// A wildcard hour keeps firing at every real interval.
		{name: "Berlin hourly at fall back", spec: berlin("0 * * * *"), from: "2026-10-24T23:30:00Z",
			want: []string{"2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"}},
		{name: "Berlin @hourly at fall back", spec: berlin("@hourly"), from: "2026-10-24T23:30:00Z",
			want: []string{"2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"}},
		{name: "Berlin */30 at fall back", spec: berlin("*/30 * * * *"), from: "2026-10-24T23:50:00Z",
			want: []string{"2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z", "2026-10-25T02:00:00Z"}},
		{name: "New York */20 at fall back", spec: ny("*/20 * * * *"), from: "2026-11-01T05:30:00Z",
			want: []string{"2026-11-01T05:40:00Z", "2026-11-01T06:00:00Z", "2026-11-01T06:20:00Z"}},
		{name: "Azores wildcard hour", spec: Spec{Cron: "30 * 25 10 *", TimeZone: "Atlantic/Azores"}, from: "2026-10-01T00:00:00Z",
			want: []string{"2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z", "2026-10-25T02:30:00Z"}},
		// Every is elapsed time; the time zone does not apply.
		{name: "every across fall back", spec: Spec{Every: time.Hour, TimeZone: "Europe/Berlin", Start: ptr("2026-10-24T22:00:00Z")}, from: "2026-10-24T23:00:00Z",
			want: []string{"2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"}},
		{name: "every across spring forward", spec: Spec{Every: time.Hour, TimeZone: "Europe/Berlin"}, from: "2026-03-29T00:00:00Z",
			want: []string{"2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"}},
	})
}

func TestBetween(t *testing.T) {
	hourly := compile(t, Spec{Cron: "0 * * * *"})
	hours := func(hs ...int) []time.Time {
		var out []time.Time
		for _, h := range hs {
			out = append(out, time.Date(2026, 5, 5, h, 0, 0, 0, time.UTC))
		}
		return out
	}
	for _, c := range []struct {
		name     string
		s        *Schedule
		from, to string
		limit    int
		want     []time.Time
		more     bool
	}{
		{"inclusive", hourly, "2026-05-05T10:00:00Z", "2026-05-05T13:00:00Z", 10, hours(10, 11, 12, 13), false},
		{"exclusive of the neighbours", hourly, "2026-05-05T10:00:00.001Z", "2026-05-05T12:59:59.999Z", 10, hours(11, 12), false},
		{"limit", hourly, "2026-05-05T10:00:00Z", "2026-05-05T13:00:00Z", 2, hours(10, 11), true},
		{"limit reached exactly", hourly, "2026-05-05T10:00:00Z", "2026-05-05T13:00:00Z", 4, hours(10, 11, 12, 13), false},
		{"limit 0", hourly, "2026-05-05T10:00:00Z", "2026-05-05T13:00:00Z", 0, nil, true},
		{"empty", hourly, "2026-05-05T10:01:00Z", "2026-05-05T10:59:00Z", 5, nil, false},
		{"reversed", hourly, "2026-05-05T13:00:00Z", "2026-05-05T10:00:00Z", 5, nil, false},
		{"end", compile(t, Spec{Every: time.Hour, End: ptr("2026-05-05T11:30:00Z")}), "2026-05-05T10:00:00Z", "2026-05-05T23:00:00Z", 5, hours(10, 11), false},
		{"fall back", compile(t, Spec{Cron: "30 2 * * *", TimeZone: "Europe/Berlin"}), "2026-10-24T00:00:00Z", "2026-10-26T23:00:00Z", 5,
			[]time.Time{at("2026-10-24T00:30:00Z"), at("2026-10-25T00:30:00Z"), at("2026-10-26T01:30:00Z")}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, more := c.s.Between(at(c.from), at(c.to), c.limit)
			if !slices.EqualFunc(got, c.want, time.Time.Equal) || more != c.more {
				t.Errorf("Between = %v, %v; want %v, %v", got, more, c.want, c.more)
			}
		})
	}
}

func TestDelay(t *testing.T) {
	if d := compile(t, Spec{Cron: "@daily"}).Delay("s", at("2026-05-05T00:00:00Z")); d != 0 {
		t.Errorf("Delay without jitter = %v", d)
	}
	spec := Spec{Cron: "@hourly", Jitter: 10 * time.Minute}
	s, again := compile(t, spec), compile(t, spec)
	// Pinned: every process, now and later, computes this one.
	if d := s.Delay("nightly-report", at("2026-05-05T10:00:00Z")); d != 45042*time.Millisecond {
		t.Errorf("Delay = %v (%d ms), want the pinned 45042 ms", d, d.Milliseconds())
	}
	fires, _ := s.Between(at("2026-01-01T00:00:00Z"), at("2027-01-01T00:00:00Z"), 1000)
	seen := map[time.Duration]bool{}
	otherKey := 0
	var sum time.Duration
	for _, f := range fires {
		d := s.Delay("nightly-report", f)
		if d < 0 || d >= spec.Jitter || d%time.Millisecond != 0 {
			t.Fatalf("Delay(%s) = %v, want whole ms in [0, %v)", f, d, spec.Jitter)
		}
		if again.Delay("nightly-report", f) != d || s.Delay("nightly-report", f.In(time.FixedZone("X", 3600))) != d {
			t.Fatalf("Delay(%s) differs between calls", f)
		}
		if s.Delay("nightly-report-2", f) != d {
			otherKey++
		}
		seen[d] = true
		sum += d
	}
	if len(fires) != 1000 || len(seen) < 990 || otherKey < 990 {
		t.Errorf("%d fires: %d distinct delays, %d differ for another key; want ~1000", len(fires), len(seen), otherKey)
	}
	if mean := sum / time.Duration(len(fires)); mean < 4*time.Minute || mean > 6*time.Minute {
		t.Errorf("mean delay %v, want about 5m", mean)
	}
}

func seed(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SERVO_TEST_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (set SERVO_TEST_SEED to repeat)", seed)
	return rand.New(rand.NewPCG(seed, 3))
}

var zones = []string{"UTC", "Europe/Berlin", "America/New_York", "Atlantic/Azores", "Australia/Lord_Howe", "Pacific/Chatham", "America/Santiago", "Asia/Kolkata"}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

// randomSpec draws a cron spec in a zone with DST, and a time near one
// of its 2026 transitions (at ms precision).
func randomSpec(r *rand.Rand) (Spec, time.Time) {
	s := Spec{
		Cron: strings.Join([]string{
			pick(r, "*", "*/15", "0", "30", "0,30", "5-10", "*/7", "45"),
			pick(r, "*", "*", "2", "1-3", "*/2", "0", "23", "2,3", "1", "0-2"),
			pick(r, "*", "*", "*", "25", "*/2", "1-7", "29"),
			pick(r, "*", "*", "*", "3", "10", "3,4,9,10,11"),
			pick(r, "*", "*", "0", "1-5", "sun", "*/3"),
		}, " "),
		TimeZone: pick(r, zones...),
	}
	loc, _ := time.LoadLocation(s.TimeZone)
	around := []time.Time{time.Date(2026, 6, 1, 0, 0, 0, 0, loc)}
	for u := time.Date(2026, 1, 1, 0, 0, 0, 0, loc); ; {
		_, end := u.ZoneBounds()
		if end.IsZero() || end.Year() > 2026 {
			break
		}
		around, u = append(around, end), end
	}
	t := pick(r, around...).Add(time.Duration(r.Int64N(int64(60*time.Hour))) - 30*time.Hour).Truncate(time.Millisecond)
	switch r.IntN(4) {
	case 0:
		st := t.Add(time.Duration(r.IntN(600)) * time.Minute)
		s.Start = &st
	case 1:
		e := t.Add(time.Duration(r.IntN(3000)) * time.Minute)
		s.End = &e
	}
	return s, t
}

// bruteNext is Next by brute force over every minute up to t+horizon:
// the cron's fields read in wall-clock time, a fixed hour's repeated wall
// time skipped.
func bruteNext(c *Schedule, t time.Time, horizon time.Duration) (f time.Time, found bool) {
	loc := c.loc
	matches := func(u time.Time) bool {
		w := u.In(loc)
		dom, dow := c.cron.Dom&(1<<w.Day()) != 0, c.cron.Dow&(1<<w.Weekday()) != 0
		day := dom || dow
		if (c.cron.Dom|c.cron.Dow)&starBit != 0 {
			day = dom && dow
		}
		return c.cron.Minute&(1<<w.Minute()) != 0 && c.cron.Hour&(1<<w.Hour()) != 0 && c.cron.Month&(1<<w.Month()) != 0 && day
	}
	seenBefore := func(u time.Time) bool {
		wall := u.In(loc).Format("2006-01-02 15:04")
		for k := 1; k <= 180; k++ {
			if u.Add(-time.Duration(k)*time.Minute).In(loc).Format("2006-01-02 15:04") == wall {
				return true
			}
		}
		return false
	}
	for u := t.Truncate(time.Minute); u.Before(t.Add(horizon)); u = u.Add(time.Minute) {
		switch {
		case !u.After(t) || c.start != nil && u.Before(*c.start):
		case c.end != nil && u.After(*c.end):
			return time.Time{}, true
		case matches(u) && !(c.fixedHour && seenBefore(u)):
			return u, true
		}
	}
	return time.Time{}, false
}

// Next agrees with a brute-force search over random crons in zones with
// daylight saving, near their transitions.
func TestNextBruteForce(t *testing.T) {
	r := seed(t)
	const horizon = 72 * time.Hour
	for i := range 200 {
		spec, from := randomSpec(r)
		s := compile(t, spec)
		for range 3 {
			want, found := bruteNext(s, from, horizon)
			got, ok := s.Next(from)
			if !found { // none within the horizon: Next's is beyond it, or none
				if ok && got.Before(from.Add(horizon)) {
					t.Fatalf("%d: %+v: Next(%s) = %s, brute force finds none before %s", i, spec, from, got, from.Add(horizon))
				}
				break
			}
			if ok != !want.IsZero() || !got.Equal(want) {
				t.Fatalf("%d: %+v: Next(%s) = %s, %v; brute force %s", i, spec, from.Format(time.RFC3339Nano), got, ok, want)
			}
			if !ok {
				break
			}
			from = got
		}
	}
}

// Between agrees with repeated Next calls over random specs and ranges.
func TestBetweenAgreesWithNext(t *testing.T) {
	r := seed(t)
	for i := range 200 {
		spec, from := randomSpec(r)
		if r.IntN(2) == 0 {
			spec.Cron, spec.Every = "", pick(r, 15*time.Second, time.Minute, 7*time.Minute, 90*time.Minute, 25*time.Hour, 15001*time.Millisecond)
		}
		s := compile(t, spec)
		to := from.Add(time.Duration(r.Int64N(int64(72 * time.Hour))))
		if r.IntN(10) == 0 {
			to = from.Add(-time.Minute)
		}
		limit := r.IntN(60)
		var all []time.Time
		for f, ok := s.Next(from.Add(-time.Nanosecond)); ok && !f.After(to); f, ok = s.Next(f) {
			all = append(all, f)
		}
		got, more := s.Between(from, to, limit)
		want := all[:min(limit, len(all))]
		if !slices.EqualFunc(got, want, time.Time.Equal) || more != (len(all) > limit) {
			t.Fatalf("%d: %+v: Between(%s, %s, %d) = %v, %v; Next gives %v", i, spec, from, to, limit, got, more, all)
		}
		for j, f := range got {
			if f.Before(from) || f.After(to) || f.Location() != time.UTC || j > 0 && !f.After(got[j-1]) {
				t.Fatalf("%d: fire %s out of [%s, %s] or order", i, f, from, to)
			}
		}
	}
}
