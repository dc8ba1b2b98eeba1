//go:build unix

package zombie_test

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the CPU time (user + system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSweeperSizing measures what one pass needs of an instance:
// over 1 000 RUNNING tasks of which 0, 100 or 1 000 are due (one
// LEASE_EXPIRED transaction each, 8 at a time), the pass's wall time, the
// CPU this process spent in it (the sweeper and its Firestore client; the
// emulator is another process) and the peak Go memory (heap in use +
// stacks, sampled every 10 ms). cpu-share = cpu-ms / pass-ms is the vCPU a
// pass keeps busy: the sweeper's Terraform size (terraform/README.md,
// "Sizing") gives it at least that. Against the emulator on a shared
// machine: an upper bound for CPU, not Firestore's latency.
//
//	go test -run '^$' -bench SweeperSizing -benchtime 1x ./zombie/
func BenchmarkSweeperSizing(b *testing.B) {
	for _, due := range []int{0, 100, 1_000} {
		b.Run(fmt.Sprintf("due=%d", due), func(b *testing.B) {
			var wall, cpu time.Duration
			var peak atomic.Uint64
			for range b.N {
				b.StopTimer()
				sw, _ := costFixture(b, 1_000, due)
				runtime.GC()
				stop := make(chan struct{})
				var wg sync.WaitGroup
				wg.Go(func() {
					var ms runtime.MemStats
					for {
						runtime.ReadMemStats(&ms)
						if v := ms.HeapInuse + ms.StackInuse; v > peak.Load() {
							peak.Store(v)
						}
						select {
						case <-stop:
							return
						case <-time.After(10 * time.Millisecond):
						}
					}
				})
				b.StartTimer()
				c0, t0 := cpuTime(), time.Now()
				sweepOnce(b, sw, due)
				wall += time.Since(t0)
				cpu += cpuTime() - c0
				close(stop)
				wg.Wait()
			}
			b.ReportMetric(float64(wall.Milliseconds())/float64(b.N), "pass-ms")
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms")
			b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cpu-share")
			b.ReportMetric(float64(peak.Load())/(1<<20), "peak-MiB")
		})
	}
}
