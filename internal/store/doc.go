// Package store keeps Servo's truth in Firestore (native mode).
//
// # Documents
//
//	tasks/{taskId}                  task.Task: identity, payload, state, attempt,
//	                                seq, timing, retry policy, deadline and the
//	                                sweeper's due times (leaseExpiresAt,
//	                                cancelDeadline, dispatchCheckAt), which are
//	                                cleared when the task ends.
//	tasks/{taskId}/attempts/{n}     task.Attempt: worker id, times, last
//	                                heartbeat, progress, checkpoint, outcome,
//	                                error, output, metrics, completion digest.
//	outbox/{eventId}                task.Transition plus delivered, createdAt,
//	                                deliveredAt and expireAt (TTL once delivered),
//	                                nextTryAt, tries and eventPublished (re-drive).
//	idempotency/{sha256(tenant,key)} tenantId, key, taskId, createdAt, expireAt.
//
// Payload, output, checkpoint and other opaque JSON are stored as bytes.
//
// # Transactions and round trips
//
// Every state change goes through [Store.Apply]: one Firestore transaction
// that re-reads the task (and the attempt record the event names), applies
// [task.Apply], and commits the task, the attempt records and the outbox
// entries for its transitions together. Servo uses Firestore's low-level API
// so that the transaction begins on its first read (BatchGetDocuments with
// new_transaction) instead of with a separate BeginTransaction call: an
// Apply costs 2 RPCs (BatchGetDocuments + Commit, or + Rollback when the
// event is refused or changes nothing); a Cancel, which does not know the
// attempt up front, costs 3. A heartbeat reads only the task document,
// through a field mask that leaves out everything large, and writes only the
// fields it changed (an update mask): the running attempt's heartbeat state
// lives on the task (task.Task.Live) and is folded into the attempt record
// at the attempt's next transition (live.go). A heartbeat that makes a
// transition reads the whole task and attempt in the same transaction
// first: 3 RPCs, on that rare path. Create costs 1 (a Commit with
// exists=false preconditions), or 3 for a repeated idempotency key;
// CreateMany puts as many tasks in one commit as Firestore's limits allow. The figures are
// measured by [RPCCounter] in store_test.go; ABORTED transactions retry with
// backoff and count again.
//
// # Indexes
//
// [Indexes] lists every composite index the queries need; terraform/
// declares exactly these.
package store
