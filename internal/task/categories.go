package task

import "github.com/servo-dev/servo/api"

// ActiveStates lists the non-terminal states.
var ActiveStates = []api.State{api.Pending, api.Queued, api.Running, api.Cancelling}

// Categories lists every error category.
var Categories = []api.Category{api.CategoryUserCode, api.CategoryDataQuality, api.CategoryInfrastructure, api.CategoryConfiguration, api.CategoryTimeout, api.CategoryCancelled, api.CategoryConflict}

// ReportableOutcome reports whether a worker may report o in `completed`.
func ReportableOutcome(o api.Outcome) bool {
	return o == api.OutcomeSucceeded || o == api.OutcomeFailed || o == api.OutcomeCancelled
}

// RetryableByDefault is the category's default retryability
// (docs/contract.md §6.1).
func RetryableByDefault(c api.Category) bool {
	switch c {
	case api.CategoryUserCode, api.CategoryInfrastructure, api.CategoryTimeout, api.CategoryConflict:
		return true
	}
	return false
}
