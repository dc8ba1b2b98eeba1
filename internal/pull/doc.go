// Package pull serves pull pools: workers that cannot take inbound
// requests (GKE or on-prem batch machines, GPU boxes behind NAT, laptops)
// claim attempts over outbound HTTPS instead of receiving Cloud Tasks
// pushes. Firestore stays the truth and the queue only transport, as in
// seed 003.
//
// Transport: one Pub/Sub topic and pull subscription per pool, both named
// "servo-pool-NAME". [Transport] is the enqueue path's [enqueue.Pools]:
// every enqueue of a pool's attempt — submit, retry, sweeper re-drive —
// publishes a small message naming the task, the attempt and, for a
// retry, when it is due. A cancel deletes nothing: the claim drops the
// message.
//
// Claim ([Handler], POST /v1/pools/{pool}/claim): after the caller's
// identity is checked against the pool's serviceAccounts, the handler
// pulls one message at a time (long-polling up to maxWaitMs) and settles
// it: a retry not yet due is hidden until it is (ModifyAckDeadline); a
// message whose attempt is claimable is applied as [task.EventClaimed]
// through the state machine in one Firestore transaction (store.Apply),
// then acknowledged, and its envelope, with a freshly signed token, is the
// answer; a message whose attempt is not claimable (cancelled, claimed
// already, superseded by a retry) is acknowledged and dropped. A store
// failure hands the message back and answers 503 RETRY; so does a Pub/Sub
// failure. A message is acknowledged only after its claim commits, and a
// duplicate finds the attempt started and is dropped: one claim per
// attempt.
//
// Identity: [IDToken] in production (the ServoClaim function);
// [DevIdentity], the X-Servo-Dev-Identity header taken on trust, only in
// the local stack.
package pull

import "github.com/servo-dev/servo/internal/enqueue"

var _ enqueue.Pools = (*Transport)(nil)
