package events_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/task"
)

// topicSubscriptions lists the subscriptions on the events topic.
func (e *env) topicSubscriptions(t *testing.T) []string {
	t.Helper()
	it := e.ps.TopicAdminClient.ListTopicSubscriptions(t.Context(), &pubsubpb.ListTopicSubscriptionsRequest{Topic: events.TopicName(e.project, events.DefaultEventsTopic)})
	var out []string
	for {
		name, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, name)
	}
}

// TestStreamFiltersTenantsInPubSub: a stream for a caller who views some
// tenants holds a subscription whose filter names them (Pub/Sub drops the
// other tenants' events instead of delivering them to be dropped), named
// with the time by which the stream ends (at most an hour on); it
// delivers only those tenants' events and deletes its subscription when
// it ends.
func TestStreamFiltersTenantsInPubSub(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if err := events.EnsureTopics(ctx, e.ps, events.DefaultEventsTopic); err != nil {
		t.Fatal(err)
	}
	p := e.publisher(t, events.Config{})
	e.st.OnCommit(p.Hook())

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan struct{})
	var (
		mu  sync.Mutex
		got []api.Event
	)
	done := make(chan error, 1)
	opened := time.Now()
	go func() {
		done <- events.Stream(sctx, e.ps, e.project, events.StreamOptions{Tenants: []string{"acme", "initech"}}, func() { close(ready) }, func(ev api.Event) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, ev)
			return nil
		})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Stream returned before it was ready: %v", err)
	case <-time.After(waitTimeout):
		t.Fatal("Stream not ready")
	}
	subs := e.topicSubscriptions(t)
	if len(subs) != 1 {
		t.Fatalf("subscriptions on the topic: %v", subs)
	}
	sub, err := e.ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: subs[0]})
	if err != nil {
		t.Fatal(err)
	}
	if want := `(attributes.tenantId = "acme" OR attributes.tenantId = "initech")`; sub.Filter != want {
		t.Fatalf("filter %q, want %q", sub.Filter, want)
	}
	id := subs[0][strings.LastIndex(subs[0], "/")+1:]
	secs, _, _ := strings.Cut(strings.TrimPrefix(id, "servo-stream-"), "-")
	until, err := strconv.ParseInt(secs, 10, 64)
	if err != nil || until < opened.Add(events.MaxStreamDuration).Unix()-1 || until > time.Now().Add(events.MaxStreamDuration).Unix() {
		t.Fatalf("subscription %s: until %d, want about an hour from %d", id, until, opened.Unix())
	}

	mine, theirs := submitted(time.Now(), "run_A", api.RetryPolicy{}), submitted(time.Now(), "run_A", api.RetryPolicy{})
	theirs.TenantID = "globex"
	run(t, e.st, []task.Task{theirs, mine}, [][]step{succeed, succeed})
	deadline := time.Now().Add(waitTimeout)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // room for a stray event
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Stream: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 4 || slices.ContainsFunc(got, func(ev api.Event) bool { return ev.TaskID != mine.ID }) {
		t.Fatalf("delivered %d events (%+v), want the 4 of %s only", len(got), got, mine.ID)
	}
	if subs := e.topicSubscriptions(t); len(subs) != 0 {
		t.Fatalf("subscriptions left after the stream ended: %v", subs)
	}
}

// TestDeleteLeftoverStreams: the sweeper's duty deletes the stream
// subscriptions whose stream ended more than LeftoverGrace ago (an
// instance died mid-stream) and nothing else: not a live stream's, not a
// tail's, not another subscription on the topic.
func TestDeleteLeftoverStreams(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if err := events.EnsureTopics(ctx, e.ps, events.DefaultEventsTopic); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	topic := events.TopicName(e.project, events.DefaultEventsTopic)
	ids := map[string]bool{ // id → left over
		"servo-stream-" + strconv.FormatInt(now.Add(-time.Hour).Unix(), 10) + "-aaaaaaaaaaaa":                        true,
		"servo-stream-" + strconv.FormatInt(now.Add(-events.LeftoverGrace-time.Second).Unix(), 10) + "-bbbbbbbbbbbb": true,
		"servo-stream-" + strconv.FormatInt(now.Add(-time.Minute).Unix(), 10) + "-cccccccccccc":                      false, // within the grace
		"servo-stream-" + strconv.FormatInt(now.Add(time.Hour).Unix(), 10) + "-dddddddddddd":                         false, // live
		"servo-tail-eeeeeeeeeeee": false,
		"servo-dead-letter-inbox": false,
	}
	for id := range ids {
		if _, err := e.ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: events.SubscriptionName(e.project, id), Topic: topic}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := events.DeleteLeftoverStreams(ctx, e.ps, e.project, "", now)
	if err != nil || n != 2 {
		t.Fatalf("DeleteLeftoverStreams = %d, %v; want 2", n, err)
	}
	for id, leftover := range ids {
		_, err := e.ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: events.SubscriptionName(e.project, id)})
		if gone := status.Code(err) == codes.NotFound; gone != leftover {
			t.Errorf("%s: deleted %v, want %v (%v)", id, gone, leftover, err)
		}
	}
	if n, err := events.DeleteLeftoverStreams(ctx, e.ps, e.project, "", now); err != nil || n != 0 {
		t.Fatalf("again: %d, %v", n, err)
	}
	if n, err := events.DeleteLeftoverStreams(ctx, e.ps, e.project, "no-such-topic", now); err != nil || n != 0 {
		t.Fatalf("missing topic: %d, %v", n, err)
	}
}
