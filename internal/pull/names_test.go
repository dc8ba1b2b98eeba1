package pull_test

import (
	"testing"

	"github.com/servo-dev/servo/internal/pull"
)

// Two environments in one project keep their pools apart: a pool's topic
// and subscription carry the deployment's name prefix, as Terraform names
// them (terraform/pull.tf).
func TestResourceIDCarriesThePrefix(t *testing.T) {
	for _, tc := range []struct{ prefix, pool, want string }{
		{"", "gpu", "servo-pool-gpu"},
		{"servo", "gpu", "servo-pool-gpu"},
		{"stg", "gpu", "stg-pool-gpu"},
	} {
		if got := pull.ResourceID(tc.prefix, tc.pool); got != tc.want {
			t.Errorf("ResourceID(%q, %q) = %q, want %q", tc.prefix, tc.pool, got, tc.want)
		}
	}
}
