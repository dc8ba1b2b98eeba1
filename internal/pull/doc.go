// Package pull serves pull pools (docs/contract.md §10): workers that
// cannot take inbound requests (GKE or on-prem batch machines, GPU boxes
// behind NAT, laptops) claim attempts over outbound HTTPS instead of
// receiving Cloud Tasks pushes. Firestore stays the truth and the queue
// only transport: everything after the claim (heartbeats, checkpoints,
// cancel, `completed`, the sweeper's lease expiry, retries with
// resumeFrom, events) is the ordinary protocol of docs/contract.md §4–§7
// on the same state machine.
//
// A pull pool is a worker entry with "pull": true and the identities
// allowed to claim from it; tasks name it like any worker:
//
//	SERVO_WORKERS={"gpu": {"pull": true, "serviceAccounts": ["gpu-boxes@P.iam.gserviceaccount.com"]}}
//
// # Transport
//
// One Pub/Sub topic and pull subscription per pool, both named
// "NAMEPREFIX-pool-NAME" ([ResourceID]: servo-pool-NAME by default; Terraform creates them in
// production, [Transport.Ensure] locally). [Transport] is the enqueue
// path's [enqueue.Pools]: every enqueue of a pool's attempt (submit, retry,
// sweeper re-drive) publishes a small message naming the task, the attempt,
// the tenant, the re-drive number and, for a retry, when it is due
// (notBefore). No token is ever in a message: the envelope is built at
// claim time, so a message may wait longer than a token lives. A cancel
// deletes nothing: the claim drops the message.
//
//	submit / retry / re-drive ──publish {taskId, attempt, notBefore}──▶ topic servo-pool-gpu
//	                                                                     │ pull subscription servo-pool-gpu
//	worker ──POST /v1/pools/gpu/claim {workerId, maxWaitMs}──▶ claim handler
//	           ◀── 200 {claimed: true, envelope} ──  receive → Apply(CLAIMED) in one transaction → ack
//	worker ──heartbeat / completed (task token)──▶ callbacks (unchanged)
//
// # Claim
//
// [Handler] serves POST /v1/pools/{pool}/claim ([ClaimPath]); its answers
// and their order of checks are docs/contract.md §10. After the caller's
// identity is checked against the pool's serviceAccounts, the handler
// pulls one message at a time, long-polling up to maxWaitMs, and settles
// it by what the message finds:
//
//   - an attempt QUEUED (or PENDING): it is started for the claiming
//     workerId ([task.EventClaimed], the attempt's `started`) in one
//     Firestore transaction (store.Apply), the message is acknowledged
//     after the commit, and the answer is the envelope with a freshly
//     signed token;
//   - an attempt already RUNNING or CANCELLING (a duplicate message, even
//     to the same worker), a terminal task (cancelled while queued, …) or
//     an older attempt: acknowledged and dropped; the claim keeps waiting;
//   - a retry whose backoff has not passed (notBefore): hidden until then
//     (ModifyAckDeadline, at most [MaxDefer], 600 s, at a time), since
//     Pub/Sub has no delivery time;
//   - a store or Pub/Sub failure: the message is handed back (ack deadline
//     0) and the claim answers 503 RETRY.
//
// A message is acknowledged only after its claim commits, and a duplicate
// finds the attempt started and is dropped: one claim per attempt. The
// worker need not send `started` (the Go SDK does not); if it does, a
// repeat from the claiming worker is 200 and another worker's is 409
// attempt_already_started.
//
// # Identity
//
// In production ([IDToken], the ServoClaim function) Terraform grants the
// function's invoker role only to the pools' service accounts, and the
// handler verifies the caller's Google ID token (auth.GoogleVerifier, with
// google.golang.org/api/idtoken; audience SERVO_CLAIM_AUDIENCE, the
// function's URL) and checks its verified email against the pool's
// serviceAccounts, which production requires. Locally ([DevIdentity],
// `servo dev --pull-pool gpu[=SA,...]`) the caller names itself in the
// [DevIdentityHeader] header, unverified, and a pool with no accounts
// accepts any caller. Production never reads that header.
//
// # Limits
//
//   - A pool's task waits under the same start timeout as a push task:
//     after SERVO_START_TIMEOUT (10 min) unclaimed, the sweeper re-drives
//     it (one more message; the old one is dropped as a duplicate), and
//     after SERVO_MAX_REDRIVES (5) re-drives it ends FAILED
//     DISPATCH_TIMEOUT. A pool whose backlog may wait longer needs a longer
//     start timeout.
//   - A claim that commits but whose answer never reaches the worker leaves
//     the attempt started by a worker that does not run it: its lease
//     expires and the sweeper retries it (one attempt spent), as for a lost
//     push.
//   - Each idle claim holds one request of the claim function for up to
//     maxWaitMs.
package pull

import "github.com/servo-dev/servo/internal/enqueue"

var _ enqueue.Pools = (*Transport)(nil)
