package pull

import "context"

// OnClaimCommitted makes f run when a claim from pool commits, with the
// claim request's context, before its answer; it returns the restore.
func OnClaimCommitted(pool string, f func(ctx context.Context)) (restore func()) {
	prev := claimHook.Load()
	hook := func(ctx context.Context, p string) {
		if p == pool {
			f(ctx)
		}
		if prev != nil {
			(*prev)(ctx, p)
		}
	}
	claimHook.Store(&hook)
	return func() { claimHook.Store(prev) }
}
