// Package telemetry is Servo's OpenTelemetry: the tracer and meter every
// component uses, the instruments (defined here, once, in metrics.go, with
// bounded attribute sets; the attribute keys and the propagator are
// internal/spanattr's, shared with the worker SDK), W3C trace-context
// helpers, [Setup], which builds the tracer and meter providers from the
// standard OTEL_* variables, and the in-memory span [Recorder] behind
// `servo get ID --trace`.
//
// Components call [Tracer] and the Record* functions; until Setup runs (or
// the program installs its own global providers) they are no-ops
// (OpenTelemetry's global no-op providers), so libraries and unit tests
// pay nothing. Setup may run more than once in a process (tests): the
// instruments follow the latest providers.
//
// Nothing here ever records a task token or a payload: spans and metrics
// carry ids, attempt numbers, states, reasons and dispositions only
// (internal/devstack/telemetry_test.go checks every recorded span against
// the tokens of its run).
//
// # Exporters
//
//   - The Cloud Functions, with no OTEL_* exporter variable set
//     ([DefaultGoogleCloud]): traces to Cloud Trace and metrics to Cloud
//     Monitoring (every 60 s), both over OTLP/gRPC to Google's Telemetry
//     API ([GoogleTelemetryEndpoint], Application Default Credentials,
//     resource attribute gcp.project_id). The functions' service accounts
//     need roles/telemetry.tracesWriter and roles/telemetry.metricsWriter
//     (terraform/iam.tf), and the Telemetry API must be enabled
//     (terraform/main.tf).
//   - Any process with OTEL_TRACES_EXPORTER, OTEL_METRICS_EXPORTER or
//     OTEL_EXPORTER_OTLP_ENDPOINT set: as the variables say (autoexport):
//     otlp (OTEL_EXPORTER_OTLP_PROTOCOL grpc or http/protobuf), console or
//     none for traces; otlp, console, prometheus or none for metrics.
//   - `servo dev`: spans kept in memory (the last [DefaultRecorderSpans],
//     20 000) for GET /v1/tasks/{id}/trace, metrics as Prometheus text at
//     GET /metrics, each plus OTLP when set.
//
// The resource: service.name (OTEL_SERVICE_NAME, or [Config].ServiceName,
// which the functions set to their Cloud Run service, K_SERVICE, and
// `servo dev` to servo-dev), service.instance.id (Cloud Run's instance id,
// faas.instance, when Google's resource detector finds one; a random id
// per process otherwise), and with DefaultGoogleCloud what Google's
// resource detector (go.opentelemetry.io/contrib/detectors/gcp) finds:
// cloud.region, cloud.platform, faas.name, faas.version. The detection is
// bounded to 2 s (off Google Cloud the metadata probe would otherwise
// delay a cold start). OTEL_RESOURCE_ATTRIBUTES wins over all of it.
// The functions sample traces with Config.Sampling ([Sampling]: a ratio by
// trace id, default 0.1, and every other trace exported only when a span
// failed or its request was slow); OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG, when set, choose the sampler instead (without
// either and without Sampling, as in servo dev: parentbased_always_on, a
// caller's sampling decision kept).
// The propagator is W3C traceparent, plus baggage.
//
// In Cloud Monitoring, metrics sent to the Telemetry API are stored the
// Managed Service for Prometheus way
// (https://docs.cloud.google.com/stackdriver/docs/reference/telemetry/v1.metrics):
// the instrument servo.x is the metric type
// prometheus.googleapis.com/servo.x/counter (a counter: CUMULATIVE
// DOUBLE), …/gauge (a gauge: GAUGE DOUBLE) or …/histogram (CUMULATIVE
// DISTRIBUTION), on the monitored resource prometheus_target, whose
// location is cloud.region, cluster __run__ on Cloud Run, job the service
// and instance service.instance.id (a point without it is refused), so
// each instance writes its own series. The alert policies
// (terraform/modules/alerts) read those types; TestAlertPoliciesMatchTheMetrics
// checks each of their metric types, resource types, aligners and
// reducers against the instruments here. Google's Go exporters for Cloud
// Trace and Cloud Monitoring (opentelemetry-operations-go), deprecated and
// archived after 2027-01-01, are no longer used.
//
// # One task's trace
//
//	hop                        span (kind)                                        parent
//	submit                     POST /v1/tasks (server, otelhttp)                  the caller's traceparent, if any
//	enqueue                    send <worker> (producer, Cloud Tasks CreateTask)   the submit, callback or sweeper span that enqueues
//	transport                  the Cloud Task's request carries traceparent in its headers (the emulator forwards them,
//	                           as Cloud Tasks does)
//	worker SDK                 process <worker> (server), one per delivery        the enqueue span
//	callbacks, worker side     POST /v1/tasks/{taskId}/<callback> (client)        the attempt span
//	callbacks, Servo side      POST /v1/tasks/{taskId}/<callback> (server,        the worker's client span
//	                           otelhttp), then firestore.transaction <EVENT>
//	                           (client)
//	retry after a failed       send <worker> for the next attempt, inside the     so attempt 2 is in the same trace
//	completed                  completed callback
//	sweeper                    servo.sweeper.pass → servo.sweeper.duty <duty> →   the tick
//	                           servo.sweeper.apply <EVENT> per due task, linked
//	                           to the task's trace; its transaction and any
//	                           re-enqueue are its children
//	events                     send servo-task-events (producer) per event; the   the span that committed the transition
//	                           message carries traceparent in its attributes
//
// A worker's own spans are children of the attempt span when started from
// the Func's context. Attributes: servo.task_id, servo.attempt,
// servo.tenant_id, servo.worker, servo.disposition, servo.callback,
// servo.duty, plus the HTTP and messaging semantic conventions.
//
// To link later hops, the submit's trace context is stored on the task
// document (trace, a 55-byte traceparent; about 62 bytes a task with the
// field name) and each transition's in its commit's outbox document (the same size),
// so an event re-driven from the outbox still carries the context of the
// hop that committed it. No Firestore RPC is added: both ride on writes
// that happen anyway, and the sweeper's due query projects the field.
//
// # Metrics
//
//	instrument                       kind           attributes
//	servo.task.transitions           counter        servo.from, servo.to, servo.reason, servo.worker
//	servo.callbacks                  counter        servo.callback, http.response.status_code, servo.disposition
//	servo.callback.duration          histogram (s)  servo.callback, servo.disposition
//	servo.callback.firestore.rpcs    histogram      servo.callback (the RPCs of the callback's transaction,
//	                                                tallied in its context by a gRPC interceptor: no call of its own)
//	servo.submits                    counter        servo.result (created, existing, rejected)
//	servo.sweeper.passes             counter        servo.result (ok, error): one per pass, at its end
//	servo.sweeper.due                counter        servo.duty (due tasks found; 0 added when none, so
//	                                                every duty has a series from the first pass)
//	servo.sweeper.max_lag            gauge (s)      servo.duty (the last pass's largest lag; 0 when none)
//	servo.sweeper.last_pass_time     gauge (s)      – (when the last pass ended, Unix seconds)
//	servo.sweeper.lag                histogram (s)  servo.duty (due time → handled)
//	servo.sweeper.handled            counter        servo.duty, servo.result (applied, noop, error)
//	servo.api.requests               counter        http.request.method, http.route (bounded: ids are
//	                                                {id}, unknown paths "other"), http.response.status_code
//	servo.api.duration               histogram (s)  http.request.method, http.route
//	servo.zombies                    counter        servo.worker
//	servo.retries.scheduled          counter        servo.worker, servo.reason
//	servo.dead_letters               counter        servo.worker, servo.reason (the task's final reason:
//	                                                HEARTBEAT_TIMEOUT, DISPATCH_TIMEOUT, NON_RETRYABLE, …)
//	servo.outbox.backlog,            gauges         – (what the sweeper's last outbox re-drive found past
//	servo.outbox.oldest_age                         the grace period)
//	servo.queued.oldest_age          gauge (s)      servo.worker (see below)
//	servo.events.publish_failures    counter        servo.op (publish: after a commit, in the API, the
//	                                                callbacks or the sweeper; redrive: the sweeper's),
//	                                                servo.cause (a gRPC status code name: NotFound,
//	                                                PermissionDenied, Unavailable, DeadlineExceeded, …;
//	                                                message, attempts): events left in the outbox
//	servo.task.start_latency         histogram (s)  servo.worker (attempt created, or a retry's schedule
//	                                                time → accepted started)
//
// servo.queued.oldest_age is recorded by the sweeper at each pass, for
// every worker it has seen: the longest that a PENDING or QUEUED attempt
// of the worker among the pass's dispatch-duty tasks has waited to start
// (since the task's creation, or its attempt's schedule time when later:
// a retry's, a delayed start's), 0 when the pass handled none. The
// sweeper looks at a QUEUED push attempt at its delivery probes (first at
// most 30 s after its enqueue, then at doubling intervals) and at its
// start timeout (then every start timeout while Cloud Tasks holds it), not
// at every pass: the gauge is a sawtooth whose peaks come at most a start
// timeout apart (each held 2 minutes, zombie.QueuedHold, so that a metric
// export sees it). Alert on its max over a window at least as long as the
// longest start timeout of your tasks (10 min by default;
// terraform/modules/alerts aligns over queued_age_window_seconds). The
// API and the callbacks record servo.events.publish_failures whenever a
// publish fails, so it keeps counting when the sweeper, whose ticks come
// through Pub/Sub, stops with Pub/Sub; the sweeper's outbox gauges do not.
//
// The worker SDK records its own (servo.worker.runs,
// servo.worker.run.duration, servo.worker.heartbeats,
// servo.worker.retry_attempts; see package worker) with the providers it
// is given. In Prometheus text the dots become underscores and counters
// end in _total (servo_task_transitions_total, servo_worker_runs_total).
//
// Log lines written with a context that carries a span get
// logging.googleapis.com/trace (projects/P/traces/ID),
// logging.googleapis.com/spanId and logging.googleapis.com/trace_sampled
// (package internal/logs), so Cloud Logging shows a task's log lines under
// its trace.
//
// # Cost
//
// Tracing and metrics add no Firestore RPC to any path
// (callbacks.TestTelemetryAddsNoFirestoreRPC, and `servo dev`'s
// servo_callback_firestore_rpcs_sum of 2 per `started` in
// cmd/servo's TestServoDevTelemetry). Their latency, measured interleaved
// in one run: go test -run '^$' -bench BenchmarkCallbackTracing
// -benchtime 2000x ./internal/callbacks/ (the figures are in
// docs/observability.md).
package telemetry
