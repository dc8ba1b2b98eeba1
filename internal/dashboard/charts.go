package dashboard

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// Timeline geometry (SVG user units).
const (
	timelineLabel = 90  // the attempt labels' column
	timelinePlot  = 700 // the bars' width at full span
	timelineRow   = 26  // one attempt's row
	timelineBar   = 14  // a bar's height
)

// Timeline is the task page's attempt chart: one row per attempt, oldest
// on top, on one time axis from the first enqueue to the last end (or
// now).
type Timeline struct {
	Width, Height int
	// PlotX is where the time axis starts; Span prints its length.
	PlotX int
	Span  string
	Bars  []Bar
}

// Bar is one attempt on the timeline: a light segment while it waited for
// delivery (enqueue to start), a solid one while it ran (start to end),
// a tick at each heartbeat the attempt keeps (task.Attempt.HeartbeatTimes:
// every one, or an even sample past task.MaxHeartbeatTicks).
type Bar struct {
	Attempt int
	// Y is the row's top; TextY the label's baseline.
	Y, TextY int
	// Waiting and Running are the segments' x and width (width 0: none).
	WaitX, WaitW int
	RunX, RunW   int
	// Ticks are the heartbeats' x, oldest first (an attempt recorded
	// before heartbeat history: its last heartbeat only).
	Ticks []int
	// Class colours the bar by outcome (succeeded, failed, ..., running).
	Class string
	Title string
}

// timelineOf draws attempts (oldest first) up to now.
func timelineOf(attempts []task.Attempt, now time.Time) Timeline {
	tl := Timeline{Width: timelineLabel + timelinePlot + 10, PlotX: timelineLabel, Height: max(1, len(attempts))*timelineRow + 4}
	if len(attempts) == 0 {
		return tl
	}
	start := attempts[0].CreatedAt
	end := start
	ends := make([]time.Time, len(attempts))
	for i, a := range attempts {
		ends[i] = now
		if a.CompletedAt != nil {
			ends[i] = *a.CompletedAt
		}
		if a.CreatedAt.Before(start) {
			start = a.CreatedAt
		}
		if ends[i].After(end) {
			end = ends[i]
		}
	}
	span := end.Sub(start)
	tl.Span = fmtAge(span)
	x := func(t time.Time) int {
		if span <= 0 {
			return timelineLabel
		}
		f := float64(t.Sub(start)) / float64(span)
		return timelineLabel + int(math.Round(min(1, max(0, f))*timelinePlot))
	}
	for i, a := range attempts {
		b := Bar{Attempt: a.Attempt, Y: i*timelineRow + 4, TextY: i*timelineRow + 4 + timelineBar - 2, Class: outcomeClass(a.Outcome)}
		from := a.CreatedAt
		if a.ScheduledAt != nil && a.ScheduledAt.After(from) {
			from = *a.ScheduledAt
		}
		runFrom := ends[i]
		if a.StartedAt != nil {
			runFrom = *a.StartedAt
		}
		b.WaitX, b.WaitW = x(from), max(0, x(runFrom)-x(from))
		if a.StartedAt != nil {
			b.RunX, b.RunW = x(runFrom), max(2, x(ends[i])-x(runFrom))
		}
		times := a.HeartbeatTimes()
		for _, hb := range times {
			b.Ticks = append(b.Ticks, x(hb))
		}
		if len(b.Ticks) == 0 && a.LastHeartbeatAt != nil {
			b.Ticks = []int{x(*a.LastHeartbeatAt)}
		}
		outcome := string(a.Outcome)
		if outcome == "" {
			outcome = "in progress"
		}
		b.Title = fmt.Sprintf("attempt %d: %s, %s from enqueue to end, %s", a.Attempt, outcome, fmtAge(ends[i].Sub(a.CreatedAt)), heartbeatsOf(&a, times))
		tl.Bars = append(tl.Bars, b)
	}
	return tl
}

// heartbeatsOf says how many heartbeats an attempt received, and whether
// its ticks (times, its HeartbeatTimes) are a sample: "3 heartbeats",
// "200 heartbeats (ticks sampled)".
func heartbeatsOf(a *task.Attempt, times []time.Time) string {
	n := a.Heartbeats
	if n == 0 && a.LastHeartbeatAt != nil {
		return "heartbeats not counted (recorded before heartbeat history)"
	}
	s := fmt.Sprintf("%d heartbeats", n)
	if n == 1 {
		s = "1 heartbeat"
	}
	if n > len(times) {
		s += " (ticks sampled)"
	}
	return s
}

// outcomeClass is the CSS class of an outcome.
func outcomeClass(o api.Outcome) string {
	if o == "" {
		return "running"
	}
	return strings.ToLower(string(o))
}

// Chart geometry.
const (
	chartMinutes = 60
	chartColumn  = 12
	chartHeight  = 140
)

// Chart is the health page's transitions per minute by to-state over the
// last hour: one stacked column per minute.
type Chart struct {
	Width, Height int
	Rects         []Rect
	// Max is the tallest column's count; Total counts every transition
	// drawn.
	Max, Total int
	// Truncated: the read was bounded and more transitions exist.
	Truncated bool
	// Legend lists the states with their totals.
	Legend []StateCount
	// Since is the first minute.
	Since time.Time
}

// Rect is one state's share of one minute.
type Rect struct {
	X, Y, W, H int
	Class      string
	Title      string
}

// chartOf draws stamps from since (a minute boundary) over 60 minutes.
func chartOf(stamps []store.TransitionStamp, since time.Time, truncated bool) Chart {
	c := Chart{Width: chartMinutes * chartColumn, Height: chartHeight, Truncated: truncated, Since: since.UTC()}
	counts := make([]map[api.State]int, chartMinutes)
	totals := map[api.State]int{}
	for _, s := range stamps {
		m := int(s.OccurredAt.Sub(since) / time.Minute)
		if s.OccurredAt.Before(since) || m >= chartMinutes {
			continue
		}
		if counts[m] == nil {
			counts[m] = map[api.State]int{}
		}
		counts[m][s.To]++
		totals[s.To]++
		c.Total++
	}
	for _, m := range counts {
		n := 0
		for _, v := range m {
			n += v
		}
		c.Max = max(c.Max, n)
	}
	for _, st := range store.States {
		if totals[st] > 0 {
			c.Legend = append(c.Legend, StateCount{State: st, N: totals[st]})
		}
	}
	if c.Max == 0 {
		return c
	}
	for i, m := range counts {
		y := chartHeight
		for _, st := range store.States {
			n := m[st]
			if n == 0 {
				continue
			}
			h := max(1, n*chartHeight/c.Max)
			y -= h
			c.Rects = append(c.Rects, Rect{X: i * chartColumn, Y: y, W: chartColumn - 2, H: h, Class: strings.ToLower(string(st)),
				Title: fmt.Sprintf("%s: %d → %s", since.Add(time.Duration(i)*time.Minute).UTC().Format("15:04"), n, st)})
		}
	}
	return c
}
