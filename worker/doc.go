// Package worker is Servo's Go worker SDK: the worker side of the callback
// contract (docs/contract.md §4), a conforming worker as docs/contract.md
// §14 describes it. Workers do work, not truth: Servo alone decides a
// task's state, and the SDK only asks for permission, reports, and obeys;
// it never retries a task itself.
//
// A [Func] does the work of one attempt. The same Func runs in three modes:
//
//   - [Handler], a push worker: the http.Handler a Cloud Run service
//     mounts; Cloud Tasks POSTs each attempt's envelope ([api.Envelope]) to
//     it (docs/contract.md §2).
//   - [Pull], a pull worker: it claims attempts from a pull pool over
//     outbound HTTPS and serves nothing (docs/contract.md §10).
//   - [RunJob], a job worker: one attempt per Cloud Run Job execution, its
//     envelope in the environment (docs/contract.md §11).
//
// In every mode the attempt follows the same protocol, below. The examples
// show a complete Func; the example worker (examples/worker) runs in all
// three modes.
//
// # Protocol
//
// For each attempt the SDK:
//
//  1. sends `started`; the Func runs only if Servo answers CONTINUE. A 409
//     (task terminal or cancelled, a newer attempt, the attempt started by
//     another worker: a duplicate delivery) or a 410 means the Func is never
//     called; so does REJECTED, which is logged. A pull-pool claim is the
//     attempt's `started`, so [Pull] sends none.
//  2. while the Func runs, sends a heartbeat every heartbeatIntervalMs
//     (jittered down by up to 15%) carrying the latest [Task.Progress] and
//     any [Task.Checkpoint] Servo has not stored yet; a checkpoint brings
//     the next heartbeat forward (at most one per quarter interval). A
//     heartbeat with nothing new to report (no checkpoint, the same
//     progress and message) waits instead for the last answer's
//     nextHeartbeatInMs when that is longer than the interval (Servo's
//     pacing hint, docs/contract.md §5.7, which keeps the lease, the cancel
//     notice and the token refresh within their bounds; an answer without
//     it, from an older Servo, means the interval). A
//     refreshed task token in a heartbeat answer replaces the old one for
//     every later callback. A heartbeat answered shouldCancel cancels the
//     Func's context with a [*CancelledError] (the reason inside); one
//     answered 410 or 409 cancels it with a [*LeaseLostError], a REJECTED
//     one with a [*RejectedError], and then nothing more is sent for the
//     attempt.
//  3. fences the attempt when Servo has acknowledged nothing for
//     heartbeatTimeoutMs (counted from when `started`, then the last
//     heartbeat answered CONTINUE, was sent: Servo counts the lease from
//     when it processed the request, so a slow answer never lets the worker
//     outlive the lease; a claim counts from its answer): a network
//     partition, or Servo answering
//     only RETRY. The lease is then surely gone: Servo has expired it or
//     will, and may run the next attempt. The SDK abandons the heartbeat in
//     flight, cancels the Func's context with a [*LeaseLostError] of code
//     [CodeHeartbeatTimeout] (errors.Is(context.Cause(ctx), ErrLeaseLost)
//     holds), and never reports `completed` for the attempt.
//  4. when the Func returns, sends `completed` exactly once (the same body
//     on every retry) with the outcome, the output or the categorised error,
//     and metrics, and never sends anything after COMMITTED, CANCELLED or
//     REJECTED. A failed attempt's checkpoint that Servo has not stored yet
//     is sent first, with one last heartbeat, so the retry's
//     [Task.ResumeFrom] has it.
//
// # Retries
//
// The SDK obeys the answer's disposition, whatever its status
// (docs/contract.md §4.7). Every callback is idempotent, so it retries:
//
//   - transport errors and per-request timeouts ([WithRequestTimeout]);
//   - Servo's 503 with disposition RETRY (unavailable);
//   - 408, 429, 500, 502, 503 and 504 without a Servo body (no JSON with a
//     disposition: a load balancer's or Cloud Run's page, an empty body),
//     since the request may not have reached Servo.
//
// It never retries an answer with disposition CONTINUE, COMMITTED,
// CANCELLED or REJECTED, even as a 500 or 429. Other statuses without a
// Servo body are taken as accepted (2xx), CANCELLED (409, 410) or REJECTED
// (the rest).
//
// Delays grow exponentially from 250 ms to 15 s, each jittered in [d/2, d)
// ([WithRetryBackoff]), and are at least the answer's Retry-After (up to
// that 15 s cap). `started` is retried within [WithStartRetryWindow] (one
// minute), heartbeats and `completed` until the task token expires (a
// refreshed token extends it). When the token expires while Servo cannot
// be reached during the run, the attempt has lost its authority: the
// Func's context is cancelled with a [*LeaseLostError] of code
// [CodeServoUnreachable].
//
// # Outcomes
//
// What the Func returns is reported as:
//
//   - out, nil: SUCCEEDED with the JSON of out as output (a json.RawMessage
//     as is; nil for none). An output that cannot be encoded or exceeds
//     api.MaxOutputBytes (256 KiB) is FAILED/USER_CODE, not retryable.
//   - an error with an [*Error] in its chain: FAILED with its category and
//     retry advice ([UserCode], [DataQuality], [Infrastructure],
//     [Configuration], [Timeout], [Conflict], [WithRetryable]); with
//     [Cancelled]'s category, CANCELLED (the worker's own decision) with
//     the last checkpoint as partialProgress.
//   - any error after Servo asked to cancel: CANCELLED with the last
//     checkpoint as partialProgress and the [Task.SetPhase] phase as
//     cancelledDuringPhase; but an error with an explicit category other
//     than CANCELLED that is not a context cancellation is a real failure
//     found while winding down, reported FAILED with that category.
//   - any other error after the task's deadline: FAILED/TIMEOUT (the
//     context's cause is [ErrDeadlineExceeded]).
//   - any other error after [Pull] stopped the Func at the end of its grace
//     period ([ErrStopping]): FAILED/INFRASTRUCTURE, so Servo retries it
//     from its last checkpoint.
//   - any other error: FAILED/USER_CODE.
//   - a panic in the Func's goroutine: FAILED/USER_CODE, message "panic: …",
//     with the stack (truncated to api.MaxStackTraceBytes, 16 KiB).
//   - anything after [ErrLeaseLost] or [ErrRejected]: nothing is reported.
//
// The metrics of `completed`: cpuTimeMs is the process's user and system
// CPU time while the Func ran (getrusage deltas on Unix; elsewhere the Go
// runtime's estimate); peakMemoryBytes is the largest
// /memory/classes/total:bytes (all the memory the Go runtime mapped),
// sampled every 200 ms. Both are process-wide: exact with one attempt per
// process (Cloud Run concurrency 1), an upper bound otherwise. I/O is not
// measured. The progress Servo stores is as of the last heartbeat
// (`completed` carries none).
//
// # Answers to Cloud Tasks
//
// Cloud Tasks retries every non-2xx answer, so [Handler] answers 2xx as
// soon as the attempt is settled, whoever settled it, and 503 only when
// Servo could not be reached, so that Cloud Tasks redelivers
// (docs/contract.md §2). The answer's JSON body (workerId, result, code,
// outcome, finalState, detail) is informational; its result is one of:
//
//	status  result              when
//	200     committed           `completed` answered COMMITTED
//	200     discarded           `completed` answered 409/410: the result was discarded
//	200     not_started         `started` answered 409/410: a duplicate delivery, or a task
//	                            Servo has already decided; the Func did not run
//	200     lease_lost          the attempt lost its lease while running: Servo answered
//	                            409/410, or the SDK fenced it (code heartbeat_timeout)
//	200     rejected            Servo answered REJECTED
//	503     servo_unreachable   Servo could not be reached: at `started` within the start
//	                            window, at `completed` until the token expired
//	503     client_gone         a redelivery waiting for the running attempt lost its caller
//	400     bad_envelope        not a valid envelope (logged at ERROR)
//	413     envelope_too_large  over MaxEnvelopeBytes, 1 MiB (logged at ERROR)
//	401     unauthenticated     the delivery check refused it (WithDeliveryCheck)
//	405     method_not_allowed  not POST
//
// A lost lease is not answered 5xx: a redelivery of the same attempt could
// not run it again (Servo answers 409/410 at `started`), and Servo decides
// on the next attempt through its own lease expiry. Nor is REJECTED: the
// same envelope would be rejected again, and Servo's sweeper re-drives a
// stuck task with a fresh envelope. Note that Cloud Tasks retries 4xx
// answers too, until the queue's retry limit.
//
// A delivery of an attempt this process is already running (Cloud Tasks
// redelivers after the dispatch deadline, or duplicates) waits for the
// running one and gets its answer: the Func runs once per process. One
// that reaches another instance gets 409 attempt_already_started at
// `started` and is answered 200. The Func's context does not end when
// Cloud Tasks closes the connection: the attempt's fate is Servo's.
//
// # Push, pull or job
//
// Push ([Handler]): the worker is an HTTPS endpoint Cloud Tasks can reach
// (Cloud Run). An attempt starts within Cloud Tasks' dispatch, tens of
// milliseconds on a warm instance, seconds on a cold start. Cloud Run
// scales on requests, to zero, billed per request-second; the queue's rate
// limits (max_dispatches_per_second) pace it. One delivery lasts at most
// 30 minutes (below); envelopes are up to 1 MiB. Good for many short
// tasks and bursty load.
//
// Pull ([Pull]): the worker runs anywhere with outbound HTTPS (GKE, VMs,
// on-prem, GPU boxes behind NAT, laptops) and needs no inbound port. An
// attempt starts within one claim round trip: a waiting claim returns as
// soon as a message arrives. You size the fleet (PullConfig.Concurrency
// per process; scale on the pool's backlog, the subscription's
// num_undelivered_messages); each worker takes only what it has room for,
// and idle workers hold long-polls (one claim request per MaxWait per idle
// slot). No request is held while an attempt runs, so attempts may be of
// any length. Good for steady streams and private networks.
//
// Job ([RunJob]): Servo starts one Cloud Run Job execution per attempt (no
// inbound network), which may run for hours (Cloud Run's task timeout, up
// to 24 h; heartbeats refresh the token). An attempt starts with a new
// execution, typically tens of seconds; it is billed for its run time
// only, with no idle instances, up to the project's job quotas. The
// envelope travels in one environment variable and must stay under 32 KiB:
// pass large inputs by reference. Good for long renders, training, batch
// exports.
//
// All three share the state machine, tokens, callbacks, sweeper and
// events: a task's worker names a push worker, a pull pool or a job
// worker, and nothing else changes.
//
// # Pull workers
//
// A deployed API needs an ID token on every claim: googleauth.Client
// (package worker/googleauth) makes such a client from Application Default
// Credentials, and the identity must be one of the pool's serviceAccounts.
// Locally, [PullConfig].DevIdentity names the caller instead.
//
// An empty claim is followed by a short pause (the [WithRetryBackoff]
// delays, growing a little), a 503 or a transport error by the exponential
// backoff, at least the Retry-After. A claim refused for good (4xx:
// unknown pool, caller not allowed, bad request) ends Pull with an
// *[api.Error].
//
// Cancel Pull's context on SIGTERM (signal.NotifyContext): a worker being
// shut down must not start an attempt it cannot finish. When the context
// ends no new claim is made, and the claim then open (a long-poll of up to
// PullConfig.MaxWait) is abandoned at once: its request is cancelled, and
// Servo hands a pool message that comes after the caller left back to the
// pool, where another worker claims it (docs/contract.md §10). A claim
// whose answer had already begun to arrive is read in full rather than
// lost: an attempt in it is not started (the Func is not called) and is
// reported at once as FAILED/INFRASTRUCTURE, retryable, so that Servo
// schedules its retry, after the task's retry backoff, instead of waiting
// for its lease to run out (heartbeatTimeoutMs); like a lease expiry it
// uses one of the task's retry.maxAttempts. A claim Servo committed just
// as its request was cancelled, whose answer was lost with it, waits for
// its lease like any lost worker. Running attempts have PullConfig.Grace
// to finish, then their context is cancelled with [ErrStopping] and they
// are reported FAILED/INFRASTRUCTURE (retryable: Servo runs them again
// from their last checkpoint). Pull returns once every report is in.
//
// # Cloud Run
//
// The delivery's request stays open while the Func runs, so Cloud Run
// keeps CPU allocated under request-based billing. Cloud Tasks waits at
// most 30 minutes for one delivery (its dispatch deadline): longer
// attempts belong in a job worker, or need instance-based billing (CPU
// always allocated) and a Cloud Run request timeout long enough, so that
// the attempt keeps its CPU after the connection closes. When an instance
// dies mid-attempt, Servo's lease expiry retries the attempt and the retry
// resumes from the last stored checkpoint.
//
// Verifying the Cloud Tasks OIDC token is off by default because Cloud
// Run's IAM invoker check already verifies it; googleauth.VerifyOIDC
// (package worker/googleauth) turns it on, through [WithDeliveryCheck],
// for a service that allows unauthenticated invocations or runs elsewhere.
//
// # Logs, traces and metrics
//
// Every log line about an attempt carries taskId, attempt, tenantId, runId
// and workerId ([Task.Logger] gives the Func such a logger; [WithLogger]
// sets the handler). Task tokens are never logged, and [Task.Envelope]
// leaves the token out.
//
// The SDK continues the trace a delivery carries (W3C traceparent, which
// Servo puts in the Cloud Task's headers). [Handler] runs each delivery
// under a server span "process <worker>" (attributes servo.task_id,
// servo.attempt, servo.tenant_id, servo.worker, servo.worker_id,
// servo.result, servo.outcome; never the token or the payload); the Func's
// ctx carries it, so spans started from it are its children. Every
// callback request is a client span "POST /v1/tasks/{taskId}/<callback>"
// whose traceparent is injected into the request.
//
// Metrics: servo.worker.runs (counter, by servo.outcome and error.type,
// the error category), servo.worker.run.duration (histogram in seconds, by
// servo.outcome) and servo.worker.retry_attempts (counter, attempts > 1)
// for each attempt [Handler] or [RunJob] ran; servo.worker.heartbeats
// (counter, by servo.result: sent or failed) in every mode.
//
// Spans and metrics go to the providers given with [WithTracerProvider]
// and [WithMeterProvider], by default OpenTelemetry's global ones
// (otel.SetTracerProvider, otel.SetMeterProvider); without any they cost
// nothing. The package depends on the standard library, package api,
// Servo's log format (internal/logs), the attribute keys it shares with
// Servo's own telemetry (internal/spanattr) and OpenTelemetry's API only:
// nothing of Servo's server, Google's clients or an exporter is linked
// into a worker.
//
// # Testing a Func
//
// [NewTestTask] gives a [*Task] that is not connected to Servo:
// [Task.Progress] and [Task.Checkpoint] record, [Task.LastProgress] and
// [Task.LastCheckpoint] read what was recorded. Cancel the Func's context
// with a [*CancelledError] cause (context.WithCancelCause) to simulate
// Servo's cancel.
package worker
