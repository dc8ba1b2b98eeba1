// Package faults is Servo's fault-injection harness, in the spirit of
// Jepsen. docs/contract.md §15 promises nothing lost, nothing doubled: one
// accepted outcome per task under duplicates, races, crashes and restarts
// of any component. This package keeps that promise honest: it runs the
// real local stack, injects faults into it while tasks run, records what
// every worker and client saw, and checks that history against the
// invariants ([Check], in history.go, is pure and unit-tested on hand-made
// violating histories).
//
// # What runs
//
//   - Firestore and Pub/Sub: the official emulators, one per test binary
//     (package emulator/emulatortest).
//   - Servo: `servo dev --no-demo --firestore … --pubsub …`, built once by
//     TestMain into a temporary directory and run as a child process, so it
//     can be killed (SIGKILL) and started again against the same emulators.
//     Its Cloud Tasks emulator lives inside it, so a kill also loses every
//     queued Cloud Task.
//   - Workers: a [Fleet], an HTTP endpoint registered as worker "sim" (and,
//     with the priority workload, as worker "simq" too, which has a
//     maxRunning quota: [PriorityWorker]). Each delivery is acknowledged and worked on in its own goroutine, which
//     reports `started`, heartbeats and `completed` over HTTP, retrying
//     transport errors and 503 (honouring Retry-After) with the same body,
//     and waiting a heartbeat that reports nothing new for the last
//     answer's pacing hint (nextHeartbeatInMs, docs/contract.md §5.7), as
//     the SDKs do.
//   - Clients: submits with an idempotency key, retried on transport errors
//     and 503 by a bounded pool of clients.
//   - Events: a subscription on servo-task-events, created before Servo
//     starts.
//
// Servo runs with --store-timeout 8s ([StoreTimeout]: callbacks and the API
// answer 503 after it), --start-timeout 3s ([StartTimeout]: a lost Cloud
// Task is re-driven quickly), a sweep every second, and one token key ring
// for every start (SERVO_TOKEN_KEYS), as production keeps its keys in
// Secret Manager. The simulated tasks heartbeat every 300 ms with a 6 s
// lease and a 1 s cancel grace. Each fault outlasts the bound it tests: a
// Firestore freeze the store timeout (a store outage longer than
// --store-timeout: the short mode's is 10 s; the long mode's first is 10-14
// s, the others 2-12 s), a Pub/Sub freeze the publisher's 5 s publish
// timeout.
//
// # Faults
//
//	kind                        how
//	firestore-freeze            SIGSTOP of the Firestore emulator's process group (emulator.Process.Freeze),
//	                            SIGCONT after the hold
//	pubsub-freeze               the same for Pub/Sub; the sweeper's ticks (pushed by Pub/Sub) stop too
//	servo-kill                  SIGKILL of `servo dev` (and the Cloud Tasks emulator in it), restarted after
//	                            the hold on the same address
//	worker crash-before-start   the first attempt's delivery is acknowledged, then nothing
//	worker crash-mid            the first attempt goes silent after one heartbeat (a zombie)
//	worker crash-after-commit   the answer to the first attempt's `completed` is lost; the worker reports it again
//	worker fail-once            the first attempt reports a retryable failure
//	crash-after-commit          servo dev restarted with SERVO_FAILPOINTS=events.after-commit=crash@N (N 1-6):
//	                            it SIGKILLs itself after a Firestore commit, before the transitions are queued
//	                            for publishing (package failpoint); restarted armed after each crash until the
//	                            hold ends, then unarmed
//	crash-before-create-task    the same at enqueue.before-create-task: before an attempt's Cloud Task is created
//	crash-after-create-task     the same at enqueue.after-create-task: after it, before QUEUED is recorded
//	worker skew                 the worker's startedAt, heartbeatAt and completedAt are an hour off
//	worker pause                attempt 1 stops calling for PauseFor (its lease and 3 s) after a heartbeat, then
//	                            resumes, while attempt 2 runs (its 25 heartbeats), and calls back as before
//	worker duplicate            attempt 1 is delivered twice: two workers (two ids) run it side by side
//	worker cancel-late          after a heartbeat, attempt 1's worker cancels its task through the API and
//	                            stops for CancelLateFor (the grace and 2 s), then resumes
//	worker slow-body            one heartbeat's body trickles in over SlowBody (3 s); the next heartbeat is sent
//	                            2 s before the lease counted from the receipt of the slow one runs out (the long
//	                            mode and TestFaultsSlowBody, not TestFaults: see Modes)
//	worker delayed              not a fault: the task is submitted with startDelayMs DelayedStart (1.5 s), and
//	                            its worker behaves
//	worker plain                not a fault: a worker heartbeating plainly (nothing new) at its task's
//	                            interval, ignoring the pacing hint (as an older SDK does), the contract's
//	                            default ratio (lease ÷ 3)
//	worker skip-half            plain heartbeats by the contract's reckoning of the lease, in rounds of three:
//	                            just over half the lease left (not written), just under it (written), then 1 s
//	                            after the lease before that renewal ran out (interval lease ÷ 4)
//	worker skip-interval        the same about 1.5 intervals left (interval lease × 5/12: that bound binds)
//	worker paced                not a fault: plain heartbeats, each when the last answer's pacing hint has
//	                            passed since it arrived, as the SDKs pace them (interval lease ÷ 6, a grace of
//	                            twice the lease: the lease bound decides the hint, 4.5 s)
//	priority workload           not a fault (Config.Priority, TestFaults in both modes): worker simq, served by the
//	                            same fleet, has a worker quota of maxRunning 2 (servo dev --quotas; "sim" and the
//	                            tenants stay unlimited); a round submits 12 priority-5 tasks at once, then, once
//	                            each was answered, bursts of 3 priority-1 tasks at 6, 17 and 21 s (in the short
//	                            mode: in the Firestore freeze, in the crashes before a Cloud Task is created, and
//	                            in a calm moment); every task behaves (5 heartbeats, about 2 s) and the run's
//	                            faults apply to them; each priority-1 task is read every 250 ms from its submit's
//	                            answer until it no longer waits for a slot (TaskHistory.Slot). The short mode
//	                            runs one round (about 45 s of a saturated simq, within the load's time), the long
//	                            mode one every 45 s at least ([PriorityAt], [PriorityBacklog], [PriorityBurst])
//
// # Invariants
//
//	name            promise
//	terminal        every task ends in exactly one terminal state once the faults heal and its timers run out
//	answer          a conforming worker only ever gets 200, 409/410 CANCELLED, or 503 unavailable RETRY with
//	                Retry-After; the control API answers 2xx or 503 with Retry-After; never a 500 or a wrong
//	                disposition
//	latency         no answer is blocked past the store timeout (plus the follow-up enqueue and slack)
//	committed       every COMMITTED answer agrees with the final state (or its scheduled retry happened), and
//	                the attempt's record keeps the reported outcome
//	attempt-order   attempt never decreases (events in seq order; no attempt seen beyond the final one)
//	stale-attempt   no callback of an attempt is accepted once the task moved past it
//	zombie          a zombie's lease never comes back (no accepted callback, no event of that attempt after
//	                it; its record stays ZOMBIE)
//	events          per task, the events read form a gapless seq 1..n along task.Edges, from the creation to
//	                the final state (duplicates allowed and counted; two different events with one seq are not)
//	server-time     the attempt records hold Servo's times, never a skewed worker's
//	duplicate-task  one task per idempotency key, however often a submit was retried
//	token-in-log    no task token, nor its claims or signature, in any line Servo wrote
//	lease           a lease is not honoured after it ran out (no callback accepted whose first try was sent
//	                more than the lease after the previous accepted one was answered), nor does it run out
//	                early (no ZOMBIE, no heartbeat-timeout task_expired, before the lease after the receipt in
//	                full of the last accepted callback that renewed it, by the skip rule and the task's own
//	                interval); both by the credited rule (docs/contract.md §5.3): the lease runs its length
//	                outside the outages, counted at least (each less its slack: StoreSlack for a frozen
//	                Firestore, CreditSlack for Servo down) when it ends, at most (each, and each Pub/Sub
//	                freeze, CreditSlack longer at both ends) when it is honoured
//	cancel-grace    once a cancel is accepted, no callback first sent after the grace ran out (outages
//	                credited at most) is accepted
//	one-worker      an attempt's accepted callbacks come from one worker id (a second delivery gets
//	                attempt_already_started)
//	early-start     a delayed start (attempt 1's scheduledAt) is never early: no delivery of attempt 1
//	                before it, no callback of it sent before it accepted
//	schedule-once   each fire time of the run's schedules (docs/contract.md §16) is made exactly once: a
//	                schedule firing every 2 s for 12 s under the faults (ALLOW_ALL, an hour's catch-up
//	                window), and a past minute backfilled twice (a client's retry)
//	schedule-early  no schedule fire's task is created before its fire time
//	pacing          every 200 to started and heartbeat carries a pacing hint of at least the interval; one above
//	                it is at most half the cancel grace and leaves the lease's margin (docs/contract.md §5.7,
//	                counted from the request's sending against the latest the lease may end); and a callback
//	                sent within the last answer's hint, or half an interval after it (no outage in between),
//	                never finds the lease gone: no task_expired outside a cancel's grace, no zombie declared
//	                before it was sent
//	priority        for each task P of a worker with a maxRunning quota that outranks another task of it (same
//	                tenant, lower priority, created before P less than 5 min × the levels between them before it:
//	                docs/contract.md §12 "Priority"): P starts; and at most maxRunning of the tasks it outranks
//	                start for the first time while it waits: their first accepted started first sent after P's
//	                first accepted submit was answered, and answered before the last read that showed P
//	                waiting for its slot was sent. Only the tasks holding the worker's slots when P came may
//	                (bounds taken so that such a start falls in P's wait by Servo's clock; a slot given to P
//	                whose Cloud Task was lost and re-driven while the other slots turned over counts nothing
//	                against it; a task created after P may take a slot it finds free, waiting or not)
//
// A violation is printed with the task's whole history (deliveries, every
// request and answer, every event, the final state), in time order.
//
// # Modes
//
// TestFaults is the short mode, run by `go test ./...`: [ShortSchedule]
// (every stack fault once) while 135 tasks cycle through [Modes] and one
// round of the priority workload (21 tasks) runs; it fails if no
// priority-1 task was seen waiting for a slot. The long
// mode (-faults.long) submits -faults.rate tasks/s (6), cycling through
// [AllModes] (every worker fault), for -faults.duration while a random
// schedule ([RandomSchedule]: every kind of [FaultKinds] once per round) (from the printed seed; -faults.seed replays it)
// injects faults one after another, then holds a steady load of
// -faults.steady-rate callbacks/s (50) with no fault for -faults.steady,
// and prints: tasks by final state, callbacks, faults injected by kind, 503
// answers, invariant violations, the recovery time after each fault heals
// (p50 and max: from the heal to the first callback accepted after it, or
// for Pub/Sub to the first event delivered after it), the steady load's
// error rate and p50/p99 latency, the priority workload's figures (the
// priority-1 tasks judged, those seen waiting for a slot, the most
// lower-priority tasks that started while one waited), and the seed.
//
// # Mutation check
//
// TestMutants proves the harness catches bugs: each [Mutant] of the one
// table [Mutants] (in mutants.go) is a list of exact text replacements
// applied to a copy of the module ([CopyModule], [Mutant.Apply]: a snippet
// not found exactly once fails the check, so a rewrite of the code it
// targets is noticed); `servo dev` is built from the copy and the mutant's
// focused run (its worker modes, tasks, stack faults, sweeper cadence) must
// report a violation of an invariant of the guarantee it breaks. Every
// guarantee of docs/contract.md §15 has its invariants and at least one
// mutant in [Guarantees] (TestGuarantees fails a guarantee without either,
// an invariant or a mutant without a guarantee, and a contract whose table
// differs from the code's). The output lists, for each mutant, the
// invariants that caught it, the submit order of the first task that broke
// one, and the run's length ([Caught]):
//
//	mutant                           focused run                                  caught by
//	attempt-guard-disabled           pause                                        stale-attempt, zombie
//	duplicate-started-accepted       duplicate                                    one-worker
//	outbox-write-skipped             ok/fail-once, crash-after-commit for 20 s    events (a seq lost for good)
//	lease-check-skipped              pause, a sweep every 30 s                    lease
//	outage-credit-off                ok, Firestore frozen 10 s (past the lease)   lease
//	heartbeat-skip-greedy            plain, skip-half                             lease
//	heartbeat-skip-ignores-interval  skip-interval                                lease
//	pacing-margin-dropped            paced (the hint runs to the lease's end)    pacing
//	cancel-grace-not-enforced        cancel-late, a sweep every 30 s              cancel-grace
//	terminal-reentered               crash-after-commit (a repeated completed)    events, terminal
//	dispatch-redrive-off             ok, crash-before-create-task for 8 s         terminal
//	unavailable-answered-500         ok, Firestore frozen 10 s                    answer
//	store-timeout-ignored            ok, Firestore frozen 35 s                    latency
//	worker-clock-recorded            skew                                         server-time
//	idempotency-record-misfiled      ok, crash-after-commit for 12 s              duplicate-task
//	start-delay-ignored              delayed                                      early-start
//	fire-id-not-derived              ok (the repeated backfill doubles)           schedule-once
//	fire-made-early                  ok (the duty fires 3 s ahead)                schedule-early
//	token-logged                     ok                                           token-in-log
//	wait-rank-ignored                ok, the priority workload (the admit duty    priority
//	                                 orders by waitingSince, not by rank)
//
// `go test ./...` runs the mutants marked CI (attempt-guard-disabled,
// duplicate-started-accepted, outage-credit-off, heartbeat-skip-greedy,
// pacing-margin-dropped, start-delay-ignored and fire-id-not-derived: 12
// to 50 s each here, about three minutes in all); -faults.long runs them all (about 27 minutes), each
// after its focused run against the unmutated servo dev, which must
// report none.
//
// The figures depend on the machine: the emulators share its cores with
// Servo and the workers. On a heavily loaded machine (a load average many
// times the core count) even a healthy emulator takes seconds per request;
// that is why the store timeout is 8 s and the leases 6 s.
package faults
