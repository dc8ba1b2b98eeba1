package events

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/servo-dev/servo/api"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TailOptions selects and formats the events Tail prints.
type TailOptions struct {
	// TaskID, when set, prints only this task's events.
	TaskID string
	// RunID, when set, prints only this run's events.
	RunID string
	// JSON prints one event JSON per line instead of a table.
	JSON bool
	// Topic is the events topic id or full name; default DefaultEventsTopic.
	Topic string
	// Ready, when set, is called once the temporary subscription exists:
	// every event published after that is printed.
	Ready func(subscription string)
	// Replay, when set, is called once the subscription exists (after
	// Ready) and returns recorded events to print, in the order returned,
	// before the live ones. Because the subscription exists before the
	// record is read, an event is either in the record or arrives live, or
	// both: a live event whose EventID was replayed is not printed again
	// (nor is a redelivered one), so the seam has neither gap nor duplicate.
	Replay func(ctx context.Context) ([]api.Event, error)
	// ReplaySince, when set, prints only the replayed events that occurred
	// at or after it; the earlier ones still count as printed.
	ReplaySince time.Time
	// Source, when set, replaces the topic: Tail prints the events it
	// delivers after it called ready (the control API's GET /v1/events,
	// filtered by the caller's roles: client.StreamEvents). Tail's client
	// and project are then unused.
	Source func(ctx context.Context, ready func(), each func(api.Event) error) error
}

// tailSubscriptionTTL lets Pub/Sub delete a tail subscription whose
// process died before deleting it (one day is Pub/Sub's minimum).
const tailSubscriptionTTL = 24 * time.Hour

// Tail prints the events published on the events topic of project until
// ctx ends, as JSON lines or as a table (see TailOptions). It creates a
// temporary subscription (ordered, so a task's events arrive in order,
// filtered on the taskId/runId attributes), prints what opts.Replay returns,
// then the live events, each eventId once, and deletes the subscription on
// return. It returns nil when ctx ends; this is
// `servo events tail [--task ID] [--run ID] [--since D | --all]`.
func Tail(ctx context.Context, client *pubsub.Client, project string, w io.Writer, opts TailOptions) error {
	if opts.Source != nil {
		return tailSource(ctx, w, opts)
	}
	project = cmp.Or(project, client.Project())
	topic := TopicName(project, cmp.Or(opts.Topic, DefaultEventsTopic))
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	name := SubscriptionName(project, "servo-tail-"+hex.EncodeToString(suffix[:]))
	req := &pubsubpb.Subscription{
		Name:                     name,
		Topic:                    topic,
		EnableMessageOrdering:    true,
		Filter:                   tailFilter(opts),
		AckDeadlineSeconds:       10,
		MessageRetentionDuration: durationpb.New(10 * time.Minute),
		ExpirationPolicy:         &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(tailSubscriptionTTL)},
	}
	if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, req); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if status.Code(err) == codes.NotFound {
			return fmt.Errorf("events: tail: topic %s does not exist (is the stack up?): %w", topic, err)
		}
		return fmt.Errorf("events: tail: create subscription on %s: %w", topic, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = client.SubscriptionAdminClient.DeleteSubscription(dctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: name})
	}()
	if opts.Ready != nil {
		opts.Ready(name)
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	pr := &printer{w: w, json: opts.JSON, stop: stop, seen: map[string]bool{}}
	if err := pr.replay(ctx, opts); err != nil {
		return err
	}
	sub := client.Subscriber(name)
	err := sub.Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		if t := m.Attributes[AttrType]; t != "" && t != TypeTransition {
			return
		}
		pr.print(m.Data, opts)
	})
	if pr.err != nil {
		return fmt.Errorf("events: tail: write: %w", pr.err)
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("events: tail: receive: %w", err)
	}
	return nil
}

// tailFilter is the subscription filter for opts ("" for all events).
func tailFilter(opts TailOptions) string {
	var parts []string
	if opts.TaskID != "" {
		parts = append(parts, AttrTaskID+" = "+strconv.Quote(opts.TaskID))
	}
	if opts.RunID != "" {
		parts = append(parts, AttrRunID+" = "+strconv.Quote(opts.RunID))
	}
	for i, p := range parts {
		parts[i] = "attributes." + p
	}
	return strings.Join(parts, " AND ")
}

// Matches reports whether e passes the task and run filters of opts.
func (opts TailOptions) Matches(e api.Event) bool {
	return (opts.TaskID == "" || e.TaskID == opts.TaskID) && (opts.RunID == "" || e.RunID == opts.RunID)
}

// printer writes tail output; messages arrive on several goroutines.
type printer struct {
	mu     sync.Mutex
	w      io.Writer
	json   bool
	header bool
	err    error
	stop   context.CancelFunc // ends the tail when writing fails
	seen   map[string]bool    // eventIds printed (or replayed before ReplaySince)
}

func (p *printer) print(data []byte, opts TailOptions) {
	e, err := DecodeEvent(data)
	if err != nil || !opts.Matches(e) {
		return
	}
	p.printEvent(e, data)
}

// printEvent prints e (data is its JSON) unless an event with its EventID
// was printed already.
func (p *printer) printEvent(e api.Event, data []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil || p.seen[e.EventID] {
		return
	}
	p.seen[e.EventID] = true
	var line string
	if p.json {
		line = strings.TrimSpace(string(data)) + "\n"
	} else {
		if !p.header {
			p.header = true
			line = TableHeader()
		}
		line += TableRow(e)
	}
	if _, p.err = io.WriteString(p.w, line); p.err != nil {
		p.stop()
	}
}

const rowFormat = "%-24s  %-31s  %3s  %4s  %-25s  %-20s  %s\n"

// TableHeader is the header line of Tail's table.
func TableHeader() string {
	return fmt.Sprintf(rowFormat, "TIME", "TASK", "ATT", "SEQ", "TRANSITION", "REASON", "DETAIL")
}

// TableRow formats an event as one line of Tail's table.
func TableRow(e api.Event) string {
	from := string(e.From)
	if from == "" {
		from = "∅"
	}
	var detail []string
	if e.Outcome != "" {
		detail = append(detail, "outcome="+string(e.Outcome))
	}
	if e.NextAttempt > 0 {
		detail = append(detail, "nextAttempt="+strconv.Itoa(e.NextAttempt))
	}
	if e.Error != nil {
		detail = append(detail, "error="+strconv.Quote(string(e.Error.Category)+": "+e.Error.Message))
	}
	return fmt.Sprintf(rowFormat, e.OccurredAt.UTC().Format("2006-01-02T15:04:05.000Z"), e.TaskID,
		strconv.Itoa(e.Attempt), strconv.FormatInt(e.Seq, 10), from+" → "+string(e.To), e.Reason, strings.Join(detail, " "))
}

// replay prints what opts.Replay returns (see TailOptions.Replay); ctx
// ending is not an error.
func (pr *printer) replay(ctx context.Context, opts TailOptions) error {
	if opts.Replay != nil {
		past, err := opts.Replay(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("events: tail: replay: %w", err)
		}
		for _, e := range past {
			if !opts.Matches(e) {
				continue
			}
			if e.OccurredAt.Before(opts.ReplaySince) {
				pr.seen[e.EventID] = true
				continue
			}
			data, err := json.Marshal(e)
			if err != nil {
				return fmt.Errorf("events: tail: replay: %w", err)
			}
			pr.printEvent(e, data)
		}
		if pr.err != nil {
			return fmt.Errorf("events: tail: write: %w", pr.err)
		}
	}
	return nil
}
