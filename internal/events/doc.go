// Package events delivers Servo's task transition events and dead letters
// to Pub/Sub from the transactional outbox (docs/contract.md §8.1). Every
// task transition produces exactly one event; a task that ends FAILED also
// produces one dead letter. Neither is lost when Pub/Sub or a function
// fails after Firestore commits.
//
// # The outbox
//
// A [Publisher] delivers the outbox in two ways:
//
//  1. store.Create and store.Apply write the commit's transitions in the
//     same Firestore transaction as the state change: one document per task
//     (outbox/{eventId}, named by the last transition's event id, the
//     earlier ones in its unindexed earlier field; delivered: false,
//     createdAt). A submit's two transitions are one write, and one delete
//     once delivered (store.OutboxDocIDs names a commit's documents).
//  2. After the commit the store calls the hook (st.OnCommit(p.Hook())),
//     which only queues the committed transitions and returns: a callback
//     answers as soon as its transaction commits, and nothing about events
//     is on its path (no Firestore RPC, no wait for Pub/Sub, even during a
//     Pub/Sub outage). One sender goroutine per Publisher takes about 500
//     queued transitions at a time (never splitting a document's),
//     publishes them (ordering key = task id, in commit order per task),
//     waits for Pub/Sub's acks (at most [Config.PublishTimeout]), plus
//     one read of the attempt history per dead letter. It deletes each
//     document whose events were all acked (store.DeleteDelivered: one
//     delete per document, no mark and no TTL delete; the transitions stay
//     in the task document's history), coalescing the deletes: it holds
//     the delivered documents for up to [Config.DeleteDelay]
//     ([DefaultDeleteDelay], 200 ms, far below the re-drive's grace) and
//     deletes them together, 500 to a commit (sooner when 500 are held,
//     and at once on [Publisher.Flush] or [Publisher.Close]), so a steady
//     load costs one delete commit per delay rather than one per batch. A
//     crash while they are held only means the re-drive publishes their
//     events again (duplicates, never a loss). [Publisher.Publish] and
//     the re-drive delete at once.
//     Errors are logged (with taskId, attempt, tenantId, eventId) and the
//     entry stays undelivered. The queue holds [Config.MaxQueue] (10 000)
//     transitions; past that the hook leaves them to the re-drive
//     ([Publisher.Dropped] counts them). [Publisher.Close] delivers what is
//     queued and deletes what is delivered; [Publisher.Flush] waits for
//     both. On Cloud Run functions with request-based billing the sender
//     gets CPU while the instance serves requests; what an idle or
//     recycled instance did not send reaches Pub/Sub through the
//     re-drive.
//  3. [Publisher.Redrive] (the sweeper, every pass) reads, a group of up
//     to 30 due shards a query (dueShard IN [...], store.OutboxGroups: 13
//     queries for 384 shards), the entries still undelivered whose nextTryAt (the creation
//     time until a delivery failed) is at least [Config.Grace] (10 s) old
//     (index outbox(dueShard, delivered, nextTryAt)), an entry per
//     transition of each document read, publishes them sorted by task then
//     seq, and deletes each document whose events all went out. A crash between commit and
//     publish, a publish timeout, a Pub/Sub outage or a failed delete all
//     end here. An entry an older version marked delivered: true is never
//     read again; its TTL (expireAt) removes it.
//  4. Failures are isolated per document: a document with an event or a
//     dead letter not acked is kept whole (its acked events are published
//     again on the next try: duplicates, never a loss) and gets tries + 1
//     and nextTryAt = now + a backoff
//     ([RedriveMinBackoff], 30 s, doubling per try up to
//     [RedriveMaxBackoff], 1 h; the grace period comes on top), in one
//     commit per batch, and the pass goes on with the next batch. The reads
//     skip it until then, so a few entries that keep failing never cut a
//     pass short nor hide the others. When the document's own (last)
//     event was acked and only its dead letter failed, eventPublished is
//     set and the retries publish only the dead letter. A pass stops early when a whole batch fails (an
//     outage: those entries are backed off, the next pass goes on), when a
//     delete fails, or after [Config.RedriveMaxBatches] batches of
//     [Config.RedriveBatch] entries in one group of shards.
//
// A document is deleted only when every event in it and (for a task that
// failed) its dead letter were acked. Documents an older version wrote
// hold one transition each and are read, published and deleted the same
// way.
//
// # Delivery
//
// Delivery is at least once (docs/contract.md §8.5): an event may arrive
// more than once (the hook published but the delete failed or a crash
// came before it, the hook and Redrive raced, Pub/Sub redelivered). Every
// copy has the same eventId (deterministic from the task id and seq) and
// the same body; consumers deduplicate on eventId (attribute or body).
//
// Messages carry ordering key = task id and the publisher enables message
// ordering; subscribers that want a task's events in order create their
// subscription with message ordering enabled (as [Tail] does). When a
// publish fails Pub/Sub pauses the key; the publisher resumes it once the
// batch's results are in, so later events are not blocked. Within one
// publish and one Redrive batch a task's events go out in seq order. An
// event that is re-driven can still arrive after a later event the hook
// delivered, and two instances may publish one task's events
// concurrently, so seq is authoritative: it numbers a task's transitions
// 1, 2, 3, … without gaps. Sort by it and detect gaps with it.
//
// # Messages
//
// The events topic ([DefaultEventsTopic], servo-task-events) carries one
// JSON [api.Event] per transition ([EventOf], [EventMessage]); the schema
// is docs/contract.md §8.2, the reasons §8.3. For example:
//
//	{"eventId":"evt_3f…","taskId":"task_01J…","runId":"run_01J…","tenantId":"acme","workspaceId":"ws",
//	 "worker":"etl","attempt":1,"from":"RUNNING","to":"QUEUED","reason":"RETRY_SCHEDULED",
//	 "occurredAt":"2025-11-21T09:30:00.123Z","outcome":"FAILED",
//	 "error":{"category":"USER_CODE","message":"division by zero"},"nextAttempt":2,"seq":4}
//
// The dead-letter topic ([DefaultDeadLetterTopic], servo-dead-letter; no
// ordering key) carries one JSON [api.DeadLetter] per transition to FAILED
// ([DeadLetterOf], [DeadLetterMessage]; docs/contract.md §8.4): retries
// exhausted, a non-retryable error, the heartbeat, deadline, dispatch and
// cancel timeouts. Its error is the last
// attempt's; for failures no worker reported (timeouts) one is
// synthesized, with category TIMEOUT.
//
// A dead letter always fits in [MaxDeadLetterBytes] (1 MiB, a tenth of
// Pub/Sub's 10 MB limit, whatever maxAttempts and the workers' data were;
// [Capped]). When the full body would exceed it, each large
// field is cut and truncated is set: the output, checkpoint and
// partialProgress of every attempt become
// {"truncated":true,"bytes":N,"head":"…"}, and the messages,
// cancelledDuringPhase and the errors' message and stackTrace keep
// [TruncatedFieldBytes] (2 KiB) followed by [TruncatedMarker] and the
// original size ("…[truncated; 16384 bytes]"). If that is still too big,
// the oldest attempts are left out (halving the kept ones) and counted in
// omittedAttempts. The full records stay in Firestore
// (tasks/{taskId}/attempts).
//
// Both topics' messages have the attributes type ([TypeTransition] or
// [TypeDeadLetter]), eventId, tenantId, workspaceId, taskId, runId and
// state (the state entered); dead letters also reason (the Attr*
// constants). They allow subscription filters, e.g.
// attributes.tenantId = "acme" or attributes.state = "FAILED".
//
// # Local stack and servo events tail
//
// [EnsureLocal] creates both topics and the subscription [DeadLetterInbox]
// (servo-dead-letter-inbox: dead letters are kept until read) on the
// Pub/Sub emulator (PUBSUB_EMULATOR_HOST); [EnsureTopics] and
// [EnsureSubscriptions] create anything else, leaving what exists. They
// use the v2 admin clients with full resource names.
//
// [Tail] (`servo events tail`) creates a temporary ordered subscription
// servo-tail-… on the events topic (filtered on the taskId or runId
// attribute, expiring after a day if the process dies), prints each
// matching event as a JSON line or a table row until its context ends,
// and deletes the subscription. With [TailOptions].Replay (what
// `servo events tail --all` and `--since D` use: the API's /events
// endpoints) it first prints the recorded events (ReplaySince skips older
// ones), read after the subscription exists, so none is missed at the
// seam; every event is printed once by eventId, a replayed one arriving
// live or a redelivery included:
//
//	TIME                      TASK                             ATT   SEQ  TRANSITION                 REASON                DETAIL
//	2025-11-21T09:30:00.123Z  task_01JD…                         1     4  RUNNING → QUEUED           RETRY_SCHEDULED       outcome=FAILED nextAttempt=2 error="USER_CODE: division by zero"
package events
