package events

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A stream (GET /v1/events) holds a subscription of its own, named
// servo-stream-{until}-{random}: until is the Unix second by which the
// stream ends (its identity's expiry, at most MaxStreamDuration after it
// opened). Pub/Sub's shortest expiration policy is a day, so an instance
// killed mid-stream would leave its subscriptions that long, each
// receiving (and paying for) the filtered events: the sweeper deletes the
// ones whose until has passed (DeleteLeftoverStreams).
const (
	streamPrefix = "servo-stream-"
	// MaxStreamDuration bounds one event stream: it then ends as an
	// expired token ends it, and the client opens a new one.
	MaxStreamDuration = time.Hour
	// LeftoverGrace is how long after its until a stream's subscription
	// is left to its own deletion before the sweeper deletes it.
	LeftoverGrace = 5 * time.Minute
	// MaxFilterBytes is the longest subscription filter Pub/Sub accepts
	// (https://cloud.google.com/pubsub/docs/subscription-message-filter:
	// "The maximum length of a filter is 256 bytes").
	MaxFilterBytes = 256
)

// streamSubscriptionID is the id of a new stream's subscription.
func streamSubscriptionID(until time.Time) string {
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	return streamPrefix + strconv.FormatInt(until.Unix(), 10) + "-" + hex.EncodeToString(suffix[:])
}

// streamUntil reads until from a stream subscription's id or full name.
func streamUntil(name string) (time.Time, bool) {
	id := name[strings.LastIndex(name, "/")+1:]
	rest, ok := strings.CutPrefix(id, streamPrefix)
	if !ok {
		return time.Time{}, false
	}
	secs, _, ok := strings.Cut(rest, "-")
	n, err := strconv.ParseInt(secs, 10, 64)
	if !ok || err != nil {
		return time.Time{}, false
	}
	return time.Unix(n, 0), true
}

// streamFilter is the filter of a stream's subscription: the task, run and
// tenant of opts and, when they fit in MaxFilterBytes, its Tenants, so
// that Pub/Sub delivers only the events the caller may view. Tenants that
// do not fit are left to the check of every event (Stream does it
// anyway); fitted reports whether they fit.
func streamFilter(opts StreamOptions) (filter string, fitted bool) {
	var parts []string
	if f := tailFilter(TailOptions{TaskID: opts.TaskID, RunID: opts.RunID}); f != "" {
		parts = append(parts, f)
	}
	if opts.TenantID != "" {
		parts = append(parts, "attributes."+AttrTenantID+" = "+strconv.Quote(opts.TenantID))
	}
	base := strings.Join(parts, " AND ")
	if len(opts.Tenants) == 0 {
		return base, opts.Tenants == nil // none: every event is dropped by the check
	}
	var ors []string
	for _, t := range opts.Tenants {
		ors = append(ors, "attributes."+AttrTenantID+" = "+strconv.Quote(t))
	}
	tenants := "(" + strings.Join(ors, " OR ") + ")"
	f := tenants
	if base != "" {
		f = base + " AND " + tenants
	}
	if len(f) > MaxFilterBytes {
		return base, false
	}
	return f, true
}

// DeleteLeftoverStreams deletes the stream subscriptions on the events
// topic (topic id or full name; default DefaultEventsTopic) whose stream
// ended more than LeftoverGrace before now: those of an instance that died
// mid-stream. It returns how many it deleted; one it cannot delete is
// tried again on the next call. This is a sweeper duty (one
// ListTopicSubscriptions call, then a deletion per leftover).
func DeleteLeftoverStreams(ctx context.Context, client *pubsub.Client, project, topic string, now time.Time) (int, error) {
	project = cmp.Or(project, client.Project())
	it := client.TopicAdminClient.ListTopicSubscriptions(ctx, &pubsubpb.ListTopicSubscriptionsRequest{Topic: TopicName(project, cmp.Or(topic, DefaultEventsTopic))})
	var (
		deleted int
		errs    []error
	)
	for {
		name, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			if status.Code(err) == codes.NotFound {
				break // no topic: nothing to clean
			}
			return deleted, fmt.Errorf("events: list stream subscriptions: %w", err)
		}
		until, ok := streamUntil(name)
		if !ok || now.Before(until.Add(LeftoverGrace)) {
			continue
		}
		err = client.SubscriptionAdminClient.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: name})
		switch {
		case err == nil:
			deleted++
		case status.Code(err) == codes.NotFound: // its stream deleted it meanwhile
		default:
			errs = append(errs, fmt.Errorf("events: delete leftover stream subscription %s: %w", name, err))
		}
	}
	return deleted, errors.Join(errs...)
}

// DeleteLeftoverStreams is DeleteLeftoverStreams on the publisher's
// events topic (the sweeper's Cleaner).
func (p *Publisher) DeleteLeftoverStreams(ctx context.Context, now time.Time) (int, error) {
	return DeleteLeftoverStreams(ctx, p.client, p.client.Project(), p.topic, now)
}
