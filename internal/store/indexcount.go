package store

import (
	"slices"
	"strings"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
)

// Index entries are what Firestore writes besides the document itself: two
// single-field entries (ascending and descending) per indexed leaf value,
// one array-contains entry per element of an array, and one entry per
// composite index the document has every field of. Firestore bills
// documents, not entries, but entries cost storage and write latency, and
// sequential values in one range hot-spot. The emulator neither applies
// FieldExemptions nor reports entries, so RPCCounter models them from the
// writes it sees, with Servo's own index configuration (FieldExemptions,
// TTLFields, Indexes) as production has it.

// IndexEntries returns the index entries w writes in production:
//   - an update with a mask (a heartbeat, a failed delivery) counts the
//     entries of the masked fields, each a replacement of the old entry,
//     plus one per composite index that names a masked field it sets;
//   - a write without a mask (a new document, or a whole-document
//     rewrite) counts every entry of the document: an upper bound for a
//     rewrite, where Firestore touches only the entries whose values
//     changed;
//   - a field transform (an increment) counts its field's entries;
//   - a delete counts nothing (its entries are removed, not written).
func IndexEntries(w *pb.Write) int {
	doc := w.GetUpdate()
	if doc == nil {
		return 0
	}
	coll := collectionOf(doc.GetName())
	n := 0
	if mask := w.GetUpdateMask(); mask != nil {
		for _, p := range mask.GetFieldPaths() {
			n += fieldEntries(coll, p, valueAt(doc.GetFields(), p))
		}
		for _, ix := range Indexes {
			// A masked field without a value is deleted: its entries are
			// removed, not written.
			if ix.Collection == coll && slices.ContainsFunc(ix.Fields, func(f IndexField) bool {
				return slices.Contains(mask.GetFieldPaths(), f.Path) && valueAt(doc.GetFields(), f.Path) != nil
			}) {
				n++
			}
		}
	} else {
		for k, v := range doc.GetFields() {
			n += fieldEntries(coll, k, v)
		}
		for _, ix := range Indexes {
			if ix.Collection == coll && !slices.ContainsFunc(ix.Fields, func(f IndexField) bool { return valueAt(doc.GetFields(), f.Path) == nil }) {
				n++
			}
		}
	}
	for _, t := range w.GetUpdateTransforms() {
		if !exempt(coll, t.GetFieldPath()) {
			n += 2
		}
	}
	return n
}

// collectionOf is the collection id of a document name (…/documents/a/x/b/y → b).
func collectionOf(name string) string {
	parts := strings.Split(name, "/")
	if len(parts) < 2 {
		return ""
	}
	return parts[len(parts)-2]
}

// valueAt is the value at a dotted field path (nil when absent).
func valueAt(fields map[string]*pb.Value, path string) *pb.Value {
	head, rest, nested := strings.Cut(path, ".")
	v := fields[head]
	if !nested || v == nil {
		return v
	}
	return valueAt(v.GetMapValue().GetFields(), rest)
}

// exempt reports whether path (or a map field containing it) has no
// single-field indexes in coll.
func exempt(coll, path string) bool {
	for _, e := range FieldExemptions {
		if e.Collection == coll && (path == e.Path || strings.HasPrefix(path, e.Path+".")) {
			return true
		}
	}
	for _, t := range TTLFields {
		if t.Collection == coll && path == t.Path {
			return true
		}
	}
	return false
}

// fieldEntries counts the single-field entries of the value at path: 2 per
// leaf, map subfields recursively, one per array element. A nil value
// (a field the mask deletes) counts its 2 removed entries as 0 written.
func fieldEntries(coll, path string, v *pb.Value) int {
	if v == nil || exempt(coll, path) {
		return 0
	}
	switch x := v.GetValueType().(type) {
	case *pb.Value_MapValue:
		n := 0
		for k, sub := range x.MapValue.GetFields() {
			n += fieldEntries(coll, path+"."+k, sub)
		}
		return n
	case *pb.Value_ArrayValue:
		return len(x.ArrayValue.GetValues())
	}
	return 2
}
