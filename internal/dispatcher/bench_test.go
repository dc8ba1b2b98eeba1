package dispatcher

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
)

// benchEnv is an env for benchmarks: the queue is paused, so the figures
// are the control API's (validate, store, enqueue) and not the emulator's
// deliveries competing for the CPU.
// The first write to a new emulator project is slow (seconds): one submit
// warms it up before the measurements.
func benchEnv(b *testing.B) *env {
	e := newEnv(b, envOptions{paused: true})
	e.submit(validSubmit("acme"), http.StatusCreated)
	return e
}

func post(b *testing.B, e *env, path string, body []byte, want int) {
	resp, err := http.Post(e.api.URL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		var eb api.Error
		_ = json.NewDecoder(resp.Body).Decode(&eb)
		b.Fatalf("%s: status %d, want %d: %+v", path, resp.StatusCode, want, eb)
	}
}

// BenchmarkSubmit measures POST /v1/tasks, one task per request, with
// sequential and with 8 concurrent callers.
func BenchmarkSubmit(b *testing.B) {
	body, _ := json.Marshal(validSubmit("acme"))
	e := benchEnv(b)
	b.Run("sequential", func(b *testing.B) {
		n, start := 0, time.Now()
		for b.Loop() {
			post(b, e, "/v1/tasks", body, http.StatusCreated)
			n++
		}
		b.ReportMetric(float64(n)/time.Since(start).Seconds(), "tasks/s")
	})
	b.Run("parallel8", func(b *testing.B) {
		b.SetParallelism(8)
		b.ResetTimer()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				post(b, e, "/v1/tasks", body, http.StatusCreated)
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tasks/s")
	})
}

// BenchmarkSubmitBatch measures POST /v1/tasks:batch with 100 and 500
// tasks per request; tasks/s counts tasks, not requests.
func BenchmarkSubmitBatch(b *testing.B) {
	e := benchEnv(b)
	for _, size := range []int{100, 500} {
		items := make([]any, size)
		for i := range items {
			items[i] = validSubmit("acme")
		}
		body, _ := json.Marshal(map[string]any{"tasks": items})
		b.Run(itoa(size), func(b *testing.B) {
			n, start := 0, time.Now()
			for b.Loop() {
				post(b, e, "/v1/tasks:batch", body, http.StatusCreated)
				n += size
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "tasks/s")
		})
	}
}
