// Package callbacks serves the worker callbacks of ADR-023 §1–7:
//
//	POST /v1/tasks/{taskId}/started
//	POST /v1/tasks/{taskId}/heartbeat
//	POST /v1/tasks/{taskId}/completed
//	Authorization: Bearer <task token>
//	Content-Type: application/json
//
// [NewHandler] returns the one http.Handler; the ServoCallbacks Cloud
// Function (package functions) and the local stack serve it unchanged.
//
// # Order of checks
//
// A request is judged in PRODUCT §4's order, and the first check that fails
// answers:
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
//     the task and the attempt record of the token's attempt and applies the
//     state machine's event ([task.Apply]) with the server's time, the
//     token's attempt, the worker id and the body.
//
// Steps 1–7 never touch Firestore, so nothing is written for a request they
// refuse; the token is checked before any read.
//
// # Answers
//
// Every answer is JSON ([task.CallbackResponse]) with "disposition" and
// "serverTime"; "acknowledged" is true on 200 only:
//
//	situation                                    status   error                     disposition
//	accepted started / heartbeat                 200      –                         CONTINUE
//	accepted completed, or an identical repeat   200      –                         COMMITTED
//	task terminal, cancelled before start        409      task_already_terminal     CANCELLED  +state
//	older attempt (late result)                  409      attempt_mismatch          CANCELLED  +expectedAttempt, receivedAttempt
//	attempt started by another worker id         409      attempt_already_started   CANCELLED
//	lease expired (zombie)                       410      task_expired              CANCELLED
//	another outcome for a completed attempt      409      completion_conflict       REJECTED
//	bad body or field                            400      invalid_request           REJECTED   +field
//	missing, bad or expired token                401      invalid_token,            REJECTED
//	                                                      token_expired
//	token for another task, attempt or tenant    403      token_scope_mismatch      REJECTED
//	unknown task                                 404      task_not_found            REJECTED
//	body too large, not JSON                     413/415  payload_too_large,        REJECTED
//	                                                      unsupported_media_type
//	Firestore unavailable, contention exhausted  503      unavailable               RETRY      +Retry-After
//	Firestore refused the write as invalid       500      internal                  REJECTED   (not in §4)
//
// The 500 row is for store.ErrRejected: retrying the same body cannot help,
// nothing was written, and the attempt's lease runs out so the sweeper
// retries the task. The tenant, workspace and run of a token that names the
// right task are compared with the task after the transaction (only a
// signer bug or a stolen key can make them differ) and answered 403.
//
// A heartbeat's 200 always carries "shouldCancel" (true, with
// "cancelReason", while the task is CANCELLING; the disposition stays
// CONTINUE). A completed's 200 carries "finalState" (the terminal state, or
// QUEUED with "retryScheduled": true and "nextAttempt" when a retry was
// scheduled).
//
// The precedence among the 409/410 rows is the state machine's (see
// [task.Apply]): an accepted completion of the token's attempt replays
// (identical report) or conflicts (different report); then an attempt other
// than the task's current one is attempt_mismatch; then a terminal task is
// task_already_terminal; then another worker id is attempt_already_started;
// then an expired lease is task_expired. One deliberate reading of PRODUCT
// §4: a callback of an older attempt on a task that has since ended answers
// attempt_mismatch, not task_already_terminal, because ADR-023 §3.3 names
// exactly that situation ("a newer attempt has already completed") and
// workers act the same on both (disposition CANCELLED).
//
// A callback that finds the lease expired, whether or not the sweeper has
// run, applies the zombie transition itself in the same transaction (the
// attempt ends ZOMBIE; the task is retried or FAILED), then answers 410.
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
// # Round trips
//
// A callback costs at most one transaction of 2 Firestore RPCs, measured
// with [store.RPCCounter] in the tests:
//
//	accepted (a write: started, heartbeat, completed, expired lease applied)
//	                        BatchGetDocuments (begins the transaction) + Commit = 2
//	refused or no-op (terminal, attempt mismatch, replay, conflict,
//	repeated started, unknown task)
//	                        BatchGetDocuments + Rollback = 2
//	refused before the transaction (steps 1–7)
//	                        0
//
// Contention (ABORTED) retries the transaction, which costs 2 RPCs again.
// Within one process the store runs one transaction per task at a time, so
// concurrent duplicates of a callback queue instead of contending.
// Enqueueing a retry adds one Cloud Tasks CreateTask and no Firestore RPC.
//
// # Logs
//
// Each callback writes one JSON line (message "callback") with taskId,
// attempt, tenantId, kind, status, disposition, error, latencyMs and, when
// known, workerId, field, finalState, nextAttempt. The token, the
// Authorization header and the body are never logged.
package callbacks
