package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/servo-dev/servo/internal/task"
)

// Servo's own outages must not make a healthy worker a zombie
// (docs/contract.md §5.3): a worker whose heartbeats failed because the
// store, or Servo itself, was unavailable keeps its lease for that time.
// Two things record an outage, each as a document outages/{id} (from, to,
// and expireAt for the TTL policy, OutageRetention after its end):
//
//   - every process, from its own store calls: Apply (every callback,
//     cancel and sweeper event) and the sweeper's due queries. The span
//     from the start of the first call that failed unavailable (or ran
//     past its deadline) to the end of the next one that succeeded is an
//     outage; it counts in this process at once, while still open, and is
//     written for the others when it closes.
//   - the sweeper, from its own cadence ([Store.Pulse]): a gap between two
//     passes longer than expected means Servo itself was down (or not
//     swept), and callbacks may have failed with it.
//
// Only the rare path reads them: when an event would end an attempt
// because its lease or cancel grace ran out, the store applies it again
// with the recent outages (Store.machine), which credit the timer with the
// time they cover (task.Event.Outages). A cached read serves every such
// event of the next OutageCacheFor.

// OutagesCollection holds the recorded outages.
const OutagesCollection = "outages"

// OutageRetention is how long an outage is kept after it ended: longer
// than any lease or cancel grace it could credit.
const OutageRetention = 26 * time.Hour

// outageCacheFor is how long the recorded outages read from Firestore are
// reused.
const outageCacheFor = 2 * time.Second

// outageDoc is an outage as stored.
type outageDoc struct {
	// Outage is the span, its fields at the top level of the document
	// (flatten).
	Outage   outageSpanDoc
	ExpireAt time.Time `firestore:"expireAt"`
}

// outageLog is one process's view of Servo's outages.
type outageLog struct {
	mu       sync.Mutex
	fetch    sync.Mutex    // held while the recorded outages are read
	open     *time.Time    // start of the first failed call, while calls fail
	seen     []task.Outage // closed here, kept until OutageRetention
	stored   []task.Outage // read from Firestore
	storedAt time.Time
	persist  func(task.Outage) // writes a closed outage (set by New)
}

// unavailable reports whether err says the store could not be reached or
// did not answer in time (as opposed to refusing, or losing a race).
func unavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Internal, codes.Unknown:
		return true
	}
	return false
}

// observe records the outcome of a store call begun at began.
func (o *outageLog) observe(began time.Time, err error) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case err != nil && unavailable(err):
		if o.open == nil || began.Before(*o.open) {
			o.open = &began
		}
	case err == nil && o.open != nil:
		out := task.Outage{From: o.open.UTC(), To: time.Now().UTC()}
		o.open = nil
		o.add(out)
	}
}

// add keeps out (the caller holds mu) and has it written.
func (o *outageLog) add(out task.Outage) {
	o.seen = append(o.seen, out)
	cut := time.Now().Add(-OutageRetention)
	o.seen = slices.DeleteFunc(o.seen, func(x task.Outage) bool { return x.To.Before(cut) })
	if o.persist != nil {
		go o.persist(out)
	}
}

// recent returns every outage known here: the open one (up to now), those
// this process closed, and those recorded by any process.
func (o *outageLog) recent(ctx context.Context, s *Store) []task.Outage {
	o.fetch.Lock() // one read at a time; the others wait for its result
	defer o.fetch.Unlock()
	o.mu.Lock()
	fresh := time.Since(o.storedAt) < outageCacheFor
	o.mu.Unlock()
	if !fresh {
		if read, err := s.Outages(ctx); err == nil {
			o.mu.Lock()
			o.stored, o.storedAt = read, time.Now()
			o.mu.Unlock()
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var outs []task.Outage
	if o.open != nil {
		outs = append(outs, task.Outage{From: *o.open, To: time.Now().UTC()})
	}
	outs = append(outs, o.seen...)
	return append(outs, o.stored...)
}

func (s *Store) outageName(o task.Outage) string {
	sum := sha256.Sum256([]byte(o.From.UTC().Format(time.RFC3339Nano) + "/" + o.To.UTC().Format(time.RFC3339Nano)))
	return s.docs + "/" + OutagesCollection + "/" + hex.EncodeToString(sum[:12])
}

// RecordOutage writes an outage (idempotent: its id is its span).
func (s *Store) RecordOutage(ctx context.Context, o task.Outage) error {
	o.From, o.To = o.From.UTC(), o.To.UTC()
	w := setWrite(s.outageName(o), outageDoc{Outage: outageSpanDoc(o), ExpireAt: o.To.Add(OutageRetention)}, false)
	w.GetUpdate().Fields = flatten(w.GetUpdate().Fields, "Outage")
	_, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{w}})
	return wrap("record outage", err)
}

// Outages reads the recorded outages that ended within OutageRetention
// (one query over a collection that holds only those, and what the TTL
// policy has not deleted yet).
func (s *Store) Outages(ctx context.Context) ([]task.Outage, error) {
	q := &pb.StructuredQuery{
		From:  []*pb.StructuredQuery_CollectionSelector{{CollectionId: OutagesCollection}},
		Limit: wrapInt(500),
	}
	cut := time.Now().Add(-OutageRetention)
	var outs []task.Outage
	err := s.runQuery(ctx, s.docs, q, func(d *pb.Document) error {
		var o task.Outage
		if err := decodeFields(d.GetFields(), &o); err != nil {
			return err
		}
		if o.To.After(cut) {
			outs = append(outs, o)
		}
		return nil
	})
	return outs, wrap("read outages", err)
}

// PulseDocID is the document in MetaCollection that holds the start of
// the sweeper's latest pass.
const PulseDocID = "pulse"

type pulseDoc struct {
	At time.Time `firestore:"at"`
	// Next is the sweeper's promise of its next pass: the start of the
	// pass plus its cadence, or, when a window ended early because nothing
	// was due (PromisePulse), the next Scheduler tick. Zero in pulses
	// written before it existed: At plus the caller's cadence.
	Next time.Time `firestore:"next"`
}

// Pulse is called by the sweeper at the start of every pass, expected
// every `every`. It records the pass and its promise of the next one (now
// plus every, unless PromisePulse moves it), and when this pass comes
// later than the previous one promised (by more than half of every, at
// least 2 s), it records the excess as an outage: Servo was down or not sweeping, and
// callbacks may have failed with it. 2 RPCs (a read and a write).
func (s *Store) Pulse(ctx context.Context, now time.Time, every time.Duration) (gap *task.Outage, err error) {
	return s.pulse(ctx, now, every, true)
}

// CheckPulse is Pulse without recording a pass (1 RPC): a starting
// process learns whether Servo was down before it (the sweeper's passes
// stopped), so that its first callbacks do not expire leases for that
// time.
func (s *Store) CheckPulse(ctx context.Context, now time.Time, every time.Duration) (gap *task.Outage, err error) {
	return s.pulse(ctx, now, every, false)
}

func (s *Store) pulse(ctx context.Context, now time.Time, every time.Duration, record bool) (*task.Outage, error) {
	name := s.docs + "/" + MetaCollection + "/" + PulseDocID
	var prev pulseDoc
	found, err := s.getDoc(ctx, name, &prev)
	if err != nil {
		return nil, wrap("read pulse", err)
	}
	now = now.UTC()
	if record {
		if _, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{setWrite(name, pulseDoc{At: now, Next: now.Add(every)}, false)}}); err != nil {
			return nil, wrap("write pulse", err)
		}
	}
	if !found {
		return nil, nil
	}
	expected := prev.At.Add(every)
	if !prev.Next.IsZero() {
		expected = prev.Next
	}
	if now.Sub(expected) <= max(every/2, 2*time.Second) {
		return nil, nil
	}
	out := task.Outage{From: expected, To: now}
	s.outages.mu.Lock()
	s.outages.add(out)
	s.outages.mu.Unlock()
	return &out, nil
}

// PromisePulse moves the promise of the latest pulse to next (1 RPC): the
// sweeper ended its window early because nothing was due before the next
// Scheduler tick, so no pass comes before then, and none is an outage.
func (s *Store) PromisePulse(ctx context.Context, next time.Time) error {
	w := &pb.Write{
		Operation:  &pb.Write_Update{Update: &pb.Document{Name: s.docs + "/" + MetaCollection + "/" + PulseDocID, Fields: encodeFields(pulseDoc{Next: next.UTC()})}},
		UpdateMask: &pb.DocumentMask{FieldPaths: []string{"next"}},
	}
	_, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{w}})
	return wrap("promise pulse", err)
}
