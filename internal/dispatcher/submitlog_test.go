package dispatcher

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/servotest"
)

// logTraceID is the trace of the requests TestSubmitLogLines sends.
const logTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"

// wantLine is a log line a test expects: its severity, message, task, and
// the Cloud Task it names ("" for none); traced lines carry the request's
// trace.
type wantLine struct {
	severity, message, taskID, cloudTask string
	traced                               bool
}

// postTraced sends body to path under logTraceID and returns the answer.
func postTraced(e *env, path string, body any) response {
	e.t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		e.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, e.api.URL+path, bytes.NewReader(data))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+logTraceID+"-00f067aa0ba902b7-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: b}
}

// submitLine is the one line the submit that created task id writes.
func submitLine(e *env, id string) wantLine {
	st := e.storedTask(id)
	return wantLine{"INFO", "task submitted", id, enqueue.TaskName(e.queue, &st), true}
}

// TestSubmitLogLines: a submit writes one INFO line, "task submitted",
// naming the task and the Cloud Task it created (cloudTask), under the
// request's trace; the enqueue writes no line of its own. A repeat names
// no Cloud Task, a failed enqueue keeps its WARN lines, and every other
// enqueue (a re-drive here) keeps its "attempt enqueued" line.
func TestSubmitLogLines(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		opts envOptions
		// op acts and returns the lines it must have written, in any order.
		op func(t *testing.T, e *env) []wantLine
	}{
		{"submit", envOptions{paused: true}, func(t *testing.T, e *env) []wantLine { // paused: the Cloud Task stays
			var sr api.SubmitResponse
			postTraced(e, "/v1/tasks", validSubmit("acme")).decode(t, &sr)
			st := e.storedTask(sr.TaskID)
			if ct := e.cloudTask(&st); ct == nil || ct.Name != enqueue.TaskName(e.queue, &st) {
				t.Fatalf("Cloud Task of %s: %v", sr.TaskID, ct)
			}
			return []wantLine{submitLine(e, sr.TaskID)}
		}},
		{"batch of two", envOptions{}, func(t *testing.T, e *env) []wantLine {
			var br api.BatchResponse
			postTraced(e, "/v1/tasks:batch", map[string]any{"tasks": []any{validSubmit("acme"), validSubmit("acme")}}).decode(t, &br)
			if len(br.Tasks) != 2 || br.Created != 2 {
				t.Fatalf("batch: %+v", br)
			}
			return []wantLine{submitLine(e, br.Tasks[0].TaskID), submitLine(e, br.Tasks[1].TaskID)}
		}},
		{"repeat names no Cloud Task", envOptions{}, func(t *testing.T, e *env) []wantLine {
			body := validSubmit("acme")
			body["idempotencyKey"] = "log-repeat"
			var first, again api.SubmitResponse
			postTraced(e, "/v1/tasks", body).decode(t, &first)
			postTraced(e, "/v1/tasks", body).decode(t, &again)
			if again.TaskID != first.TaskID {
				t.Fatalf("repeat made task %s, want %s", again.TaskID, first.TaskID)
			}
			return []wantLine{submitLine(e, first.TaskID), {"INFO", "task submitted", first.TaskID, "", true}}
		}},
		{"failed enqueue keeps its warnings", envOptions{ctDown: true, config: func(c *Config) { c.CloudTasksTimeout = 2 * time.Second }},
			func(t *testing.T, e *env) []wantLine {
				var sr api.SubmitResponse
				postTraced(e, "/v1/tasks", validSubmit("acme")).decode(t, &sr)
				if sr.State != api.Pending {
					t.Fatalf("state %s, want PENDING", sr.State)
				}
				return []wantLine{
					{"WARNING", "enqueue failed; the sweeper will re-drive", sr.TaskID, "", true},
					{"WARNING", "task stored but not enqueued; the sweeper will re-drive it", sr.TaskID, "", true},
					{"INFO", "task submitted", sr.TaskID, "", true},
				}
			}},
		{"a re-drive keeps its line", envOptions{}, func(t *testing.T, e *env) []wantLine {
			var sr api.SubmitResponse
			postTraced(e, "/v1/tasks", validSubmit("acme")).decode(t, &sr)
			want := []wantLine{submitLine(e, sr.TaskID)}
			st := e.storedTask(sr.TaskID)
			st.Redrives = 1
			if err := e.enq.Enqueue(e.ctx, st); err != nil {
				t.Fatal(err)
			}
			return append(want, wantLine{"INFO", "attempt enqueued", sr.TaskID, enqueue.TaskName(e.queue, &st), false})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			buf := &servotest.Buffer{}
			c.opts.logs = buf
			cfg := c.opts.config
			c.opts.config = func(conf *Config) {
				conf.Project = "servo-test" // lines carry the request's trace
				if cfg != nil {
					cfg(conf)
				}
			}
			e := newEnv(t, c.opts)
			want := c.op(t, e)
			got := readLogLines(t, buf.String())
			key := func(l wantLine) string { return l.taskID + "|" + l.message + "|" + l.cloudTask + "|" + l.severity }
			slices.SortFunc(want, func(a, b wantLine) int { return strings.Compare(key(a), key(b)) })
			slices.SortFunc(got, func(a, b wantLine) int { return strings.Compare(key(a), key(b)) })
			if !slices.Equal(got, want) {
				t.Fatalf("log lines:\n%s\nwant (severity, message, taskId, cloudTask, traced):\n%s", buf.String(), fmt.Sprint(want))
			}
		})
	}
}

// readLogLines parses JSON log lines.
func readLogLines(t *testing.T, s string) []wantLine {
	t.Helper()
	var out []wantLine
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		str := func(k string) string { v, _ := m[k].(string); return v }
		out = append(out, wantLine{str("severity"), str("message"), str("taskId"), str("cloudTask"),
			str(logs.TraceKey) == "projects/servo-test/traces/"+logTraceID})
	}
	return out
}
