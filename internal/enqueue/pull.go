package enqueue

import (
	"context"
	"errors"
	"fmt"
	"net/mail"

	"github.com/servo-dev/servo/internal/task"
)

// ErrPoolTransport: a pull pool's transport (Pub/Sub) refused or could not
// be reached; the task stays as stored and the sweeper re-drives it.
var ErrPoolTransport = errors.New("pull pool enqueue failed")

// Pools is the transport of pull pools: package pull's Transport publishes
// an attempt to the pool's topic. A pull pool has nothing to delete on
// cancel: a claim drops a message whose attempt is no longer claimable.
type Pools interface {
	Publish(ctx context.Context, pool string, t task.Task) error
}

// validatePull checks a pull pool: no URL, queue or OIDC settings (claims
// come in; nothing is pushed), and the service accounts allowed to claim,
// which production requires.
func (w Worker) validatePull(allowLoopbackHTTP bool) error {
	switch {
	case !w.Pull:
		return errors.New("serviceAccounts is for pull pools: set pull: true, or use serviceAccount for a push worker")
	case w.URL != "" || w.Queue != "" || w.MaxDispatchesPerSecond != 0:
		return errors.New("a pull pool has no url and no queue, nor maxDispatchesPerSecond: set either pull: true or url and queue")
	case w.ServiceAccount != "" || w.Audience != "":
		return errors.New("a pull pool has no serviceAccount or audience: list its callers in serviceAccounts")
	case len(w.ServiceAccounts) == 0 && !allowLoopbackHTTP:
		return errors.New("a pull pool needs serviceAccounts, the identities allowed to claim from it")
	}
	for _, sa := range w.ServiceAccounts {
		if a, err := mail.ParseAddress(sa); err != nil || a.Address != sa {
			return fmt.Errorf("serviceAccounts: %q is not an e-mail address", sa)
		}
	}
	return nil
}

// enqueuePull publishes t's current attempt to its pull pool.
func (e *Enqueuer) enqueuePull(ctx context.Context, name string, t task.Task) error {
	log := e.cfg.Logger.With("taskId", t.ID, "attempt", t.Attempt, "tenantId", t.TenantID, "worker", t.Worker)
	if e.cfg.Pools == nil {
		return fmt.Errorf("%w: %s: no pool transport is configured", ErrPoolTransport, t.ID)
	}
	if err := e.cfg.Pools.Publish(ctx, name, t); err != nil {
		log.WarnContext(ctx, "publish to the pull pool failed; the sweeper will re-drive", "error", err)
		return fmt.Errorf("%w: %s attempt %d: %w", ErrPoolTransport, t.ID, t.Attempt, err)
	}
	log.InfoContext(ctx, "attempt published to its pull pool", "redrive", t.Redrives)
	return nil
}

// WithPools returns an Enqueuer like e whose pull pools publish through p
// (for entry points that open the Pub/Sub client after the Enqueuer).
func (e *Enqueuer) WithPools(p Pools) *Enqueuer {
	cfg := e.cfg
	cfg.Pools = p
	return &Enqueuer{cfg: cfg}
}
