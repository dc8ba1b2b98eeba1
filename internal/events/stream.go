package events

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/servo-dev/servo/api"
)

// StreamOptions select the events Stream delivers.
type StreamOptions struct {
	// Topic is the events topic id or full name; default DefaultEventsTopic.
	Topic string
	// TaskID, RunID and TenantID, when set, keep only that task's, run's
	// or tenant's events (in the subscription's filter).
	TaskID, RunID, TenantID string
	// Tenants, when not nil, keeps only the events of these tenants: in
	// the subscription's filter when they fit in its MaxFilterBytes, and
	// checked on each event in any case.
	Tenants []string
}

// Stream delivers the transition events published on the events topic
// of project, as the control API's GET /v1/events streams them to people:
// it creates a temporary subscription (ordered, filtered on the task, run
// and tenant attributes, the Tenants among them when they fit in Pub/Sub's
// filter: streamFilter), calls ready once it exists (every event
// published after that is delivered), then each for every event that
// passes opts, each eventId once, until ctx ends (at most
// MaxStreamDuration) or each fails; it deletes the subscription on return
// (the sweeper deletes it if this process dies first:
// DeleteLeftoverStreams). It returns nil when ctx ends.
func Stream(ctx context.Context, client *pubsub.Client, project string, opts StreamOptions, ready func(), each func(api.Event) error) error {
	project = cmp.Or(project, client.Project())
	topic := TopicName(project, cmp.Or(opts.Topic, DefaultEventsTopic))
	until := time.Now().Add(MaxStreamDuration)
	if d, ok := ctx.Deadline(); ok && d.Before(until) {
		until = d
	}
	ctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	name := SubscriptionName(project, streamSubscriptionID(until))
	filter, _ := streamFilter(opts)
	if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: name, Topic: topic, EnableMessageOrdering: true, Filter: filter, AckDeadlineSeconds: 10,
		MessageRetentionDuration: durationpb.New(10 * time.Minute),
		ExpirationPolicy:         &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(tailSubscriptionTTL)},
	}); err != nil {
		return fmt.Errorf("events: stream: create subscription on %s: %w", topic, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = client.SubscriptionAdminClient.DeleteSubscription(dctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: name})
	}()
	ready()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	// Receive calls back on several goroutines; events are handed to each
	// one at a time, in arrival order.
	out := make(chan api.Event)
	var werr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		seen := map[string]bool{}
		for e := range out {
			if seen[e.EventID] || werr != nil {
				continue
			}
			seen[e.EventID] = true
			if len(seen) > 100000 {
				clear(seen)
			}
			if werr = each(e); werr != nil {
				stop()
			}
		}
	}()
	err := client.Subscriber(name).Receive(rctx, func(ctx context.Context, m *pubsub.Message) {
		m.Ack()
		if t := m.Attributes[AttrType]; t != "" && t != TypeTransition {
			return
		}
		e, err := DecodeEvent(m.Data)
		if err != nil || (opts.Tenants != nil && !slices.Contains(opts.Tenants, e.TenantID)) ||
			(opts.TenantID != "" && e.TenantID != opts.TenantID) || !(TailOptions{TaskID: opts.TaskID, RunID: opts.RunID}).Matches(e) {
			return
		}
		select {
		case out <- e:
		case <-ctx.Done():
		}
	})
	close(out)
	<-done
	if werr != nil {
		return werr
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("events: stream: receive: %w", err)
	}
	return nil
}

// tailSource is Tail over opts.Source: once the source is ready it prints
// the replay, then the live events (the source waits meanwhile), each
// eventId once.
func tailSource(ctx context.Context, w io.Writer, opts TailOptions) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	pr := &printer{w: w, json: opts.JSON, stop: stop, seen: map[string]bool{}}
	ready := make(chan struct{})
	live := make(chan api.Event)
	srcErr := make(chan error, 1)
	go func() {
		srcErr <- opts.Source(ctx, func() { close(ready) }, func(e api.Event) error {
			select {
			case live <- e:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	select {
	case <-ready:
	case err := <-srcErr:
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("events: tail: %w", err)
		}
		return nil
	}
	if err := pr.replay(ctx, opts); err != nil {
		return err
	}
	for {
		select {
		case e := <-live:
			if !opts.Matches(e) {
				continue
			}
			data, err := json.Marshal(e)
			if err != nil {
				return fmt.Errorf("events: tail: %w", err)
			}
			pr.printEvent(e, data)
			if pr.err != nil {
				return fmt.Errorf("events: tail: write: %w", pr.err)
			}
		case err := <-srcErr:
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("events: tail: %w", err)
			}
			return nil
		}
	}
}
