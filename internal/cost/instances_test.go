package cost

import (
	"math"
	"testing"
)

// TestNewLoad checks the instance model against hand-computed figures:
// alone, overlapping on one instance, bound by CPU, bound by concurrency.
func TestNewLoad(t *testing.T) {
	f := Function{Memory: "256Mi", CPU: 1, Concurrency: 80}
	for _, c := range []struct {
		name                 string
		perSecond, wall, cpu float64
		f                    Function
		wantInstances        float64
		wantBilledPerRequest float64
	}{
		// Rare requests: each busy period is one request, billed one
		// granule (100 ms).
		{"alone", 0.001, 0.02, 0.005, f, 1, 0.1 * math.Exp(-0.001*0.02)},
		// 10 a second of 20 ms: the instance is idle e^-0.2 of the time,
		// busy periods start 10·e^-0.2 a second, each billed 100 ms.
		{"overlapping", 10, 0.02, 0.002, f, 1, 0.1 * math.Exp(-0.2)},
		// 1 000 a second of 3 ms CPU: 5 instances at 60 %, always busy.
		{"CPU-bound", 1000, 0.02, 0.003, f, 5, 0.005},
		// 1 000 a second of 1 s with at most 10 at once: 1000/(10·0.6)
		// instances, busy but for 0.25 % of the time, each busy period
		// rounded up by half a granule.
		{"concurrency-bound", 1000, 1, 0.0001, Function{Memory: "256Mi", CPU: 1, Concurrency: 10}, 167,
			167 * (-math.Expm1(-1000.0/167) + 1000.0/167*math.Exp(-1000.0/167)*0.05) / 1000},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := NewLoad(c.perSecond, c.wall, c.cpu, c.f, DefaultAssumptions)
			if l.Instances != c.wantInstances {
				t.Errorf("instances %g, want %g", l.Instances, c.wantInstances)
			}
			if got := l.BilledSecondsPerRequest(); math.Abs(got-c.wantBilledPerRequest) > 1e-9 {
				t.Errorf("billed %g s a request, want %g", got, c.wantBilledPerRequest)
			}
		})
	}
	// Busier never costs more a request, and never more than alone.
	prev := math.Inf(1)
	for _, rate := range []float64{0.01, 0.1, 1, 10, 100, 1000, 10000, 100000} {
		got := NewLoad(rate, 0.015, 0.002, f, DefaultAssumptions).BilledSecondsPerRequest()
		if got > prev+1e-12 || got > 0.1 {
			t.Errorf("at %g/s: %g s a request (before: %g)", rate, got, prev)
		}
		prev = got
	}
	if l := NewLoad(0, 0.015, 0.002, f, DefaultAssumptions); l.BilledSecondsPerRequest() != 0 {
		t.Errorf("no requests billed %g", l.BilledSecondsPerRequest())
	}
}
