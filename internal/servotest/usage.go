package servotest

import (
	"runtime"
	"sync"
	"time"
)

// PeakMemory samples the Go memory this process uses (heap in use plus
// stacks) every interval until the returned stop is called, which returns
// the peak seen in bytes. The sizing benchmarks report it.
func PeakMemory(every time.Duration) (stop func() uint64) {
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse+ms.StackInuse)
			select {
			case <-done:
				return
			case <-time.After(every):
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak
	}
}
