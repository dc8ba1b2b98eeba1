package events

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// EnsureTopics creates the topics (ids or full names, in the client's
// project) that do not exist yet. With PUBSUB_EMULATOR_HOST set the client
// talks to the emulator, which is how the local stack uses it.
func EnsureTopics(ctx context.Context, client *pubsub.Client, topics ...string) error {
	for _, t := range topics {
		name := TopicName(client.Project(), t)
		_, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: name})
		if err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("events: create topic %s: %w", name, err)
		}
	}
	return nil
}

// Subscription describes a subscription for EnsureSubscriptions.
type Subscription struct {
	// Name is the subscription id or full name.
	Name string
	// Topic is the topic id or full name.
	Topic string
	// Ordered enables message ordering: a task's events arrive in order.
	Ordered bool
	// Filter is a Pub/Sub filter on attributes, e.g. `attributes.tenantId = "acme"`.
	Filter string
	// AckDeadline defaults to 30 s.
	AckDeadline time.Duration
	// Retention is how long unacknowledged messages are kept; default 7 days.
	Retention time.Duration
}

// EnsureSubscriptions creates the subscriptions that do not exist yet (an
// existing one is left as it is).
func EnsureSubscriptions(ctx context.Context, client *pubsub.Client, subs ...Subscription) error {
	for _, s := range subs {
		if err := createSubscription(ctx, client, s); err != nil && status.Code(err) != codes.AlreadyExists {
			return err
		}
	}
	return nil
}

func createSubscription(ctx context.Context, client *pubsub.Client, s Subscription) error {
	project := client.Project()
	req := &pubsubpb.Subscription{
		Name:                     SubscriptionName(project, s.Name),
		Topic:                    TopicName(project, s.Topic),
		EnableMessageOrdering:    s.Ordered,
		Filter:                   s.Filter,
		AckDeadlineSeconds:       int32(cmp.Or(s.AckDeadline, 30*time.Second) / time.Second),
		MessageRetentionDuration: durationpb.New(cmp.Or(s.Retention, 7*24*time.Hour)),
	}
	if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, req); err != nil {
		return fmt.Errorf("events: create subscription %s on %s: %w", req.Name, req.Topic, err)
	}
	return nil
}

// DeadLetterInbox is the subscription id EnsureLocal creates on the
// dead-letter topic, so that dead letters are kept until someone reads them.
const DeadLetterInbox = "servo-dead-letter-inbox"

// EnsureLocal creates what the local stack needs on the Pub/Sub emulator:
// the events and dead-letter topics (ids or full names; "" for the
// defaults) and the DeadLetterInbox subscription. Events need no standing
// subscription: `servo events tail` makes its own.
func EnsureLocal(ctx context.Context, client *pubsub.Client, eventsTopic, deadLetterTopic string) error {
	eventsTopic = cmp.Or(eventsTopic, DefaultEventsTopic)
	deadLetterTopic = cmp.Or(deadLetterTopic, DefaultDeadLetterTopic)
	if err := EnsureTopics(ctx, client, eventsTopic, deadLetterTopic); err != nil {
		return err
	}
	return EnsureSubscriptions(ctx, client, Subscription{Name: DeadLetterInbox, Topic: deadLetterTopic})
}
