// Package zombie is Servo's sweeper: it finds the tasks whose timers have
// run out and applies the state machine's timer events to them
// (docs/contract.md §5.6). It never decides a transition itself.
//
// # Duties
//
// Each pass runs the [Duties] in order. Each is one indexed Firestore query
// per group of due shards ([store.Store.DueGroups], dueShard IN [...], at
// most 30 disjunctions with the duty's states; [store.Store.DueTasks]; the
// indexes are store.Indexes)
// that returns only the tasks that are due, read in pages of
// [Config.PageSize] (cursor on due time, then id), followed by one
// transaction per task ([store.Store.Apply]), [Config.Concurrency] at a
// time, that re-reads the task and lets the state machine re-check the
// condition (a heartbeat may have arrived since the query). A no-op result
// is normal and counted as such ([DutyStats].NoOp).
//
//	duty      query (store.Due*)           event (task.Event*)  the machine's decision
//	deadline  DueDeadline: any active      DeadlineExceeded     attempt TIMED_OUT, task FAILED
//	          state, deadline ≤ now                             DEADLINE_EXCEEDED, no retry
//	cancel    DueCancel: CANCELLING,       CancelTimeout        attempt CANCEL_TIMEOUT, task FAILED
//	          cancelDeadline ≤ now                              CANCEL_TIMEOUT
//	lease     DueLease: RUNNING or         LeaseExpired         attempt ZOMBIE; a retry (QUEUED, attempt + 1)
//	          CANCELLING, leaseExpiresAt                        when attempts and the deadline allow, else
//	          ≤ now                                             FAILED HEARTBEAT_TIMEOUT; a CANCELLING task is
//	                                                            never retried: FAILED CANCEL_TIMEOUT
//	dispatch  DueDispatch: PENDING or      Redrive              the same attempt enqueued again with a fresh
//	          QUEUED, dispatchCheckAt                           token, under the re-drive's own Cloud Tasks
//	          ≤ now (the start timeout)                         name (task.RedriveName); after MaxRedrives
//	                                                            re-drives, attempt TIMED_OUT, task FAILED
//	                                                            DISPATCH_TIMEOUT; but while Cloud Tasks
//	                                                            still holds the dispatch (Config.Holder: a
//	                                                            backlog), only dispatchCheckAt moves a start
//	                                                            timeout later
//
// The lease and cancel timers count only time outside Servo's recorded
// outages (store/outages.go): each pass starts with a pulse (Config.Store
// as a Pulser), and a gap between passes longer than their cadence is
// recorded as one.
//
// Deadline comes first, so a task past both its deadline and its lease
// ends DEADLINE_EXCEEDED instead of being retried; cancel comes before
// lease, so a CANCELLING task whose grace ran out ends with outcome
// CANCEL_TIMEOUT. A re-drive needs a name of its own because Cloud Tasks
// refuses a name whose task ran or was deleted for about an hour, so a
// delivery the worker swallowed could not be delivered again under the old
// one.
//
// A due query returns only the fields the sweeper uses (a projection: task
// id, tenant, state, attempt, worker, re-drives and the due time), never payloads, so a page
// of 200 due tasks is a few tens of KiB whatever the tasks carry; the
// follow-up uses the task that the transaction read.
//
// After a committed result that asks for it, the sweeper calls
// [Enqueuer.FollowUp] (*enqueue.Enqueuer), which enqueues retries and
// re-drives and, when the cancel or lease duty ended a job worker's
// attempt (task.Result.CancelExecution), first cancels that Cloud Run Job
// execution, best effort and logged (package internal/jobs). A retry whose
// enqueue failed after the commit (here or in the callbacks) stays QUEUED
// with a dispatchCheckAt, so the dispatch duty re-drives it.
//
// With quotas (store.WithQuotas), one more duty runs after these, the
// quota duty (package internal/quota's Duty): every
// [Config.QuotaRepairEvery] (1 min) it recounts the counter shards (each
// with two count aggregations; a drifted one is rewritten
// conditionally), then it admits the tasks waiting for a run slot
// (store.DueAdmit: QUEUED tasks, event ADMIT; the oldest waiting tasks
// round robin over tenants, each tenant's in submit order, then enqueued;
// its figures are the "admit" duty's); see docs/tenants.md. Then, at most
// every [Config.CleanEvery] (10 min), [Config.Cleaner] deletes the Pub/Sub
// subscriptions of event streams (GET /v1/events) whose instance died
// mid-stream (events.DeleteLeftoverStreams: one list call, bounded to
// 10 s). Then, once per pass,
// [Config.Redriver] re-delivers the undelivered outbox events (package
// internal/events), and [Config.Recorder] writes the pass's figures to the
// document meta/sweeper (store.RecordSweep: one write per pass, best
// effort): when it ended, how long it took and, per duty, the tasks due,
// applied and failed and the longest lag from a due time to its
// transaction. GET /v1/health shows them.
//
// Because every transition is its own transaction, any number of sweepers
// may run at once: overlapping invocations never retry twice or write an
// event twice (tested with two sweepers on separate connections). One
// [Sweeper] runs one pass at a time and skips a pass asked for meanwhile.
//
// # Cadence
//
// Cloud Scheduler fires at most once a minute, which is too coarse to
// detect a zombie soon after its lease runs out. So one tick starts one
// invocation ([Sweeper.HandleEvent], the ServoSweeper CloudEvent function)
// that sweeps at once and then every [Config.Every] (SERVO_SWEEP_EVERY,
// 15 s) until [Config.Window] (SERVO_SWEEP_WINDOW, 55 s in the function, 0
// in Config: one pass) has elapsed, just before the next tick: passes at 0,
// 15, 30 and 45 s. The window is measured from the tick's time (the
// CloudEvent time, the Pub/Sub publish time), so a tick delivered late, or
// redelivered, sweeps once and never overlaps the next tick's window.
//
// A window ends early (Stats.EndedEarly) after a pass that found nothing
// due before the window's end: within a window the due queries reach to
// its end (tasks due now are swept, the later ones, counted as
// DutyStats.Upcoming, keep the window open), and, with a Redriver, one
// query per due shard (limit 1) looks for outbox entries due before it. A
// pass that swept anything, or failed, never ends the window. So at zero
// traffic an invocation is one pass; a timer running out within a window
// is swept within Every of it, as before; a timer created after an early
// end and running out before the next tick waits for that tick.
// Config.KeepWindow (SERVO_SWEEP_EARLY_END=false) sweeps every window to
// its end. An early end moves the pulse's promise of the next pass to the
// window's end plus Every (Promiser, store.PromisePulse), so the gap until
// the next tick is not taken for an outage.
//
//	Cloud Scheduler (* * * * *) ──▶ Pub/Sub topic ──▶ Eventarc ──▶ ServoSweeper (CloudEvent)
//	                                                                 └─ Run: sweep, sleep Every, sweep … until Window
//
// Deployment: the function's timeout must exceed the window (e.g. 120 s);
// where the push subscription is managed directly, its ack deadline must
// too (e.g. 90 s), or Pub/Sub redelivers the tick while it is being
// handled. Do not enable retry-on-failure: a tick is not work to retry.
// HandleEvent returns an error only when its context ended before the
// window did; failed queries and transactions are logged and counted
// ([Stats]), and the next tick sweeps again. `servo dev` mirrors all this
// with a local ticker (package internal/devstack).
//
// # The Pub/Sub push shape
//
// The function is registered with functions.CloudEvent("ServoSweeper", …).
// functions-framework-go (v1.9.2, funcframework/events.go,
// convertBackgroundToCloudEvent) turns a request without a Ce-Id header and
// without a cloudevents content type into a CloudEvent: it parses the raw
// push body {"message":{…},"subscription":"…"} as a legacy Pub/Sub push and
// produces type google.cloud.pubsub.topic.v1.messagePublished, id = the
// message id, time = the publish time, and source
// //pubsub.googleapis.com/<topic>, the topic taken from the request path
// (projects/P/topics/T anywhere in it; the subscription field is not used).
// Binary and structured CloudEvents pass through unchanged. push_test.go
// tests this against funcframework itself and the real Pub/Sub emulator.
// So the push endpoint is:
//
//   - with every function served by funcframework.Start on one port (no
//     FUNCTION_TARGET, as `servo dev` does): exactly /ServoSweeper (nothing
//     may follow it: /ServoSweeper/… is 404). It works, but the framework
//     prints a one-line WARNING per push that it found no topic in the path,
//     and the event's source is //pubsub.googleapis.com/ (the sweeper
//     ignores it);
//   - with the function served alone (FUNCTION_TARGET=ServoSweeper, as on
//     Cloud Functions): any path; /projects/PROJECT/topics/TOPIC puts the
//     topic into the source with no warning.
//
// # Cost
//
// A pass costs one query per duty and group of due shards (the default 384
// shards in 55 deadline, 13 cancel, 26 lease and 26 dispatch groups: 120
// RunQuery) and one BatchGetDocuments and one Commit per due task,
// whatever the number of tasks that are not due: 320 RPCs for 100 due
// tasks, with 1 000 or with 10 000 RUNNING tasks. A pass that ends its
// window early adds one outbox query per group of due shards and one write
// (the pulse's promise). BenchmarkSweeperSizing reports a pass's CPU and
// memory, for the function's size. It
// reads what the queries return (at least one document read per query)
// and two documents per transaction. TestSweepCostGrowsWithDueNotRunning
// asserts it on every test run; BenchmarkSweepCost gives the figures.
package zombie
