package store

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
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

// attemptName is the name of attempt n of the task whose document is base.
func attemptName(base string, n int) string { return base + "/attempts/" + strconv.Itoa(n) }
func (s *Store) outboxName(eventID string) string {
	return s.docs + "/" + OutboxCollection + "/" + eventID
}
func (s *Store) idemName(tenant, key string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + key))
	return s.docs + "/" + IdempotencyCollection + "/" + hex.EncodeToString(sum[:])
}
