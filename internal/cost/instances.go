package cost

import "math"

// Load is a function's steady request load, and what Cloud Run bills for
// it (request-based billing: an instance is billed while it serves at
// least one request, each such busy period rounded up to the billing
// granularity, https://cloud.google.com/run/pricing).
type Load struct {
	// PerSecond is the request rate.
	PerSecond float64
	// Instances is how many instances serve it: enough that none runs
	// above the autoscaler's CPU and concurrency targets, at
	// least one (the autoscaler's targets: 60 % of both,
	// https://cloud.google.com/run/docs/configuring/scaling-controls).
	Instances float64
	// Busy is the billed fraction of each instance's time.
	Busy float64
}

// BilledSecondsPerRequest is the instance time billed per request.
func (l Load) BilledSecondsPerRequest() float64 {
	if l.PerSecond == 0 {
		return 0
	}
	return l.Instances * l.Busy / l.PerSecond
}

// NewLoad models n requests a second of the given mean request and CPU
// time on instances of f. Requests arrive at random (Poisson): an
// instance receiving λ requests a second, each busy for d, is idle with
// probability e^(−λd) (an M/G/∞ queue); its busy periods start at
// λ·e^(−λd) a second and last (e^(λd) − 1)/λ on average, and each is
// billed rounded up to the granularity (at least one granule, half a
// granule over its length on average). At a low rate that is each
// request billed alone and rounded up; at a high rate instances are busy
// all the time and the bill is the instances the CPU needs.
func NewLoad(perSecond, wallSec, cpuSec float64, f Function, a Assumptions) Load {
	l := Load{PerSecond: perSecond}
	if perSecond <= 0 {
		return l
	}
	conc := float64(max(1, f.Concurrency))
	n := max(1, perSecond*cpuSec/(f.CPU*a.CPUTarget), perSecond*wallSec/(conc*a.CPUTarget))
	l.Instances = math.Ceil(n)
	per := perSecond / l.Instances
	idle := math.Exp(-per * wallSec)
	starts := per * idle
	mean := wallSec
	if x := per * wallSec; x > 1e-9 {
		mean = math.Expm1(x) / per
	}
	g := float64(a.BillingGranularityMs) / 1000
	// A busy period is billed rounded up: at least one granule, and half
	// a granule more than it lasts on average.
	billed := max(g, mean+g/2)
	l.Busy = min(1, starts*billed)
	return l
}
