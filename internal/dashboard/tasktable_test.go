package dashboard

import (
	"html"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// taskColumns are the tasks table's columns, in order (the tasks page
// and the run page).
var taskColumns = []string{"Task", "Run", "Tenant", "Key", "Worker", "Priority", "State", "Attempt", "Reason", "Progress", "Age"}

var (
	tasksTable = regexp.MustCompile(`(?s)<table class="tasks">.*?</table>`)
	headCell   = regexp.MustCompile(`(?s)<th>(.*?)</th>`)
	bodyCell   = regexp.MustCompile(`(?s)<td[^>]*>(.*?)</td>`)
	markup     = regexp.MustCompile(`(?s)<[^>]*>`)
)

// tableCells returns the tasks table's header and the cells (as text) of
// the row of task id in doc, an HTML page or live fragment.
func tableCells(t *testing.T, where, doc, id string) (head, cells []string) {
	t.Helper()
	table := tasksTable.FindString(doc)
	if table == "" {
		t.Fatalf("%s: no tasks table", where)
	}
	for _, m := range headCell.FindAllStringSubmatch(table, -1) {
		head = append(head, m[1])
	}
	_, row, ok := strings.Cut(table, `<tr id="row-`+id+`"`)
	if !ok {
		t.Fatalf("%s: no row of %s", where, id)
	}
	row, _, _ = strings.Cut(row, "</tr>")
	for _, m := range bodyCell.FindAllStringSubmatch(row, -1) {
		cells = append(cells, strings.TrimSpace(html.UnescapeString(markup.ReplaceAllString(m[1], ""))))
	}
	return head, cells
}

// TestTaskTableColumns: the tasks page and the run page (the page and its
// live fragment) show the columns of taskColumns, each row a cell under
// each; the Priority column shows the task's priority, 3 (the default)
// for a task stored before priorities existed (priority 0); the Reason
// column still shows a quota wait.
func TestTaskTableColumns(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tasks := []task.Task{
		{ID: "task_urgent", RunID: "run_r", TenantID: "acme", TaskKey: "k1", Worker: "w", Priority: 1, State: api.Running, Attempt: 1, CreatedAt: now},
		{ID: "task_legacy", RunID: "run_r", TenantID: "acme", TaskKey: "k2", Worker: "w", State: api.Queued, Attempt: 1, CreatedAt: now},
		{ID: "task_low", RunID: "run_r", TenantID: "acme", TaskKey: "k3", Worker: "w", Priority: 5, State: api.Queued, Reason: "QUOTA_WAIT", Attempt: 1, CreatedAt: now},
	}
	want := map[string]struct{ priority, reason string }{"task_urgent": {"1", ""}, "task_legacy": {"3", ""}, "task_low": {"5", "QUOTA_WAIT"}}
	v := &TasksView{RunID: "run_r", States: store.States}
	for i := range tasks {
		v.Rows = append(v.Rows, rowOf(&tasks[i], now))
	}
	if got := v.Rows[1].Priority; got != task.DefaultPriority {
		t.Errorf("rowOf a task stored without a priority: %d, want %d", got, task.DefaultPriority)
	}
	pri, reason := slices.Index(taskColumns, "Priority"), slices.Index(taskColumns, "Reason")
	for _, page := range []string{"tasks", "run"} {
		doc, frag := renderPage(t, page, v)
		for where, d := range map[string]string{page + " page": doc, page + " fragment": frag} {
			for id, w := range want {
				head, cells := tableCells(t, where, d, id)
				if !slices.Equal(head, taskColumns) {
					t.Fatalf("%s: columns %q, want %q", where, head, taskColumns)
				}
				if len(cells) != len(head) {
					t.Fatalf("%s: row %s has %d cells %q, under %d columns", where, id, len(cells), cells, len(head))
				}
				if cells[pri] != w.priority || cells[reason] != w.reason {
					t.Errorf("%s: row %s shows priority %q, reason %q; want %q, %q", where, id, cells[pri], cells[reason], w.priority, w.reason)
				}
			}
		}
	}
	// The empty table's one cell spans every column.
	doc, _ := renderPage(t, "tasks", &TasksView{States: store.States})
	if want := `colspan="` + strconv.Itoa(len(taskColumns)) + `" class="empty"`; !strings.Contains(doc, want) {
		t.Errorf("the empty tasks table lacks %s", want)
	}
}

// TestTaskPagePriority: the task page (and its live fragment) shows the
// task's priority among its facts.
func TestTaskPagePriority(t *testing.T) {
	for _, c := range []struct {
		stored int
		want   string
	}{{1, "1"}, {0, "3"}, {5, "5"}} {
		tk := task.Task{ID: "task_p", RunID: "run_r", TenantID: "acme", Worker: "w", State: api.Queued, Priority: c.stored}
		v := &TaskView{Task: tk, Priority: task.PriorityOf(tk.Priority)}
		doc, frag := renderPage(t, "task", v)
		for where, d := range map[string]string{"page": doc, "fragment": frag} {
			if got := `<span id="task-priority">` + c.want + `</span>`; !strings.Contains(d, got) {
				t.Errorf("stored priority %d: the task %s lacks %s", c.stored, where, got)
			}
		}
	}
}
