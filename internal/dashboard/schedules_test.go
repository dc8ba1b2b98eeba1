package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
)

// renderPage renders page with view as the dashboard does (the layout,
// the head and the live part), and its live fragment alone.
func renderPage(t *testing.T, page string, view any) (doc, frag string) {
	t.Helper()
	pages := parsePages()
	var buf bytes.Buffer
	if err := pages[page].Execute(&buf, layoutData{Title: "t", Live: "/ui/live?view=x", CSRF: "c", Nav: page, View: view}); err != nil {
		t.Fatalf("%s: %v", page, err)
	}
	d := &Dashboard{pages: pages}
	frag, err := d.fragment(page, view)
	if err != nil {
		t.Fatalf("%s fragment: %v", page, err)
	}
	return buf.String(), frag
}

// testSchedule is a schedule of tenant acme with note and payload text.
func testSchedule(t *testing.T, note, text string, now time.Time) store.Schedule {
	t.Helper()
	payload, err := json.Marshal(map[string]string{"text": text})
	if err != nil {
		t.Fatal(err)
	}
	tmpl, _ := json.Marshal(api.SubmitRequest{TaskKey: "k", Worker: "w", Payload: payload})
	next := now.Add(time.Hour)
	return store.Schedule{ScheduleID: "nightly", TenantID: "acme", WorkspaceID: "ws", Cron: "0 2 * * *", TimeZone: "Europe/Berlin",
		Task: tmpl, Overlap: api.OverlapSkip, Paused: true, Note: note, NextFireAt: &next, CreatedAt: now, UpdatedAt: now,
		Recent: []store.ScheduleFire{{At: now, Kind: api.FireBySchedule, Outcome: api.FireFailed, Message: note}}}
}

// TestScheduleTextEscaped: a schedule's note and its template's payload
// holding <script> are shown as text on the schedule's page (its head
// with the note in the pause form, and its live fragment) and on the
// schedules page: never as markup.
func TestScheduleTextEscaped(t *testing.T) {
	const script = `<script>alert(1)</script>`
	now := time.Date(2030, 1, 15, 12, 0, 0, 0, time.UTC)
	sc := testSchedule(t, "note "+script, "payload "+script, now)
	for _, operator := range []bool{true, false} {
		doc, frag := renderPage(t, "schedule", scheduleViewOf(&sc, nil, now, operator))
		for where, s := range map[string]string{"page": doc, "fragment": frag} {
			if strings.Contains(s, "<script>alert") {
				t.Errorf("schedule %s (operator %v): a script element:\n%s", where, operator, s)
			}
			if !strings.Contains(s, "note &lt;script&gt;alert(1)&lt;/script&gt;") {
				t.Errorf("schedule %s (operator %v) does not show the note as text", where, operator)
			}
			// The payload is JSON (where json.Marshal writes < as \u003c),
			// shown as text.
			if !strings.Contains(s, `payload \u003cscript\u003ealert(1)\u003c/script\u003e`) {
				t.Errorf("schedule %s (operator %v) does not show the payload as text:\n%s", where, operator, s)
			}
		}
	}
	doc, frag := renderPage(t, "schedules", &SchedulesView{Rows: []ScheduleRow{scheduleRowOf(&sc, now)}})
	for where, s := range map[string]string{"page": doc, "fragment": frag} {
		if strings.Contains(s, "<script>alert") || !strings.Contains(s, "note &lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("schedules %s: the note is not shown as text:\n%s", where, s)
		}
	}
}

// schedulePieces are what a note or a payload may hold that means
// something to a page or a template (as the worker text test's).
var schedulePieces = []string{
	"<", ">", "&", `"`, "'", "/", "\\", "<script>", "</script>", "</textarea>", "<img src=x onerror=alert(1)>", "&lt;", "&#60;",
	"\n", "\t", "\r", "\x00", "\x1b[2J", "{{.}}", "${x}", "javascript:", "\u2028", "\u202e", "é", "😀", " ", "ok", `" onmouseover="x`,
}

// TestScheduleTextNeverUnescapedProperty: random notes and payload texts
// made of schedulePieces, each between markers, read back from the
// rendered schedule and schedules pages (every place they are shown: the
// facts, the note field's value, a fire's message, the payload) as the
// text sent, never as markup.
func TestScheduleTextNeverUnescapedProperty(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SERVO_TEST_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	now := time.Date(2030, 1, 15, 12, 0, 0, 0, time.UTC)
	for range 200 {
		var note, payload strings.Builder
		var want []string
		for i := range 3 {
			var s strings.Builder
			for range 1 + rng.IntN(4) {
				s.WriteString(schedulePieces[rng.IntN(len(schedulePieces))])
			}
			want = append(want, s.String())
			fmt.Fprintf(&note, "QZN%dB%sQZN%dE ", i, s.String(), i)
			fmt.Fprintf(&payload, "QZP%dB%sQZP%dE ", i, s.String(), i)
		}
		sc := testSchedule(t, note.String(), payload.String(), now)
		doc, frag := renderPage(t, "schedule", scheduleViewOf(&sc, nil, now, true))
		list, _ := renderPage(t, "schedules", &SchedulesView{Rows: []ScheduleRow{scheduleRowOf(&sc, now)}})
		for _, c := range []struct{ where, prefix, s string }{
			{"schedule page", "QZN", doc}, {"schedule page", "QZP", doc}, {"schedule fragment", "QZN", frag},
			{"schedule fragment", "QZP", frag}, {"schedules page", "QZN", list},
		} {
			if n := segmentsRead(t, c.where, c.prefix, c.s, want); n == 0 {
				t.Fatalf("%s shows no %s text", c.where, c.prefix)
			}
		}
		if t.Failed() {
			return
		}
	}
}

// segmentsRead checks every marked text of doc: no raw markup character,
// and it reads (as HTML text, or as a JSON string shown as text) as the
// text sent (a NUL as U+FFFD). It returns how many it found.
func segmentsRead(t *testing.T, where, prefix, doc string, want []string) int {
	t.Helper()
	found := 0
	for i, s := range want {
		begin, end := fmt.Sprintf("%s%dB", prefix, i), fmt.Sprintf("%s%dE", prefix, i)
		for rest := doc; ; {
			j := strings.Index(rest, begin)
			if j < 0 {
				break
			}
			rest = rest[j+len(begin):]
			k := strings.Index(rest, end)
			if k < 0 {
				t.Errorf("%s: text %d is cut", where, i)
				break
			}
			seg := rest[:k]
			rest = rest[k:]
			found++
			if strings.ContainsAny(seg, `<>"'`) {
				t.Errorf("%s: text %d shown unescaped: %q (sent %q)", where, i, seg, s)
				continue
			}
			text := html.UnescapeString(seg)
			var fromJSON string
			okJSON := json.Unmarshal([]byte(`"`+text+`"`), &fromJSON) == nil && fromJSON == s
			if text != s && text != strings.ReplaceAll(s, "\x00", "\uFFFD") && !okJSON {
				t.Errorf("%s: text %d shown as %q; sent %q", where, i, seg, s)
			}
		}
	}
	return found
}

// TestSchedulePathTenantCheck: a schedule's page path round-trips any
// tenant id (escaped as one segment), and a caller who does not view the
// tenant is answered not found before anything is read (the dashboard
// here has no store: a read would panic).
func TestSchedulePathTenantCheck(t *testing.T) {
	d := &Dashboard{cfg: Config{Refresh: time.Second}}
	for _, tenant := range []string{"acme", "a/b c", "é?#%", "x/../y"} {
		p := schedulePath(tenant, "nightly")
		v, err := d.resolve(p, nil, &caller{who: "bob@example.com", tenants: []string{"globex"}})
		if err != nil {
			t.Fatalf("%q: %v", tenant, err)
		}
		if v.path != p || v.page != "schedule" {
			t.Errorf("%q: view %q (%s), want %q", tenant, v.path, v.page, p)
		}
		if _, err := v.load(t.Context()); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%q: another tenant's viewer: %v, want not found", tenant, err)
		}
	}
	for _, p := range []string{"/ui/schedules/acme", "/ui/schedules/acme/-x", "/ui/schedules//x", "/ui/schedules/acme/x/y", "/ui/schedules/%zz/x"} {
		if _, err := d.resolve(p, nil, &caller{all: true}); err == nil {
			t.Errorf("%s: resolved, want no view", p)
		}
	}
}
