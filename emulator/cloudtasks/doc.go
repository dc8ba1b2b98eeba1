// Package cloudtasks is a local, in-memory emulator of Google Cloud Tasks
// (google.cloud.tasks.v2) for Servo.
//
// Google ships no Cloud Tasks emulator; Servo needs one to run end to end
// on a laptop and in CI. This one is a gRPC server built on the generated
// types of cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb, so the
// official Go client (cloud.google.com/go/cloudtasks/apiv2) works against
// it unmodified, and it really pushes HTTP tasks to workers the way Cloud
// Tasks does.
//
// Run it in-process:
//
//	s := cloudtasks.NewServer(cloudtasks.Options{})
//	addr, err := s.Start("127.0.0.1:0") // picks a free port
//	…
//	defer s.Stop() // stops gRPC, cancels in-flight requests, waits for every goroutine
//	client, err := cloudtasksapi.NewClient(ctx, cloudtasks.ClientOptions(addr)...)
//
// ([Server.Serve] serves on a listener you own instead), or standalone with
// `servo emulator cloudtasks --host-port 127.0.0.1:8123` ([Run]), which
// prints the line export CLOUD_TASKS_EMULATOR_HOST=127.0.0.1:8123 to
// evaluate in the shell that runs Servo. Servo builds its Cloud Tasks
// client with [NewClient], which honours that variable.
//
// An injectable [Clock] drives every time-based rule. With a [FakeClock],
// schedule times, backoffs, dispatch deadlines, token refills and
// tombstone windows all follow [FakeClock.Advance]; [FakeClock.Pending]
// lists the armed timers, so a test can wait for the emulator to settle
// before advancing. The HTTP requests themselves still happen in real
// time.
//
// # What it emulates
//
//   - Queues: CreateQueue, GetQueue, ListQueues (lexicographic, page
//     tokens, a state filter), UpdateQueue (field masks, nested paths
//     included; it creates a missing queue), DeleteQueue, PurgeQueue (sets
//     purge_time), PauseQueue, ResumeQueue; the IAM methods GetIamPolicy,
//     SetIamPolicy and TestIamPermissions store policies but never enforce
//     them.
//   - Tasks: CreateTask, BatchCreateTasks, GetTask, ListTasks (page
//     tokens), DeleteTask, BatchDeleteTasks, RunTask; the BASIC and FULL
//     views (BASIC omits the body). The batch methods return long-running
//     operations that are already done; google.longrunning.Operations
//     (GetOperation, ListOperations, …) serves them again by name.
//   - Names: projects/PROJECT_ID/locations/LOCATION_ID/queues/QUEUE_ID/tasks/TASK_ID
//     with the documented character sets and lengths (queue id ≤ 100, task
//     id ≤ 500). Without a name the server generates a numeric id, like the
//     real service.
//   - Defaults: a queue dispatches 500 tasks/s, 1000 at once, with a
//     max_burst_size of 100, 100 attempts, backoff 0.1 s – 3600 s, 16
//     doublings and an unlimited retry duration. A task's schedule_time is
//     now (a past time becomes now), its dispatch_deadline 10 min.
//   - Validation: INVALID_ARGUMENT for bad names, a rate over 500/s,
//     concurrency over 5000, max_attempts < -1, min_backoff > max_backoff,
//     URLs that are not http(s), a body on GET, HEAD, DELETE or OPTIONS, a
//     dispatch_deadline outside [15 s, 30 min], a schedule_time more than
//     30 days ahead, tasks over 1 MB, headers of 80 KB or more; NOT_FOUND
//     for missing queues and tasks (executed or deleted tasks included, and
//     RunTask on them); ALREADY_EXISTS for duplicate queues and task names;
//     FAILED_PRECONDITION when a queue is re-created within
//     Options.QueueTombstoneWindow; UNIMPLEMENTED for App Engine tasks.
//   - Dispatch: URL, method (default POST), headers and body; the queue's
//     http_target overrides (uri_override, IF_NOT_EXISTS included,
//     http_method, header_overrides, queue-level OIDC and OAuth). Redirects
//     are followed. The task's Host, Content-Length, User-Agent,
//     X-Google-*, X-AppEngine-* and X-CloudTasks-* headers are replaced or
//     dropped.
//   - Headers added: User-Agent: Google-Cloud-Tasks, and the X-CloudTasks-*
//     headers ([HeaderQueueName], [HeaderTaskName], [HeaderRetryCount],
//     [HeaderExecutionCount], [HeaderETA]: the schedule time in seconds
//     since the epoch, with microseconds). On retries also
//     X-CloudTasks-TaskPreviousResponse (the previous HTTP status, 0 when
//     there was no response) and X-CloudTasks-TaskRetryReason.
//   - Auth: an oidc_token becomes Authorization: Bearer <JWT> ([OIDCClaims])
//     with iss https://accounts.google.com, aud the audience or else the
//     URL, email, email_verified, sub and azp, a 1 h lifetime, RS256 with a
//     kid. An oauth_token becomes a JWT with email and scope (default
//     …/auth/cloud-platform). See the differences below.
//   - Outcomes: a 2xx deletes the task. Any other status, a
//     dispatch-deadline timeout or a connection error is a failed attempt,
//     recorded in last_attempt.response_status (the HTTP status mapped to a
//     gRPC code; DEADLINE_EXCEEDED; UNAVAILABLE).
//   - Retries: per the queue's RetryConfig, or the task's retry_config when
//     set (its unspecified fields fall back to the queue's). The delay
//     after failed attempt n is min_backoff·2^(n-1) for the first
//     max_doublings retries, then grows by linear steps of
//     min_backoff·2^max_doublings, capped at max_backoff (10 s, 300 s and 3
//     doublings give 10, 20, 40, 80, 160, 240, 300, 300 s). Retrying stops
//     once every configured limit is used up: max_attempts (unless -1,
//     unlimited) and max_retry_duration since the first attempt (unless 0,
//     unlimited); the task is then dropped (and tombstoned). A task older
//     than 31 days is dropped instead of retried. On 429 and 503 a
//     Retry-After (seconds or an HTTP date) longer than the backoff is
//     honoured.
//   - Rate limits: a token bucket per queue, refilled at
//     max_dispatches_per_second and holding up to max_burst_size tokens; at
//     most max_concurrent_dispatches requests in flight. RunTask ignores
//     both, the paused state and any running attempt, as documented; after
//     a failed RunTask the task is due at now + the retry delay.
//   - De-duplication: a task name that exists, or whose task was deleted,
//     purged or executed (succeeded or permanently failed) within the
//     tombstone window (Options.TombstoneWindow, default 1 h: "~1 hour" in
//     the Cloud Tasks limits), gets ALREADY_EXISTS.
//
// # Differences from the real service
//
//   - Tokens are signed locally, not by Google: they have Google's shape
//     and claims but do not verify against Google's JWKS, and real OAuth
//     access tokens are opaque where the emulator's are JWTs. No IAM actAs
//     check is made on the service account. [Server.PublicKey] returns the
//     key that verifies them (Options.SigningKey fixes it across restarts):
//     a worker that verifies Google-signed ID tokens must be told to use it
//     when it runs against the emulator.
//   - Only HTTP tasks are dispatched; App Engine tasks are rejected with
//     UNIMPLEMENTED. BufferTask, CMEK, locations and Cloud Logging are not
//     emulated; IAM policies are stored but never enforced.
//   - State is in memory only and lost on Stop.
//   - No system throttling: no slow ramp-up of new or idle queues, no extra
//     backoff on high error rates; 429 and 503 only matter through
//     Retry-After. max_burst_size is the rate rounded up, between 1 and 100
//     (the real service picks it dynamically).
//   - A zero numeric field in RetryConfig or RateLimits means "unspecified",
//     as in the REST API, so max_doublings: 0 becomes the default 16.
//   - Backoffs are not truncated to whole seconds, so tests may use
//     sub-second backoffs.
//   - X-CloudTasks-TaskRetryReason carries the google.rpc.Code name of the
//     previous attempt's status (e.g. INTERNAL, DEADLINE_EXCEEDED,
//     UNAVAILABLE); the real values are undocumented.
//     X-CloudTasks-TaskPreviousResponse and …RetryReason are absent on the
//     first attempt. Content-Type is sent only if the task sets it.
//   - A deleted queue's name can be reused at once (the real service blocks
//     it for up to 7 days); set Options.QueueTombstoneWindow to emulate
//     that, which yields FAILED_PRECONDITION.
//   - ListTasks returns tasks ordered by task id; ListQueues filters support
//     only state comparisons. The 1000-queues-per-region quota and the 60
//     RunTask/min quota are not enforced.
//   - PurgeQueue takes effect at once (the real one can take a minute);
//     purged task names are tombstoned like deleted ones.
package cloudtasks
