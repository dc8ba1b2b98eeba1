// Package jobs makes a Cloud Run Job a dispatch target (docs/contract.md
// §11): a job worker (enqueue.Worker.Job) runs each attempt as one
// execution of its job, for tasks longer than one Cloud Tasks HTTP request
// may last (30 minutes). Submits are unchanged ("worker": "render"); the
// worker is configured with a job instead of a URL:
//
//	SERVO_WORKERS={"render": {"job": "projects/P/locations/L/jobs/render",
//	                          "queue": "projects/P/locations/L/queues/render",
//	                          "serviceAccount": "servo-tasks-invoker@P.iam.gserviceaccount.com"}}
//	SERVO_JOBS_DISPATCH_URL=https://REGION-P.cloudfunctions.net/servo-jobs
//
// The attempt is enqueued as for a push worker, but its Cloud Task calls
// Servo's own dispatch endpoint ([Handler]; the ServoJobs function in
// production, [DispatchPath] in the local stack) with the envelope, so rate
// limits, transport retries, de-duplication by task name and the sweeper's
// re-drives work unchanged. The endpoint verifies the envelope's token, reads
// the task and, while the attempt still waits to start (PENDING or QUEUED):
//
//  1. looks the attempt's execution up by its labels (task id and attempt,
//     [Labels]); one that runs is recorded and nothing is started;
//  2. otherwise runs the job ([Runner.Run]) with the envelope and the labels
//     as environment overrides of that execution only
//     (api.EnvelopeEnv, task.ExecutionLabelsEnv): the token never appears
//     in the job's configuration;
//  3. records the execution on the attempt (task.EventExecution, a
//     compare-and-set through store.Apply). When another execution was
//     recorded first (concurrent deliveries) or the task ended meanwhile,
//     the one just started is cancelled.
//
// An execution found finished while the attempt still waits to start
// ended without running it (it crashed before `started`): a re-drive runs
// a new one, recorded in its place.
//
// In the execution, worker.RunJob runs the attempt under the same protocol
// as a push delivery (started, heartbeats, checkpoints, token refresh,
// cancel, exactly one completed) and exits 0 once the outcome is settled,
// so Cloud Run's own retries never duplicate Servo's. A cancel reaches the
// job through its heartbeats; when a timer ends the attempt (cancel grace
// over, lease expired) the result asks for the execution's cancellation
// (task.Result.CancelExecution), which enqueue.Enqueuer.FollowUp performs
// after commit, before any retry is enqueued.
//
// [Runner] is the Cloud Run Admin API in production ([CloudRun], on
// cloud.google.com/go/run/apiv2) and subprocesses locally ([Local], `servo
// dev --job-worker NAME=COMMAND`).
//
// # Answers
//
// Cloud Tasks only looks at the status: 2xx ends the Cloud Task, anything
// else is retried with the queue's backoff. The JSON body ([Answer]) says
// why; docs/contract.md §11 has the table. The 200 results are
// [ResultStarted] (with the execution's name), [ResultFound] (the
// attempt's execution runs already), [ResultStale] (the attempt no longer
// waits to start) and [ResultSuperseded] (another execution was recorded
// first, or the task ended meanwhile; ours was cancelled).
//
// # Limits and cost
//
// The envelope (payload, resources, resumeFrom) must stay under
// [MaxEnvelopeBytes] (32 KiB, Cloud Run's limit for one environment
// variable): pass large inputs by reference. Finding an execution lists
// the job's executions, of which Cloud Run keeps the last 1 000 and any of
// the last seven days. One dispatch costs one list, one RunJob and one
// Firestore transaction.
//
// # Production
//
// ServoJobs is a function of its own, so that only its service account may
// run the jobs: a custom role on each job resource (terraform/jobs.tf) with
// run.jobs.run, run.jobs.runWithOverrides, run.executions.get,
// run.executions.list and run.executions.cancel (not roles/run.developer,
// which could also change or delete the job). The sweeper and the
// callbacks hold only run.executions.cancel on the jobs; only the Cloud
// Tasks invoker account may call ServoJobs. Cloud Run's own retries are
// off (max_retries = 0 in Terraform): a retry is Servo's, a new attempt in
// a new execution.
package jobs
