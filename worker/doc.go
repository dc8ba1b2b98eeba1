// Package worker is Servo's Go worker SDK: the worker side of the ADR-023
// contract (PRODUCT §4, §8). Workers do work, not truth: Servo alone decides
// a task's state, and the SDK only asks for permission, reports, and obeys.
//
//	http.Handle("/", worker.Handler(func(ctx context.Context, t *worker.Task) (any, error) {
//		var in Input
//		if err := t.Decode(&in); err != nil {
//			return nil, err // DATA_QUALITY
//		}
//		...
//		t.Progress(50, "half way")
//		if err := t.Checkpoint(State{Next: i}); err != nil { ... }
//		...
//		return Output{...}, nil
//	}))
//
// # Protocol
//
// For each delivery of an envelope (a Cloud Tasks push, POST with the JSON
// [api.Envelope]), the handler:
//
//  1. sends `started`; the Func runs only if Servo answers CONTINUE. A 409
//     (task terminal or cancelled, a newer attempt, the attempt started by
//     another worker: a duplicate delivery) or a 410 means the Func is never
//     called.
//  2. while the Func runs, sends a heartbeat every heartbeatIntervalMs
//     (jittered down by up to 15%) carrying the latest [Task.Progress] and
//     any [Task.Checkpoint] Servo has not stored yet; a checkpoint brings
//     the next heartbeat forward (at most one per quarter interval). A
//     refreshed task token in a heartbeat answer is adopted. A heartbeat
//     answered shouldCancel cancels the Func's context with a
//     [*CancelledError] (the reason inside); one answered 410 or 409 cancels
//     it with a [*LeaseLostError], a REJECTED one with a [*RejectedError],
//     and then nothing more is sent for the attempt. When Servo has
//     acknowledged nothing for heartbeatTimeoutMs (counted from `started`,
//     then from the last heartbeat answered CONTINUE; a network partition,
//     or Servo answering only RETRY), the lease is surely gone: Servo has
//     expired it or will, and may run the next attempt. The SDK fences the
//     attempt: it abandons the heartbeat in flight, cancels the Func's
//     context with a [*LeaseLostError] of code [CodeHeartbeatTimeout], and
//     never reports `completed` for it.
//  3. when the Func returns, sends `completed` exactly once (the same body on
//     every retry) with the outcome, the output or the categorised error,
//     and metrics, and never sends anything after COMMITTED, CANCELLED or
//     REJECTED.
//
// The SDK obeys the answer's disposition, whatever its status. It retries
// only transport errors and per-request timeouts, Servo's 503 with
// disposition RETRY, and answers without a Servo body (no JSON with a
// disposition: 408, 429, 500, 502, 503 or 504 from a load balancer or Cloud
// Run in front of Servo), with exponential backoff and jitter, honouring
// Retry-After: `started` within [WithStartRetryWindow], heartbeats and
// `completed` until the task token expires (a refreshed token extends it).
// When the token expires while Servo cannot be reached the attempt has
// lost its authority: the Func is cancelled with a [*LeaseLostError]. An
// answer with disposition REJECTED, CANCELLED or COMMITTED is final and
// never sent again, even as a 500 or 429.
//
// # Outcomes
//
// nil error: SUCCEEDED with the output. An error: FAILED with the category
// of the [Error] in its chain (USER_CODE by default; TIMEOUT when the task's
// deadline passed). After Servo asked to cancel, an error is reported as
// CANCELLED with the last checkpoint as partialProgress (and the
// [Task.SetPhase] phase as cancelledDuringPhase). A panic is FAILED/USER_CODE
// with the stack (truncated to api.MaxStackTraceBytes). Metrics:
// cpuTimeMs is the process's CPU time while the Func ran (getrusage deltas),
// peakMemoryBytes the most memory the Go runtime had mapped, sampled every
// 200 ms; both are process-wide, so exact with one attempt per instance.
//
// # Answers to Cloud Tasks
//
// Cloud Tasks retries every non-2xx answer, so the handler answers 2xx as
// soon as the attempt is settled, whoever settled it: after COMMITTED, and
// also after a 409/410 at `started` (a duplicate delivery or a task Servo has
// already decided), after the attempt lost its lease (Servo's 409/410, or
// the SDK's own heartbeat-timeout fence: redelivering the same attempt
// could not run it again, and Servo decides on the next attempt through
// its own lease expiry), and after REJECTED
// (the same envelope would be rejected again; Servo's sweeper re-drives a
// stuck task with a fresh envelope). It answers 503 only when Servo could
// not be reached (at `started` within the start window, or at `completed`
// until the token expired) so that Cloud Tasks redelivers. A body that is
// not a valid envelope is answered 400 and logged at ERROR: note that Cloud
// Tasks retries 4xx too, until the queue's retry limit. The answer's JSON
// body (result, code, outcome, finalState) is informational.
//
// A delivery of an attempt this handler is already running (Cloud Tasks
// redelivers after the dispatch deadline, or duplicates) waits for the
// running one and gets its answer; the Func runs once. The Func's context
// does not end when Cloud Tasks closes the connection.
//
// # Cloud Run
//
// The delivery's request stays open while the Func runs, so Cloud Run keeps
// CPU allocated under request-based billing. Cloud Tasks waits at most 30
// minutes (its dispatch deadline): for longer attempts use instance-based
// billing (CPU always allocated) so the attempt keeps its CPU after the
// connection closes, and a Cloud Run request timeout long enough. When an
// instance dies mid-attempt, Servo's lease expiry retries the attempt and
// the retry resumes from the last stored checkpoint.
//
// Verifying the Cloud Tasks OIDC token is off by default because Cloud
// Run's IAM invoker check already verifies it; package worker/googleauth
// turns it on ([WithDeliveryCheck]).
//
// The package depends on the standard library, package api and
// OpenTelemetry's API only: spans and metrics go to the providers given
// with [WithTracerProvider] and [WithMeterProvider] (default: the global
// ones), and nothing of Servo's server, Google's clients or an exporter is
// linked into a worker.
package worker
