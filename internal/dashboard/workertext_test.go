package dashboard_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// hostilePieces are what a worker's text may hold that means something to
// a page (markup, entities, quotes), a server-sent event (line breaks and
// field names), a template or a terminal (escapes, bidi overrides); with
// controls, also the control characters the callbacks refuse, which the
// outputs must escape anyway (data stored before the refusal existed).
var hostilePieces = []string{
	"<", ">", "&", `"`, "'", "/", "\\", "<script>", "</textarea>", "<img src=x onerror=alert(1)>", "&lt;", "&#60;",
	"\n", "\t", "\r\n", "\n\n", "event: forged\n", "data: x\n", "id: 7\n", "retry: 1\n", ": c\n", "{{.}}", "${x}",
	"javascript:", "\u2028", "\u2029", "\u202e", "\u2066", "é", "😀", " ", "ok",
}

var controlPieces = []string{"\x1b[2J", "\x1b]0;pwned\x07", "\x00", "\r", "\x7f", "\u009b31m", "\x08", "\x0c"}

// hostileTexts draws n texts of a few pieces each.
func hostileTexts(rng *rand.Rand, n int, controls bool) []string {
	pieces := hostilePieces
	if controls {
		pieces = append(append([]string{}, hostilePieces...), controlPieces...)
	}
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for range 1 + rng.IntN(4) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		out[i] = b.String()
	}
	return out
}

// marked joins texts, each between markers (prefix, the index and B or
// E) that no escaping changes.
func marked(prefix string, texts []string) string {
	var b strings.Builder
	for i, s := range texts {
		fmt.Fprintf(&b, "%s%dB%s%s%dE ", prefix, i, s, prefix, i)
	}
	return b.String()
}

// readsAs reports whether seg, as shown in HTML (text, or JSON shown as
// text), reads as want.
func readsAs(seg, want string) bool {
	text := html.UnescapeString(seg)
	if text == want {
		return true
	}
	var fromJSON string
	return json.Unmarshal([]byte(`"`+text+`"`), &fromJSON) == nil && fromJSON == want
}

// checkHTML finds each marked text in an HTML document or fragment: it
// must hold no raw markup character and unescape to the text (a NUL shows
// as U+FFFD). It returns how many it found.
func checkHTML(t *testing.T, where, prefix, doc string, texts []string) int {
	t.Helper()
	found := 0
	for i, s := range texts {
		begin, end := fmt.Sprintf("%s%dB", prefix, i), fmt.Sprintf("%s%dE", prefix, i)
		for rest := doc; ; {
			j := strings.Index(rest, begin)
			if j < 0 {
				break
			}
			rest = rest[j+len(begin):]
			k := strings.Index(rest, end)
			if k < 0 {
				break // cut short (a list row shows the start of a message)
			}
			seg := rest[:k]
			rest = rest[k:]
			found++
			if strings.ContainsAny(seg, `<>"'`) {
				t.Errorf("%s: text %d shown unescaped: %q (sent %q)", where, i, seg, s)
				continue
			}
			// A NUL shows as U+FFFD; a server-sent event's lines end at
			// CR, LF or CRLF alike, so its data reads them as LF.
			want := strings.ReplaceAll(s, "\x00", "\uFFFD")
			lf := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(want)
			if !readsAs(seg, want) && !readsAs(seg, s) && !readsAs(seg, lf) {
				t.Errorf("%s: text %d shown as %q; sent %q", where, i, seg, s)
			}
		}
	}
	return found
}

// sseLine is a line a server-sent event stream may hold: a field the
// server writes, a comment or the blank line that ends an event.
var sseLine = regexp.MustCompile(`^(|:.*|event: (view|expired|error)|data: .*|retry: [0-9]+|id: .*)$`)

// checkLive reads the first view event of a live stream, split into lines
// as a browser splits it (CR, LF, CRLF): every line is one the server
// writes (a worker's CR or "event:" cannot start a field of its own), and
// the event's data is the fragment, checked as HTML.
func checkLive(t *testing.T, where, prefix string, body io.Reader, texts []string) {
	t.Helper()
	br := bufio.NewReader(body)
	deadline := time.Now().Add(30 * time.Second)
	for {
		// One event: lines up to a blank one.
		var raw strings.Builder
		for !strings.HasSuffix(raw.String(), "\n\n") {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no view event showing the texts; last %q", where, raw.String())
			}
			line, err := br.ReadString('\n')
			raw.WriteString(line)
			if err != nil {
				t.Fatalf("%s: %v after %q", where, err, raw.String())
			}
		}
		var data []string
		inView := false
		for _, l := range regexp.MustCompile("\r\n|\r|\n").Split(raw.String(), -1) {
			if !sseLine.MatchString(l) {
				t.Fatalf("%s: the stream holds a line the server does not write: %q", where, l)
			}
			switch {
			case l == "event: view":
				inView = true
			case inView && strings.HasPrefix(l, "data: "):
				data = append(data, strings.TrimPrefix(l, "data: "))
			}
		}
		if os.Getenv("SERVO_TEST_DUMP") != "" {
			t.Logf("event %q", raw.String())
		}
		if frag := strings.Join(data, "\n"); inView && strings.Contains(frag, prefix) {
			if n := checkHTML(t, where, prefix, frag, texts); n == 0 {
				t.Fatalf("%s: the view event shows none of the texts: %q", where, frag)
			}
			return
		}
	}
}

// TestWorkerTextNeverUnescaped is a property test: random texts made of
// what means something to a page, a stream or a terminal, sent by a real
// worker as its progress message (through the SDK and the callbacks), and
// then, with control characters the callbacks refuse, written by the
// store as a stored message would be, never appear unescaped in the task
// page, the list and run pages, or the live stream of the task page.
// (servo get and servo watch: cmd/servo's TestWorkerTextInertProperty.)
func TestWorkerTextNeverUnescaped(t *testing.T) {
	f := stack(t)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SERVO_TEST_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	release := f.gate(t.Name())
	defer release()
	run := task.NewRunID(time.Now())
	// Random texts, after the known worst ones.
	texts := append([]string{"<img src=x onerror=alert(1)>", "a\r\ndata: forged\r\nevent: x", "\u2028</textarea>"}, hostileTexts(rng, 20, false)...)
	msg := marked("QZX", texts)
	id := f.submit(t, map[string]any{"runId": run, "worker": "held", "tenantId": "acme",
		"payload": map[string]any{"message": msg, "gate": t.Name()}})
	f.cancelLater(t, id)
	deadline := time.Now().Add(90 * time.Second)
	for f.progressMessage(t, id) != msg {
		if time.Now().After(deadline) {
			t.Fatalf("the worker's message did not arrive: %q", f.progressMessage(t, id))
		}
		time.Sleep(100 * time.Millisecond)
	}
	check := func(prefix string, texts []string) {
		t.Helper()
		for _, p := range []string{"/ui/tasks/" + id, "/ui/?run=" + run, "/ui/runs/" + run} {
			res, err := http.Get(f.stack.URL + p)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d", p, res.StatusCode)
			}
			if n := checkHTML(t, p, prefix, string(body), texts); n == 0 && strings.HasPrefix(p, "/ui/tasks/") {
				t.Errorf("%s shows none of the texts", p)
			}
		}
		res, err := http.Get(f.stack.URL + "/ui/live?view=" + url.QueryEscape("/ui/tasks/"+id))
		if err != nil {
			t.Fatal(err)
		}
		checkLive(t, "/ui/live", prefix, res.Body, texts)
		res.Body.Close()
	}
	check("QZX", texts)

	// Stored text with control characters (as if written before the
	// callbacks refused them), here the attempt's error: escaped anyway.
	v := f.get(t, id)
	var worker string
	for _, a := range v.Attempts {
		if a.Attempt == v.Attempt {
			worker = a.WorkerID
		}
	}
	texts = append([]string{"\r\revent: forged\r", "\x1b]0;pwned\x07", "\x00\u009b31m<b>"}, hostileTexts(rng, 20, true)...)
	msg = marked("QZY", texts)
	if _, err := f.stack.Store.Apply(t.Context(), id, task.Event{Kind: task.EventCompleted, Attempt: v.Attempt, WorkerID: worker, Now: time.Now().UTC(),
		Completed: &api.CompletedRequest{Attempt: v.Attempt, WorkerID: worker, Outcome: api.OutcomeFailed,
			Error: &api.ErrorInfo{Category: api.CategoryUserCode, Message: msg, Retryable: new(false)}}}); err != nil {
		t.Fatal(err)
	}
	got := f.waitState(t, id, api.Failed)
	if a := got.Attempts[len(got.Attempts)-1]; a.Error == nil || a.Error.Message != msg {
		t.Fatalf("the stored error is not in the task: %+v", a)
	}
	check("QZY", texts)
}
