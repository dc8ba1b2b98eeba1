package dashboard

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// beaten is attempt 1 of a running task after heartbeats at the given
// seconds from t0, recorded by the task's state machine.
func beaten(t *testing.T, t0 time.Time, secs ...float64) task.Attempt {
	t.Helper()
	started := t0.Add(time.Second)
	tk := task.Task{ID: "tsk_01JTEST0000000000000000000", State: api.Running, Attempt: 1,
		Timing: api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 60000}}
	cur := &task.Attempt{Attempt: 1, WorkerID: "w", CreatedAt: t0, StartedAt: &started}
	for i, s := range secs {
		// A new progress each time: every heartbeat is written (one that
		// reports nothing new with over half its lease left is not).
		p := i % 101
		r := task.Apply(tk, cur, task.Event{Kind: task.EventHeartbeat, Attempt: 1, WorkerID: "w",
			Now: t0.Add(time.Duration(s * float64(time.Second))), Heartbeat: &api.HeartbeatRequest{Attempt: 1, WorkerID: "w", ProgressPct: &p}})
		if !r.Write || r.Attempt == nil {
			t.Fatalf("heartbeat at %gs not applied: %+v", s, r)
		}
		tk, cur = r.Task, r.Attempt
	}
	if cur.Heartbeats != len(secs) {
		t.Fatalf("%d heartbeats counted, want %d", cur.Heartbeats, len(secs))
	}
	return *cur
}

func TestTimelineOf(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) *time.Time { v := t0.Add(time.Duration(s * float64(time.Second))); return &v }
	// Attempt 1 heartbeats at 2 s and 3 s, then fails at 4 s.
	failed := beaten(t, t0, 2, 3)
	failed.Outcome, failed.CompletedAt = api.OutcomeFailed, at(4)
	// 1000 heartbeats, every 5 ms from 1 s: a sample is kept.
	many := make([]float64, 1000)
	for i := range many {
		many[i] = 1 + float64(i)*0.005
	}
	long := beaten(t, t0, many...)
	cases := []struct {
		name     string
		attempts []task.Attempt
		now      time.Time
		// want per bar: wait x, wait w, run x, run w, class.
		want [][5]any
		// ticks per bar.
		ticks [][]int
	}{
		{"none", nil, t0, nil, nil},
		{"retried: a failed attempt with two heartbeats, a gap, a successful one", []task.Attempt{
			failed,
			{Attempt: 2, Outcome: api.OutcomeSucceeded, CreatedAt: *at(4), ScheduledAt: at(6), StartedAt: at(7), CompletedAt: at(10)},
		}, t0.Add(time.Minute), [][5]any{
			{90, 70, 160, 210, "failed"},
			{510, 70, 580, 210, "succeeded"},
		}, [][]int{{230, 300}, nil}},
		{"running: ends now", []task.Attempt{
			{Attempt: 1, CreatedAt: t0, StartedAt: at(5)},
		}, t0.Add(10 * time.Second), [][5]any{{90, 350, 440, 350, "running"}}, [][]int{nil}},
		{"recorded before heartbeat history: a tick at the last heartbeat", []task.Attempt{
			{Attempt: 1, CreatedAt: t0, StartedAt: at(5), LastHeartbeatAt: at(6)},
		}, t0.Add(10 * time.Second), [][5]any{{90, 350, 440, 350, "running"}}, [][]int{{510}}},
		{"never started", []task.Attempt{
			{Attempt: 1, Outcome: api.OutcomeCancelled, CreatedAt: t0, CompletedAt: at(2)},
		}, t0.Add(time.Minute), [][5]any{{90, 700, 0, 0, "cancelled"}}, [][]int{nil}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tl := timelineOf(c.attempts, c.now)
			if len(tl.Bars) != len(c.want) {
				t.Fatalf("%d bars, want %d", len(tl.Bars), len(c.want))
			}
			for i, b := range tl.Bars {
				got := [5]any{b.WaitX, b.WaitW, b.RunX, b.RunW, b.Class}
				if got != c.want[i] {
					t.Errorf("bar %d = %v, want %v", i+1, got, c.want[i])
				}
				if !slices.Equal(b.Ticks, c.ticks[i]) {
					t.Errorf("bar %d ticks %v, want %v", i+1, b.Ticks, c.ticks[i])
				}
			}
		})
	}
	t.Run("sampled", func(t *testing.T) {
		tl := timelineOf([]task.Attempt{long}, t0.Add(10*time.Second))
		n := len(long.HeartbeatTimes())
		if n == 0 || n > task.MaxHeartbeatTicks || len(tl.Bars[0].Ticks) != n {
			t.Fatalf("%d ticks drawn, %d kept, at most %d", len(tl.Bars[0].Ticks), n, task.MaxHeartbeatTicks)
		}
		if !slices.IsSorted(tl.Bars[0].Ticks) || tl.Bars[0].Ticks[0] != 160 {
			t.Errorf("ticks %v: want sorted from the first heartbeat's x 160", tl.Bars[0].Ticks)
		}
	})
}

func TestHeartbeatsOf(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	many := make([]float64, 100)
	for i := range many {
		many[i] = float64(i)
	}
	last := t0.Add(time.Second)
	for _, c := range []struct {
		name string
		a    task.Attempt
		want string
	}{
		{"none", task.Attempt{Attempt: 1}, "0 heartbeats"},
		{"one", beaten(t, t0, 2), "1 heartbeat"},
		{"three", beaten(t, t0, 2, 3, 4), "3 heartbeats"},
		{"sampled", beaten(t, t0, many...), "100 heartbeats (ticks sampled)"},
		{"before heartbeat history", task.Attempt{Attempt: 1, LastHeartbeatAt: &last}, "heartbeats not counted (recorded before heartbeat history)"},
	} {
		if got := heartbeatsOf(&c.a, c.a.HeartbeatTimes()); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestChartOf(t *testing.T) {
	since := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	stamps := []store.TransitionStamp{
		{To: api.Running, OccurredAt: since.Add(30 * time.Second)},
		{To: api.Running, OccurredAt: since.Add(50 * time.Second)},
		{To: api.Succeeded, OccurredAt: since.Add(59 * time.Second)},
		{To: api.Failed, OccurredAt: since.Add(59*time.Minute + 59*time.Second)},
		{To: api.Failed, OccurredAt: since.Add(-time.Second)}, // before the hour
		{To: api.Failed, OccurredAt: since.Add(time.Hour)},    // after it
	}
	c := chartOf(stamps, since, true)
	if c.Total != 4 || c.Max != 3 || !c.Truncated {
		t.Fatalf("total %d max %d truncated %v, want 4, 3, true", c.Total, c.Max, c.Truncated)
	}
	want := []Rect{
		{X: 0, Y: 140 - 93, W: 10, H: 93, Class: "running"},
		{X: 0, Y: 140 - 93 - 46, W: 10, H: 46, Class: "succeeded"},
		{X: 59 * 12, Y: 140 - 46, W: 10, H: 46, Class: "failed"},
	}
	if len(c.Rects) != len(want) {
		t.Fatalf("%d rects, want %d: %+v", len(c.Rects), len(want), c.Rects)
	}
	for i, r := range c.Rects {
		r.Title = ""
		if r != want[i] {
			t.Errorf("rect %d = %+v, want %+v", i, r, want[i])
		}
	}
	if len(c.Legend) != 3 || c.Legend[0] != (StateCount{State: api.Running, N: 2}) {
		t.Errorf("legend %+v", c.Legend)
	}
}

// TestHubSharesReads: many subscribers of one view share one refresher;
// past MaxViews distinct views a subscription is refused; a view with no
// subscriber left stops being read.
func TestHubSharesReads(t *testing.T) {
	h := newHub(2, 100, 100, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var reads atomic.Int64
	v := func(key string) view {
		return view{key: key, every: 20 * time.Millisecond, load: func(context.Context) (any, error) { return reads.Add(1), nil }}
	}
	render := func(data any) (string, error) { return "n", nil }
	var unsubs []func()
	for range 50 {
		ch, unsub, err := h.subscribe(v("a"), "me", render)
		if err != nil {
			t.Fatal(err)
		}
		unsubs = append(unsubs, unsub)
		_ = ch
	}
	if _, _, err := h.subscribe(v("b"), "me", render); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.subscribe(v("c"), "me", render); err != errTooManyViews {
		t.Fatalf("a third view: %v, want errTooManyViews", err)
	}
	time.Sleep(200 * time.Millisecond) // ~10 periods
	h.mu.Lock()
	topics := len(h.topics)
	h.mu.Unlock()
	if topics != 2 {
		t.Fatalf("%d topics, want 2", topics)
	}
	// Two views, each read at most once a period: at most ~2 × 11 reads,
	// however many subscribers (50 on "a").
	if n := reads.Load(); n > 30 {
		t.Errorf("%d reads for 2 views in ~10 periods", n)
	}
	for _, u := range unsubs {
		u()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.mu.Lock()
		_, ok := h.topics["a"]
		h.mu.Unlock()
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("view a is still refreshed with no subscriber")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSSEEventFraming: whatever the data holds (a worker's message with a
// bare CR, CRLF or LF), every line of the event, split as a browser splits
// the stream, is the event's name or a data line: a CR cannot end a data
// line early and start a field (an event name, an id, a retry) of its own.
func TestSSEEventFraming(t *testing.T) {
	for _, data := range []string{
		"plain",
		"a\nb",
		"msg\revent: forged\rdata: <script>",
		"msg\r\nid: 7\r\nretry: 1",
		"\r\r\n\n",
	} {
		ev := sseEvent("view", data)
		if !strings.HasSuffix(ev, "\n\n") {
			t.Fatalf("%q: the event does not end with a blank line: %q", data, ev)
		}
		lines := regexp.MustCompile("\r\n|\r|\n").Split(strings.TrimSuffix(ev, "\n\n"), -1)
		if lines[0] != "event: view" {
			t.Fatalf("%q: first line %q", data, lines[0])
		}
		for _, l := range lines[1:] {
			if !strings.HasPrefix(l, "data: ") {
				t.Fatalf("%q: line %q is not a data line (event %q)", data, l, ev)
			}
		}
	}
}
