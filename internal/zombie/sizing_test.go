package zombie_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/servotest"
)

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
			var peak uint64
			for range b.N {
				b.StopTimer()
				sw, _ := costFixture(b, 1_000, due)
				runtime.GC()
				stopMem := servotest.PeakMemory(10 * time.Millisecond)
				b.StartTimer()
				c0, t0 := servotest.CPUTime(), time.Now()
				sweepOnce(b, sw, due)
				wall += time.Since(t0)
				cpu += servotest.CPUTime() - c0
				peak = max(peak, stopMem())
			}
			b.ReportMetric(float64(wall.Milliseconds())/float64(b.N), "pass-ms")
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms")
			b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cpu-share")
			b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
		})
	}
}
