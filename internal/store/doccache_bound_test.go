package store

import (
	"fmt"
	"strings"
	"testing"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/protobuf/proto"
)

// TestDocCacheBounds: the task cache keeps at most its entries, evicts the
// oldest put first, accounts the bytes it holds through re-puts and drops,
// and keeps no document over taskCacheMaxDoc.
func TestDocCacheBounds(t *testing.T) {
	doc := func(name string, pad int) *pb.Document {
		return &pb.Document{Name: name, Fields: map[string]*pb.Value{
			"pad": {ValueType: &pb.Value_StringValue{StringValue: strings.Repeat("x", pad)}}}}
	}
	c := newDocCache(3)
	for i := range 5 {
		c.put(doc(fmt.Sprint("t", i), 10))
	}
	for i, want := range []bool{false, false, true, true, true} {
		if got := c.get(fmt.Sprint("t", i)) != nil; got != want {
			t.Errorf("t%d kept: %v, want %v", i, got, want)
		}
	}
	c.put(doc("t3", 100)) // re-put: replaces, no new entry
	c.drop("t4")
	c.put(doc("big", taskCacheMaxDoc))
	if c.get("big") != nil {
		t.Error("a document over taskCacheMaxDoc was kept")
	}
	want := 0
	for _, n := range []string{"t2", "t3"} {
		want += proto.Size(c.get(n))
	}
	if len(c.docs) != 2 || c.bytes != want {
		t.Errorf("%d entries, %d bytes accounted; want 2 entries, %d bytes", len(c.docs), c.bytes, want)
	}
	for i := range 10 * DefaultTaskCacheEntries {
		c.put(doc(fmt.Sprint("u", i%7), 10))
		c.drop(fmt.Sprint("u", (i+3)%7))
	}
	if len(c.order) > 2*c.max+16 {
		t.Errorf("the put order grew to %d names for %d entries", len(c.order), len(c.docs))
	}
	off := newDocCache(0)
	off.put(doc("t", 1))
	if off.get("t") != nil {
		t.Error("a cache of 0 entries kept a document")
	}
}
