package worker

import (
	"runtime/metrics"
	"sync/atomic"
	"time"

	"github.com/servo-dev/servo/api"
)

// What the metrics of a `completed` report measure. Both figures are
// process-wide, so they are the attempt's own when the worker runs one
// attempt at a time (Cloud Run concurrency 1) and an upper bound otherwise:
//
//   - cpuTimeMs: user + system CPU time of the process while the Func ran
//     (getrusage(RUSAGE_SELF) deltas on Unix; elsewhere the Go runtime's
//     estimate of user and GC CPU time, /cpu/classes/{user,gc/total}).
//   - peakMemoryBytes: the largest memory mapped by the Go runtime
//     (/memory/classes/total:bytes: heap, stacks, runtime metadata; not cgo
//     allocations) seen while the Func ran, sampled every memorySampleEvery
//     and at the start and end.
//
// I/O bytes are not measured.
const memorySampleEvery = 200 * time.Millisecond

const memoryMetric = "/memory/classes/total:bytes"

type meter struct {
	cpu0 time.Duration
	peak atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

func startMeter() *meter {
	m := &meter{cpu0: cpuTime(), stop: make(chan struct{}), done: make(chan struct{})}
	m.sample()
	go func() {
		defer close(m.done)
		t := time.NewTicker(memorySampleEvery)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
				m.sample()
			}
		}
	}()
	return m
}

func (m *meter) sample() {
	s := []metrics.Sample{{Name: memoryMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	v := s[0].Value.Uint64()
	for {
		old := m.peak.Load()
		if v <= old || m.peak.CompareAndSwap(old, v) {
			return
		}
	}
}

// finish stops sampling and returns the metrics (nil if none measured).
func (m *meter) finish() *api.Metrics {
	close(m.stop)
	<-m.done
	m.sample()
	out := &api.Metrics{CPUTimeMs: max(cpuTime()-m.cpu0, 0).Milliseconds(), PeakMemoryBytes: int64(min(m.peak.Load(), 1<<62))}
	if out.CPUTimeMs == 0 && out.PeakMemoryBytes == 0 {
		return nil
	}
	return out
}

// runtimeCPUTime is the Go runtime's estimate of CPU time spent on user Go
// code and GC.
func runtimeCPUTime() time.Duration {
	s := []metrics.Sample{{Name: "/cpu/classes/user:cpu-seconds"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	var sec float64
	for _, x := range s {
		if x.Value.Kind() == metrics.KindFloat64 {
			sec += x.Value.Float64()
		}
	}
	return time.Duration(sec * float64(time.Second))
}
