// Package sdkcontract holds the contract test every worker SDK must pass:
// one scenario table (happy path, retry with checkpoint, cancel, lease lost
// by 410, lease lost by silence, 503 RETRY then success, REJECTED final,
// duplicate delivery, pull claim race, job crash, a CONFLICT retried by its
// own policy, retry_test.go) run against the real local
// stack (package devstack: the emulators, the API, callbacks, sweeper, pull
// pools and job dispatch) for the Go, Python (a sync and an async def
// handler) and TypeScript SDKs, each
// driving a small contract worker (workers/) as a subprocess in push, pull
// and job mode. A proxy between the workers and Servo injects the faults.
//
// Two scenarios send SIGTERM to a pull worker (docs/contract.md §10, §14),
// each on a pool of its own: one with an attempt running and a long-poll
// claim open on the empty pool, then a task submitted while that claim
// would still be open (the claim is abandoned, the running attempt
// finishes, the worker exits without claiming the task, and a second
// worker runs it as its first attempt); one with a claim whose answer has
// begun when SIGTERM comes (the proxy holds its envelope: the worker reads
// it and reports the attempt FAILED/INFRASTRUCTURE without running the
// handler, and a second worker runs attempt 2). Neither may wait out a
// lease.
//
// Three scenarios pace heartbeats (docs/contract.md §5.7), in push and
// pull mode, on a pull pool of their own: a task of 3 steps of 10 s with a
// 1 s interval and a 4 s lease, whose first token (20 s, put into the
// envelope by the proxy) expires during it unless a heartbeat refreshes
// it, run by a worker following nextHeartbeatInMs (it keeps its lease,
// adopts the fresh token, and makes under 60% of the heartbeat requests of
// one at its interval: counted at the proxy) and by one whose answers lose
// the field (as from an older Servo: it heartbeats at its interval, at
// least that many, and is unaffected); and a cancel just after a
// heartbeat answer on a task whose grace (6 s) decides the hint, which the
// worker sees in the next heartbeat's answer and reports CANCELLED within
// the grace. With SERVO_SDKCONTRACT_PACED_5M set, the long tasks run a
// literal five minutes (3 steps of 100 s): go test -timeout 30m -run
// 'TestSDKContract/.*/scenarios/(paced|long)' ./internal/sdkcontract/.
//
// It needs python3 (>= 3.10) and node (>= 20) with npm; a missing one fails
// the test with what to install. The TypeScript SDK is built by the test
// (npm ci when sdk/typescript/node_modules is absent, then tsc).
package sdkcontract
