package task

import (
	"regexp"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
)

func TestRefreshBefore(t *testing.T) {
	cases := []struct{ lifetime, interval, want time.Duration }{
		{time.Hour, 30 * time.Second, 15 * time.Minute},
		{time.Hour, 35 * time.Minute, 70 * time.Minute},
		{2 * time.Hour, 10 * time.Minute, 30 * time.Minute},
	}
	for _, c := range cases {
		if got := RefreshBefore(c.lifetime, c.interval); got != c.want {
			t.Errorf("RefreshBefore(%v, %v) = %v, want %v", c.lifetime, c.interval, got, c.want)
		}
	}
}

func TestRedriveName(t *testing.T) {
	id := NewTaskID(t0)
	valid := regexp.MustCompile(`^[A-Za-z0-9_-]{1,500}$`)
	seen := map[string]bool{}
	for attempt := 1; attempt <= 3; attempt++ {
		for n := 0; n <= 5; n++ {
			name := RedriveName(id, attempt, n)
			if !valid.MatchString(name) {
				t.Errorf("attempt %d re-drive %d: %q is not a valid Cloud Tasks task id", attempt, n, name)
			}
			if name != RedriveName(id, attempt, n) {
				t.Errorf("attempt %d re-drive %d: not deterministic", attempt, n)
			}
			if seen[name] {
				t.Errorf("attempt %d re-drive %d: %q repeats an earlier name", attempt, n, name)
			}
			seen[name] = true
		}
		if RedriveName(id, attempt, 0) != DispatchName(id, attempt) {
			t.Errorf("attempt %d: the first dispatch must keep DispatchName", attempt)
		}
	}
	if long := RedriveName(id, api.MaxAttemptsLimit, 1<<30); len(long) > 500 {
		t.Errorf("%d characters", len(long))
	}
}
