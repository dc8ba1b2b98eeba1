package events

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/servo-dev/servo/internal/failpoint"
	"github.com/servo-dev/servo/internal/service"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/telemetry"
)

// Defaults of Config.
const (
	// DefaultGrace is how old an undelivered outbox entry must be before
	// Redrive publishes it: younger ones are still being published by the
	// writer that committed them.
	DefaultGrace = 10 * time.Second
	// DefaultPublishTimeout bounds one Publish or one Redrive batch waiting
	// for Pub/Sub (and, separately, the commit that deletes the delivered
	// entries).
	// The wait is the sender's, never the writer's: the hook only queues.
	DefaultPublishTimeout = 5 * time.Second
	// DefaultRedriveBatch is how many outbox documents Redrive reads at once.
	DefaultRedriveBatch = 200
	// DefaultRedriveMaxBatches bounds the batches one Redrive call reads
	// from each group of due shards (store.Store.OutboxGroups: 13 for 384
	// shards); the next sweeper pass continues.
	DefaultRedriveMaxBatches = 10
	// RedriveMinBackoff is how long Redrive leaves an entry alone after its
	// first failed delivery (plus the grace period); each further failure
	// doubles it, up to RedriveMaxBackoff.
	RedriveMinBackoff = 30 * time.Second
	// RedriveMaxBackoff caps the wait between an entry's tries.
	RedriveMaxBackoff = time.Hour
	// DefaultDeleteDelay is how long the hook's sender holds delivered
	// outbox documents before deleting them, so that a steady load costs
	// one delete commit per delay rather than one per small batch. It is
	// far below the re-drive's grace (DefaultGrace, 10 s), so the re-drive
	// never reads an entry whose delete is merely pending; a crash in that
	// window only means the re-drive publishes its events again
	// (duplicates, which the contract allows), never a loss.
	DefaultDeleteDelay = 200 * time.Millisecond
)

// redriveBackoff is the wait after an entry's tries-th failed delivery.
func redriveBackoff(tries int) time.Duration {
	if tries > 7 { // 30 s · 2^7 > 1 h
		return RedriveMaxBackoff
	}
	return min(RedriveMaxBackoff, RedriveMinBackoff<<max(0, tries-1))
}

// farFuture bounds the re-drive's query of every undelivered entry.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// maxWritesPerCommit is Firestore's limit of writes in one commit.
const maxWritesPerCommit = 500

// ErrUndelivered is wrapped by Publish and Redrive when some events were
// not delivered (or their entries not deleted); they stay in the outbox.
var ErrUndelivered = errors.New("events: not delivered")

// Outbox is the part of the store the publisher uses; *store.Store
// implements it.
type Outbox interface {
	// Undelivered returns undelivered entries due for a try at or before
	// dueBy, earliest first.
	// Undelivered takes one group of due shards (OutboxGroups) a query.
	Undelivered(ctx context.Context, shards []int, dueBy time.Time, limit int) ([]store.OutboxEntry, error)
	// OutboxGroups splits the due shards into the groups Undelivered takes.
	OutboxGroups() [][]int
	// DeleteDelivered deletes outbox documents (named by event id,
	// store.OutboxEntry.Doc) whose events were all delivered, in one
	// commit.
	DeleteDelivered(ctx context.Context, eventIDs []string) error
	// MarkFailed records failed deliveries and their next try, in one commit.
	MarkFailed(ctx context.Context, failures []store.OutboxFailure) error
	// Attempts returns a task's attempt records, oldest first.
	Attempts(ctx context.Context, taskID string) ([]task.Attempt, error)
}

var _ Outbox = (*store.Store)(nil)

// Config configures New.
type Config struct {
	// Store is the outbox; required.
	Store Outbox
	// Client is the Pub/Sub client; required. The caller closes it after
	// the Publisher.
	Client *pubsub.Client
	// EventsTopic is the topic id (or full name) of transition events;
	// default DefaultEventsTopic.
	EventsTopic string
	// DeadLetterTopic is the topic id (or full name) of dead letters;
	// default DefaultDeadLetterTopic.
	DeadLetterTopic string
	// Logger defaults to a logger that discards.
	Logger *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
	// Grace is the age an undelivered entry must reach before Redrive
	// publishes it; default DefaultGrace.
	Grace time.Duration
	// PublishTimeout bounds waiting for Pub/Sub; default DefaultPublishTimeout.
	PublishTimeout time.Duration
	// RedriveBatch is the number of outbox documents Redrive reads at
	// once; default DefaultRedriveBatch.
	RedriveBatch int
	// RedriveMaxBatches bounds the batches one Redrive call reads from each
	// group of due shards; default DefaultRedriveMaxBatches.
	RedriveMaxBatches int
	// MaxQueue bounds the transitions the hook queues for the sender;
	// default DefaultMaxQueue.
	MaxQueue int
	// DeleteDelay is how long the hook's sender may hold delivered outbox
	// documents to delete them together (up to maxWritesPerCommit in one
	// commit); default DefaultDeleteDelay, negative: delete right after
	// each publish. Keep it well below Grace. Publish and Redrive always
	// delete at once.
	DeleteDelay time.Duration
}

// Publisher delivers the outbox's transition events to Pub/Sub: right after
// each commit (Hook) and, for what that missed, from the outbox (Redrive).
// It is safe for concurrent use.
type Publisher struct {
	outbox     Outbox
	client     *pubsub.Client
	topic      string // the events topic's full name
	events     *pubsub.Publisher
	dead       *pubsub.Publisher
	log        *slog.Logger
	now        func() time.Time
	grace      time.Duration
	timeout    time.Duration
	batch      int
	maxBatches int
	redriveMu  sync.Mutex

	// The hook's queue, drained by one sender goroutine (send).
	qmu         sync.Mutex
	queue       []item // a commit's items together (itemsOf)
	inFlight    int    // transitions taken by the sender, not yet done
	deleting    int    // delivered documents the sender has not deleted yet
	flushing    int    // Flush calls waiting: the sender deletes at once
	closed      bool   // Close was called: the hook queues nothing more
	maxQueue    int
	deleteDelay time.Duration // Config.DeleteDelay; negative: none
	wake        chan struct{} // a transition was queued, or Flush or Close called
	drained     *sync.Cond    // queue empty, nothing in flight nor left to delete
	stopped     chan struct{} // the sender has returned
	dropped     atomic.Int64  // transitions the full queue left to Redrive

	published, publishedDead atomic.Int64 // messages acked by Pub/Sub
}

// Defaults of the hook's queue.
const (
	// DefaultMaxQueue bounds the transitions waiting for the sender; past
	// it the hook leaves them to Redrive (they are in the outbox).
	DefaultMaxQueue = 10000
	// sendBatch is about the most transitions the sender publishes at
	// once (an outbox document's transitions are never split between two
	// batches).
	sendBatch = 500
)

// New returns a Publisher. It does not check that the topics exist: a
// missing topic makes publishing fail, which leaves events in the outbox
// until Redrive succeeds. Register it with the store:
//
//	st.OnCommit(p.Hook())
func New(ctx context.Context, cfg Config) (*Publisher, error) {
	switch {
	case cfg.Store == nil:
		return nil, service.Missing("events", "Config.Store")
	case cfg.Client == nil:
		return nil, service.Missing("events", "Config.Client")
	}
	p := &Publisher{
		outbox: cfg.Store, log: cfg.Logger, now: cfg.Now, grace: cfg.Grace, timeout: cfg.PublishTimeout,
		batch: cfg.RedriveBatch, maxBatches: cfg.RedriveMaxBatches, maxQueue: cfg.MaxQueue,
		deleteDelay: cfg.DeleteDelay, wake: make(chan struct{}, 1), stopped: make(chan struct{}),
	}
	p.drained = sync.NewCond(&p.qmu)
	if p.maxQueue <= 0 {
		p.maxQueue = DefaultMaxQueue
	}
	if p.deleteDelay == 0 {
		p.deleteDelay = DefaultDeleteDelay
	}
	if p.log == nil {
		p.log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	p.now = service.Clock(p.now)
	if p.grace <= 0 {
		p.grace = DefaultGrace
	}
	if p.timeout <= 0 {
		p.timeout = DefaultPublishTimeout
	}
	if p.batch <= 0 {
		p.batch = DefaultRedriveBatch
	}
	if p.maxBatches <= 0 {
		p.maxBatches = DefaultRedriveMaxBatches
	}
	project := cfg.Client.Project()
	p.client, p.topic = cfg.Client, TopicName(project, cmp.Or(cfg.EventsTopic, DefaultEventsTopic))
	p.events = cfg.Client.Publisher(p.topic)
	p.events.EnableMessageOrdering = true
	p.dead = cfg.Client.Publisher(TopicName(project, cmp.Or(cfg.DeadLetterTopic, DefaultDeadLetterTopic)))
	for _, t := range []*pubsub.Publisher{p.events, p.dead} {
		// The sender publishes a batch and waits for it: send at once
		// rather than wait for the default 10 ms bundling delay.
		t.PublishSettings.DelayThreshold = time.Millisecond
		t.PublishSettings.Timeout = p.timeout
	}
	go p.send()
	return p, nil
}

// Close delivers what the hook has queued (bounded by the publish
// timeout) and deletes the delivered documents still held, stops the
// sender and the Pub/Sub publishers. Transitions committed after Close
// stay in the outbox for Redrive. It does not close the client.
func (p *Publisher) Close() {
	p.qmu.Lock()
	p.closed = true
	p.qmu.Unlock()
	p.poke()
	<-p.stopped
	p.events.Stop()
	p.dead.Stop()
}

// Hook returns the function to register with store.OnCommit. It only
// queues the committed transitions for the sender and returns at once, so
// a callback answers as soon as its transaction commits: publishing and
// deleting the delivered entries happen off the request's path, many
// transitions to a publish and the deletes of Config.DeleteDelay to a
// commit. What the sender cannot deliver (Pub/Sub down, a full queue, a
// crash) stays in the outbox for Redrive. A task's transitions are queued
// in commit order (the store runs one transaction per task at a time and
// calls the hook before the next), and the sender keeps that order.
func (p *Publisher) Hook() func(context.Context, []task.Transition) {
	return func(_ context.Context, trs []task.Transition) {
		failpoint.Hit(failpoint.EventsAfterCommit) // the fault harness's crash between the commit and the publish
		p.enqueue(trs)
	}
}

// enqueue queues trs for the sender, or leaves them to Redrive when the
// queue is full or closed.
func (p *Publisher) enqueue(trs []task.Transition) {
	p.qmu.Lock()
	if p.closed || len(p.queue)+len(trs) > p.maxQueue {
		p.qmu.Unlock()
		if n := p.dropped.Add(int64(len(trs))); n == int64(len(trs)) || n%1000 < int64(len(trs)) {
			p.log.Warn("events: the publish queue is full; transitions are left to the outbox re-drive", "dropped", n)
		}
		return
	}
	p.queue = append(p.queue, itemsOf(trs)...)
	p.qmu.Unlock()
	p.poke()
}

func (p *Publisher) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// send is the sender: it takes up to sendBatch queued transitions at a
// time and publishes them, until Close. It holds the delivered documents
// and deletes them together (flushDeletes), one commit per
// maxWritesPerCommit.
func (p *Publisher) send() {
	defer close(p.stopped)
	var (
		pend   []string  // delivered documents not deleted yet
		oldest time.Time // when the first of pend was delivered
		timer  = time.NewTimer(time.Hour)
	)
	timer.Stop()
	for {
		p.qmu.Lock()
		n := min(len(p.queue), sendBatch)
		for n > 0 && n < len(p.queue) && p.queue[n].docID() == p.queue[n-1].docID() {
			n++ // the rest of the document: it is deleted only once all its events are delivered
		}
		batch := slices.Clone(p.queue[:n])
		p.queue = p.queue[n:]
		p.inFlight = n
		p.qmu.Unlock()
		if n > 0 {
			done, _ := p.deliver(context.Background(), sortItems(batch), "publish")
			if len(pend) == 0 {
				oldest = time.Now()
			}
			pend = append(pend, done...)
		}
		p.qmu.Lock()
		p.inFlight = 0
		p.deleting = len(pend)
		force := p.closed || p.flushing > 0
		p.qmu.Unlock()
		if len(pend) > 0 && p.flushDeletes(len(pend), time.Since(oldest), force) {
			_, _ = p.mark(context.Background(), pend, nil, "publish")
			pend = nil
		}
		p.qmu.Lock()
		p.deleting = len(pend)
		empty, closed := len(p.queue) == 0, p.closed
		if empty && len(pend) == 0 {
			p.drained.Broadcast()
		}
		p.qmu.Unlock()
		switch {
		case !empty:
		case len(pend) == 0 && closed:
			return
		case len(pend) == 0:
			<-p.wake
		default:
			// Idle with deletes held: until a transition, Flush or Close,
			// or the delay's end.
			timer.Reset(p.deleteDelay - time.Since(oldest))
			select {
			case <-p.wake:
			case <-timer.C:
			}
			timer.Stop()
		}
	}
}

// flushDeletes reports whether the sender deletes the n delivered
// documents it holds, the oldest held for age, now: when they fill a
// commit, the delay has passed, or force (Close or Flush).
func (p *Publisher) flushDeletes(n int, age time.Duration, force bool) bool {
	return force || n >= maxWritesPerCommit || age >= p.deleteDelay
}

// Flush waits until every transition the hook queued so far has been
// delivered or left to Redrive, and the delivered documents deleted (at
// once, not after Config.DeleteDelay), or ctx ends.
func (p *Publisher) Flush(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		p.qmu.Lock()
		defer p.qmu.Unlock()
		p.drained.Broadcast()
	})
	defer stop()
	p.qmu.Lock()
	defer p.qmu.Unlock()
	p.flushing++
	defer func() { p.flushing-- }()
	p.poke()
	for len(p.queue) > 0 || p.inFlight > 0 || p.deleting > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		p.drained.Wait()
	}
	return nil
}

// Published is the number of messages Pub/Sub acked: transition events and
// dead letters.
func (p *Publisher) Published() (events, deadLetters int64) {
	return p.published.Load(), p.publishedDead.Load()
}

// Dropped is the number of transitions the hook left to Redrive because
// its queue was full or closed.
func (p *Publisher) Dropped() int64 { return p.dropped.Load() }

// Publish delivers one commit's transitions (as store.OnCommit passes
// them) now, on the caller's goroutine (tools may use it; the hook's
// sender does the same, but holds the deletes for Config.DeleteDelay): it
// publishes them (in seq order per task, ordering key = task id) and
// their dead letters, waits for Pub/Sub's acks, and deletes, in one
// commit, each outbox document (one per task, store.OutboxDocIDs) whose
// events were all acked. It costs one Firestore RPC (DeleteDelivered: one
// delete per document), plus one read of the attempt history per dead
// letter. It runs even when ctx is cancelled
// (the transitions are committed), bounded by the publish timeout.
// Failures are logged and returned wrapping ErrUndelivered; the documents
// stay undelivered.
func (p *Publisher) Publish(ctx context.Context, trs []task.Transition) error {
	return p.publish(ctx, itemsOf(trs))
}

// publish is Publish for items sorted by task then seq, every document's
// items together.
func (p *Publisher) publish(ctx context.Context, items []item) error {
	if len(items) == 0 {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	done, err := p.deliver(ctx, items, "publish")
	_, markErr := p.mark(ctx, done, nil, "publish")
	return errors.Join(err, markErr)
}

// deliver publishes items (as publish takes them) and returns the
// documents whose events were all acked, to delete; the others stay in
// the outbox for Redrive.
func (p *Publisher) deliver(ctx context.Context, items []item, op string) ([]string, error) {
	ok, failed, err := p.publishAll(ctx, items, op)
	done, _ := byDoc(ok, failed)
	return done, err
}

// itemsOf returns one commit's transitions as items, each with its outbox
// document, sorted by task then seq.
func itemsOf(trs []task.Transition) []item {
	docs := store.OutboxDocIDs(trs)
	items := make([]item, len(trs))
	for i, tr := range trs {
		items[i] = item{tr: tr, doc: docs[i]}
	}
	return sortItems(items)
}

// RedriveGrace is how old an undelivered outbox entry must be before
// Redrive takes it (Config.Grace): an entry is due for the re-drive at its
// next try plus this (zombie.GraceRedriver).
func (p *Publisher) RedriveGrace() time.Duration { return p.grace }

// Redrive publishes the outbox entries still undelivered after the grace
// period, in seq order per task, and deletes each document once all its
// events are delivered: the events a crash, a timeout or a Pub/Sub outage
// kept from Publish. The sweeper calls it every pass. Failures are
// isolated per document (one commit's events of a task): a document with
// an event or dead letter not acked keeps them all and gets a next try
// after a backoff (RedriveMinBackoff doubling to RedriveMaxBackoff, after
// the grace period), is skipped by the reads until then, and the pass goes
// on with the other documents; the next try publishes again its events
// that were acked (duplicates, contract §8.5), never losing one. It reads
// batches until the outbox has no document due, a batch delivers nothing
// (an outage: its documents are backed off and the next pass goes on), a
// delete fails, or RedriveMaxBatches batches were read. Concurrent calls
// on one Publisher run one at a time.
func (p *Publisher) Redrive(ctx context.Context) error {
	p.redriveMu.Lock()
	defer p.redriveMu.Unlock()
	cutoff := p.now().Add(-p.grace)
	total, failedTotal := 0, 0
	defer func() {
		if total > 0 || failedTotal > 0 {
			p.log.InfoContext(ctx, "events: re-drove outbox entries", "delivered", total, "failed", failedTotal)
		}
	}()
	var errs []error
	// Every group of shards in turn, one query a batch (a task's events
	// share its shard, so its order by seq holds); a batch that delivers
	// nothing at all is an outage, and ends the pass rather than wait out
	// the publish timeout per group.
	outage := false
	var backlog outboxBacklog
	defer func() { backlog.record(ctx, p.now()) }()
	for _, shards := range p.outbox.OutboxGroups() {
		if outage || ctx.Err() != nil {
			break
		}
		t, f, o, err := p.redriveShard(ctx, shards, cutoff, &backlog)
		total, failedTotal, outage = total+t, failedTotal+f, o
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// heldBack returns the due entries that may go out now: a task's events
// leave in seq order (their ordering key), so none goes while an earlier
// one of the same task waits, backed off after more failed tries than it
// (in waiting, the undelivered entries read but not due yet). A
// document's entries share their next try, so it never splits one.
func heldBack(due, waiting []store.OutboxEntry) []store.OutboxEntry {
	first := map[string]int64{} // task → its earliest waiting seq
	for _, e := range waiting {
		if s, ok := first[e.TaskID]; !ok || e.Seq < s {
			first[e.TaskID] = e.Seq
		}
	}
	if len(first) == 0 {
		return due
	}
	var out []store.OutboxEntry
	for _, e := range due {
		if s, ok := first[e.TaskID]; !ok || e.Seq < s {
			out = append(out, e)
		}
	}
	return out
}

// redriveShard is Redrive for one group of due shards: batches of
// undelivered entries until none is left, a delete fails, a batch delivers
// nothing (outage), or RedriveMaxBatches batches were read.
func (p *Publisher) redriveShard(ctx context.Context, shard []int, cutoff time.Time, backlog *outboxBacklog) (total, failedTotal int, outage bool, _ error) {
	var errs []error
	for range p.maxBatches {
		// Every undelivered entry, due first: the ones not due yet (backed
		// off after a failed delivery) are not published, but are the
		// backlog's too, so that the metrics see a Pub/Sub outage that
		// outlasts the first retry. The same query and index as the due
		// ones alone: no RPC more, and no entry read when there is none.
		all, err := p.outbox.Undelivered(ctx, shard, farFuture, p.batch)
		if err != nil {
			errs = append(errs, fmt.Errorf("events: redrive: read outbox (shards %v): %w", shard, err))
			break
		}
		due := len(all)
		for i, e := range all {
			if e.NextTryAt.After(cutoff) {
				due = i
				break
			}
		}
		entries := heldBack(all[:due], all[due:])
		backlog.add(all[:due])
		for _, e := range all[due:] {
			if !e.CreatedAt.After(cutoff) { // past the grace period, backed off
				backlog.add([]store.OutboxEntry{e})
			}
		}
		if len(entries) == 0 {
			break
		}
		items := make([]item, len(entries))
		docs := map[string]bool{}
		for i, e := range entries {
			items[i] = item{tr: e.Transition, doc: e.Doc, tries: e.Tries, eventPublished: e.EventPublished}
			docs[items[i].docID()] = true
		}
		ok, failed, err := p.publishAll(ctx, sortItems(items), "redrive")
		if err != nil {
			errs = append(errs, fmt.Errorf("events: redrive: %w", err))
		}
		done, bad := byDoc(ok, failed)
		_, markErr := p.mark(ctx, done, bad, "redrive")
		failedTotal += len(failed)
		if markErr != nil {
			// Documents not deleted would be read again by the next batch.
			errs = append(errs, fmt.Errorf("events: redrive: %w", markErr))
			break
		}
		total += len(ok)
		if len(ok) == 0 {
			outage = true
			break
		}
		if len(docs) < p.batch {
			break
		}
	}
	return total, failedTotal, outage, errors.Join(errs...)
}

// item is an outbox entry to publish.
type item struct {
	tr task.Transition
	// doc is the event id naming the outbox document the entry is in
	// (store.OutboxEntry.Doc); empty: its own.
	doc   string
	tries int // failed deliveries so far
	// eventPublished: the event was acked on an earlier try; only the dead
	// letter is left.
	eventPublished bool
}

// docID is the event id naming the item's outbox document.
func (it item) docID() string { return cmp.Or(it.doc, it.tr.EventID) }

// byDoc settles a batch per outbox document: done, the documents whose
// events all went out (their own, last, transition among them), to
// delete; bad, one item per document some of whose events failed, to
// back off: its own transition's when in the batch (eventPublished then
// says whether that event was acked), else the first failed one's.
func byDoc(ok, failed []item) (done []string, bad []item) {
	own := map[string]item{}
	for _, it := range slices.Concat(ok, failed) {
		if it.tr.EventID == it.docID() {
			own[it.docID()] = it
		}
	}
	kept := map[string]bool{}
	for _, it := range failed {
		d := it.docID()
		if kept[d] {
			continue
		}
		kept[d] = true
		r, found := own[d]
		if !found {
			r = it
			r.eventPublished = false
		}
		bad = append(bad, r)
	}
	for _, it := range ok {
		if d := it.docID(); it.tr.EventID == d && !kept[d] {
			done = append(done, d)
		}
	}
	return done, bad
}

// sortItems orders items by task, then seq.
func sortItems(items []item) []item {
	slices.SortStableFunc(items, func(a, b item) int {
		return cmp.Or(cmp.Compare(a.tr.TaskID, b.tr.TaskID), cmp.Compare(a.tr.Seq, b.tr.Seq))
	})
	return items
}

// pending is one transition in flight.
type pending struct {
	item
	ev  *pubsub.PublishResult
	dl  *pubsub.PublishResult
	err error // set when a message could not even be built or sent
	// cause is the first failure's, bounded (servo.events.publish_failures).
	cause string
}

// mark records a batch's results: the delivered documents deleted (one
// commit per Firestore's write limit) and, for the re-drive, the failed
// documents (one item each, byDoc) with their next try. Each is bounded
// by the publish timeout. It returns how many documents were deleted.
func (p *Publisher) mark(ctx context.Context, delivered []string, failed []item, op string) (int, error) {
	mctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	n, err := p.deleteDelivered(mctx, delivered)
	if err != nil {
		p.log.WarnContext(ctx, "events: published events' outbox documents not deleted; they will be re-published",
			"op", op, "documents", len(delivered)-n, "error", err.Error())
		return n, fmt.Errorf("%w: %d outbox documents published but not deleted: %w", ErrUndelivered, len(delivered)-n, err)
	}
	if len(failed) == 0 {
		return n, nil
	}
	now := p.now()
	fs := make([]store.OutboxFailure, len(failed))
	for i, f := range failed {
		tries := f.tries + 1
		fs[i] = store.OutboxFailure{EventID: f.docID(), Tries: tries, NextTryAt: now.Add(redriveBackoff(tries)), EventPublished: f.eventPublished}
	}
	fctx, fcancel := context.WithTimeout(ctx, p.timeout)
	defer fcancel()
	for chunk := range slices.Chunk(fs, maxWritesPerCommit) {
		if err := p.outbox.MarkFailed(fctx, chunk); err != nil {
			p.log.WarnContext(ctx, "events: failed deliveries not recorded; the entries are retried without backoff", "op", op, "error", err.Error())
			return n, fmt.Errorf("events: record failed deliveries: %w", err)
		}
	}
	return n, nil
}

// publishAll publishes the items' events (those not yet acked) and dead
// letters and waits for the acks; it returns the items fully delivered
// and those that failed (eventPublished set when their event was acked
// this time).
func (p *Publisher) publishAll(ctx context.Context, items []item, op string) ([]item, []item, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	ps := make([]pending, len(items))
	// Publish every event first: they are in flight while dead letters
	// read their attempt histories.
	for i, it := range items {
		ps[i].item = it
		if it.eventPublished {
			continue
		}
		msg, err := EventMessage(it.tr)
		if err != nil {
			ps[i].err, ps[i].cause = err, causeMessage
			continue
		}
		p.traceMessage(ctx, it.tr, msg)
		ps[i].ev = p.events.Publish(ctx, msg)
	}
	for i := range ps {
		if !ps[i].tr.DeadLetter || ps[i].err != nil {
			continue
		}
		attempts, err := p.outbox.Attempts(ctx, ps[i].tr.TaskID)
		if err != nil {
			ps[i].err, ps[i].cause = fmt.Errorf("read attempts for the dead letter: %w", err), causeAttempts
			continue
		}
		msg, err := DeadLetterMessage(DeadLetterOf(ps[i].tr, attempts))
		if err != nil {
			ps[i].err, ps[i].cause = err, causeMessage
			continue
		}
		ps[i].dl = p.dead.Publish(ctx, msg)
	}
	var (
		delivered []item
		failed    []item
		firstErr  error
		paused    = map[string]bool{}
	)
	for i := range ps {
		pe := &ps[i]
		if pe.ev != nil {
			if _, err := pe.ev.Get(ctx); err != nil {
				// With ordering, a failure pauses the key: later messages
				// for it fail too until ResumePublish.
				paused[pe.tr.TaskID] = true
				pe.err = cmp.Or(pe.err, fmt.Errorf("publish to %s: %w", p.events, err))
				pe.cause = cmp.Or(pe.cause, publishCause(err))
			} else {
				pe.eventPublished = true
				p.published.Add(1)
			}
		}
		if pe.dl != nil {
			if _, err := pe.dl.Get(ctx); err != nil {
				pe.err = cmp.Or(pe.err, fmt.Errorf("publish dead letter to %s: %w", p.dead, err))
				pe.cause = cmp.Or(pe.cause, publishCause(err))
			} else {
				p.publishedDead.Add(1)
			}
		}
		if pe.err != nil {
			failed = append(failed, pe.item)
			firstErr = cmp.Or(firstErr, pe.err)
			p.log.WarnContext(ctx, "events: event not delivered; it stays in the outbox",
				"op", op, "taskId", pe.tr.TaskID, "attempt", pe.tr.Attempt, "tenantId", pe.tr.TenantID,
				"eventId", pe.tr.EventID, "seq", pe.tr.Seq, "to", pe.tr.To, "tries", pe.tries+1,
				"eventPublished", pe.eventPublished, "error", pe.err.Error())
			telemetry.RecordPublishFailure(ctx, op, pe.cause, 1)
			continue
		}
		delivered = append(delivered, pe.item)
	}
	for key := range paused {
		p.events.ResumePublish(key)
	}
	if len(failed) > 0 {
		return delivered, failed, fmt.Errorf("%w: %d of %d events: %w", ErrUndelivered, len(failed), len(ps), firstErr)
	}
	return delivered, nil, nil
}

// deleteDelivered deletes the delivered documents, one commit per
// Firestore's write limit.
func (p *Publisher) deleteDelivered(ctx context.Context, ids []string) (int, error) {
	done := 0
	for chunk := range slices.Chunk(ids, maxWritesPerCommit) {
		if err := p.outbox.DeleteDelivered(ctx, chunk); err != nil {
			return done, err
		}
		done += len(chunk)
	}
	return done, nil
}
