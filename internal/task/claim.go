package task

import (
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
	return nil
}

// ClaimWait is a claim request's long-poll.
func ClaimWait(r api.ClaimRequest) time.Duration {
	if r.MaxWaitMs == nil {
		return DefaultClaimWait
	}
	return time.Duration(*r.MaxWaitMs) * time.Millisecond
}
