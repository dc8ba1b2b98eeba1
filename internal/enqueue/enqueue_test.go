package enqueue

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/task"
)

func TestParseWorkers(t *testing.T) {
	const q = `"queue":"projects/my-project/locations/europe-west1/queues/render"`
	cases := []struct {
		name     string
		json     string
		loopback bool
		wantErr  string
	}{
		{"https", `{"render":{"url":"https://render.example.run.app/",` + q + `}}`, false, ""},
		{"http refused in production", `{"render":{"url":"http://render.example/",` + q + `}}`, false, "must be https"},
		{"http on loopback locally", `{"render":{"url":"http://127.0.0.1:8080/w",` + q + `}}`, true, ""},
		{"http off loopback locally", `{"render":{"url":"http://10.0.0.1/w",` + q + `}}`, true, "must be https"},
		{"no scheme", `{"render":{"url":"render.example",` + q + `}}`, false, "absolute URL"},
		{"other scheme", `{"render":{"url":"file:///etc/passwd",` + q + `}}`, true, "absolute URL"},
		{"bad queue", `{"render":{"url":"https://r.example/","queue":"render"}}`, false, "queue"},
		{"bad name", `{"Render!":{"url":"https://r.example/",` + q + `}}`, false, "name"},
		{"not JSON", `{`, false, "SERVO_WORKERS"},
		{"job, no url", `{"render":{"job":"projects/my-project/locations/europe-west1/jobs/render",` + q + `}}`, false, ""},
		{"job and url", `{"render":{"job":"projects/my-project/locations/europe-west1/jobs/render","url":"https://r.example/",` + q + `}}`, false, "no url"},
		{"bad job", `{"render":{"job":"render",` + q + `}}`, false, "jobs/JOB"},
		{"timeout", `{"render":{"url":"https://r.example/","timeoutSeconds":900,` + q + `}}`, false, ""},
		{"negative timeout", `{"render":{"url":"https://r.example/","timeoutSeconds":-1,` + q + `}}`, false, "timeoutSeconds"},
		{"job without queue", `{"render":{"job":"projects/my-project/locations/europe-west1/jobs/render"}}`, false, "queue"},
		{"rate over several queues", `{"render":{"url":"https://r.example/","maxDispatchesPerSecond":1500,` + q + `}}`, false, ""},
		{"negative rate", `{"render":{"url":"https://r.example/","maxDispatchesPerSecond":-1,` + q + `}}`, false, `worker "render": maxDispatchesPerSecond must be 0`},
		{"rate over 100 queues", `{"render":{"url":"https://r.example/","maxDispatchesPerSecond":50001,` + q + `}}`, false, `worker "render": maxDispatchesPerSecond 50001 needs 101 queues`},
		{"rate not a number", `{"render":{"url":"https://r.example/","maxDispatchesPerSecond":"fast",` + q + `}}`, false, "maxDispatchesPerSecond"},
		{"rate with a queue name too long for its siblings", `{"render":{"url":"https://r.example/","maxDispatchesPerSecond":1500,"queue":"projects/my-project/locations/l/queues/` + strings.Repeat("q", 98) + `"}}`, false, "maxDispatchesPerSecond 1500 its last queue"},
		{"rate on a pull pool", `{"render":{"pull":true,"maxDispatchesPerSecond":1500}}`, true, "nor maxDispatchesPerSecond"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws, err := ParseWorkers([]byte(c.json), c.loopback)
			if c.wantErr == "" {
				if err != nil || len(ws) != 1 {
					t.Fatalf("got %v, %v", ws, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("got %v, want an error about %q", err, c.wantErr)
			}
		})
	}
}

func TestLookupUnknownWorker(t *testing.T) {
	if _, err := (Workers{}).Lookup("nope"); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("got %v", err)
	}
}

func TestDispatchDeadline(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	cases := []struct {
		deadline *time.Time
		timeout  int // the worker's TimeoutSeconds
		want     time.Duration
	}{
		{nil, 0, MaxDispatchDeadline},
		{at(5 * time.Minute), 0, 5 * time.Minute},
		{at(time.Second), 0, MinDispatchDeadline},
		{at(-time.Hour), 0, MinDispatchDeadline},
		{at(3 * time.Hour), 0, MaxDispatchDeadline},
		// The worker's request timeout caps the deadline-derived value.
		{nil, 900, 900 * time.Second},
		{at(3 * time.Hour), 900, 900 * time.Second},
		{at(5 * time.Minute), 900, 5 * time.Minute},
		{nil, 5, MinDispatchDeadline},
		{nil, 3600, MaxDispatchDeadline},
	}
	for _, c := range cases {
		if got := DispatchDeadline(&task.Task{Deadline: c.deadline}, Worker{TimeoutSeconds: c.timeout}, now); got != c.want {
			t.Errorf("deadline %v, timeout %ds: got %v, want %v", c.deadline, c.timeout, got, c.want)
		}
	}
}

func TestTaskNameIsDeterministicPerAttempt(t *testing.T) {
	const q = "projects/p-12345/locations/l/queues/q"
	a := &task.Task{ID: task.NewTaskID(time.Now()), Attempt: 1}
	b := *a
	b.Attempt = 2
	if TaskName(q, a) != TaskName(q, a) || TaskName(q, a) == TaskName(q, &b) || !strings.HasPrefix(TaskName(q, a), q+"/tasks/") {
		t.Fatalf("names: %s %s", TaskName(q, a), TaskName(q, &b))
	}
}

// Each sweeper re-drive of an attempt has a name of its own (Cloud Tasks
// refuses a name whose task ran or was deleted); the first dispatch keeps
// task.DispatchName.
func TestTaskNamePerRedrive(t *testing.T) {
	const q = "projects/p-12345/locations/l/queues/q"
	tk := task.Task{ID: task.NewTaskID(time.Now()), Attempt: 2}
	if got, want := TaskName(q, &tk), q+"/tasks/"+task.DispatchName(tk.ID, 2); got != want {
		t.Fatalf("first dispatch: %s, want %s", got, want)
	}
	seen := map[string]bool{TaskName(q, &tk): true}
	for n := 1; n <= 3; n++ {
		tk.Redrives = n
		name := TaskName(q, &tk)
		if seen[name] || name != q+"/tasks/"+task.RedriveName(tk.ID, 2, n) {
			t.Fatalf("re-drive %d: %s", n, name)
		}
		seen[name] = true
	}
}
