// Package events delivers Servo's task transition events and dead letters
// to Pub/Sub from the transactional outbox (PRODUCT §7).
//
// Every transition is written to the outbox (outbox/{eventId}) in the
// Firestore transaction that makes it (package store). A [Publisher]
// delivers the entries:
//
//   - right after each commit, off the writer's path: the store's
//     post-commit hook (st.OnCommit(p.Hook())) only queues the transitions;
//     a sender goroutine publishes them in batches with ordering key = task
//     id, waits for Pub/Sub's acks, and marks each batch delivered in one
//     commit;
//   - later, from the outbox, for whatever that missed (a crash, a timeout,
//     a Pub/Sub outage): [Publisher.Redrive], called by the sweeper on every
//     pass, publishes the entries still undelivered after a grace period, in
//     seq order per task. An entry that fails is retried after a backoff
//     ([RedriveMinBackoff] doubling to [RedriveMaxBackoff]) while the pass
//     goes on with the others.
//
// Delivery is at least once: a duplicate carries the same eventId. Tasks
// that end FAILED also publish a [DeadLetter] with the error and the
// attempt history to the dead-letter topic, capped to [MaxDeadLetterBytes]
// (large fields truncated with a marker, the oldest attempts left out if
// needed).
//
// [Tail] prints the events as they arrive (`servo events tail`);
// [EnsureTopics], [EnsureSubscriptions] and [EnsureLocal] create what the
// local stack needs on the Pub/Sub emulator (PUBSUB_EMULATOR_HOST).
//
// See README.md for the message schema.
package events
