package store

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Strict mode enforces, in the client, the rules production Firestore
// applies and the emulator does not: every query must be served by the
// declared composite indexes (Indexes) or by single-field indexes of fields
// not exempted (FieldExemptions, TTLFields), and every request must keep
// Firestore's documented limits. A breach is refused with the status
// production gives (FAILED_PRECONDITION for a missing index,
// INVALID_ARGUMENT for a limit), before the request is sent.
//
// Strict mode is on by default against the emulator (every test, servo
// dev) and off against production Firestore, which enforces its rules
// itself. SERVO_STORE_STRICT=false turns it off (servo dev --strict=false);
// WithStrict overrides both.

// Firestore's documented limits (https://cloud.google.com/firestore/quotas,
// "Collections, documents, and fields", "Writes and transactions" and
// "Indexes"; https://cloud.google.com/firestore/docs/query-data/queries,
// "Limits on OR queries"; https://cloud.google.com/firestore/docs/storage-size
// for how sizes are counted).
const (
	// LimitDocumentBytes is the maximum size for a document.
	LimitDocumentBytes = 1 << 20
	// LimitDocumentNameBytes is the maximum size for a document name.
	LimitDocumentNameBytes = 6 << 10
	// LimitFieldValueBytes is the maximum size of a field value.
	LimitFieldValueBytes = 1<<20 - 89
	// LimitFieldDepth is the maximum depth of fields in a map or array.
	LimitFieldDepth = 20
	// LimitRequestBytes is the maximum API request size.
	LimitRequestBytes = 10 << 20
	// LimitTransformsPerDocument is the maximum number of field
	// transformations on one document in a commit.
	LimitTransformsPerDocument = 500
	// LimitIndexEntryBytes is the maximum size of an index entry.
	LimitIndexEntryBytes = 7680
	// LimitIndexEntriesPerDocument is the maximum number of index entries
	// for each document.
	LimitIndexEntriesPerDocument = 40000
	// LimitCompositeIndexes is the maximum number of composite indexes
	// for a database.
	LimitCompositeIndexes = 200
	// LimitDisjunctions is the maximum number of disjunctions of a query
	// in disjunctive normal form (its "in" and "or" filters).
	LimitDisjunctions = 30
	// LimitIndexedStringBytes is how much of a string an index holds
	// (longer values are truncated in the index, not refused).
	LimitIndexedStringBytes = 1500
)

// EnvStrict turns strict mode off with "false" or "0" (default: on against
// the emulator).
const EnvStrict = "SERVO_STORE_STRICT"

// StrictLogEnv names a file to which strict mode appends every query it
// refuses for want of an index: the tests' harness
// (emulator/emulatortest) sets it and fails the test binary when the file
// is not empty, since the emulator would have served the query and only
// production would have refused it.
const StrictLogEnv = "SERVO_STORE_STRICT_LOG"

// WithStrict turns strict mode on or off, whatever the default.
func WithStrict(on bool) Option { return func(c *config) { c.strict = &on } }

// strictDefault: on against the emulator unless SERVO_STORE_STRICT says
// otherwise.
func strictDefault() bool {
	if os.Getenv(EmulatorHostEnv) == "" {
		return false
	}
	switch strings.ToLower(os.Getenv(EnvStrict)) {
	case "false", "0", "off", "no":
		return false
	}
	return true
}

// Strict reports whether the store enforces production's rules itself.
func (s *Store) Strict() bool { return s.strict }

// Rules are the indexes and exemptions strict mode checks queries against.
type Rules struct {
	Indexes    []Index
	Exemptions []FieldExemption
	TTL        []TTLField
}

// DeclaredRules are the rules of this code's indexes: what Terraform
// declares.
func DeclaredRules() Rules {
	return Rules{Indexes: Indexes, Exemptions: FieldExemptions, TTL: TTLFields}
}

// QueryShape is what a query asks of Firestore's indexes: its collection,
// the fields of its equality filters in order, then its inequality and
// order fields (without __name__; " desc" marks a descending order).
type QueryShape struct {
	Collection string
	Equality   []string
	Ordered    []string
}

// ShapeOf returns q's shape.
func ShapeOf(q *pb.StructuredQuery) QueryShape {
	sh := QueryShape{}
	if len(q.GetFrom()) > 0 {
		sh.Collection = q.GetFrom()[0].GetCollectionId()
	}
	var walk func(f *pb.StructuredQuery_Filter)
	walk = func(f *pb.StructuredQuery_Filter) {
		if c := f.GetCompositeFilter(); c != nil {
			for _, sub := range c.GetFilters() {
				walk(sub)
			}
			return
		}
		if u := f.GetUnaryFilter(); u != nil {
			sh.Equality = append(sh.Equality, u.GetField().GetFieldPath())
			return
		}
		ff := f.GetFieldFilter()
		switch ff.GetOp() {
		case pb.StructuredQuery_FieldFilter_EQUAL, pb.StructuredQuery_FieldFilter_IN, pb.StructuredQuery_FieldFilter_ARRAY_CONTAINS,
			pb.StructuredQuery_FieldFilter_ARRAY_CONTAINS_ANY:
			sh.Equality = append(sh.Equality, ff.GetField().GetFieldPath())
		default:
			// __name__ ends every index: a range on it needs nothing more.
			if p := ff.GetField().GetFieldPath(); p != "__name__" && !slices.Contains(sh.Ordered, p) {
				sh.Ordered = append(sh.Ordered, p)
			}
		}
	}
	if q.GetWhere() != nil {
		walk(q.GetWhere())
	}
	for _, o := range q.GetOrderBy() {
		if p := o.GetField().GetFieldPath(); p != "__name__" && !slices.Contains(sh.Ordered, p) {
			sh.Ordered = append(sh.Ordered, p)
		}
	}
	for i, p := range sh.Ordered {
		for _, o := range q.GetOrderBy() {
			if o.GetField().GetFieldPath() == p && o.GetDirection() == pb.StructuredQuery_DESCENDING {
				sh.Ordered[i] = p + " desc"
			}
		}
	}
	return sh
}

// Merged are the indexes Firestore merges to serve sh when no one index
// does (index merging): for equality filters led by dueShard, one index
// (dueShard, filter, ordered…) per other filter.
func (sh QueryShape) Merged() []string {
	if len(sh.Equality) < 3 || sh.Equality[0] != "dueShard" {
		return nil
	}
	var out []string
	for _, e := range sh.Equality[1:] {
		out = append(out, QueryShape{Collection: sh.Collection, Equality: []string{"dueShard", e}, Ordered: sh.Ordered}.Index())
	}
	return out
}

// NeedsComposite: Firestore serves equality filters alone (merging
// single-field indexes, with __name__ order) and a single field's range or
// order; anything else needs a composite index.
func (sh QueryShape) NeedsComposite() bool {
	return len(sh.Ordered) > 1 || (len(sh.Ordered) == 1 && len(sh.Equality) > 0)
}

// Index names the composite index sh needs: collection(field,field desc).
func (sh QueryShape) Index() string {
	return sh.Collection + "(" + strings.Join(append(slices.Clone(sh.Equality), sh.Ordered...), ",") + ")"
}

// IndexName names ix as QueryShape.Index does.
func IndexName(ix Index) string {
	fs := make([]string, 0, len(ix.Fields))
	for _, f := range ix.Fields {
		if f.Order == "DESCENDING" {
			fs = append(fs, f.Path+" desc")
		} else {
			fs = append(fs, f.Path)
		}
	}
	return ix.Collection + "(" + strings.Join(fs, ",") + ")"
}

// exempt reports whether path of collection has no single-field index.
func (r Rules) exempt(collection, path string) bool {
	for _, e := range r.Exemptions {
		if e.Collection == collection && (e.Path == path || strings.HasPrefix(path, e.Path+".")) {
			return true
		}
	}
	for _, e := range r.TTL {
		if e.Collection == collection && e.Path == path {
			return true
		}
	}
	return false
}

// Serving returns the declared indexes that serve q (none when
// single-field indexes do), or a FAILED_PRECONDITION error as production
// gives when no index does, or an INVALID_ARGUMENT error for a query over
// the disjunction limit.
func (r Rules) Serving(q *pb.StructuredQuery) ([]string, error) {
	if n := disjunctions(q.GetWhere()); n > LimitDisjunctions {
		return nil, status.Errorf(codes.InvalidArgument, "strict: the query has %d disjunctions in disjunctive normal form, over Firestore's limit of %d", n, LimitDisjunctions)
	}
	sh := ShapeOf(q)
	usesExempt := slices.ContainsFunc(sh.Equality, func(f string) bool { return r.exempt(sh.Collection, f) })
	if !sh.NeedsComposite() && !usesExempt {
		for _, f := range sh.Ordered {
			if r.exempt(sh.Collection, strings.TrimSuffix(f, " desc")) {
				return nil, status.Errorf(codes.FailedPrecondition, "strict: the query requires an index: it orders or ranges on %s.%s, which is exempted from single-field indexing (store.FieldExemptions)", sh.Collection, f)
			}
		}
		return nil, nil
	}
	declared := map[string]bool{}
	for _, ix := range r.Indexes {
		declared[IndexName(ix)] = true
	}
	if declared[sh.Index()] {
		return []string{sh.Index()}, nil
	}
	if merged := sh.Merged(); len(merged) > 0 && !slices.ContainsFunc(merged, func(ix string) bool { return !declared[ix] }) {
		return merged, nil
	}
	return nil, status.Errorf(codes.FailedPrecondition, "strict: the query requires an index: %s is not in store.Indexes (the emulator serves any query; production refuses this one)", sh.Index())
}

// disjunctions counts f's disjunctions in disjunctive normal form.
func disjunctions(f *pb.StructuredQuery_Filter) int {
	if f == nil {
		return 1
	}
	if c := f.GetCompositeFilter(); c != nil {
		if c.GetOp() == pb.StructuredQuery_CompositeFilter_OR {
			n := 0
			for _, sub := range c.GetFilters() {
				n += disjunctions(sub)
			}
			return n
		}
		n := 1
		for _, sub := range c.GetFilters() {
			n *= disjunctions(sub)
		}
		return n
	}
	if ff := f.GetFieldFilter(); ff != nil {
		switch ff.GetOp() {
		case pb.StructuredQuery_FieldFilter_IN, pb.StructuredQuery_FieldFilter_ARRAY_CONTAINS_ANY:
			return max(1, len(ff.GetValue().GetArrayValue().GetValues()))
		}
	}
	return 1
}

// nameSize is a document name's size: each collection and document id's
// bytes plus one, plus 16.
func nameSize(name string) int {
	_, rel, ok := strings.Cut(name, "/documents/")
	if !ok {
		return len(name) + 16
	}
	n := 16
	for _, seg := range strings.Split(rel, "/") {
		n += len(seg) + 1
	}
	return n
}

// valueSize is a field value's size as Firestore counts it, and its depth.
func valueSize(v *pb.Value) (size, depth int) {
	switch x := v.GetValueType().(type) {
	case *pb.Value_StringValue:
		return len(x.StringValue) + 1, 0
	case *pb.Value_BytesValue:
		return len(x.BytesValue), 0
	case *pb.Value_BooleanValue, *pb.Value_NullValue:
		return 1, 0
	case *pb.Value_IntegerValue, *pb.Value_DoubleValue, *pb.Value_TimestampValue:
		return 8, 0
	case *pb.Value_GeoPointValue:
		return 16, 0
	case *pb.Value_ReferenceValue:
		return nameSize(x.ReferenceValue), 0
	case *pb.Value_ArrayValue:
		for _, e := range x.ArrayValue.GetValues() {
			s, d := valueSize(e)
			size += s
			depth = max(depth, d+1)
		}
		return size, max(depth, 1)
	case *pb.Value_MapValue:
		s, d := fieldsSize(x.MapValue.GetFields())
		return s, d + 1
	}
	return 0, 0
}

func fieldsSize(fields map[string]*pb.Value) (size, depth int) {
	for k, v := range fields {
		s, d := valueSize(v)
		size += len(k) + 1 + s
		depth = max(depth, d)
	}
	return size, depth
}

// DocumentSize is doc's size as Firestore counts it: its name's, its
// fields', and 32 bytes.
func DocumentSize(doc *pb.Document) int {
	s, _ := fieldsSize(doc.GetFields())
	return nameSize(doc.GetName()) + s + 32
}

// CheckWrite refuses a write that production refuses: a document over its
// size, name or depth limits, a field value over its size, too many
// transforms, an index entry over its size or too many index entries.
// Sizes of an update with a mask count the fields written.
func (r Rules) CheckWrite(w *pb.Write) error {
	if n := len(w.GetUpdateTransforms()) + len(w.GetTransform().GetFieldTransforms()); n > LimitTransformsPerDocument {
		return status.Errorf(codes.InvalidArgument, "strict: %d field transforms on one document, over Firestore's limit of %d", n, LimitTransformsPerDocument)
	}
	doc := w.GetUpdate()
	if doc == nil {
		return nil
	}
	if n := len(doc.GetName()); n > LimitDocumentNameBytes {
		return status.Errorf(codes.InvalidArgument, "strict: document name of %d bytes, over Firestore's limit of %d", n, LimitDocumentNameBytes)
	}
	if n := DocumentSize(doc); n > LimitDocumentBytes {
		return status.Errorf(codes.InvalidArgument, "strict: document %s of %d bytes exceeds Firestore's maximum document size (%d bytes)", doc.GetName(), n, LimitDocumentBytes)
	}
	for k, v := range doc.GetFields() {
		s, d := valueSize(v)
		if s > LimitFieldValueBytes {
			return status.Errorf(codes.InvalidArgument, "strict: field %s of %d bytes, over Firestore's limit of %d for a field value", k, s, LimitFieldValueBytes)
		}
		if d+1 > LimitFieldDepth {
			return status.Errorf(codes.InvalidArgument, "strict: field %s nests %d levels, over Firestore's limit of %d", k, d+1, LimitFieldDepth)
		}
	}
	coll := collectionOf(doc.GetName())
	name := nameSize(doc.GetName())
	entries := 0
	var tooBig error
	var count func(path string, v *pb.Value)
	count = func(path string, v *pb.Value) {
		if r.exempt(coll, path) || tooBig != nil {
			return
		}
		switch x := v.GetValueType().(type) {
		case *pb.Value_MapValue:
			entries += 2
			for k, sub := range x.MapValue.GetFields() {
				count(path+"."+k, sub)
			}
			return
		case *pb.Value_ArrayValue:
			entries += 2 + len(x.ArrayValue.GetValues())
			return
		}
		s, _ := valueSize(v)
		if s > LimitIndexedStringBytes+1 {
			s = LimitIndexedStringBytes + 1
		}
		if e := name + s + len(coll) + 1 + 32; e > LimitIndexEntryBytes {
			tooBig = status.Errorf(codes.InvalidArgument, "strict: the single-field index entry of %s for %s has %d bytes, over Firestore's limit of %d", path, doc.GetName(), e, LimitIndexEntryBytes)
		}
		entries += 2
	}
	for k, v := range doc.GetFields() {
		count(k, v)
	}
	if tooBig != nil {
		return tooBig
	}
	for _, ix := range r.Indexes {
		if ix.Collection != coll {
			continue
		}
		size, all := name+32, true
		for _, f := range ix.Fields {
			v := valueAt(doc.GetFields(), f.Path)
			if v == nil {
				all = false
				break
			}
			s, _ := valueSize(v)
			size += min(s, LimitIndexedStringBytes+1)
		}
		if !all {
			continue
		}
		entries++
		if size > LimitIndexEntryBytes {
			return status.Errorf(codes.InvalidArgument, "strict: an entry of index %s for %s has %d bytes, over Firestore's limit of %d", IndexName(ix), doc.GetName(), size, LimitIndexEntryBytes)
		}
	}
	if entries > LimitIndexEntriesPerDocument {
		return status.Errorf(codes.InvalidArgument, "strict: document %s has %d index entries, over Firestore's limit of %d", doc.GetName(), entries, LimitIndexEntriesPerDocument)
	}
	return nil
}

// CheckCommit refuses a commit that production refuses: over the request
// size, or with a write CheckWrite refuses.
func (r Rules) CheckCommit(req *pb.CommitRequest) error {
	if n := proto.Size(req); n > LimitRequestBytes {
		return status.Errorf(codes.InvalidArgument, "strict: a commit of %d bytes, over Firestore's API request limit of %d", n, LimitRequestBytes)
	}
	for _, w := range req.GetWrites() {
		if err := r.CheckWrite(w); err != nil {
			return err
		}
	}
	return nil
}

// strictLog appends a refused query to the file StrictLogEnv names.
var strictLog sync.Mutex

func logStrict(err error) {
	path := os.Getenv(StrictLogEnv)
	if path == "" {
		return
	}
	strictLog.Lock()
	defer strictLog.Unlock()
	f, ferr := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if ferr != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%v\n", err)
}

// check refuses req (a Commit, RunQuery or RunAggregationQuery request)
// when production would.
func (r Rules) check(req any) error {
	switch x := req.(type) {
	case *pb.CommitRequest:
		return r.CheckCommit(x)
	case *pb.RunQueryRequest:
		if q := x.GetStructuredQuery(); q != nil {
			_, err := r.Serving(q)
			return err
		}
	case *pb.RunAggregationQueryRequest:
		if q := x.GetStructuredAggregationQuery().GetStructuredQuery(); q != nil {
			_, err := r.Serving(q)
			return err
		}
	}
	return nil
}

// checked logs a refused query for the tests' harness.
func (r Rules) checked(req any) error {
	err := r.check(req)
	if status.Code(err) == codes.FailedPrecondition {
		logStrict(err)
	}
	return err
}

// unary is strict mode's interceptor of unary RPCs (Commit).
func (r Rules) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if err := r.checked(req); err != nil {
		return err
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// stream is strict mode's interceptor of streaming RPCs (RunQuery,
// RunAggregationQuery): each request is checked before it is sent.
func (r Rules) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	return &strictStream{ClientStream: cs, rules: r, cancel: cancel}, nil
}

// strictStream checks each request it sends; a refused one ends the
// stream unsent.
type strictStream struct {
	grpc.ClientStream
	rules  Rules
	cancel context.CancelFunc
}

func (s *strictStream) SendMsg(m any) error {
	if err := s.rules.checked(m); err != nil {
		s.cancel()
		return err
	}
	return s.ClientStream.SendMsg(m)
}

func (s *strictStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.cancel()
	}
	return err
}
