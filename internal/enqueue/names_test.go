package enqueue

import (
	"regexp"
	"strings"
	"testing"
)

// TestNameGrammars checks the length-bounded grammars against the single
// expressions they stand for, on names at and around every bound.
func TestNameGrammars(t *testing.T) {
	ref := map[string]*regexp.Regexp{
		"queue": regexp.MustCompile(`^projects/[a-z][a-z0-9-]{4,61}[a-z0-9]/locations/[a-z0-9-]+/queues/[A-Za-z0-9-]{1,100}$`),
		"name":  regexp.MustCompile(namePattern),
		"job":   regexp.MustCompile(`^projects/[a-z][a-z0-9-]{4,61}[a-z0-9]/locations/[a-z0-9-]+/jobs/[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`),
	}
	got := map[string]boundedRE{"queue": queueRE, "name": nameRE, "job": jobRE}
	project := func(n int) string { return "p" + strings.Repeat("x", n-2) + "1" }
	var cases []struct{ kind, s string }
	add := func(kind string, ss ...string) {
		for _, s := range ss {
			cases = append(cases, struct{ kind, s string }{kind, s})
		}
	}
	for _, n := range []int{4, 5, 6, 7, 62, 63, 64} {
		add("queue", "projects/"+project(n)+"/locations/europe-west1/queues/q")
		add("job", "projects/"+project(n)+"/locations/europe-west1/jobs/j")
	}
	for _, n := range []int{0, 1, 99, 100, 101} {
		add("queue", "projects/my-project/locations/l/queues/"+strings.Repeat("Q", n))
	}
	for _, n := range []int{1, 2, 62, 63, 64} {
		add("job", "projects/my-project/locations/l/jobs/j"+strings.Repeat("9", n-1))
		add("name", "w"+strings.Repeat("_", n-1))
	}
	add("job", "projects/my-project/locations/l/jobs/j-", "projects/my-project/locations/l/jobs/1j", "projects/my-project/locations/l/jobs/")
	add("queue", "projects/my-project-/locations/l/queues/q", "projects/1project/locations/l/queues/q", "projects/my-project/locations/L/queues/q", "projects/my-project/locations/l/queues/q/x")
	add("name", "", "W", "1w", "w-x_y", "w.x")
	for _, c := range cases {
		if want, g := ref[c.kind].MatchString(c.s), got[c.kind].MatchString(c.s); g != want {
			t.Errorf("%s %q: %v, want %v", c.kind, c.s, g, want)
		}
	}
}
