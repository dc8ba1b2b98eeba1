package functions

import (
	"context"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"
	cloudevents "github.com/cloudevents/sdk-go/v2"
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
// is a tick. A Server that cannot be built is the tick's error; a later
// tick builds again after the backoff. The invocation flushes its telemetry
// before it returns (flushTelemetry): a window that ended early is about a
// second of the minute.
func ServoSweeper(ctx context.Context, e cloudevents.Event) error {
	s, err := serverInit.get(ctx)
	if err != nil {
		return err
	}
	defer flushTelemetry(ctx)
	return s.Sweeper.HandleEvent(ctx, e)
}
