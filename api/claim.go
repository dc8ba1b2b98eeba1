package api

import "time"

// Pull-pool claims (package pull; POST /v1/pools/{pool}/claim).
const (
	// MaxClaimWait caps ClaimRequest.MaxWaitMs.
	MaxClaimWait = 60 * time.Second
	// MaxThenPools caps ClaimRequest.ThenPools.
	MaxThenPools = 9
	// CodeUnauthenticated: the caller's identity could not be verified
	// (401): no identity token where the access policy needs one, or one
	// that is malformed, forged, expired or for another audience.
	CodeUnauthenticated = "unauthenticated"
	// CodePermissionDenied: the caller has no role for the tenant, or may
	// not claim from the pool (403).
	CodePermissionDenied = "permission_denied"
	// CodeQuotaExceeded: the tenant or worker is at maxQueued (429).
	CodeQuotaExceeded = "quota_exceeded"
	// CodeRunNotFound: a run cancel for a run with no tasks (404).
	CodeRunNotFound = "run_not_found"
	// CodeTaskNotTerminal: a submit's rerunOf names a task that has not
	// finished (409).
	CodeTaskNotTerminal = "task_not_terminal"
)

// ClaimRequest is the body of a claim.
type ClaimRequest struct {
	// WorkerID is the claiming worker; the attempt is started for it.
	WorkerID string `json:"workerId"`
	// MaxWaitMs is how long the claim may wait for work (0 … 60 000;
	// absent: 20 s).
	MaxWaitMs *int64 `json:"maxWaitMs,omitempty"`
	// ThenPools are more pools to claim from, in priority order after the
	// path's: the claim answers with an attempt of the first of them
	// (the path's pool first) that has one (docs/contract.md §10).
	ThenPools []string `json:"thenPools,omitempty"`
}

// ClaimResponse answers a claim: 200 with Claimed and, when true, the
// envelope a push worker would have received; an error otherwise, with
// Disposition REJECTED (4xx) or RETRY (503).
type ClaimResponse struct {
	Claimed     bool        `json:"claimed"`
	Envelope    *Envelope   `json:"envelope,omitempty"`
	Disposition Disposition `json:"disposition"`
	ServerTime  time.Time   `json:"serverTime"`

	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
	Field   string `json:"field,omitempty"`
}
