// Package callbacks serves the worker callbacks of docs/contract.md §4:
//
//	POST /v1/tasks/{taskId}/started
//	POST /v1/tasks/{taskId}/heartbeat
//	POST /v1/tasks/{taskId}/completed
//	Authorization: Bearer <task token>
//	Content-Type: application/json
//
// [NewHandler] returns the one http.Handler; the ServoCallbacks Cloud
// Function (package functions; public, every request is authenticated by
// its token) and the local stack serve it unchanged. The handler also
// accepts the path behind any prefix ([PathPrefix]).
//
// # Order of checks
//
// A request is judged in the order of docs/contract.md §4.5, and the first
// check that fails answers:
//
//  1. path: anything but .../v1/tasks/{taskId}/{started|heartbeat|completed}
//     is 404 not_found;
//  2. method: not POST is 405 method_not_allowed (with Allow: POST);
//  3. content type: not application/json (parameters such as charset are
//     fine) is 415 unsupported_media_type;
//  4. size: a body over Config.MaxBodyBytes (1 MiB by default) is 413
//     payload_too_large;
//  5. token: a missing, malformed, forged (alg none, unknown kid, wrong key)
//     token is 401 invalid_token, an expired one 401 token_expired;
//  6. scope: a token for another task (path) or attempt (body) is 403
//     token_scope_mismatch;
//  7. body: malformed JSON or a bad field is 400 invalid_request with
//     "field";
//  8. then exactly one Firestore transaction ([store.Store.Apply]) re-reads
//     the task, and the record of the token's attempt when the task says
//     there is one (a report of an earlier attempt; 404 task_not_found
//     when there is no task), and applies the state machine's
//     event ([task.Apply]) with the server's time, the token's scope and
//     attempt, the worker id and the body.
//
// Steps 1–7 never touch Firestore, so nothing is written for a request they
// refuse; the token is checked before any read.
//
// # Answers
//
// Every answer is JSON ([api.CallbackResponse]) with "disposition" and
// "serverTime"; "acknowledged" is true on 200 only:
//
//	situation                                    status   error                     disposition
//	accepted started / heartbeat                 200      –                         CONTINUE
//	accepted completed, or an identical repeat   200      –                         COMMITTED
//	task terminal, cancelled before start        409      task_already_terminal     CANCELLED  +state
//	older attempt (late result)                  409      attempt_mismatch          CANCELLED  +expectedAttempt, receivedAttempt
//	attempt started by another worker id         409      attempt_already_started   CANCELLED
//	lease expired (zombie), cancel grace over    410      task_expired              CANCELLED
//	another outcome from the attempt that ended  409      completion_conflict       REJECTED
//	the task
//	bad body or field                            400      invalid_request           REJECTED   +field
//	missing, bad or expired token                401      invalid_token,            REJECTED
//	                                                      token_expired
//	token for another task, attempt or tenant    403      token_scope_mismatch      REJECTED
//	unknown task                                 404      task_not_found            REJECTED
//	body too large, not JSON                     413/415  payload_too_large,        REJECTED
//	                                                      unsupported_media_type
//	Firestore unavailable, contention exhausted  503      unavailable               RETRY      +Retry-After
//	Firestore refused the write as invalid       500      internal                  REJECTED
//
// (docs/contract.md §4.4 has the same table, with what the worker does.)
// The 500 row is for store.ErrRejected: retrying the same body cannot help,
// nothing was written, and the attempt's lease runs out so the sweeper
// retries the task. The 503 row covers Firestore errors, contention
// outlasting the store's retries and [Config.StoreTimeout] (20 s).
//
// A heartbeat's 200 always carries "shouldCancel" (true, with
// "cancelReason", while the task is CANCELLING; the disposition stays
// CONTINUE). A completed's 200 carries "finalState" (the terminal state, or
// QUEUED with "retryScheduled": true and "nextAttempt" when a retry was
// scheduled).
//
// After the read, the state machine ([task.Apply]) decides between the
// 403 scope row, the 409/410 rows, a replay and acceptance in the order of
// docs/contract.md §4.5, the first that fits answering:
//
//  1. the token's tenant, workspace or run is not the task's:
//     token_scope_mismatch (403, REJECTED), before anything else is
//     decided and without a write. Only a signer bug or a stolen key can
//     cause it, so it is logged at ERROR;
//  2. the task is terminal: an identical repeat of a committed completed
//     replays its first answer (200 COMMITTED); a different completed from
//     the attempt that ended the task is completion_conflict; anything
//     else (a heartbeat, started, or an older attempt's report, even one
//     from an attempt that completed and was retried) is
//     task_already_terminal with "state";
//  3. the token's attempt is not the task's current one: attempt_mismatch
//     with "expectedAttempt" and "receivedAttempt";
//  4. the attempt was started by another worker id: attempt_already_started;
//  5. the lease has run out, or, while CANCELLING, the cancel grace has:
//     task_expired (below);
//  6. accept.
//
// An identical repeat of an older attempt's committed completed (a FAILED
// that scheduled the retry, repeated because its answer was lost) while the
// task runs the newer attempt replays its first answer (200 COMMITTED,
// "finalState" QUEUED, "retryScheduled", "nextAttempt") rather than
// attempt_mismatch: the report did count, and a replay changes nothing. A
// different report from that attempt is attempt_mismatch (CANCELLED), never
// completion_conflict: only the attempt that ended the task can conflict.
// "Identical" compares the substance of the report ([task.CompletionDigest]:
// worker id, outcome, output, error, cancelledDuringPhase, partialProgress),
// not completedAt or metrics.
//
// A callback that finds the lease expired, whether or not the sweeper has
// run, applies the zombie transition itself in the same transaction (the
// attempt ends ZOMBIE; the task is retried or FAILED), then answers 410.
// Likewise a callback that finds a CANCELLING task past its cancel deadline
// applies the cancel timeout (the attempt ends CANCEL_TIMEOUT; the task
// FAILED with reason CANCEL_TIMEOUT, never retried) and answers 410
// task_expired, CANCELLED: a completed after the grace period is not
// accepted, and a heartbeat after it never extends the lease, so the
// outcome is the sweeper's whichever runs first. The grace period is
// [cancel, cancelDeadline): at the deadline itself it has run out, as the
// lease has at leaseExpiresAt (the sweeper uses the same comparison). When
// both have run out the cancel timeout applies, as in the sweeper, which
// runs its cancel duty before its lease duty.
//
// # Retries
//
// When the committed result scheduled an attempt (a FAILED report that the
// policy retries, or an expired lease), the handler calls
// [Enqueuer.FollowUp] (*enqueue.Enqueuer) before answering, so the next
// attempt's envelope, with the last checkpoint as resumeFrom, is on its way
// when the worker hears "retryScheduled". An enqueue failure does not
// change the answer: the attempt is committed as QUEUED, and the sweeper
// re-drives a QUEUED attempt whose dispatch check time passes.
//
// # Token refresh
//
// When the token of an accepted heartbeat would expire before the next
// heartbeat could arrive (less than [task.RefreshBefore] left: a quarter of
// its lifetime, or two heartbeat intervals when that is more), the answer
// carries a fresh "taskToken" for the same scope and its "tokenExpiresAt"
// (lifetime [task.TokenTTL] from now: at least two intervals, covering the
// deadline when it can), so tasks may outlive one token. Submit refuses a
// heartbeat interval over half the maximum token lifetime, which no
// refresh could cover.
//
// # Paced heartbeats
//
// Every 200 answer to `started` and `heartbeat` carries
// "nextHeartbeatInMs" ([task.NextHeartbeatIn], docs/contract.md §5.7):
// how long the worker may wait before its next heartbeat that reports
// nothing new, computed from the task as the transaction left it (its
// lease, its timers) and the newest token the worker holds after the
// answer (the refreshed one, when the answer carries one). It is never
// less than the heartbeat interval, and keeps the lease's margin, the
// cancel notice and the token refresh within their bounds.
//
// # Round trips
//
// A callback costs one optimistic transaction of at most 2 Firestore RPCs
// (a read, then a commit conditional on the versions read; no lock, so
// nothing to roll back), measured with
// [store.RPCCounter] in the tests; a heartbeat that changes the task's state
// costs one read more:
//
//	accepted (a write: started, heartbeat, completed), or refused after
//	applying an expired lease or cancel grace
//	                        BatchGetDocuments + Commit (preconditions: the versions read) = 2
//	heartbeat that makes a transition (the first one of an attempt that
//	never said started; past the lease or the cancel grace)
//	                        BatchGetDocuments × 2 + Commit = 3
//	refused or no-op (terminal, attempt mismatch, replay, conflict,
//	repeated started, unknown task; a heartbeat that changes nothing
//	but a lease with over half of it left, docs/cost.md "Heartbeats")
//	                        BatchGetDocuments = 1
//	refused before the transaction (steps 1–7)
//	                        0
//
// An ordinary heartbeat reads the task document through a field mask (never
// the payload, resources, resumeFrom or checkpoint) and writes only the
// fields it changes (lease, progress, message, checkpoint when sent), in
// that one document: what it costs does not grow with the payload. The
// running attempt's heartbeat state lives on the task document and is
// kept there through its end when no retry follows (a `started`, a job
// execution and the outcome of the task's last attempt write the task
// alone; see internal/store/live.go); GET
// /v1/tasks/{id} shows it in attempts[] all the same.
//
// Contention (a commit whose precondition failed: another writer changed
// the task after the read) reads and applies again, which costs 2 RPCs
// again. Within one process the store applies one event per task at a
// time, so concurrent duplicates of a callback queue instead of
// contending.
// Enqueueing a retry adds one Cloud Tasks CreateTask and no Firestore RPC.
//
// # Logs
//
// Each callback writes one JSON line (message "callback") with taskId,
// attempt, tenantId, kind, status, disposition, error, latencyMs and, when
// known, workerId, field, finalState, nextAttempt, at INFO (WARNING for a
// 4xx, ERROR for a 5xx), except an accepted heartbeat answered CONTINUE,
// which is logged at DEBUG unless Config.LogHeartbeats
// (SERVO_LOG_HEARTBEATS), and an accepted started answered CONTINUE,
// logged at DEBUG unless Config.LogStarted (SERVO_LOG_STARTED); both are
// counted in the metric servo.callbacks either way. The token, the
// Authorization header and the body are never logged.
package callbacks
