package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
)

// WriteRecorder records every document write the store commits, in commit
// order, with the index entries each makes in production: the scale model
// (bench/scale, internal/scale) extrapolates them to a target load. It
// keeps each document's last known fields, so that an update through a
// mask (a heartbeat) is indexed with the fields it does not send (the
// dueShard of a composite index) and only fields whose value changed make
// entries. Install it with WithClientOptions(r.ClientOptions()...).
type WriteRecorder struct {
	mu     sync.Mutex
	state  map[string]map[string]*pb.Value
	writes []RecordedWrite
	commit int
}

// RecordedWrite is one write of a commit.
type RecordedWrite struct {
	// Commit numbers the commit (writes of one commit share it).
	Commit int
	// Doc is the document's path below the database's documents
	// (tasks/x, tasks/x/attempts/1).
	Doc string
	// Collection is the document's collection id (its group).
	Collection string
	// Create is a write to a document the recorder had not seen.
	Create bool
	// Delete is a delete (its Entries are the document's entries, all
	// removed); Expiry a delete Firestore makes by TTL policy
	// (WriteRecorder.Expiries), At then the time it expires.
	Delete, Expiry bool
	// Fields are the paths written (the mask, else every field).
	Fields []string
	// Entries are the index entries written, and those removed
	// (RecordedEntry.Removed): an old value's entry when the value changed
	// or was cleared, every entry of a deleted document.
	Entries []RecordedEntry
	// TaskID, TenantID and Worker are the document's fields of these
	// names after the write (before it, for a delete; "" when absent).
	TaskID, TenantID, Worker string
	// Cause is what the commit's context says made it (WithCause), Path
	// the code that committed it (the first caller outside the store).
	Cause, Path string
	// At is when the commit was answered.
	At time.Time
}

type causeKey struct{}

// WithCause marks the store writes made with ctx as cause's (the
// sweeper's pass, a process's start-up, an outage's record): the scale
// model's recorder attributes a write of no task and no schedule by it,
// and holds one with no cause as a model error that names its code.
func WithCause(ctx context.Context, cause string) context.Context {
	return context.WithValue(ctx, causeKey{}, cause)
}

// forTask marks the store writes made with ctx as task id's when their
// documents name no task: a run's document created in a commit of its own
// after the task's (Store.createRun) is that submit's.
func forTask(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, forTaskKey{}, id)
}

type forTaskKey struct{}

// CauseOf is ctx's cause (WithCause), or "".
func CauseOf(ctx context.Context) string {
	c, _ := ctx.Value(causeKey{}).(string)
	return c
}

// callerPath names the first function on the stack outside this package,
// the gRPC and Google client libraries, the client's interceptors
// (internal/telemetry) and the runtime: the code that made a commit.
func callerPath() string {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		f, more := frames.Next()
		fn := f.Function
		if !strings.Contains(fn, "/internal/store.") && !strings.Contains(fn, "/internal/telemetry.") && !strings.HasPrefix(fn, "google.golang.org/") && !strings.HasPrefix(fn, "cloud.google.com/") &&
			!strings.HasPrefix(fn, "runtime.") && !strings.HasPrefix(fn, "github.com/googleapis/") {
			return fmt.Sprintf("%s (%s:%d)", fn, filepath.Base(f.File), f.Line)
		}
		if !more {
			return ""
		}
	}
}

// RecordedEntry is one index entry a write makes.
type RecordedEntry struct {
	// Index names the index: "tasks.state ASCENDING" for a single-field
	// index, "tasks(dueShard,state,leaseExpiresAt)" for a composite one,
	// "tasks.__name__" for the document names of a collection.
	Index string
	// Prefix holds the values of a composite index's fields before its
	// last (its equality prefix), encoded.
	Prefix string
	// Value is the last field's value in an order-preserving encoding
	// (byte order is Firestore's order within one type); Text is it for
	// people.
	Value, Text string
	// Removed is an entry the write removes (the old value's), not one it
	// writes.
	Removed bool
}

// NewWriteRecorder returns an empty recorder.
func NewWriteRecorder() *WriteRecorder {
	return &WriteRecorder{state: map[string]map[string]*pb.Value{}}
}

// ClientOptions install the recorder on a Firestore client.
func (r *WriteRecorder) ClientOptions() []option.ClientOption {
	return []option.ClientOption{option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(r.unary))}
}

// Writes returns a copy of the writes recorded so far.
func (r *WriteRecorder) Writes() []RecordedWrite {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.writes)
}

func (r *WriteRecorder) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	creq, ok := req.(*pb.CommitRequest)
	if err != nil || !ok {
		return err
	}
	var results []*pb.WriteResult
	if res, ok := reply.(*pb.CommitResponse); ok {
		results = res.GetWriteResults()
	}
	forID, _ := ctx.Value(forTaskKey{}).(string)
	r.record(creq.GetWrites(), results, CauseOf(ctx), forID, callerPath())
	return nil
}

// record applies a committed request's writes to the known state and
// records each with its entries, cause and path.
func (r *WriteRecorder) record(writes []*pb.Write, results []*pb.WriteResult, cause, forID, path string) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.commit++
	for i, w := range writes {
		var transforms []*pb.Value
		if i < len(results) {
			transforms = results[i].GetTransformResults()
		}
		rw := r.apply(w, transforms)
		rw.Cause, rw.Path, rw.At = cause, path, now
		if rw.TaskID == "" {
			rw.TaskID = forID
		}
		r.writes = append(r.writes, rw)
	}
}

func relName(name string) string {
	if _, rest, ok := strings.Cut(name, "/documents/"); ok {
		return rest
	}
	return name
}

func (r *WriteRecorder) apply(w *pb.Write, transforms []*pb.Value) RecordedWrite {
	if d := w.GetDelete(); d != "" {
		rel := relName(d)
		old, seen := r.state[rel]
		delete(r.state, rel)
		rw := RecordedWrite{Commit: r.commit, Doc: rel, Collection: collectionOf(d), Delete: true}
		if seen {
			rw.TaskID, rw.TenantID, rw.Worker = old["taskId"].GetStringValue(), old["tenantId"].GetStringValue(), old["worker"].GetStringValue()
			rw.Entries = docEntries(rw.Collection, rel, old, true)
		}
		return rw
	}
	doc := w.GetUpdate()
	rel, coll := relName(doc.GetName()), collectionOf(doc.GetName())
	old, seen := r.state[rel]
	next := map[string]*pb.Value{}
	var written []string
	if mask := w.GetUpdateMask(); mask != nil && seen {
		for k, v := range old {
			next[k] = v
		}
		for _, p := range mask.GetFieldPaths() {
			setAt(next, p, valueAt(doc.GetFields(), p))
		}
		written = slices.Clone(mask.GetFieldPaths())
	} else {
		for k, v := range doc.GetFields() {
			next[k] = v
		}
		for k := range doc.GetFields() {
			written = append(written, k)
		}
		// A whole-document write over a known document clears the
		// fields it does not send.
		for k := range old {
			if _, ok := doc.GetFields()[k]; !ok {
				written = append(written, k)
			}
		}
	}
	for j, t := range w.GetUpdateTransforms() {
		var v *pb.Value
		if j < len(transforms) {
			v = transforms[j]
		}
		setAt(next, t.GetFieldPath(), v)
		written = append(written, t.GetFieldPath())
	}
	sort.Strings(written)
	written = slices.Compact(written)
	r.state[rel] = next
	rw := RecordedWrite{Commit: r.commit, Doc: rel, Collection: coll, Create: !seen, Fields: written,
		TaskID: next["taskId"].GetStringValue(), TenantID: next["tenantId"].GetStringValue(), Worker: next["worker"].GetStringValue()}
	if !seen {
		rw.Entries = append(rw.Entries, RecordedEntry{Index: coll + ".__name__", Value: rel})
	}
	changed := map[string]bool{}
	for _, p := range written {
		if !seen || !sameValue(valueAt(old, p), valueAt(next, p)) {
			changed[p] = true
		}
	}
	// A changed value's entries replace the old value's: the old ones
	// no longer written are removed, the new ones not there before are
	// written (a cleared value only removes).
	for _, p := range slices.Sorted(maps.Keys(changed)) {
		var before []RecordedEntry
		if seen {
			before = singleEntries(coll, p, valueAt(old, p))
		}
		rw.Entries = append(rw.Entries, diffEntries(before, singleEntries(coll, p, valueAt(next, p)))...)
	}
	for _, ix := range Indexes {
		if ix.Collection != coll || !slices.ContainsFunc(ix.Fields, func(f IndexField) bool { return changed[f.Path] }) {
			continue
		}
		var before, after []RecordedEntry
		if e, ok := compositeEntry(ix, old); ok && seen {
			before = []RecordedEntry{e}
		}
		if e, ok := compositeEntry(ix, next); ok {
			after = []RecordedEntry{e}
		}
		rw.Entries = append(rw.Entries, diffEntries(before, after)...)
	}
	sort.SliceStable(rw.Entries, func(i, j int) bool { return rw.Entries[i].Index < rw.Entries[j].Index })
	return rw
}

// Expiries are the deletes Firestore makes by TTL policy (TTLFields) of
// the documents the recorder holds: each known document whose TTL field
// holds a time, with every entry it still has, removed, in the order
// they expire (At: the time). A document is created once and expires
// once: in a steady state documents expire at the rate they are created.
func (r *WriteRecorder) Expiries() []RecordedWrite {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []RecordedWrite
	for _, rel := range slices.Sorted(maps.Keys(r.state)) {
		fields := r.state[rel]
		coll := collectionOf("/" + rel)
		for _, t := range TTLFields {
			ts := fields[t.Path].GetTimestampValue()
			if t.Collection != coll || ts == nil {
				continue
			}
			out = append(out, RecordedWrite{Doc: rel, Collection: coll, Delete: true, Expiry: true, At: ts.AsTime(),
				TaskID: fields["taskId"].GetStringValue(), TenantID: fields["tenantId"].GetStringValue(), Worker: fields["worker"].GetStringValue(),
				Entries: docEntries(coll, rel, fields, true), Cause: "TTL expiry"})
			break
		}
	}
	slices.SortStableFunc(out, func(a, b RecordedWrite) int { return a.At.Compare(b.At) })
	return out
}

// docEntries are every index entry of a document (rel in coll) with
// fields: its name, its single-field entries, and one per composite index
// it has every field of; removed marks them removed.
func docEntries(coll, rel string, fields map[string]*pb.Value, removed bool) []RecordedEntry {
	out := []RecordedEntry{{Index: coll + ".__name__", Value: rel}}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		out = append(out, singleEntries(coll, k, fields[k])...)
	}
	for _, ix := range Indexes {
		if e, ok := compositeEntry(ix, fields); ok && ix.Collection == coll {
			out = append(out, e)
		}
	}
	for i := range out {
		out[i].Removed = removed
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// compositeEntry is ix's entry for a document with fields, if it has
// every field of ix.
func compositeEntry(ix Index, fields map[string]*pb.Value) (RecordedEntry, bool) {
	if fields == nil || slices.ContainsFunc(ix.Fields, func(f IndexField) bool { return valueAt(fields, f.Path) == nil }) {
		return RecordedEntry{}, false
	}
	var prefix []string
	for _, f := range ix.Fields[:len(ix.Fields)-1] {
		prefix = append(prefix, f.Path+"="+textOf(valueAt(fields, f.Path)))
	}
	last := valueAt(fields, ix.Fields[len(ix.Fields)-1].Path)
	return RecordedEntry{Index: compositeName(ix), Prefix: strings.Join(prefix, ","), Value: orderKey(last), Text: textOf(last)}, true
}

// diffEntries are the entries of after not in before, then those of
// before not in after, removed.
func diffEntries(before, after []RecordedEntry) []RecordedEntry {
	key := func(e RecordedEntry) RecordedEntry { e.Removed = false; return e }
	in := func(es []RecordedEntry, e RecordedEntry) bool {
		return slices.ContainsFunc(es, func(x RecordedEntry) bool { return key(x) == key(e) })
	}
	var out []RecordedEntry
	for _, e := range after {
		if !in(before, e) {
			out = append(out, e)
		}
	}
	for _, e := range before {
		if !in(after, e) {
			e.Removed = true
			out = append(out, e)
		}
	}
	return out
}

func compositeName(ix Index) string {
	var fs []string
	for _, f := range ix.Fields {
		fs = append(fs, f.Path)
	}
	return ix.Collection + "(" + strings.Join(fs, ",") + ")"
}

// singleEntries are the single-field entries of the value at path, as
// fieldEntries counts them: ascending and descending per leaf, map
// subfields recursively, one array-contains entry per element.
func singleEntries(coll, path string, v *pb.Value) []RecordedEntry {
	if v == nil || exempt(coll, path) {
		return nil
	}
	switch x := v.GetValueType().(type) {
	case *pb.Value_MapValue:
		var out []RecordedEntry
		for k, sub := range x.MapValue.GetFields() {
			out = append(out, singleEntries(coll, path+"."+k, sub)...)
		}
		return out
	case *pb.Value_ArrayValue:
		var out []RecordedEntry
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, RecordedEntry{Index: coll + "." + path + " CONTAINS", Value: orderKey(e), Text: textOf(e)})
		}
		return out
	}
	e := orderKey(v)
	t := textOf(v)
	return []RecordedEntry{{Index: coll + "." + path + " ASCENDING", Value: e, Text: t}, {Index: coll + "." + path + " DESCENDING", Value: e, Text: t}}
}

func setAt(fields map[string]*pb.Value, path string, v *pb.Value) {
	head, rest, nested := strings.Cut(path, ".")
	if !nested {
		if v == nil {
			delete(fields, head)
		} else {
			fields[head] = v
		}
		return
	}
	m := fields[head].GetMapValue()
	sub := map[string]*pb.Value{}
	if m != nil {
		for k, x := range m.GetFields() {
			sub[k] = x
		}
	}
	setAt(sub, rest, v)
	fields[head] = &pb.Value{ValueType: &pb.Value_MapValue{MapValue: &pb.MapValue{Fields: sub}}}
}

func sameValue(a, b *pb.Value) bool {
	if a == nil || b == nil {
		return a == b
	}
	return orderKey(a) == orderKey(b)
}

// orderKey encodes v so that byte order is Firestore's value order
// within a type (numbers, timestamps, strings); a type tag leads.
func orderKey(v *pb.Value) string {
	var b []byte
	switch x := v.GetValueType().(type) {
	case nil:
		return ""
	case *pb.Value_NullValue:
		return "0"
	case *pb.Value_BooleanValue:
		if x.BooleanValue {
			return "1t"
		}
		return "1f"
	case *pb.Value_IntegerValue:
		b = append([]byte("2"), orderedFloat(float64(x.IntegerValue))...)
	case *pb.Value_DoubleValue:
		b = append([]byte("2"), orderedFloat(x.DoubleValue)...)
	case *pb.Value_TimestampValue:
		b = []byte("3")
		b = binary.BigEndian.AppendUint64(b, uint64(x.TimestampValue.GetSeconds())^1<<63)
		b = binary.BigEndian.AppendUint32(b, uint32(x.TimestampValue.GetNanos()))
	case *pb.Value_StringValue:
		return "4" + x.StringValue
	case *pb.Value_BytesValue:
		return "5" + string(x.BytesValue)
	case *pb.Value_ReferenceValue:
		return "6" + relName(x.ReferenceValue)
	case *pb.Value_MapValue:
		keys := make([]string, 0, len(x.MapValue.GetFields()))
		for k := range x.MapValue.GetFields() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		s := "9"
		for _, k := range keys {
			s += k + ":" + orderKey(x.MapValue.GetFields()[k]) + ";"
		}
		return s
	default:
		return "8" + v.String()
	}
	return string(b)
}

func orderedFloat(f float64) []byte {
	u := math.Float64bits(f)
	if f < 0 {
		u = ^u
	} else {
		u |= 1 << 63
	}
	return binary.BigEndian.AppendUint64(nil, u)
}

// textOf shows a value to people.
func textOf(v *pb.Value) string {
	switch x := v.GetValueType().(type) {
	case nil:
		return ""
	case *pb.Value_NullValue:
		return "null"
	case *pb.Value_BooleanValue:
		return strconv.FormatBool(x.BooleanValue)
	case *pb.Value_IntegerValue:
		return strconv.FormatInt(x.IntegerValue, 10)
	case *pb.Value_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *pb.Value_TimestampValue:
		return x.TimestampValue.AsTime().UTC().Format(time.RFC3339Nano)
	case *pb.Value_StringValue:
		return strconv.Quote(x.StringValue)
	}
	return "…"
}
