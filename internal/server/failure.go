package server

import (
	"errors"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
)

// Why a Server could not be built, by what an operator fixes. Open and
// OpenEnv wrap their errors with these; FailureCode names them.
var (
	// ErrMisconfigured: the function's own configuration is wrong (its
	// environment, or a database this build refuses: schema, due shards).
	ErrMisconfigured = errors.New("misconfigured")
	// ErrSecret: the task-token key ring's secret cannot be read or parsed.
	ErrSecret = errors.New("token key secret unavailable")
)

// FailureCode is the error code a function answers (503, with a
// Retry-After) while its Server cannot be built because of err:
// api.CodeSecretUnavailable, api.CodeMisconfigured, or
// api.CodeUnavailable for anything else (a dependency that did not
// answer). docs/operations.md routes each code to its runbook section.
func FailureCode(err error) string {
	switch {
	case errors.Is(err, ErrSecret):
		return api.CodeSecretUnavailable
	case errors.Is(err, ErrMisconfigured), errors.Is(err, ErrDueShardsShrunk),
		errors.Is(err, store.ErrSchemaTooNew), errors.Is(err, store.ErrSchemaTooOld):
		return api.CodeMisconfigured
	}
	return api.CodeUnavailable
}
