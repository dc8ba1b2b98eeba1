package jobs

import (
	"context"
	"testing"
)

// Each job numbers its own executions, as each Cloud Run Job lists its
// own: a second job's first execution is its 00001, whatever ran before.
func TestLocalNumbersExecutionsPerJob(t *testing.T) {
	l := NewLocal(map[string]string{
		"projects/p/locations/l/jobs/a": "true", "projects/p/locations/l/jobs/b": "true",
	}, nil, nil)
	want := []struct{ job, name string }{
		{"projects/p/locations/l/jobs/a", "projects/p/locations/l/jobs/a/executions/a-00001"},
		{"projects/p/locations/l/jobs/a", "projects/p/locations/l/jobs/a/executions/a-00002"},
		{"projects/p/locations/l/jobs/b", "projects/p/locations/l/jobs/b/executions/b-00001"},
	}
	for _, w := range want {
		e, err := l.Run(context.Background(), w.job, []byte(`{}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		if e.Name != w.name {
			t.Fatalf("execution %q, want %q", e.Name, w.name)
		}
	}
}
