package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/servo-dev/servo/internal/task"
)

// outboxDoc is an outbox entry as stored.
type outboxDoc struct {
	// Transition is the document's own transition, its fields at the top
	// level of the document (flatten).
	Transition transitionDoc
	// DueShard leads the re-drive's index, as on tasks.
	DueShard    int        `firestore:"dueShard"`
	Delivered   bool       `firestore:"delivered"`
	CreatedAt   time.Time  `firestore:"createdAt"`
	DeliveredAt *time.Time `firestore:"deliveredAt"`
	ExpireAt    *time.Time `firestore:"expireAt"`
	// NextTryAt is when the re-drive may take the entry: its creation
	// time, then, after each failed delivery, a time set by MarkFailed.
	NextTryAt time.Time `firestore:"nextTryAt"`
	// Tries counts the re-drive's failed deliveries.
	Tries int `firestore:"tries"`
	// EventPublished: the event of the document's own transition (the
	// last) was acked; only its dead letter is still to deliver.
	EventPublished bool `firestore:"eventPublished"`
	// Earlier holds the transitions the same commit made before the
	// document's own, in seq order (unindexed; absent when there are
	// none, and in the entries of older versions).
	Earlier []transitionDoc `firestore:"earlier"`
}

// outboxEarlier is the field of outboxDoc.Earlier.
const outboxEarlier = "earlier"

// outboxWrites is the outbox's part of a commit of trs: one document per
// task, named by the event id of its last transition in trs
// (OutboxDocIDs), holding that transition and, in earlier, the ones
// before it. One write however many transitions the commit makes.
func (s *Store) outboxWrites(trs []task.Transition) []*pb.Write {
	var writes []*pb.Write
	for _, g := range outboxGroups(trs) {
		writes = append(writes, s.outboxWrite(g))
	}
	return writes
}

// outboxWrite is the write of the outbox document of one commit's
// transitions of one task (g, in seq order).
func (s *Store) outboxWrite(g []task.Transition) *pb.Write {
	tr := g[len(g)-1]
	doc := outboxDoc{Transition: transitionDocOf(&tr), DueShard: DueShardOf(tr.TaskID, s.shards), CreatedAt: tr.OccurredAt, NextTryAt: tr.OccurredAt}
	if len(g) > 1 {
		doc.Earlier = transitionDocsOf(g[:len(g)-1])
	}
	fields := flatten(encodeFields(doc), "Transition")
	if doc.Earlier == nil {
		delete(fields, outboxEarlier)
	}
	return &pb.Write{Operation: &pb.Write_Update{Update: &pb.Document{Name: s.outboxName(tr.EventID), Fields: fields}}}
}

// outboxGroups splits one commit's transitions by task, in the order the
// tasks first appear, each group sorted by seq.
func outboxGroups(trs []task.Transition) [][]task.Transition {
	var groups [][]task.Transition
	at := map[string]int{}
	for _, tr := range trs {
		i, ok := at[tr.TaskID]
		if !ok {
			i = len(groups)
			at[tr.TaskID] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], tr)
	}
	for _, g := range groups {
		slices.SortStableFunc(g, func(a, b task.Transition) int { return cmp.Compare(a.Seq, b.Seq) })
	}
	return groups
}

// OutboxDocIDs returns, for each of one commit's transitions trs (as
// OnCommit passes them), the event id naming the outbox document the
// commit stored it in: that of the task's last transition in trs. The
// publisher deletes a document once every transition in it is delivered.
func OutboxDocIDs(trs []task.Transition) []string {
	doc := map[string]string{} // task → its document, as outboxWrites names it
	for _, g := range outboxGroups(trs) {
		doc[g[0].TaskID] = g[len(g)-1].EventID
	}
	out := make([]string, len(trs))
	for i, tr := range trs {
		out[i] = doc[tr.TaskID]
	}
	return out
}

// queryOutbox runs a query over the outbox collection.
func (s *Store) queryOutbox(ctx context.Context, q *pb.StructuredQuery) ([]OutboxEntry, error) {
	var out []OutboxEntry
	err := s.runQuery(ctx, s.docs, q, func(doc *pb.Document) error {
		es, err := decodeOutbox(doc)
		out = append(out, es...)
		return err
	})
	return out, err
}

// decodeOutbox decodes an outbox document as stored: one entry per
// transition it holds, in seq order, each with the document's delivery
// state (EventPublished only on the document's own transition).
func decodeOutbox(doc *pb.Document) ([]OutboxEntry, error) {
	var o outboxDoc
	if err := decodeFields(doc.GetFields(), &o.Transition); err != nil {
		return nil, err
	}
	if err := decodeFields(doc.GetFields(), &o); err != nil {
		return nil, err
	}
	id := doc.GetName()[strings.LastIndexByte(doc.GetName(), '/')+1:]
	entry := func(tr task.Transition, published bool) OutboxEntry {
		return OutboxEntry{Transition: tr, Doc: id, Delivered: o.Delivered, CreatedAt: o.CreatedAt,
			NextTryAt: o.NextTryAt, Tries: o.Tries, EventPublished: published}
	}
	out := make([]OutboxEntry, 0, len(o.Earlier)+1)
	for _, tr := range o.Earlier {
		out = append(out, entry(tr.transition(), false))
	}
	return append(out, entry(o.Transition.transition(), o.EventPublished)), nil
}

// OutboxGroups splits the due shards into the groups Undelivered takes:
// 30 shards a query.
func (s *Store) OutboxGroups() [][]int { return shardGroups(s.shards, maxDisjunctions, 1) }

func sortBySeq(es []OutboxEntry) {
	slices.SortFunc(es, func(a, b OutboxEntry) int { return cmp.Compare(a.Seq, b.Seq) })
}

// OutboxEntry is a transition event waiting for, or past, delivery.
type OutboxEntry struct {
	task.Transition
	// Doc is the event id naming the outbox document the entry is stored
	// in: that of the last transition of the same commit (its own for the
	// last, and for every entry an older version wrote). The delivery
	// state below is the document's. Empty for a transition whose
	// document is gone (OutboxEntries).
	Doc       string
	Delivered bool
	CreatedAt time.Time
	// NextTryAt is when the re-drive may take the entry (CreatedAt until a
	// delivery failed; see MarkFailed).
	NextTryAt time.Time
	// Tries counts the failed deliveries MarkFailed recorded.
	Tries int
	// EventPublished: the event was acked, only its dead letter was not.
	EventPublished bool
}

// Undelivered returns the entries of up to limit outbox documents of a
// group of due shards (one of OutboxGroups()) not yet delivered whose
// next try is due at or before dueBy (a document is due from its
// creation, and after a failed delivery from the time MarkFailed set),
// earliest first, a document's entries together in seq order. Entries
// that keep failing are skipped until their next try, so they never hide
// the others.
func (s *Store) Undelivered(ctx context.Context, shards []int, dueBy time.Time, limit int) ([]OutboxEntry, error) {
	if len(shards) == 0 || len(shards) > maxDisjunctions {
		return nil, fmt.Errorf("store: undelivered over %d due shards: want 1 to %d", len(shards), maxDisjunctions)
	}
	out, err := s.queryOutbox(ctx, s.undeliveredQuery(shards, dueBy, limit))
	return out, wrap("undelivered", err)
}

// undeliveredQuery is Undelivered's query, served by the index (dueShard,
// delivered, nextTryAt), one range per shard merged in order.
func (s *Store) undeliveredQuery(shards []int, dueBy time.Time, limit int) *pb.StructuredQuery {
	return &pb.StructuredQuery{
		From: []*pb.StructuredQuery_CollectionSelector{{CollectionId: OutboxCollection}},
		Where: and(shardFilter(shards),
			fieldFilter("delivered", pb.StructuredQuery_FieldFilter_EQUAL, &pb.Value{ValueType: &pb.Value_BooleanValue{BooleanValue: false}}),
			fieldFilter("nextTryAt", pb.StructuredQuery_FieldFilter_LESS_THAN_OR_EQUAL, encodeValue(reflect.ValueOf(dueBy.UTC())))),
		OrderBy: []*pb.StructuredQuery_Order{
			{Field: fieldRef("nextTryAt"), Direction: pb.StructuredQuery_ASCENDING},
			{Field: fieldRef("__name__"), Direction: pb.StructuredQuery_ASCENDING},
		},
		Limit: wrapInt(limit),
	}
}

// OutboxFailure records a failed delivery of one outbox document (some
// of its events or dead letters not acked).
type OutboxFailure struct {
	// EventID names the document (OutboxEntry.Doc).
	EventID string
	// Tries is the number of failed deliveries, this one included.
	Tries int
	// NextTryAt is when Undelivered may return the document again.
	NextTryAt time.Time
	// EventPublished: the event of the document's own (last) transition
	// was acked, only its dead letter failed; the next try publishes only
	// the dead letter. The earlier transitions' events are published
	// again (duplicates are allowed, contract §8.5).
	EventPublished bool
}

// MarkFailed records failed deliveries, in one commit (at most 500): each
// document stays undelivered, with all its entries, and is skipped by
// Undelivered until its NextTryAt. A document deleted meanwhile
// (delivered by another instance) is left alone.
func (s *Store) MarkFailed(ctx context.Context, failures []OutboxFailure) error {
	if len(failures) == 0 {
		return nil
	}
	writes := make([]*pb.Write, 0, len(failures))
	for _, f := range failures {
		fields := encodeFields(struct {
			NextTryAt      time.Time `firestore:"nextTryAt"`
			Tries          int       `firestore:"tries"`
			EventPublished bool      `firestore:"eventPublished"`
		}{f.NextTryAt.UTC(), f.Tries, f.EventPublished})
		writes = append(writes, &pb.Write{
			Operation:       &pb.Write_Update{Update: &pb.Document{Name: s.outboxName(f.EventID), Fields: fields}},
			UpdateMask:      &pb.DocumentMask{FieldPaths: []string{"nextTryAt", "tries", "eventPublished"}},
			CurrentDocument: &pb.Precondition{ConditionType: &pb.Precondition_Exists{Exists: true}},
		})
	}
	_, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes})
	if status.Code(err) == codes.NotFound {
		// An entry was delivered (deleted) by another instance meanwhile:
		// record the others one by one; the deleted ones need nothing.
		err = nil
		for _, w := range writes {
			_, e := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{w}})
			if status.Code(e) != codes.NotFound {
				err = cmp.Or(err, e)
			}
		}
	}
	return wrap("mark failed", err)
}

// OutboxEntries returns every transition of a task, delivered or not, in
// seq order, with its outbox entry's delivery state: an entry still stored
// as it is (undelivered, or delivered by an older version and kept until
// its TTL), a transition whose entry is gone (deleted on delivery) from the
// task's history, Delivered. It reads the task, then the entries by name
// (task.EventID of each seq: no index on the outbox's taskId is needed, a
// task id is a ULID and that index would take every new entry at one end).
// The events endpoints read TaskEvents instead, which reads no entry for a
// task whose history is complete. No task, no entries.
func (s *Store) OutboxEntries(ctx context.Context, taskID string) ([]OutboxEntry, error) {
	t, err := s.GetTask(ctx, taskID)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	stored, err := s.entriesOf(ctx, []task.Task{t}, func(task.Task) int64 { return t.Seq })
	if err != nil {
		return nil, fmt.Errorf("store: outbox entries: %w", err)
	}
	bySeq := make(map[int64]OutboxEntry, len(stored))
	for _, e := range stored {
		bySeq[e.Seq] = e
	}
	for _, tr := range t.Events() {
		if _, ok := bySeq[tr.Seq]; !ok {
			bySeq[tr.Seq] = OutboxEntry{Transition: tr, Delivered: true, CreatedAt: tr.OccurredAt, NextTryAt: tr.OccurredAt}
		}
	}
	out := make([]OutboxEntry, 0, len(bySeq))
	for _, e := range bySeq {
		out = append(out, e)
	}
	sortBySeq(out)
	return out, nil
}

// TaskEvents returns the transition events of t (as read) in seq order:
// those its history keeps (task.Task.History, on the document already
// read) and, for the seqs before the history's first (a task written
// before histories existed, or one past their bound), the outbox entries
// still kept, read by name. A task whose history starts at seq 1 costs no
// read.
func (s *Store) TaskEvents(ctx context.Context, t task.Task) ([]task.Transition, error) {
	entries, err := s.entriesOf(ctx, []task.Task{t}, historyStart)
	if err != nil {
		return nil, fmt.Errorf("store: task events: %w", err)
	}
	out := make([]task.Transition, 0, len(entries)+len(t.History))
	for _, e := range entries {
		out = append(out, e.Transition)
	}
	return append(out, t.Events()...), nil
}

// historyStart is the last seq of t its history lacks: t.Seq for a task
// without one.
func historyStart(t task.Task) int64 {
	if len(t.History) == 0 {
		return t.Seq
	}
	return t.History[0].Seq - 1
}

// entriesOf reads by name the outbox entries of tasks' seqs 1 to upTo(t),
// outboxReadChunk names a BatchGetDocuments, and returns those still
// stored in task, then seq order. A document is named by its commit's
// last seq, so when upTo(t) is short of t.Seq the names of the next
// commitSlack seqs are read too, for an entry of seq upTo(t) or before
// stored with a later one.
func (s *Store) entriesOf(ctx context.Context, tasks []task.Task, upTo func(task.Task) int64) ([]OutboxEntry, error) {
	type ref struct {
		name string
		upTo int64
	}
	var refs []ref
	for _, t := range tasks {
		up := upTo(t)
		last := up
		if up > 0 {
			last = min(t.Seq, up+commitSlack)
		}
		for seq := int64(1); seq <= last; seq++ {
			refs = append(refs, ref{s.outboxName(task.EventID(t.ID, seq)), up})
		}
	}
	var out []OutboxEntry
	for chunk := range slices.Chunk(refs, outboxReadChunk) {
		names := make([]string, len(chunk))
		for i, r := range chunk {
			names[i] = r.name
		}
		docs, _, err := s.batchGet(ctx, names, nil)
		if err != nil {
			return nil, wrap("read outbox entries", err)
		}
		for _, r := range chunk {
			d := docs[r.name]
			if d == nil {
				continue
			}
			es, err := decodeOutbox(d)
			if err != nil {
				return nil, err
			}
			for _, e := range es {
				if e.Seq <= r.upTo {
					out = append(out, e)
				}
			}
		}
	}
	return out, nil
}

// commitSlack is more than the transitions one commit makes of a task
// after the first (a submit's two today); an outbox document holds them
// all.
const commitSlack = 4

// outboxReadChunk is the most outbox entries read per RPC.
const outboxReadChunk = 300

// DeleteDelivered deletes the outbox documents (named by event id,
// OutboxEntry.Doc) whose events are all published, in one commit (at most
// 500): a delivered event leaves nothing in the outbox, its transition
// stays in the task's history. Deleting a document already gone
// (delivered by another instance, or an older version's delivered entry
// expired) is no error.
func (s *Store) DeleteDelivered(ctx context.Context, eventIDs []string) error {
	if len(eventIDs) == 0 {
		return nil
	}
	writes := make([]*pb.Write, 0, len(eventIDs))
	for _, id := range eventIDs {
		writes = append(writes, &pb.Write{Operation: &pb.Write_Delete{Delete: s.outboxName(id)}})
	}
	_, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes})
	return wrap("delete delivered", err)
}
