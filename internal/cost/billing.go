package cost

import (
	"fmt"
	"math"
)

// BreakEvenShape is the shape the break-even rates are computed for: the
// lightest lifecycle (fewest requests), so that a function Auto bills by
// instance is cheaper so for every heavier one too.
const BreakEvenShape = "1 attempt, 1 heartbeat"

// SizingShape is the shape max_instances is sized for: the heaviest
// target shape (most callbacks a lifecycle), so that the bound holds for
// every lighter one.
const SizingShape = "1 attempt, 10 heartbeats"

// breakEvenRange are the rates (lifecycles a second) the break-even is
// looked for between: below the lowest, request-based billing is cheaper
// for sure (an instance billed whole for a few requests); the highest is
// the scale model's target.
var breakEvenRange = [2]float64{0.01, 10000}

// FunctionUSD is what function name's lines of a million lifecycles of t
// cost (requests, CPU and memory) under billing, at a's rate.
func FunctionUSD(t Traffic, name, billing string, p Prices, d Defaults, a Assumptions) (float64, error) {
	f, ok := d.Functions[name]
	if !ok {
		return 0, fmt.Errorf("cost: function %q has no Terraform sizing", name)
	}
	f.Billing = billing
	d.Functions = map[string]Function{name: f}
	one := Traffic{Shape: t.Shape, Invocations: map[string]int64{name: t.Invocations[name]}, RequestMs: t.RequestMs, CPUUs: t.CPUUs}
	ls, err := Bill(one, p, d, a)
	if err != nil {
		return 0, err
	}
	var usd float64
	for _, l := range ls {
		if l.Price == p.RunRequest || l.Price == p.RunCPU || l.Price == p.RunMemory || l.Price == p.RunCPUInstance || l.Price == p.RunMemoryInstance {
			usd += l.USD
		}
	}
	return usd, nil
}

// BreakEven is the lowest rate (lifecycles a second of t) from which
// instance-based billing of function name costs no more than
// request-based billing at every rate up to the range's top, rounded up
// to two significant digits: the rate Auto switches at. Above it the
// instances are busy enough that paying for their whole life at the
// lower instance-based prices, without a fee a request, is cheaper than
// paying for their busy time; below it, an instance billed whole serves
// too few requests. It is +Inf when request-based billing stays cheaper
// somewhere at the range's top.
func BreakEven(t Traffic, name string, p Prices, d Defaults, a Assumptions) (float64, error) {
	dearer := func(rate float64) (bool, error) {
		a.LifecyclesPerSecond = rate
		req, err := FunctionUSD(t, name, Request, p, d, a)
		if err != nil {
			return false, err
		}
		inst, err := FunctionUSD(t, name, Instance, p, d, a)
		return inst > req, err
	}
	// A grid of 10 rates a decade, from the top down to the last rate
	// where instance-based billing is dearer; then bisection to 1 %.
	lo, hi := breakEvenRange[0], breakEvenRange[1]
	steps := int(math.Round(10 * math.Log10(hi/lo)))
	last := -1
	for i := steps; i >= 0; i-- {
		r := lo * math.Pow(10, float64(i)/10)
		d, err := dearer(r)
		if err != nil {
			return 0, err
		}
		if d {
			last = i
			break
		}
	}
	switch last {
	case -1:
		return lo, nil
	case steps:
		return math.Inf(1), nil
	}
	below, above := lo*math.Pow(10, float64(last)/10), lo*math.Pow(10, float64(last+1)/10)
	for above/below > 1.01 {
		mid := math.Sqrt(below * above)
		d, err := dearer(mid)
		if err != nil {
			return 0, err
		}
		if d {
			below = mid
		} else {
			above = mid
		}
	}
	return roundUp2(above), nil
}

// NeededPerLifecycleRate is how many instances function name needs per
// lifecycle a second of t once busy (NeededPerRequestRate times its
// requests a lifecycle), rounded up to two significant digits: Terraform
// sizes max_instances from it and the declared rate.
func NeededPerLifecycleRate(t Traffic, name string, d Defaults, a Assumptions) (float64, error) {
	f, ok := d.Functions[name]
	if !ok {
		return 0, fmt.Errorf("cost: function %q has no Terraform sizing", name)
	}
	n := t.Invocations[name]
	if n == 0 {
		return 0, nil
	}
	wall := mean(t.RequestMs[name]) / 1000
	cpu := wall
	if c := t.CPUUs[name]; len(c) > 0 {
		cpu = mean(c) / 1e6
	}
	return roundUp2(float64(n) * NeededPerRequestRate(wall, cpu, f, a)), nil
}
