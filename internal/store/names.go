package store

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
)

// TaskDocID is the id of task id's document: the id behind a prefix
// derived from it (4 hex digits of its SHA-256), so that tasks created in
// sequence are written all over the collection's key range instead of at
// its end (doc.go, "Names"), while a lookup by id still reads one
// document.
func TaskDocID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:2]) + "_" + id
}

func (s *Store) taskName(id string) string {
	return s.docs + "/" + TasksCollection + "/" + TaskDocID(id)
}

// legacyTaskName is the name schema 1 and earlier gave a task:
// tasks/{taskId}. Migrate moves such documents to taskName.
func (s *Store) legacyTaskName(id string) string { return s.docs + "/" + TasksCollection + "/" + id }

// taskNames are the names a lookup of a task reads: its own alone. A
// database of an older schema (legacy names) is refused at start
// (CheckSchema: `servo migrate` first), so no lookup reads two names.
func (s *Store) taskNames(id string) []string { return []string{s.taskName(id)} }

// foundTask picks the task's document among docs read with taskNames: its
// name and the document, or taskName and nil when there is none.
func (s *Store) foundTask(id string, docs map[string]*pb.Document) (string, *pb.Document) {
	for _, n := range s.taskNames(id) {
		if d := docs[n]; d != nil {
			return n, d
		}
	}
	return s.taskName(id), nil
}

// attemptName is the name of attempt n of the task whose document is base.
func attemptName(base string, n int) string { return base + "/attempts/" + strconv.Itoa(n) }
func (s *Store) outboxName(eventID string) string {
	return s.docs + "/" + OutboxCollection + "/" + eventID
}
func (s *Store) idemName(tenant, key string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + key))
	return s.docs + "/" + IdempotencyCollection + "/" + hex.EncodeToString(sum[:])
}
