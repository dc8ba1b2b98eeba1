package cost

import (
	"math"
	"math/rand/v2"
)

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
	// Busy is the billed fraction of each instance's time under
	// request-based billing.
	Busy float64
	// Alive is the fraction of each instance's time it is up, billed
	// under instance-based billing: from a request's arrival to
	// IdleInstanceSeconds after it ends, when no other request came.
	Alive float64
}

// BilledSecondsPerRequest is the instance time billed per request.
func (l Load) BilledSecondsPerRequest() float64 {
	if l.PerSecond == 0 {
		return 0
	}
	return l.Instances * l.Busy / l.PerSecond
}

// InstanceSecondsPerRequest is the instance time billed per request
// under instance-based billing: the instances' whole life.
func (l Load) InstanceSecondsPerRequest() float64 {
	if l.PerSecond == 0 {
		return 0
	}
	return l.Instances * l.Alive / l.PerSecond
}

// AliveFraction is the share of an instance's time it is up when
// requests arrive at random, perSecond on average, each keeping it up
// from its arrival for wall seconds and then idle seconds: one minus the
// chance that no arrival fell in the last wall + idle seconds (the
// coverage of Poisson arrivals by intervals of that length,
// 1 − e^(−λ·(wall+idle))).
func AliveFraction(perSecond, wall, idle float64) float64 {
	if perSecond <= 0 {
		return 0
	}
	return 1 - math.Exp(-perSecond*(wall+idle))
}

// NewLoad models n requests a second, taking the request times walls in
// turn (seconds) and the given mean CPU time, on instances of f.
// Requests arrive at random (Poisson) and are spread evenly over the
// instances; an instance is busy while at least one request is in
// flight, each busy period is billed rounded up to the granularity from
// its start, and time covered by two rounded periods is billed once
// ([BilledFraction]). At a low rate that is each request
// billed alone and rounded up; at a high rate instances are busy all the
// time and the bill is the instances the CPU needs.
func NewLoad(perSecond float64, walls []float64, cpuSec float64, f Function, a Assumptions) Load {
	l := Load{PerSecond: perSecond}
	if perSecond <= 0 || len(walls) == 0 {
		return l
	}
	var wallSec float64
	for _, w := range walls {
		wallSec += w
	}
	wallSec /= float64(len(walls))
	conc := float64(max(1, f.Concurrency))
	n := max(1, perSecond*cpuSec/(f.CPU*a.CPUTarget), perSecond*wallSec/(conc*a.CPUTarget))
	l.Instances = math.Ceil(n)
	l.Alive = AliveFraction(perSecond/l.Instances, wallSec, a.IdleInstanceSeconds)
	if f.Billing != Instance {
		l.Busy = BilledFraction(perSecond/l.Instances, walls, float64(a.BillingGranularityMs)/1000)
	}
	return l
}

// NeededPerRequestRate is how many instances the autoscaler runs per
// request a second, once the rate is high enough that they are busy:
// the larger of the CPU's and the concurrency's need at their target
// utilisation (NewLoad's count before it is rounded up and floored at
// one).
func NeededPerRequestRate(wallSec, cpuSec float64, f Function, a Assumptions) float64 {
	conc := float64(max(1, f.Concurrency))
	return max(cpuSec/(f.CPU*a.CPUTarget), wallSec/(conc*a.CPUTarget))
}

// billedArrivals is how many requests BilledFraction simulates.
const billedArrivals = 200_000

// BilledFraction is the share of an instance's time Cloud Run bills when
// requests arrive at random, perSecond on average, taking walls (seconds)
// in turn: each busy period (at least one request in flight) is billed
// from its start rounded up to a whole number of granules, and an instant
// two rounded periods cover is billed once. It is simulated, the same
// arrivals every time (a fixed seed), so that the figures it gives are
// reproducible, and is the time billed per request times the rate (the
// arrivals' mean gap, not the sample's, so that requests billed alone
// are billed exactly their rounded time). TestBilledFraction checks it
// against the two cases known in closed form (instant requests:
// 1 − e^(−λ·granule); no rounding: 1 − e^(−λ·wall)).
func BilledFraction(perSecond float64, walls []float64, granule float64) float64 {
	if perSecond <= 0 || len(walls) == 0 {
		return 0
	}
	r := rand.New(rand.NewPCG(1, 2))
	// round is the end of the billed time of a busy period.
	round := func(from, to float64) float64 {
		if granule <= 0 {
			return to
		}
		return from + math.Ceil((to-from)/granule-1e-9)*granule
	}
	// Times are relative to an origin moved to each arrival that finds
	// nothing billed, so that they stay small whatever the rate.
	var (
		billed           float64
		at               float64 // the current arrival
		busyFrom, busyTo float64 // the busy period in progress
		billFrom, billTo float64 // the billed stretch in progress
	)
	// closeBusy bills the busy period in progress.
	closeBusy := func() {
		if busyFrom > billTo {
			billed += billTo - billFrom
			billFrom = busyFrom
		}
		billTo = max(billTo, round(busyFrom, busyTo))
	}
	busyTo = walls[0]
	for i := 1; i < billedArrivals; i++ {
		at += r.ExpFloat64() / perSecond
		wall := walls[i%len(walls)]
		if at <= busyTo {
			busyTo = max(busyTo, at+wall)
			continue
		}
		closeBusy()
		if at > billTo {
			billed += billTo - billFrom
			at, billFrom, billTo = 0, 0, 0
		}
		busyFrom, busyTo = at, at+wall
	}
	closeBusy()
	billed += billTo - billFrom
	return min(1, billed*perSecond/billedArrivals)
}
