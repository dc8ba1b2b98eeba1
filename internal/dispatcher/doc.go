// Package dispatcher is Servo's control API (docs/contract.md §9): submit
// tasks (one or a batch), read, list and count them, read their events,
// cancel a task or a whole run, list runs, and report the sweeper's health
// and a tenant's usage.
//
// [NewHandler] returns one http.Handler that the ServoAPI Cloud Function
// (package functions; IAM-protected) and the local stack both serve:
//
//	POST /v1/tasks                    submit a task (§9.2)
//	POST /v1/tasks:batch              submit 1–500 tasks (§9.3)
//	GET  /v1/tasks/{id}               a task with its attempts (§9.4)
//	GET  /v1/tasks?tenantId=&runId=&state=&worker=&order=&pageSize=&pageToken=
//	                                  list tasks (§9.5)
//	GET  /v1/tasks:counts?tenantId=&runId=&worker=
//	                                  tasks per state (§9.5)
//	GET  /v1/tasks/{id}/events        a task's recorded transitions (§8.6)
//	GET  /v1/runs/{runId}/events      a run's recorded transitions (§8.6)
//	GET  /v1/events?tenantId=&taskId=&runId=
//	                                  the transitions published from now on that
//	                                  the caller views, as server-sent events
//	                                  ([Config.Events]; §12)
//	GET  /v1/tasks/{id}/trace         a task's recorded spans ([Config.Traces]; servo dev)
//	POST /v1/tasks/{id}/cancel        cancel a task (§7, §9.7)
//	POST /v1/runs/{runId}/cancel      cancel every unfinished task of a run (§9.7)
//	GET  /v1/runs?tenantId=&pageSize=&pageToken=
//	                                  runs, newest first (§9.8)
//	GET  /v1/health                   the sweeper's latest pass (§9.9)
//	GET  /v1/tenants/{tenant}/usage   a tenant's running and queued tasks and limits (§9.10)
//	GET  /v1/openapi.json             docs/openapi.yaml as JSON (package openapi)
//
// The sections are docs/contract.md's, which has every request and answer
// body, the field rules and defaults, the order of checks (§9.1) and the
// error codes (§13). The GET routes also answer HEAD; another method on a
// known path is 405 with Allow, any other path 404 not_found. Every route
// authenticates the caller ([Config.Verifiers]) and checks its role on the
// tenant ([Config.Access]; lists without a tenant are filtered to the
// caller's); limited tenants and workers are admitted against their
// quotas (docs/tenants.md). A request's store work is bounded by
// [Config.RequestTimeout] (50 s), past which it is answered 503.
//
// # Submit
//
// A submit validates everything first and answers 400 invalid_request
// naming the offending field; nothing is stored for a bad request. Unknown
// fields are refused, so a misspelt field never silently takes its default.
// A rerunOf costs one document read (the task it names must exist and have
// finished). The envelope the task would produce must leave room in a
// Cloud Task for what later attempts add: at most Cloud Tasks' 1 MiB less
// 136 KiB (two checkpoints, the one a retry resumes from and the running
// attempt's own, which the task document keeps, and the task's other
// fields), else 413 payload_too_large with field payload.
//
// A valid submit is one Firestore commit ([store.Store.CreateMany]) and one
// enqueue ([enqueue.Enqueuer.EnqueueSubmitted]), and writes one INFO line,
// "task submitted", which names the Cloud Task created (cloudTask). The commit writes the task already
// QUEUED, its idempotency record, both of its events (→ PENDING,
// PENDING → QUEUED) to the outbox, and its run's document (runs/{runId},
// rewritten at most once a minute per process: store.RunDocumentEvery).
// The first attempt's record is not written until it holds something the
// task document does not (internal/store/live.go); GET shows the attempt
// all the same. The enqueue then hands the attempt to its
// transport: a Cloud Task on the worker's queue (docs/contract.md §2), or
// a message on a pull pool's topic (§10).
//
// When the enqueue fails, one more transaction records the task back as
// PENDING (event DISPATCH_FAILED) with its dispatch check due at once, so
// the sweeper's next pass re-drives it; that transaction has a budget of
// its own, since an enqueue that stalled until [Config.CloudTasksTimeout]
// has used up the request's. When the process dies between the commit and
// the enqueue, the task's dispatch check (the start timeout,
// [Config.DefaultStartTimeout]) re-drives it. Either way the submit
// answers 201 with state PENDING: the task is stored. A repeated submit of
// a task still PENDING (the same idempotency key) retries its enqueue,
// which is idempotent (the Cloud Task's name is deterministic).
//
// With quotas, a task of a limited tenant or worker is admitted by package
// internal/quota in a transaction of its own: refused past maxQueued (429
// quota_exceeded, nothing stored), or stored QUEUED waiting for a run slot
// (reason QUOTA_WAIT), with no Cloud Task until the sweeper admits it
// (docs/contract.md §12).
//
// A batch is validated whole first: one bad task refuses it, and nothing
// is stored. Its tasks are then stored in as few commits as Firestore's
// limits allow (500 writes and 9 MiB a commit: about 100 tasks with
// idempotency keys, 125 without; a commit refused because one of its
// tasks repeats an idempotency key is retried task by task) and enqueued
// [Config.BatchParallelism] (16) at a time. The tasks of a 207 that failed
// can be submitted again, safely with idempotency keys.
//
// Every later change of a task (an enqueue failure, a cancel) goes through
// [store.Store.Apply], that is through the one state machine of package
// internal/task.
//
// # Cancel
//
// A cancel is one transaction; a PENDING or QUEUED task it cancels has its
// Cloud Task deleted afterwards, best effort and bounded by
// [Config.CloudTasksTimeout] (a delivery that slips through gets 409 at
// `started`). A run cancel cancels the run's unfinished tasks
// [Config.BatchParallelism] at a time, and can be repeated safely.
//
// # Reads and what they cost
//
//   - a list reads the tasks of its page only (no attempt records); pages
//     are stable: pass pageToken back to continue after the last task
//     seen, and tasks created meanwhile come later;
//   - counts are one count aggregation per state (seven, in parallel, each
//     billed as one read per 1 000 index entries) and read no task;
//     `servo runs` makes one such call per run;
//   - runs cost one document read per run listed (runs/{runId}) and read no
//     task. They are ordered by run id, a ULID, so createdAt is its time;
//     with tenantId the composite index runs(tenantId, runId desc) serves
//     them. Runs whose tasks were all submitted before run documents
//     existed are not listed;
//   - health is one read of meta/sweeper, which every sweeper pass writes
//     (package zombie).
package dispatcher
