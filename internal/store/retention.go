package store

import (
	"time"

	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/task"
)

// Retention (docs/cost.md, "Retention"): an ended task, its attempt
// records and its run's document carry expireAt, and Firestore's TTL
// policies (TTLFields) delete them some time after it. The field is
// stamped by the commit that ends the task (task.Event.Retention), or that
// writes the run's document, never by a write of its own.

// WithRetention sets how long ended tasks, their attempts and runs are
// kept (default task.DefaultRetention); a tenant's retentionDays in the
// quota policy (WithQuotas) overrides it. Shorter than task.MinRetention
// is raised to it: an idempotency key must not outlive its task.
func WithRetention(d time.Duration) Option { return func(c *config) { c.retention = d } }

// retentionFor is how long tenant's ended tasks are kept.
func (s *Store) retentionFor(tenant string) time.Duration {
	d := s.retention
	if days := s.counters.Policy().For(quota.KindTenant, tenant).RetentionDays; days > 0 {
		d = time.Duration(days) * 24 * time.Hour
	}
	if d <= 0 {
		d = task.DefaultRetention
	}
	return max(d, task.MinRetention)
}
