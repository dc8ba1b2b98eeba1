package task

import (
	"fmt"
	"time"

	"github.com/servo-dev/servo/api"
)

// DefaultClaimWait is the long-poll of a claim that names no maxWaitMs.
const DefaultClaimWait = 20 * time.Second

// ValidateClaim checks a claim request.
func ValidateClaim(r api.ClaimRequest) *FieldError {
	if r.WorkerID == "" {
		return fieldErr("workerId", "is required")
	}
	if fe := validWorker(1, r.WorkerID); fe != nil {
		return fe
	}
	if r.MaxWaitMs != nil && (*r.MaxWaitMs < 0 || *r.MaxWaitMs > api.MaxClaimWait.Milliseconds()) {
		return fieldErr("maxWaitMs", "must be between 0 and 60000")
	}
	if len(r.ThenPools) > MaxThenPools {
		return fieldErr("thenPools", "names at most %d pools", MaxThenPools)
	}
	return nil
}

// ValidateThenPools checks a claim's further pools against the path's
// pool: each named, distinct, and not the path's own.
func ValidateThenPools(pool string, then []string) *FieldError {
	seen := map[string]bool{pool: true}
	for i, p := range then {
		f := fmt.Sprintf("thenPools[%d]", i)
		switch {
		case p == "":
			return fieldErr(f, "must name a pool")
		case p == pool:
			return fieldErr(f, "is the claim's own pool (the path's)")
		case seen[p]:
			return fieldErr(f, "names %q twice", p)
		}
		seen[p] = true
	}
	return nil
}

// ClaimWait is a claim request's long-poll.
func ClaimWait(r api.ClaimRequest) time.Duration {
	if r.MaxWaitMs == nil {
		return DefaultClaimWait
	}
	return time.Duration(*r.MaxWaitMs) * time.Millisecond
}
