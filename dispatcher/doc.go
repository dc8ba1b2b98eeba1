// Package dispatcher is Servo's control API (PRODUCT §5): submit tasks
// (one or a batch), read and list them, and cancel a task or a whole run.
//
// [NewHandler] returns one http.Handler that the ServoAPI Cloud Function
// (package functions) and the local stack both serve:
//
//	POST /v1/tasks                  submit a task
//	POST /v1/tasks:batch            submit up to 500 tasks
//	GET  /v1/tasks/{id}             a task with its attempts
//	GET  /v1/tasks?tenantId=&runId=&state=&pageSize=&pageToken=
//	POST /v1/tasks/{id}/cancel      cancel a task
//	POST /v1/runs/{runId}/cancel    cancel every active task of a run
//
// A submit validates everything first and answers 400 invalid_request with
// the offending field; nothing is stored for a bad request. It then stores
// the task PENDING ([store.Store.Create], idempotency-key aware) and hands
// the first attempt to Cloud Tasks ([enqueue.Enqueuer.Enqueue]), which
// marks it QUEUED. When Cloud Tasks cannot be reached the submit still
// answers 201 with state PENDING: the task is stored and the sweeper
// re-drives it. Callers name workers; worker URLs come from configuration
// only.
//
// Every state change (enqueued, cancel) goes through [store.Store.Apply],
// that is through the one state machine in package task.
//
// README.md in this directory documents requests, responses and errors.
package dispatcher
