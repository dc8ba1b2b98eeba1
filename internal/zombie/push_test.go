package zombie_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"
	"github.com/GoogleCloudPlatform/functions-framework-go/functions"
	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/zombie"
)

// The functions-framework servers of this test binary. The function is
// registered exactly as functions/sweeper.go registers it
// (functions.CloudEvent("ServoSweeper", …)) and served by funcframework
// itself, twice: once the way `servo dev` serves every function on one
// port (FUNCTION_TARGET unset: the function answers at /ServoSweeper, that
// exact path), once the way Cloud Functions serves it (FUNCTION_TARGET=
// ServoSweeper: it answers at every path).
var (
	ffOnce      sync.Once
	ffAll       string // base URL, FUNCTION_TARGET unset
	ffTarget    string // base URL, FUNCTION_TARGET=ServoSweeper
	ffErr       error
	ffSweeper   atomic.Pointer[zombie.Sweeper] // the current test's sweeper
	ffEvents    = make(chan cloudevents.Event, 64)
	errNoTarget = errors.New("no sweeper installed")
)

func framework(t *testing.T) (all, target string) {
	t.Helper()
	ffOnce.Do(func() {
		functions.CloudEvent("ServoSweeper", func(ctx context.Context, e cloudevents.Event) error {
			select {
			case ffEvents <- e:
			default:
			}
			sw := ffSweeper.Load()
			if sw == nil {
				return errNoTarget
			}
			return sw.HandleEvent(ctx, e)
		})
		if ffAll, ffErr = serveFramework(""); ffErr != nil {
			return
		}
		ffTarget, ffErr = serveFramework("ServoSweeper")
	})
	if ffErr != nil {
		t.Fatal(ffErr)
	}
	return ffAll, ffTarget
}

// serveFramework starts funcframework.StartHostPort on a free loopback
// port with FUNCTION_TARGET set to target while the server builds its
// routes. The server lives as long as the test binary (funcframework has no
// way to stop it).
func serveFramework(target string) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	old, had := os.LookupEnv("FUNCTION_TARGET")
	os.Setenv("FUNCTION_TARGET", target)
	defer func() {
		if had {
			os.Setenv("FUNCTION_TARGET", old)
		} else {
			os.Unsetenv("FUNCTION_TARGET")
		}
	}()
	failed := make(chan error, 1)
	go func() { failed <- funcframework.StartHostPort("127.0.0.1", port) }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case err := <-failed:
			return "", fmt.Errorf("functions framework: %w", err)
		default:
		}
		if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
			c.Close()
			return "http://127.0.0.1:" + port, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "", errors.New("functions framework did not start listening")
}

// drainEvents forgets events recorded by earlier tests.
func drainEvents() {
	for {
		select {
		case <-ffEvents:
		default:
			return
		}
	}
}

func nextEvent(t *testing.T) cloudevents.Event {
	t.Helper()
	select {
	case e := <-ffEvents:
		return e
	case <-time.After(15 * time.Second):
		t.Fatal("the function received no event")
		return cloudevents.Event{}
	}
}

// zombieFixture installs a one-pass sweeper for a new env and returns a
// zombie task (no retries left) whose lease has run out.
func zombieFixture(t *testing.T) (*env, task.Task) {
	t.Helper()
	e := newEnv(t)
	ffSweeper.Store(e.sweeper(nil))
	t.Cleanup(func() { ffSweeper.Store(nil) })
	tk := e.running(spec{maxAttempts: 1}, false)
	waitPast(t, tk.LeaseExpiresAt)
	drainEvents()
	return e, tk
}

func assertSwept(t *testing.T, e *env, id string) {
	t.Helper()
	if got := e.get(id); got.State != api.Failed || got.Reason != api.ReasonHeartbeatTimeout {
		t.Fatalf("task not swept: %s %s", got.State, got.Reason)
	}
}

func post(t *testing.T, url string, header http.Header, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s %s", url, resp.Status, b)
	}
}

// rawPush is the body a Pub/Sub push subscription POSTs (the emulator's
// shape), with no CloudEvent headers.
func rawPush(messageID string, publish time.Time) string {
	return fmt.Sprintf(`{"message":{"data":%q,"attributes":{"source":"scheduler"},"messageId":%q,"publishTime":%q},"subscription":"projects/servo-local/subscriptions/servo-sweep-push"}`,
		base64.StdEncoding.EncodeToString([]byte("tick")), messageID, publish.UTC().Format(time.RFC3339Nano))
}

const messagePublished = "google.cloud.pubsub.topic.v1.messagePublished"

// TestPushShapesReachTheFunction POSTs what Pub/Sub and Eventarc send to
// the registered ServoSweeper function served by functions-framework-go,
// and checks that each reaches HandleEvent as a messagePublished CloudEvent
// and sweeps: the raw push body (converted by the framework; the topic is
// taken from the request path when it has one), a binary-mode CloudEvent
// and a structured one.
func TestPushShapesReachTheFunction(t *testing.T) {
	all, target := framework(t)
	jsonHeader := http.Header{"Content-Type": {"application/json"}}
	tests := []struct {
		name   string
		url    string
		header http.Header
		body   func() string
		source string
	}{
		{"raw push, all functions on one port", all + "/ServoSweeper", jsonHeader,
			func() string { return rawPush("m-1", time.Now()) }, "//pubsub.googleapis.com/"},
		{"raw push, FUNCTION_TARGET, topic in the path", target + "/projects/servo-local/topics/servo-sweep", jsonHeader,
			func() string { return rawPush("m-2", time.Now()) }, "//pubsub.googleapis.com/projects/servo-local/topics/servo-sweep"},
		{"binary CloudEvent", all + "/ServoSweeper", http.Header{
			"Content-Type":   {"application/json"},
			"Ce-Id":          {"m-3"},
			"Ce-Specversion": {"1.0"},
			"Ce-Type":        {messagePublished},
			"Ce-Source":      {"//pubsub.googleapis.com/projects/servo-prod/topics/servo-sweep"},
			"Ce-Time":        {time.Now().UTC().Format(time.RFC3339Nano)},
		}, func() string { return rawPush("m-3", time.Now()) }, "//pubsub.googleapis.com/projects/servo-prod/topics/servo-sweep"},
		{"structured CloudEvent", target + "/", http.Header{"Content-Type": {"application/cloudevents+json"}}, func() string {
			return fmt.Sprintf(`{"specversion":"1.0","id":"m-4","type":%q,"source":"//pubsub.googleapis.com/projects/servo-prod/topics/servo-sweep","time":%q,"datacontenttype":"application/json","data":{"message":{"data":"dGljaw==","messageId":"m-4"},"subscription":"projects/servo-prod/subscriptions/eventarc"}}`,
				messagePublished, time.Now().UTC().Format(time.RFC3339Nano))
		}, "//pubsub.googleapis.com/projects/servo-prod/topics/servo-sweep"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, tk := zombieFixture(t)
			post(t, tc.url, tc.header.Clone(), tc.body())
			ev := nextEvent(t)
			if ev.Type() != messagePublished || ev.Source() != tc.source || ev.ID() != fmt.Sprint("m-", i+1) || ev.Time().IsZero() {
				t.Fatalf("event: %s", ev)
			}
			assertSwept(t, e, tk.ID)
		})
	}
}

// TestPubSubEmulatorPushReachesTheFunction drives the function the way the
// local stack does: a message published to a topic of the real Pub/Sub
// emulator, whose push subscriptions POST to the function. Both endpoint
// shapes are subscribed to the same topic, so one tick starts two
// overlapping invocations: the zombie is failed once, with one event.
func TestPubSubEmulatorPushReachesTheFunction(t *testing.T) {
	all, target := framework(t)
	e, tk := zombieFixture(t)
	ctx := e.ctx
	const project = "servo-local"
	client, err := pubsub.NewClient(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	topic := fmt.Sprintf("projects/%s/topics/servo-sweep-%d", project, time.Now().UnixNano())
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	for i, endpoint := range []string{all + "/ServoSweeper", target + "/" + topic} {
		sub := &pubsubpb.Subscription{
			Name: fmt.Sprintf("projects/%s/subscriptions/%s-push-%d", project, topic[strings.LastIndex(topic, "/")+1:], i), Topic: topic,
			PushConfig: &pubsubpb.PushConfig{PushEndpoint: endpoint}, AckDeadlineSeconds: 60,
		}
		if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, sub); err != nil {
			t.Fatal(err)
		}
	}
	pub := client.Publisher(topic)
	defer pub.Stop()
	id, err := pub.Publish(ctx, &pubsub.Message{Data: []byte("tick"), Attributes: map[string]string{"source": "ticker"}}).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string]bool{}
	for range 2 {
		ev := nextEvent(t)
		if ev.Type() != messagePublished || ev.ID() != id {
			t.Fatalf("event %s, want message %s", ev, id)
		}
		sources[ev.Source()] = true
	}
	if !sources["//pubsub.googleapis.com/"] || !sources["//pubsub.googleapis.com/"+topic] {
		t.Fatalf("sources %v", sources)
	}
	eventually(t, "the zombie swept", func() bool { return e.get(tk.ID).State == api.Failed })
	assertSwept(t, e, tk.ID)
	n := 0
	for _, ob := range e.outbox(tk.ID) {
		if ob.To == api.Failed {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d FAILED events, want 1", n)
	}
}
