// Package store keeps Servo's truth in Firestore (native mode).
//
// # Documents
//
//	tasks/{hhhh}_{taskId}           task.Task: identity, payload, state, attempt,
//	                                seq, timing, retry policy, deadline and the
//	                                sweeper's due times (leaseExpiresAt,
//	                                cancelDeadline, dispatchCheckAt), which are
//	                                cleared when the task ends; expireAt (TTL)
//	                                once it has ended (retention.go); history:
//	                                its recent transitions (task.Step, unindexed,
//	                                the most recent task.HistoryLimit within
//	                                task.HistoryBytes and the room the payload
//	                                leaves), appended by the commit of each
//	                                transition.
//	tasks/{hhhh}_{taskId}/attempts/{n}
//	                                task.Attempt: worker id, times, last
//	                                heartbeat, progress, checkpoint, outcome,
//	                                error, output, metrics, completion digest;
//	                                expireAt (TTL) once it has ended. Written
//	                                only when it holds something the task
//	                                document does not (see "Attempt records").
//	runs/{runId}.{tenantKey}        Run: runId, tenantId, lastSubmitAt and
//	                                expireAt (TTL).
//	outages/{id}                    from, to, expireAt: a span during which
//	                                Servo could not record callbacks.
//	outbox/{eventId}                one commit's transitions of one task, named
//	                                by the last one's event id: that
//	                                task.Transition, earlier (the ones before it,
//	                                unindexed; absent when there are none) plus
//	                                delivered (false), createdAt, nextTryAt,
//	                                tries and eventPublished (re-drive, per
//	                                document); one write in the commit however
//	                                many transitions it makes, deleted once all
//	                                its events are delivered (DeleteDelivered).
//	                                An older version wrote one document per
//	                                transition (read the same way); those it
//	                                marked delivered (delivered, deliveredAt,
//	                                expireAt) expire by TTL and are never
//	                                re-read for delivery.
//	idempotency/{sha256(tenant,key)} tenantId, key, taskId, createdAt, expireAt.
//	runs/{hhhh}_{runId}.{tenantKey} Run: runId, tenantId, lastSubmitAt and
//	                                the run id's dueShard (runs.go).
//
// Payload, output, checkpoint and other opaque JSON are stored as bytes.
// The stored fields and their names are those of the document types in
// docs.go (taskDoc, attemptDoc, ...), mapped to and from the domain types
// of packages task and api, which carry no storage tags.
//
// # Names
//
// No document name and no indexed value is sequential at the task rate.
// A task's document is named by [TaskDocID]: 4 hex digits of its id's
// SHA-256 before the id, so tasks created in sequence are written all
// over the key range, and a lookup by id is still one read. Schema 1 and
// earlier named it tasks/{taskId}; schema 2's migration step moves each
// old task with its attempts (migrate.go). A store reads one name only:
// the server refuses to start on a database of an older schema
// (CheckSchema, ErrSchemaTooOld, naming `servo migrate`). Outbox entries (evt_ + a hash) and
// idempotency records (a SHA-256) were never sequential. The task id is
// exempt from single-field indexing; listings order by it behind the due
// shard, one query per shard (or group of shards) merged on read (List),
// so that each index range takes 1/DueShards() of the new tasks; a task's
// events come from its document's history (TaskEvents), a task written
// before histories existed has its entries read by name, with no index on
// the outbox's taskId. Runs get the same treatment (schema 4): a run's document is
// named with a hash prefix (runDocID), holds its run id's due shard, and
// ListRuns reads a group of shards a query newest first by (dueShard,
// [tenantId,] runId desc) and merges; runId and tenantId are exempt on
// runs. A run of a single submit without a runId has no document: its
// task (ownRun) is listed through (dueShard, ownRun, [tenantId,] runId
// desc) on tasks, merged with the documents. A task's and an outbox entry's runId are exempt as well: a run's
// counts take the listing's indexes behind the due shard (CountByState,
// runCountQuery), its events come with its listed tasks' histories
// (RunEvents).
//
// The sweeper's due queries, the outbox re-drive and the backlog counts
// take a group of due shards each (dueShard IN [...], DueGroups,
// OutboxGroups): Firestore serves an "in" as one range per shard, merged
// in the query's order, up to 30 disjunctions a query (the shards times
// the duty's states). 384 shards (DefaultDueShards) keep the busiest due
// range (the leases') near 410 writes/s at twice the mean of 10 000
// tasks/s and 1 000 000 running tasks, under Firestore's 500 (docs/scale.md),
// and an idle sweep pass costs 120 due queries, the re-drive 13.
//
// A simpler idea considered: drop the ULID's time from the name entirely
// (a random id) — but ids must stay sortable for people and page tokens,
// and a hash prefix gives the same spread with the id still readable in
// the name.
//
// # Concurrency: no lock outlives an outage
//
// Every state change goes through [Store.Apply], an optimistic transaction:
// it reads the task (and, when the task says it exists, the record of the
// attempt the event names: live.go) outside any
// Firestore transaction, applies [task.Apply] (which appends the transitions
// to the task's history), and commits the task, the attempt records and the
// outbox entries for its transitions in one atomic
// Commit whose writes carry preconditions on the versions read (the task's
// and the attempt record's update_time; exists=false for a record that was
// absent). When another writer changed either in between, the commit fails
// FAILED_PRECONDITION (or ALREADY_EXISTS) and Apply reads and applies again.
//
// Why not a Firestore transaction: a read-write transaction locks what it
// reads. When the answer to a transaction's first read is lost (a frozen
// Firestore that serves it after the thaw, a network partition), Servo
// never learns the transaction's id, cannot roll it back, and the task
// stays locked until Firestore expires the transaction: a worker's retried
// `completed` got 503 for about a minute, and the lease could run out
// first (issue 33). An optimistic Apply takes no lock at all, so there is
// nothing to release; it costs the same round trips (less when it writes
// nothing).
//
// The quota steps that must read counter shards in a transaction (a
// limited submit, createAdmitted; an admit, admitOnce) begin it with an
// explicit BeginTransaction, so the id is known before any read takes a
// lock, and every transaction that does not commit is rolled back, in the
// background (no answer waits for it) and retried while Firestore is
// unavailable. A BeginTransaction whose answer is lost holds no lock.
//
// # Round trips
//
// An Apply costs 2 RPCs (BatchGetDocuments + Commit), 1 when the event is
// refused or changes nothing; a Cancel, which does not know the attempt up
// front, costs 3. A heartbeat that changes nothing but a lease with over
// half of it left costs 1 (the read: task.Apply writes nothing). Any other
// heartbeat reads only the task document,
// through a field mask that leaves out everything large, and writes only the
// fields it changed (an update mask): the running attempt's heartbeat state
// lives on the task (task.Task.Live) and is folded into the attempt record
// at the attempt's next transition that writes it, or kept on the task
// when the attempt ends it (live.go). A heartbeat
// that makes a transition reads the whole task and attempt again first: 3
// RPCs, on that rare path. Create costs 1 (a Commit with exists=false preconditions), or
// 3 for a repeated idempotency key; CreateMany puts as many tasks in one
// commit as Firestore's limits allow. The figures are measured by
// [RPCCounter] in store_test.go; a lost race retries with backoff and
// counts again.
//
// # The task cache
//
// With [WithTaskCache], a store keeps the task documents it last wrote
// whole, as written, with the update time the commit gave them
// (doccache.go; at most 16 MiB; documents over 32 KiB are not kept). An
// Apply or a heartbeat of a task found there skips the read: the commit's
// precondition is the update time a read of that version would have
// given, so it commits only when no other writer came in between; when one
// did, the commit fails, the entry is dropped and Apply reads and applies
// again (one refused commit more). An event that would commit nothing (a
// refused or repeated callback, a heartbeat with over half its lease
// left) has no precondition to check the cached version, so its answer
// always comes from a read. servo dev turns it on
// ([DefaultTaskCacheEntries]): one store writes a task's every version, so
// a lifecycle (submit, started, a heartbeat, completed) is 4 commits and no
// read (TestTaskCache). The deployed functions leave it off: a task's
// callbacks land on any of the callbacks' instances, one of which would
// seldom hold the last version and, after an earlier callback of the task,
// often an older one, whose refused commit costs more than the read it
// saves. A transaction's reads (the quota steps) never use it.
//
// # Attempt records
//
// An attempt's record is written only by a transition that changes
// something of it the task document does not hold: its outcome (with its
// error, output, metrics, completion digest and expiry) or a job
// execution. Everything else is on the task: the first attempt's number
// and creation time are the task's (Create writes no record), a retry's
// next attempt's creation and scheduled times are task.Task.Live (the
// retry writes the ended attempt's record only), and so are a running
// attempt's worker id, start, heartbeats, progress, message and checkpoint
// (a `started` writes the task document alone: mirrored). Every read of an
// attempt lays the task's live state over the record, or stands in for the
// current attempt's missing one (firstAttempt: fullOnce, Get, AttemptsOf),
// so that the attempt guard and GET see what a record would hold;
// Attempts reads records alone, complete for an ended task (the dead
// letters). One lifecycle (submit, started, heartbeats, completed) writes
// the record once, at completion, and a retry one record, not two.
// Records written by earlier versions (at submit, at every transition, at
// the retry) read the same; no migration step. During a rolling update an
// earlier version that handles a callback of an attempt with no record
// stamps its creation time with the callback's.
//
// # Outages
//
// A lease or cancel grace that would run out is judged again with Servo's
// recorded outages (outages.go), so that a worker is never made a zombie by
// time during which Servo could not record its heartbeats.
//
// # Indexes
//
// [Indexes] lists every composite index the queries need; terraform/
// declares exactly these (terraform/modules/firestore/layout.tf holds the
// listings').
//
// # Production's rules, here
//
// The emulator serves any query and takes writes production refuses.
// Strict mode (strict.go, [WithStrict]; on by default against the
// emulator, so in every test and in servo dev) checks each request before
// it leaves, in the client's interceptors: a query must be served by
// [Indexes] or by single-field indexes of fields not in
// [FieldExemptions] (FAILED_PRECONDITION otherwise, and the test binary
// fails: emulatortest reads [StrictLogEnv]), and documents, index entries,
// requests and disjunctions keep Firestore's documented limits
// (INVALID_ARGUMENT, as production answers).
//
// # The store as a contract
//
// The conformance suite (package storetest) is what any store
// implementation must pass: transitions and their preconditions, races
// of two clients, outbox order and delivery, due queries and their
// cursors, the schema and quotas. conformance_test.go runs it against
// this store in strict mode. The storage schema is this package's own
// (docs.go): package api and package task carry no storage tags.
package store
