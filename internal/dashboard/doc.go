// Package dashboard is Servo's web dashboard: server-rendered pages of
// tasks, runs, one task (with its attempt timeline and its trace),
// schedules and the control plane's health, kept live by server-sent
// events, with Cancel, Cancel run, and Pause and Unpause of a schedule.
// It is served under [Prefix] (/ui/) next to the control API ([Mount]):
// by `servo dev` on its address (`servo dev --open` opens it),
// and in production by the IAM-protected ServoAPI function.
//
// # Pages
//
//	page    path                                     shows
//	tasks   /ui/?tenant=&run=&state=&worker=         counts by state; the tasks newest first (task, run, tenant, key,
//	                                                 worker, priority, state, attempt, reason, progress, age), 50 a
//	                                                 page; with a tenant filter, its usage against its limits (GET
//	                                                 /v1/tenants/{t}/usage's figures)
//	run     /ui/runs/{runId}                         the run's tasks (up to 500), a per-state summary, Cancel run
//	task    /ui/tasks/{taskId}                       state, reason, priority, timers, deadline; the attempt timeline; each
//	                                                 attempt's worker id, progress, message, heartbeat count,
//	                                                 checkpoint, error (stack trace collapsed), metrics, output; the
//	                                                 task's transitions; its trace; the payload; Cancel with a reason
//	schedules /ui/schedules?tenant=                  the schedules (id, tenant, spec, overlap, paused and note, next fire in
//	                                                 the schedule's zone and UTC, fires/skipped/missed), 50 a page
//	schedule /ui/schedules/{tenant}/{id}             the spec, the task template (worker, key, payload), the next 10 fire
//	                                                 times, the last 10 fires (kind, outcome, task and its state now,
//	                                                 message); Pause and Unpause with a note
//	health  /ui/health                               the last sweeper pass (meta/sweeper) and its age; each duty's due
//	                                                 backlog now and its last pass's figures; the outbox backlog and
//	                                                 the age of its oldest due entry; the latest failed tasks with
//	                                                 their attempt history; transitions per minute by to-state over
//	                                                 the last hour
//
// A task's priority (1 highest, 5 lowest) is shown as task.PriorityOf
// gives it: 3, the default, for a task stored before priorities existed.
//
// The task page's attempt timeline is SVG ([Bar]): one bar per attempt
// from enqueue to end, light while it waited for delivery, coloured by
// outcome, a tick per heartbeat the attempt keeps
// (task.Attempt.HeartbeatTimes: every one up to task.MaxHeartbeatTicks,
// 64, then an even sample), retry gaps visible. The attempt's details say
// how many heartbeats it received ("3 heartbeats", "(ticks sampled)" when
// the ticks are a sample); an attempt recorded before heartbeat history
// has a tick at its last heartbeat only.
//
// The task page's trace: with [Config].Traces (a TaskSpans(taskID) source;
// *telemetry.Recorder is one, which `servo dev` passes) the page draws the
// task's recorded spans, those of GET /v1/tasks/{id}/trace: one row per
// span with its name, service · kind and duration, a bar from its start to
// its end on one axis from the first span, indented under its parent when
// the parent is shown, red when its status is an error (at most 300 rows;
// the legend counts the rest). With [Config].CloudTraceProject (production:
// the project whose Cloud Trace receives the spans) it links to the task's
// trace in the Cloud Trace console ([CloudTraceURL]), the trace id read
// from the task's stored traceparent. With neither there is no trace
// section; with a source but no recorded span, or a project but no stored
// trace context, a line says so.
//
// # How it works
//
// Pages are html/template (templates/), with a little JavaScript
// (static/app.js) and CSS, embedded with embed: no CDN, no npm, no build
// step, no network at run time. Charts are SVG drawn by the templates.
//
// Pages read the store directly: List and CountByState (tasks, run), Get
// and OutboxEntries (task), LastSweep, DueBacklog (4 duties × due shards
// count aggregations, no document read), OutboxBacklog (a count and one
// entry per shard), the 10 latest FAILED tasks with their attempts, and
// RecentTransitions (at most 2 000 tasks created from an hour before the
// chart's hour, newest first, projected to their history, re-read at most
// every 30 s; the chart says when the bound cut it, and does not count
// transitions of tasks created earlier). Every
// query is served by an index Servo already declares (store.Indexes) or by
// single-field indexes.
//
// Each page's live part is re-rendered by the server and pushed by
// server-sent events (GET /ui/live?view=…): one refresher per distinct view
// (a page and its filters) per process, shared by every tab showing it,
// reading at most every [Config].Refresh (1 s; the health view every
// HealthRefresh, 5 s) and sending only when the fragment changed; at most
// [Config].MaxViews (64) distinct views at once (more is answered 503 and
// the browser retries), and per caller at most [Config].MaxViewsPerCaller
// (16) distinct views and [Config].MaxStreamsPerCaller (64) streams (more
// is answered 429 with Retry-After). The store's cost grows with the distinct views
// open, not with tabs. The browser reconnects after 2 s.
//
// Pause and Unpause (POST /ui/schedules/{tenant}/{id}/pause, …/unpause,
// with the field note: at most 1024 bytes, no control character; absent,
// the note is kept) write the schedule in the store for an operator of its
// tenant (403 for a viewer, 404 for a caller who does not view it), with
// the control API's optimistic write (store.ErrScheduleChanged: re-read,
// up to 5 times) and its due time reset (Schedule.SetDue), then redirect
// back.
//
// Cancel and Cancel run are forms that POST to the dashboard, which calls
// the control API handler ([Config].API) in process (POST
// /v1/tasks/{id}/cancel, POST /v1/runs/{runId}/cancel), so they have the
// API's checks and answers; then it redirects back with the outcome.
//
// # Safety
//
//   - Every string from users and workers (keys, payloads, messages,
//     errors, reasons) is escaped by html/template; the live fragments are
//     rendered by the same templates.
//   - Every answer carries [ContentSecurityPolicy]: no inline script or
//     style, no framing.
//   - POSTs must pass the same-origin check (http.CrossOriginProtection:
//     Sec-Fetch-Site, else Origin against Host) and carry the anti-forgery
//     token: a random value in the [CSRFCookie] cookie (HttpOnly,
//     SameSite=Strict, path /ui/) posted back in the form (double submit,
//     so it works across function instances). Anything else is answered
//     403 and changes nothing.
//   - No task token reaches a page: tokens live only in envelopes, which
//     are not stored; the browser test checks the held worker's tokens
//     against every page it renders.
//   - Every page, live stream and action acts as its caller, under the
//     control API's access policy (Config.Access, Config.Verifiers): the
//     identity is IAP's signed header, the Authorization header or the
//     sign-in cookie ([IdentityCookie], set by POST /ui/signin after
//     verifying the token); a caller without one gets the sign-in page
//     (401), never data. Reads are filtered to the tenants the caller
//     views (the tasks and schedules pages in the query; another tenant's
//     task, run or schedule is 404; the health page needs a viewer of
//     every tenant), a live view's
//     key includes the caller's scope, and Cancel goes to the control API
//     with the caller's identity, which needs operator.
package dashboard
