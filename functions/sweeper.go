package functions

import (
	"context"
	"fmt"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"
	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/servo-dev/servo/zombie"
)

// Sweeper environment (see package zombie and zombie/README.md).
const (
	// EnvSweepEvery is the cadence of passes within one invocation.
	EnvSweepEvery = "SERVO_SWEEP_EVERY"
	// EnvSweepWindow is how long one invocation keeps sweeping; 0 means a
	// single pass per tick.
	EnvSweepWindow = "SERVO_SWEEP_WINDOW"
	// EnvMaxRedrives bounds the re-drives of one attempt before it fails
	// with DISPATCH_TIMEOUT.
	EnvMaxRedrives = "SERVO_MAX_REDRIVES"
)

func init() {
	functions.CloudEvent("ServoSweeper", ServoSweeper)
}

// ServoSweeper is the sweeper's CloudEvent function. In production Cloud
// Scheduler publishes to a Pub/Sub topic once a minute and the function is
// triggered by it (Eventarc delivers a google.cloud.pubsub.topic.v1.
// messagePublished CloudEvent). Locally the Pub/Sub emulator's push
// subscription POSTs the raw push body, which functions-framework-go turns
// into the same CloudEvent. The message's content is ignored: each message
// is a tick.
func ServoSweeper(ctx context.Context, e cloudevents.Event) error {
	sw, err := sweeperInit.get(ctx)
	if err != nil {
		return err
	}
	return sw.HandleEvent(ctx, e)
}

// sweeperInit builds the instance's Sweeper from the environment; a failed
// build is retried by a later tick after a backoff (see dependencies).
var sweeperInit = newLazy(loadSweeper)

func loadSweeper(ctx context.Context) (*zombie.Sweeper, error) {
	d, err := dependencies(ctx)
	if err != nil {
		return nil, err
	}
	every, err := EnvDuration(EnvSweepEvery, zombie.DefaultEvery)
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	window, err := EnvDuration(EnvSweepWindow, zombie.DefaultWindow)
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	maxRedrives, err := EnvInt(EnvMaxRedrives, zombie.DefaultMaxRedrives)
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	sw, err := zombie.New(zombie.Config{
		Store:       d.Store,
		Enqueuer:    d.Enqueuer,
		Redriver:    d.Publisher,
		Recorder:    d.Store,
		Logger:      d.Logger,
		Every:       every,
		Window:      window,
		MaxRedrives: maxRedrives,
	})
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	return sw, nil
}
