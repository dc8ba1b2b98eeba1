package schedule

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // IANA zones wherever the binary runs (a distroless image has none)

	"github.com/robfig/cron/v3"
)

// maxJitter is the most jitter any spec may have.
const maxJitter = time.Hour

// starBit is robfig/cron's mark of a field given as "*".
const starBit = 1 << 63

// Spec is when a schedule fires (the stored, validated form).
type Spec struct {
	// Cron is a five-field cron ("m h dom mon dow") or a shorthand:
	// @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly.
	// It is empty when Every is set.
	Cron string
	// Every is a fixed interval (> 0), instead of Cron.
	Every time.Duration
	// TimeZone is the IANA name Cron is read in; "" is UTC.
	TimeZone string
	// Start is the earliest fire (inclusive). For Every it is also the
	// anchor: fires are Start + k×Every; without it they are the
	// multiples of Every since the Unix epoch.
	Start *time.Time
	// End is the latest fire (inclusive).
	End *time.Time
	// Jitter bounds each fire's Delay.
	Jitter time.Duration
}

// FieldError names the bad field of a spec: one of "cron", "everyMs",
// "timezone", "startAt", "endAt", "jitterMs".
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Schedule is a compiled Spec. It is immutable and safe for concurrent
// use.
type Schedule struct {
	every      time.Duration // or cron:
	cron       *cron.SpecSchedule
	loc        *time.Location // the cron's
	fixedHour  bool           // the cron's hour field is not "*": a repeated wall time fires once
	start, end *time.Time
	jitter     time.Duration
}

// Compile validates s and returns its Schedule. minEvery is the finest
// interval allowed (the sweeper's cadence). Jitter must be at most an
// hour and less than the shortest gap between fires: Every, or for a cron
// the shortest gap between the wall-clock times of day it fires at.
func Compile(s Spec, minEvery time.Duration) (*Schedule, error) {
	c := &Schedule{every: s.Every, jitter: s.Jitter}
	switch {
	case s.Cron != "" && s.Every != 0:
		return nil, fieldErr("cron", "give cron or everyMs, not both")
	case s.Cron == "" && s.Every == 0:
		return nil, fieldErr("cron", "give one of cron or everyMs")
	}
	loc := time.UTC
	if s.TimeZone != "" {
		var err error
		if loc, err = time.LoadLocation(s.TimeZone); err != nil || s.TimeZone == "Local" {
			return nil, fieldErr("timezone", "unknown time zone %q (want an IANA name such as Europe/Berlin)", s.TimeZone)
		}
	}
	if s.Every != 0 {
		switch {
		case s.Every < max(minEvery, time.Millisecond):
			return nil, fieldErr("everyMs", "must be at least %d ms (the sweeper's cadence)", max(minEvery, time.Millisecond).Milliseconds())
		case s.Every%time.Millisecond != 0:
			return nil, fieldErr("everyMs", "must be a whole number of milliseconds")
		}
	} else if err := c.parseCron(s.Cron, loc); err != nil {
		return nil, err
	}
	if s.Start != nil {
		t := s.Start.UTC().Truncate(time.Millisecond)
		c.start = &t
	}
	if s.End != nil {
		t := s.End.UTC().Truncate(time.Millisecond)
		c.end = &t
		if c.start != nil && !t.After(*c.start) {
			return nil, fieldErr("endAt", "must be after startAt")
		}
	}
	gap := c.every
	if c.cron != nil {
		gap = c.cronGap()
	}
	switch {
	case s.Jitter < 0:
		return nil, fieldErr("jitterMs", "must not be negative")
	case s.Jitter%time.Millisecond != 0:
		return nil, fieldErr("jitterMs", "must be a whole number of milliseconds")
	case s.Jitter > maxJitter:
		return nil, fieldErr("jitterMs", "must be at most %d ms", maxJitter.Milliseconds())
	case s.Jitter >= gap:
		return nil, fieldErr("jitterMs", "must be less than %d ms, the shortest gap between fires", gap.Milliseconds())
	}
	return c, nil
}

// parseCron sets c.cron from expr, read in loc.
func (c *Schedule) parseCron(expr string, loc *time.Location) error {
	expr = strings.TrimSpace(expr)
	fields := strings.Fields(expr)
	switch {
	case strings.HasPrefix(expr, "@every"):
		return fieldErr("cron", "@every is not supported: give the interval in everyMs")
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return fieldErr("cron", "give the time zone in timezone, not in cron")
	case !strings.HasPrefix(expr, "@") && len(fields) != 5:
		return fieldErr("cron", "want five fields (minute hour day-of-month month day-of-week), got %d; seconds are not supported", len(fields))
	}
	for _, f := range fields {
		if strings.Trim(f, ",") == "" {
			return fieldErr("cron", "empty field %q", f)
		}
	}
	sched, err := cron.ParseStandard(expr)
	if err != nil {
		return fieldErr("cron", "%v", err)
	}
	c.cron, c.loc = sched.(*cron.SpecSchedule), loc
	c.fixedHour = expr != "@hourly"
	if len(fields) == 5 {
		c.fixedHour = fields[1] != "*"
		// As in Vixie cron, a day field starting with "*" (such as "*/2")
		// is unrestricted: the day must then match both day fields, not
		// either.
		if strings.HasPrefix(fields[2], "*") {
			c.cron.Dom |= starBit
		}
		if strings.HasPrefix(fields[4], "*") {
			c.cron.Dow |= starBit
		}
	}
	if _, ok := c.cronNext(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)); !ok {
		return fieldErr("cron", "never fires (no such day)")
	}
	return nil
}

// cronGap is the shortest gap between two wall-clock times of day the
// cron fires at, the next day's first included.
func (c *Schedule) cronGap() time.Duration {
	var mins []int
	for h := range 24 {
		for m := range 60 {
			if c.cron.Hour&(1<<h) != 0 && c.cron.Minute&(1<<m) != 0 {
				mins = append(mins, h*60+m)
			}
		}
	}
	gap := 24*60 + mins[0] - mins[len(mins)-1]
	for i := 1; i < len(mins); i++ {
		gap = min(gap, mins[i]-mins[i-1])
	}
	return time.Duration(gap) * time.Minute
}

// Next returns the first fire strictly after t, and false when there is
// none (past End).
func (c *Schedule) Next(t time.Time) (time.Time, bool) {
	var f time.Time
	if c.cron == nil {
		f = c.nextEvery(t)
	} else {
		if c.start != nil && t.Before(*c.start) {
			t = c.start.Add(-time.Nanosecond)
		}
		var ok bool
		if f, ok = c.cronNext(t); !ok {
			return time.Time{}, false
		}
	}
	if c.end != nil && f.After(*c.end) {
		return time.Time{}, false
	}
	return f.UTC().Truncate(time.Millisecond), true
}

// nextEvery is the first Start + k×Every (or epoch + k×Every) after t.
func (c *Schedule) nextEvery(t time.Time) time.Time {
	var anchor int64
	if c.start != nil {
		if t.Before(*c.start) {
			return *c.start
		}
		anchor = c.start.UnixMilli()
	}
	every, n := c.every.Milliseconds(), t.UnixMilli()-anchor
	k := n / every
	if n%every < 0 {
		k-- // floor, before the epoch
	}
	return time.UnixMilli(anchor + (k+1)*every)
}

// cronNext is the cron's first fire strictly after t, searched for over
// nine years (a 29 February can be eight away). It walks the matching wall
// times (UTC times standing for wall-clock ones) in order and resolves
// each to its instants; a fall-back within 3h makes wall-time order and
// instant order differ, so the walk starts and ends that much wider.
func (c *Schedule) cronNext(t time.Time) (time.Time, bool) {
	lo := c.wall(t).Add(-max(0, c.offset(t)-c.offset(t.Add(3*time.Hour))))
	var best, bestAt time.Time
	var slack time.Duration
	for day := lo.Truncate(24 * time.Hour); day.Before(lo.AddDate(9, 0, 0)); day = day.AddDate(0, 0, 1) {
		if !best.IsZero() && day.After(bestAt.Add(slack)) {
			break
		}
		if !c.dayMatches(day) {
			continue
		}
		for h := range 24 {
			if c.cron.Hour&(1<<h) == 0 {
				continue
			}
			for m := range 60 {
				at := day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute)
				if c.cron.Minute&(1<<m) == 0 || at.Before(lo) {
					continue
				}
				if !best.IsZero() && at.After(bestAt.Add(slack)) {
					return best, true
				}
				for _, u := range c.instants(at) {
					if u.After(t) && (best.IsZero() || u.Before(best)) {
						best, bestAt = u, at
						slack = max(0, c.offset(u.Add(-3*time.Hour))-c.offset(u))
					}
				}
			}
		}
	}
	return best, !best.IsZero()
}

// dayMatches says whether the cron fires on day's date. As in cron, when
// both day fields are restricted either may match.
func (c *Schedule) dayMatches(day time.Time) bool {
	if c.cron.Month&(1<<day.Month()) == 0 {
		return false
	}
	dom, dow := c.cron.Dom&(1<<day.Day()) != 0, c.cron.Dow&(1<<day.Weekday()) != 0
	if (c.cron.Dom|c.cron.Dow)&starBit != 0 {
		return dom && dow
	}
	return dom || dow
}

// instants are the instants, earliest first, whose wall-clock time is at:
// none in a spring-forward gap (that wall time is skipped), two in a
// fall-back repeat, of which a fixed hour keeps only the first.
func (c *Schedule) instants(at time.Time) []time.Time {
	guess := time.Date(at.Year(), at.Month(), at.Day(), at.Hour(), at.Minute(), 0, 0, c.loc)
	var out []time.Time
	for _, probe := range []time.Duration{-3 * time.Hour, 0, 3 * time.Hour} {
		u := at.Add(-c.offset(guess.Add(probe)))
		if c.wall(u).Equal(at) && !slices.ContainsFunc(out, u.Equal) {
			out = append(out, u)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	if c.fixedHour && len(out) > 1 {
		out = out[:1] // Vixie cron: a fixed hour fires once in a repeated hour
	}
	return out
}

// wall is t's wall-clock time in the cron's zone, as a UTC time.
func (c *Schedule) wall(t time.Time) time.Time {
	w := t.In(c.loc)
	return time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), time.UTC)
}

// offset is the cron's zone's offset from UTC at t.
func (c *Schedule) offset(t time.Time) time.Duration {
	_, off := t.In(c.loc).Zone()
	return time.Duration(off) * time.Second
}

// Between returns the fires f with from <= f <= to, oldest first, at most
// limit of them, and whether more were in the range beyond the limit.
func (c *Schedule) Between(from, to time.Time, limit int) (fires []time.Time, more bool) {
	for f, ok := c.Next(from.Add(-time.Nanosecond)); ok && !f.After(to); f, ok = c.Next(f) {
		if len(fires) >= limit {
			return fires, true
		}
		fires = append(fires, f)
	}
	return fires, false
}

// Delay is the jitter of the fire at fireAt of the schedule named key, in
// [0, Jitter) and whole milliseconds: the first 8 bytes (big-endian) of
// SHA-256(key, a zero byte, fireAt's Unix ms as 8 big-endian bytes),
// modulo Jitter in ms. Every process computes the same. It is 0 when
// Jitter is.
func (c *Schedule) Delay(key string, fireAt time.Time) time.Duration {
	if c.jitter <= 0 {
		return 0
	}
	sum := sha256.Sum256(binary.BigEndian.AppendUint64(append([]byte(key), 0), uint64(fireAt.UnixMilli())))
	return time.Duration(binary.BigEndian.Uint64(sum[:8])%uint64(c.jitter.Milliseconds())) * time.Millisecond
}
