package devstack

import (
	"context"
	"fmt"

	"cloud.google.com/go/pubsub/v2"

	"github.com/servo-dev/servo/internal/pull"
)

// startPools creates the pull pools' topics and subscriptions on the
// Pub/Sub emulator, and the client their transport publishes and receives
// with.
func (s *Stack) startPools(ctx context.Context, o Options) error {
	if len(o.PullPools) == 0 {
		return nil
	}
	var err error
	if s.poolPS, err = pubsub.NewClient(ctx, o.Project, o.PoolPubSubOptions...); err != nil {
		return fmt.Errorf("devstack: pool pubsub client: %w", err)
	}
	admin := pull.NewTransport(s.PubSub, "") // not through a test's proxy
	for name := range o.PullPools {
		if err := admin.Ensure(ctx, name); err != nil {
			return fmt.Errorf("devstack: %w", err)
		}
	}
	return nil
}
