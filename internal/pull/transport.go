package pull

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/googleapis/gax-go/v2"

	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/task"
)

// Resource names of a pool: the topic and its pull subscription share the
// id "NAMEPREFIX-pool-NAME", with the deployment's name prefix
// (SERVO_NAME_PREFIX, Terraform's name_prefix; DefaultNamePrefix): so two
// environments in one project keep their pools apart (Terraform creates
// the same ones).
const DefaultNamePrefix = "servo"

// Subscription settings the local stack uses (Terraform sets its own).
const (
	// AckDeadline is how long a received message is hidden from other
	// claims before Pub/Sub redelivers it, when the claim that received it
	// neither acknowledged it nor handed it back (a crashed claim).
	AckDeadline = 10 * time.Second
	// MaxDefer is Pub/Sub's maximum ack deadline: a message for a retry due
	// later than this is deferred again when it comes back.
	MaxDefer = 600 * time.Second
)

// ResourceID is the id of a pool's topic and of its pull subscription in
// the deployment named namePrefix ("" for DefaultNamePrefix).
func ResourceID(namePrefix, pool string) string {
	if namePrefix == "" {
		namePrefix = DefaultNamePrefix
	}
	return namePrefix + "-pool-" + pool
}

// message is a pool message: which attempt to claim, and from when. It
// carries no token: the envelope is built, with a freshly signed token, by
// the claim that starts the attempt, so a message may wait in the pool
// longer than a token lives, and no token sits in the topic or its
// dead-letter topic.
type message struct {
	TaskID    string     `json:"taskId"`
	Attempt   int        `json:"attempt"`
	Redrive   int        `json:"redrive,omitempty"`
	TenantID  string     `json:"tenantId"`
	NotBefore *time.Time `json:"notBefore,omitempty"`
}

// Transport publishes attempts to the pools' topics and receives them from
// their subscriptions (synchronous pull). It is enqueue.Pools. It is safe
// for concurrent use.
type Transport struct {
	client     *pubsub.Client
	project    string
	namePrefix string
}

// NewTransport returns a Transport on client's project, for the pools of
// the deployment named namePrefix ("" for DefaultNamePrefix; ResourceID).
func NewTransport(client *pubsub.Client, namePrefix string) *Transport {
	return &Transport{client: client, project: client.Project(), namePrefix: namePrefix}
}

func (tr *Transport) id(pool string) string { return ResourceID(tr.namePrefix, pool) }

// PublishTimeout bounds one Publish (the client's retries included), so an
// enqueue that fails leaves its caller time to record it (the task goes
// back to PENDING and the sweeper re-drives it).
const PublishTimeout = 5 * time.Second

// Publish publishes t's current attempt to the pool's topic.
func (tr *Transport) Publish(ctx context.Context, pool string, t task.Task) error {
	ctx, cancel := context.WithTimeout(ctx, PublishTimeout)
	defer cancel()
	data, err := json.Marshal(message{TaskID: t.ID, Attempt: t.Attempt, Redrive: t.Redrives, TenantID: t.TenantID, NotBefore: t.NotBefore})
	if err != nil {
		return fmt.Errorf("pull: encode message: %w", err)
	}
	_, err = tr.client.TopicAdminClient.Publish(ctx, &pubsubpb.PublishRequest{
		Topic: events.TopicName(tr.project, tr.id(pool)),
		Messages: []*pubsubpb.PubsubMessage{{Data: data, Attributes: map[string]string{
			"taskId": t.ID, "attempt": strconv.Itoa(t.Attempt), "tenantId": t.TenantID, "worker": pool,
		}}},
	})
	if err != nil {
		return fmt.Errorf("pull: publish to pool %s: %w", pool, err)
	}
	return nil
}

// Ensure creates the pools' topics and pull subscriptions that do not exist
// yet (the local stack; Terraform does it in production).
func (tr *Transport) Ensure(ctx context.Context, pools ...string) error {
	for _, p := range pools {
		if err := events.EnsureTopics(ctx, tr.client, tr.id(p)); err != nil {
			return fmt.Errorf("pull: %w", err)
		}
		if err := events.EnsureSubscriptions(ctx, tr.client, events.Subscription{
			Name: tr.id(p), Topic: tr.id(p), AckDeadline: AckDeadline,
		}); err != nil {
			return fmt.Errorf("pull: %w", err)
		}
	}
	return nil
}

// noRetry turns off the client's own retries of a pull: a claim answers 503
// at once when Pub/Sub fails, and the worker backs off.
var noRetry = gax.WithRetry(func() gax.Retryer { return nil })

// received is one message a claim received.
type received struct {
	ackID       string
	publishedAt time.Time
	msg         message
	bad         error
}

// receive waits until ctx ends for at most one message of the pool; none
// and a nil error when ctx ended first.
func (tr *Transport) receive(ctx context.Context, pool string) (*received, error) {
	resp, err := tr.client.SubscriptionAdminClient.Pull(ctx, &pubsubpb.PullRequest{
		Subscription: events.SubscriptionName(tr.project, tr.id(pool)), MaxMessages: 1,
	}, noRetry)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("pull: receive from pool %s: %w", pool, err)
	}
	for _, m := range resp.GetReceivedMessages() {
		r := &received{ackID: m.GetAckId(), publishedAt: m.GetMessage().GetPublishTime().AsTime()}
		if err := json.Unmarshal(m.GetMessage().GetData(), &r.msg); err != nil || r.msg.TaskID == "" || r.msg.Attempt < 1 {
			r.bad = errors.Join(errors.New("not a pool message"), err)
		}
		return r, nil
	}
	return nil, nil
}

// ack acknowledges a message: it is not delivered again.
func (tr *Transport) ack(ctx context.Context, pool, ackID string) error {
	return tr.client.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{
		Subscription: events.SubscriptionName(tr.project, tr.id(pool)), AckIds: []string{ackID},
	})
}

// hold hides a message for d (at most MaxDefer) before Pub/Sub delivers it
// again; 0 hands it back at once.
func (tr *Transport) hold(ctx context.Context, pool, ackID string, d time.Duration) error {
	secs := int32(min(max(d, 0), MaxDefer).Round(time.Second) / time.Second)
	if d > 0 && secs == 0 {
		secs = 1
	}
	return tr.client.SubscriptionAdminClient.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{
		Subscription: events.SubscriptionName(tr.project, tr.id(pool)), AckIds: []string{ackID}, AckDeadlineSeconds: secs,
	})
}
