package dashboard_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/chromedp/chromedp"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/devstack"
)

// uniqueID is a schedule id not yet used in the emulator's data.
func uniqueID(prefix string) string {
	return prefix + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// createSchedule creates a schedule of acme through the API of the
// shared stack (open policy) and returns its id.
func (f *fixture) createSchedule(t *testing.T, id string, task map[string]any, note string) string {
	t.Helper()
	body := map[string]any{"scheduleId": id, "tenantId": "acme", "workspaceId": "ws",
		"spec": map[string]any{"cron": "0 2 * * *", "timezone": "Europe/Berlin"}, "task": task, "note": note}
	status, out := call(t, f.stack, "", "POST", "/v1/schedules", body)
	if status != http.StatusCreated {
		t.Fatalf("create schedule: %d %s", status, out)
	}
	return id
}

// getSchedule reads a schedule of acme through the API.
func (f *fixture) getSchedule(t *testing.T, id string) api.Schedule {
	t.Helper()
	status, out := call(t, f.stack, "", "GET", "/v1/schedules/"+id+"?tenantId=acme", nil)
	if status != http.StatusOK {
		t.Fatalf("get schedule: %d %s", status, out)
	}
	var v api.Schedule
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSchedulePagesBrowser: the schedules page lists a schedule; its page
// shows its spec, its next 10 fires in its zone and in UTC, and a
// triggered fire with its task (linked, its state live); Pause with a
// note through the form shows "paused" and the note (also on the
// schedules page) and pauses it in the store; Unpause undoes it.
func TestSchedulePagesBrowser(t *testing.T) {
	f := stack(t)
	id := f.createSchedule(t, uniqueID("browser"), map[string]any{"taskKey": "scheduled", "worker": devstack.ExampleWorker,
		"payload": map[string]any{"partitions": 2, "partitionMs": 50}}, "")
	status, out := call(t, f.stack, "", "POST", "/v1/schedules/"+id+":trigger?tenantId=acme", nil)
	if status != http.StatusOK {
		t.Fatalf("trigger: %d %s", status, out)
	}
	var fired api.FireResponse
	if err := json.Unmarshal([]byte(out), &fired); err != nil || len(fired.Fires) != 1 || fired.Fires[0].TaskID == "" {
		t.Fatalf("trigger: %s (%v)", out, err)
	}
	taskID := fired.Fires[0].TaskID

	ctx := tab(t)
	// The schedules page, reached from the navigation.
	if err := chromedp.Run(ctx, chromedp.Navigate(f.stack.URL+"/ui/"), chromedp.Click("#nav-schedules", chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.querySelector("#nav-schedules.on") !== null && document.querySelector("table.schedules") !== null`, "the schedules page")
	if err := chromedp.Run(ctx, chromedp.Navigate(f.stack.URL+"/ui/schedules?tenant=acme")); err != nil {
		t.Fatal(err)
	}
	// (No quotes: text() shows the selector in a JavaScript string.)
	row := fmt.Sprintf(`tr[data-schedule=%s][data-tenant=acme]`, id)
	waitJS(t, ctx, fmt.Sprintf(`document.querySelector(%q) !== null`, row), "the schedule's row")
	if got := text(t, ctx, row+" .spec"); got != "cron 0 2 * * * (Europe/Berlin)" {
		t.Errorf("spec = %q", got)
	}
	if got := text(t, ctx, row+" .next"); !strings.Contains(got, " 02:00:00 CE") || !strings.Contains(got, ":00:00Z") {
		t.Errorf("next fire = %q, want 02:00 Berlin time and its UTC", got)
	}
	if got := text(t, ctx, row+" .fires"); got != "1" {
		t.Errorf("fires = %q, want 1 (the trigger)", got)
	}
	shot(t, ctx, "schedules")

	// Its page.
	if err := chromedp.Run(ctx, clickJS(row+" a")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.querySelectorAll("#next-fires tbody tr").length === 10`, "the next 10 fires")
	waitJS(t, ctx, `document.getElementById("status").textContent === "live"`, "the stream")
	var zones, utcs []string
	if err := chromedp.Run(ctx,
		chromedp.Evaluate(`Array.from(document.querySelectorAll("#next-fires td.zone"), e => e.textContent)`, &zones),
		chromedp.Evaluate(`Array.from(document.querySelectorAll("#next-fires td.utc"), e => e.textContent)`, &utcs)); err != nil {
		t.Fatal(err)
	}
	for i := range zones {
		if !strings.Contains(zones[i], " 02:00:00 CE") || !(strings.HasSuffix(utcs[i], " 01:00:00Z") || strings.HasSuffix(utcs[i], " 00:00:00Z")) {
			t.Errorf("next fire %d: %q / %q, want 02:00 in Berlin (01:00 or 00:00 UTC)", i+1, zones[i], utcs[i])
		}
		if i > 0 && utcs[i] <= utcs[i-1] {
			t.Errorf("next fires not in order: %q then %q", utcs[i-1], utcs[i])
		}
	}
	if got := text(t, ctx, "#tmpl-worker") + "/" + text(t, ctx, "#tmpl-key"); got != devstack.ExampleWorker+"/scheduled" {
		t.Errorf("template = %q", got)
	}
	if got := text(t, ctx, "#tmpl-payload"); !strings.Contains(got, `"partitions": 2`) {
		t.Errorf("payload = %q", got)
	}
	fire := fmt.Sprintf(`#recent-fires a[href="/ui/tasks/%s"]`, taskID)
	waitJS(t, ctx, fmt.Sprintf(`document.querySelector(%q) !== null`, fire), "the triggered fire's task")
	waitJS(t, ctx, `(document.querySelector('#recent-fires tr[data-outcome="STARTED"] .state') || {}).textContent === "SUCCEEDED"`,
		"the fire's task reaching SUCCEEDED, live")
	if got := text(t, ctx, `#recent-fires tr[data-outcome=STARTED]`); !strings.Contains(got, "TRIGGER") {
		t.Errorf("recent fire = %q, want kind TRIGGER", got)
	}
	shot(t, ctx, "schedule")

	// Pause with a note, through the form.
	const note = `<b>maintenance</b> window & "quotes"`
	if err := chromedp.Run(ctx,
		chromedp.SendKeys(`#pause-form input[name=note]`, note, chromedp.ByQuery),
		chromedp.Click(`#pause-form button`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.getElementById("flash") !== null && document.getElementById("unpause-form") !== null`, "the page after Pause")
	if got := text(t, ctx, "#flash"); got != "Schedule paused." {
		t.Errorf("flash = %q", got)
	}
	// The live part may first show the view's fragment from before the
	// post (the shared refresher's last), then the new one: wait for it.
	waitJS(t, ctx, fmt.Sprintf(`document.getElementById("sched-paused").textContent === "paused" && document.getElementById("sched-note").textContent === %q`, note),
		"paused, with the note")
	var bolds int
	if err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll("main b").length`, &bolds)); err != nil || bolds != 0 {
		t.Errorf("the note made %d b elements (%v)", bolds, err)
	}
	if v := f.getSchedule(t, id); !v.Paused || v.Note != note {
		t.Fatalf("after Pause the API shows paused %v, note %q", v.Paused, v.Note)
	}
	shot(t, ctx, "paused")
	if err := chromedp.Run(ctx, chromedp.Navigate(f.stack.URL+"/ui/schedules?tenant=acme")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, fmt.Sprintf(`document.querySelector(%q) !== null`, row+`[data-paused=true]`), "paused on the schedules page")
	if got := text(t, ctx, row+" .note"); got != note {
		t.Errorf("schedules page note = %q", got)
	}

	// Unpause.
	if err := chromedp.Run(ctx, clickJS(row+" a")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.getElementById("unpause-form") !== null`, "the Unpause form")
	if err := chromedp.Run(ctx, chromedp.Click(`#unpause-form button`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.getElementById("flash") !== null && document.getElementById("pause-form") !== null`, "the page after Unpause")
	waitJS(t, ctx, `document.getElementById("sched-paused").textContent === "active"`, "active again")
	if got := text(t, ctx, "#flash"); got != "Schedule unpaused." {
		t.Errorf("flash = %q", got)
	}
	if v := f.getSchedule(t, id); v.Paused || v.NextFireAt == nil {
		t.Fatalf("after Unpause the API shows paused %v, next fire %v", v.Paused, v.NextFireAt)
	}
	shot(t, ctx, "unpaused")
}

// clickJS clicks the element sel in one evaluation: the live part may
// replace its nodes between a lookup and a click.
func clickJS(sel string) chromedp.Action {
	return chromedp.Evaluate(fmt.Sprintf(`document.querySelector(%q).click()`, sel), nil)
}

// TestScheduleTextNeverUnescaped: random notes (without the control
// characters the API refuses) and payload texts (with them), stored
// through the API, never appear unescaped on the schedule's page, the
// schedules page or the schedule page's live stream.
func TestScheduleTextNeverUnescaped(t *testing.T) {
	f := stack(t)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SERVO_TEST_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	var notes []string
	for _, s := range append([]string{"<script>alert(1)</script>", `" onfocus="alert(1)`, xss}, hostileTexts(rng, 40, false)...) {
		if !strings.ContainsFunc(s, unicode.IsControl) && len(notes) < 6 {
			notes = append(notes, s)
		}
	}
	texts := append([]string{"<script>alert(1)</script>", "\u2028</textarea>"}, hostileTexts(rng, 20, true)...)
	note, payload := marked("QZN", notes), marked("QZP", texts)
	if len(note) > 1024 {
		t.Fatalf("the note is %d bytes", len(note))
	}
	id := f.createSchedule(t, uniqueID("hostile"), map[string]any{"taskKey": "k", "worker": devstack.ExampleWorker,
		"payload": map[string]any{"text": payload}}, note)
	for _, p := range []string{"/ui/schedules/acme/" + id, "/ui/schedules?tenant=acme"} {
		res, err := http.Get(f.stack.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", p, res.StatusCode)
		}
		if n := checkHTML(t, p, "QZN", string(body), notes); n == 0 {
			t.Errorf("%s shows no note", p)
		}
		if n := checkHTML(t, p, "QZP", string(body), texts); n == 0 && !strings.Contains(p, "?") {
			t.Errorf("%s shows no payload", p)
		}
	}
	for _, c := range []struct {
		prefix string
		texts  []string
	}{{"QZN", notes}, {"QZP", texts}} {
		res, err := http.Get(f.stack.URL + "/ui/live?view=" + url.QueryEscape("/ui/schedules/acme/"+id))
		if err != nil {
			t.Fatal(err)
		}
		checkLive(t, "/ui/live", c.prefix, res.Body, c.texts)
		res.Body.Close()
	}
}

// postForm posts a dashboard form as tok, with the anti-forgery token.
func postForm(t *testing.T, s *devstack.Stack, tok, path string, form url.Values) int {
	t.Helper()
	const csrf = "0123456789abcdef0123456789abcdef-schedule-test"
	form.Set("csrf", csrf)
	req, _ := http.NewRequest("POST", s.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+tok)
	req.AddCookie(&http.Cookie{Name: "servo_csrf", Value: csrf})
	res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// TestSchedulePauseNote: Pause's note is at most 1024 bytes, valid UTF-8
// and without control characters (400 otherwise, the schedule left as it
// was); a note of 1024 bytes is kept; Unpause without the field keeps the
// note.
func TestSchedulePauseNote(t *testing.T) {
	s := policyStack(t)
	admin, alice := devTok(t, s, "admin@example.com"), devTok(t, s, "alice@example.com")
	id := uniqueID("note")
	status, out := call(t, s, admin, "POST", "/v1/schedules", map[string]any{"scheduleId": id, "tenantId": "acme", "workspaceId": "ws",
		"spec": map[string]any{"everyMs": 3600000}, "task": map[string]any{"taskKey": "k", "worker": "idle"}})
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, out)
	}
	get := func() api.Schedule {
		status, out := call(t, s, admin, "GET", "/v1/schedules/"+id+"?tenantId=acme", nil)
		var v api.Schedule
		if status != http.StatusOK || json.Unmarshal([]byte(out), &v) != nil {
			t.Fatalf("get: %d %s", status, out)
		}
		return v
	}
	path := "/ui/schedules/acme/" + id
	for _, bad := range []string{strings.Repeat("n", 1025), strings.Repeat("é", 513), "line\nbreak", "bad \xff utf-8"} {
		if got := postForm(t, s, alice, path+"/pause", url.Values{"note": {bad}}); got != http.StatusBadRequest {
			t.Errorf("note of %d bytes %.20q: %d, want 400", len(bad), bad, got)
		}
	}
	if v := get(); v.Paused || v.Note != "" {
		t.Fatalf("after refused pauses: paused %v, note %.20q", v.Paused, v.Note)
	}
	full := strings.Repeat("é", 512)
	if got := postForm(t, s, alice, path+"/pause", url.Values{"note": {full}}); got != http.StatusSeeOther {
		t.Fatalf("a 1024-byte note: %d, want 303", got)
	}
	if v := get(); !v.Paused || v.Note != full {
		t.Fatalf("after Pause: paused %v, note of %d bytes", v.Paused, len(v.Note))
	}
	if got := postForm(t, s, alice, path+"/unpause", url.Values{}); got != http.StatusSeeOther {
		t.Fatalf("unpause: %d, want 303", got)
	}
	if v := get(); v.Paused || v.Note != full {
		t.Fatalf("after Unpause without a note field: paused %v, note of %d bytes", v.Paused, len(v.Note))
	}
	// A schedule that does not exist, or an id that cannot be one.
	for _, p := range []string{"/ui/schedules/acme/" + uniqueID("none") + "/pause", "/ui/schedules/acme/-bad/pause"} {
		if got := postForm(t, s, alice, p, url.Values{}); got != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, got)
		}
	}
}
