package cost

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestNewLoad checks the instance model: how many instances, and what
// each request is billed alone, bound by CPU, bound by concurrency.
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
		{"alone", 0.001, 0.02, 0.005, f, 1, 0.1},
		// 1 000 a second of 3 ms CPU: 5 instances at 60 %, always busy.
		{"CPU-bound", 1000, 0.02, 0.003, f, 5, 0.005},
		// 1 000 a second of 1 s with at most 10 at once: 1000/(10·0.6)
		// instances, each always busy.
		{"concurrency-bound", 1000, 1, 0.0001, Function{Memory: "256Mi", CPU: 1, Concurrency: 10}, 167, 0.167},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := NewLoad(c.perSecond, []float64{c.wall}, c.cpu, c.f, DefaultAssumptions)
			if l.Instances != c.wantInstances {
				t.Errorf("instances %g, want %g", l.Instances, c.wantInstances)
			}
			if got := l.BilledSecondsPerRequest(); math.Abs(got-c.wantBilledPerRequest) > 0.02*c.wantBilledPerRequest {
				t.Errorf("billed %g s a request, want %g within 2 %%", got, c.wantBilledPerRequest)
			}
		})
	}
	// Busier never costs more a request, and never more than alone.
	prev := math.Inf(1)
	for _, rate := range []float64{0.01, 0.1, 1, 10, 100, 1000, 10000, 100000} {
		got := NewLoad(rate, []float64{0.015}, 0.002, f, DefaultAssumptions).BilledSecondsPerRequest()
		if got > prev+1e-12 || got > 0.1 {
			t.Errorf("at %g/s: %g s a request (before: %g)", rate, got, prev)
		}
		prev = got
	}
	if l := NewLoad(0, []float64{0.015}, 0.002, f, DefaultAssumptions); l.BilledSecondsPerRequest() != 0 {
		t.Errorf("no requests billed %g", l.BilledSecondsPerRequest())
	}
}

// TestBilledFraction checks the simulated billing against the cases known
// in closed form, and against a second, independent computation on a
// millisecond grid for the cases between.
func TestBilledFraction(t *testing.T) {
	for _, c := range []struct {
		name                     string
		perSecond, wall, granule float64
		want                     float64
	}{
		// Instant requests: the billed time is the union of [a, a+g] over
		// Poisson arrivals a.
		{"instant, 1 a second", 1, 1e-9, 0.1, -math.Expm1(-0.1)},
		{"instant, 10 a second", 10, 1e-9, 0.1, -math.Expm1(-1)},
		{"instant, 30 a second", 30, 1e-9, 0.1, -math.Expm1(-3)},
		// No rounding: the busy fraction of an M/D/∞ queue.
		{"unrounded, 10 of 50 ms", 10, 0.05, 0, -math.Expm1(-0.5)},
		{"unrounded, 30 of 16 ms", 30, 0.016, 0, -math.Expm1(-0.48)},
		// Rare: every request billed one granule alone.
		{"rare", 0.001, 0.02, 0.1, 0.0001},
		{"saturated", 1000, 0.02, 0.1, 1},
		// Between, on the grid.
		{"10 of 11 ms", 10, 0.011, 0.1, gridBilled(10, 0.011, 0.1)},
		{"30 of 16 ms", 30, 0.016, 0.1, gridBilled(30, 0.016, 0.1)},
		{"3 of 150 ms", 3, 0.15, 0.1, gridBilled(3, 0.15, 0.1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := BilledFraction(c.perSecond, []float64{c.wall}, c.granule); math.Abs(got-c.want) > 0.02*c.want {
				t.Errorf("billed %.4f of the time, want %.4f within 2 %%", got, c.want)
			}
		})
	}
}

// gridBilled computes BilledFraction's figure another way: other random
// arrivals over 4 000 s, on a grid of 0.5 ms, each instant marked busy
// and then billed.
func gridBilled(perSecond, wall, granule float64) float64 {
	const step, span = 0.0005, 4000.0
	n := int(span / step)
	busy := make([]bool, n)
	r := rand.New(rand.NewPCG(7, 11))
	for at := r.ExpFloat64() / perSecond; at < span; at += r.ExpFloat64() / perSecond {
		for i := int(at / step); i < min(n, int((at+wall)/step)); i++ {
			busy[i] = true
		}
	}
	billed := make([]bool, n)
	g := int(math.Round(granule / step))
	for i := 0; i < n; {
		if !busy[i] {
			i++
			continue
		}
		j := i
		for j < n && busy[j] {
			j++
		}
		end := i + (j-i+g-1)/g*g
		for k := i; k < min(n, end); k++ {
			billed[k] = true
		}
		i = j
	}
	var b int
	for _, x := range billed {
		if x {
			b++
		}
	}
	return float64(b) / float64(n)
}
