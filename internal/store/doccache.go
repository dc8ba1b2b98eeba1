package store

import (
	"strings"
	"sync"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/protobuf/proto"
)

// The task cache: the task documents this process last wrote, as written
// (their fields, and the update time Firestore gave the write). A
// transition (fullOnce) or a heartbeat (heartbeatOnce) of a task found here
// skips its read: the commit's precondition on that update time is what
// it would have been after a read that found the same version, so the
// machine's result is committed only if no other writer (another process,
// the sweeper, another path of this one) wrote the task since; when one
// did, the commit fails, the entry is dropped and Apply tries again with a
// read. A callback handled by the process that wrote the task's last
// version costs one RPC instead of two; a stale entry costs a refused
// commit more. It is on in servo dev, whose one process writes every
// version of a task, and off by default: deployed callbacks land on any of
// many instances, which would seldom hold the last version and often an
// older one. A read inside a transaction (an admit with quotas) never uses
// it.

// Defaults of the task cache.
const (
	// DefaultTaskCacheEntries bounds the task documents one store keeps.
	DefaultTaskCacheEntries = 4096
	// taskCacheMaxDoc is the largest document kept (a payload or a
	// checkpoint makes most of it); larger ones are read.
	taskCacheMaxDoc = 32 << 10
	// taskCacheMaxBytes bounds the encoded size of the documents one store
	// keeps: 16 MiB, whatever the entries (a function has 256 MiB).
	taskCacheMaxBytes = 16 << 20
)

// WithTaskCache sets how many task documents the store keeps to skip a
// transition's read (default 0: none). servo dev keeps
// DefaultTaskCacheEntries; the deployed functions keep none (doc.go, "The
// task cache").
func WithTaskCache(entries int) Option { return func(c *config) { c.taskCache = &entries } }

// docCache is the task cache: documents by name, the oldest put evicted
// first once it holds max.
type docCache struct {
	mu    sync.Mutex
	max   int
	docs  map[string]cacheEntry
	bytes int      // the encoded size of docs
	order []string // names in put order; may name dropped or re-put ones
}

// cacheEntry is a kept document and its encoded size.
type cacheEntry struct {
	doc  *pb.Document
	size int
}

func newDocCache(max int) *docCache {
	return &docCache{max: max, docs: map[string]cacheEntry{}}
}

// get returns the document as this process last wrote it, or nil.
func (c *docCache) get(name string) *pb.Document {
	if c == nil || c.max <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.docs[name].doc
}

// drop forgets name.
func (c *docCache) drop(name string) {
	if c == nil || c.max <= 0 {
		return
	}
	c.mu.Lock()
	c.remove(name)
	c.mu.Unlock()
}

// remove forgets name; c.mu is held.
func (c *docCache) remove(name string) {
	c.bytes -= c.docs[name].size
	delete(c.docs, name)
}

// put keeps d (not to be modified afterwards), or forgets its name when d
// is too large to keep.
func (c *docCache) put(d *pb.Document) {
	if c == nil || c.max <= 0 {
		return
	}
	size := proto.Size(d)
	if size > taskCacheMaxDoc {
		c.drop(d.GetName())
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.docs[d.GetName()]; !ok {
		c.order = append(c.order, d.GetName())
	}
	c.remove(d.GetName())
	c.docs[d.GetName()] = cacheEntry{doc: d, size: size}
	c.bytes += size
	for (len(c.docs) > c.max || c.bytes > taskCacheMaxBytes) && len(c.order) > 0 {
		c.remove(c.order[0])
		c.order = c.order[1:]
	}
	if len(c.order) > 2*c.max+16 { // dropped names pile up: keep the live ones, in order
		kept := c.order[:0:0]
		seen := map[string]bool{}
		for _, n := range c.order {
			if _, ok := c.docs[n]; ok && !seen[n] {
				seen[n] = true
				kept = append(kept, n)
			}
		}
		c.order = kept
	}
}

// keepWritten puts in the cache the task documents a commit set whole
// (no mask, no transform), with the update times its results give them.
func (s *Store) keepWritten(writes []*pb.Write, res *pb.CommitResponse) {
	if s.taskCache == nil || s.taskCache.max <= 0 {
		return
	}
	results := res.GetWriteResults()
	for i, w := range writes {
		d := w.GetUpdate()
		if d == nil || w.GetUpdateMask() != nil || len(w.GetUpdateTransforms()) > 0 || i >= len(results) || !s.isTaskName(d.GetName()) {
			continue
		}
		s.taskCache.put(&pb.Document{Name: d.GetName(), Fields: d.GetFields(), UpdateTime: results[i].GetUpdateTime()})
	}
}

// keepUpdated puts in the cache the document before became once w (an
// update of some fields, top-level or one map level down, by mask) was
// committed as res says; anything else drops it.
func (s *Store) keepUpdated(before *pb.Document, w *pb.Write, res *pb.CommitResponse) {
	name := w.GetUpdate().GetName()
	results := res.GetWriteResults()
	if before == nil || len(results) != 1 || len(w.GetUpdateTransforms()) > 0 || w.GetUpdateMask() == nil {
		s.taskCache.drop(name)
		return
	}
	fields := make(map[string]*pb.Value, len(before.GetFields()))
	for k, v := range before.GetFields() {
		fields[k] = v
	}
	set := w.GetUpdate().GetFields()
	for _, p := range w.GetUpdateMask().GetFieldPaths() {
		top, sub, nested := strings.Cut(p, ".")
		if strings.ContainsAny(p, "`\\") || strings.Contains(sub, ".") {
			s.taskCache.drop(name)
			return
		}
		if !nested {
			if v, ok := set[top]; ok {
				fields[top] = v
			} else {
				delete(fields, top)
			}
			continue
		}
		m := map[string]*pb.Value{}
		for k, v := range fields[top].GetMapValue().GetFields() {
			m[k] = v
		}
		if v, ok := set[top].GetMapValue().GetFields()[sub]; ok {
			m[sub] = v
		} else {
			delete(m, sub)
		}
		fields[top] = &pb.Value{ValueType: &pb.Value_MapValue{MapValue: &pb.MapValue{Fields: m}}}
	}
	s.taskCache.put(&pb.Document{Name: name, Fields: fields, UpdateTime: results[0].GetUpdateTime()})
}

// isTaskName reports whether name is a task document's (not a document
// under one).
func (s *Store) isTaskName(name string) bool {
	rest, ok := strings.CutPrefix(name, s.docs+"/"+TasksCollection+"/")
	return ok && rest != "" && !strings.Contains(rest, "/")
}
