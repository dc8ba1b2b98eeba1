"""One attempt in this process: the protocol around one call of the
handler (started, heartbeats, fencing, completed)."""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import json
import random
import re
import secrets
import sys
import threading
import time
import traceback
import urllib.parse
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Optional

from . import _client
from ._client import CANCELLED, COMMITTED, CONTINUE, Reply, Stopped, Unreachable
from ._logs import FieldsAdapter
from ._util import (MAX_MESSAGE_BYTES, MAX_OUTPUT_BYTES, MAX_STACK_TRACE_BYTES, compact_json, format_time,
                    parse_time, token_expiry, truncate, utcnow)
from .errors import (CANCELLED as CAT_CANCELLED, INFRASTRUCTURE, TIMEOUT, USER_CODE, CancelRequested,
                     DeadlineExceededError, LeaseLostError, RejectedError, StopRequested, TaskError, WorkerStopping)
from .task import Task

if TYPE_CHECKING:
    from .app import App

try:
    import resource
except ImportError:  # pragma: no cover - not Unix
    resource = None  # type: ignore[assignment]

# Results in the answer to Cloud Tasks (the same as the Go SDK's).
RESULT_COMMITTED = "committed"
RESULT_DISCARDED = "discarded"
RESULT_NOT_STARTED = "not_started"
RESULT_LEASE_LOST = "lease_lost"
RESULT_REJECTED = "rejected"
RESULT_UNREACHABLE = "servo_unreachable"
RESULT_INTERNAL = "internal_error"

# How long the last heartbeat that carries a successful or cancelled
# attempt's final progress is retried before `completed` is sent anyway
# (bounded by the fence and the token too).
FINAL_PROGRESS_WINDOW = 5.0

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def _wall_to_mono(t: Optional[dt.datetime]) -> float:
    if t is None:
        return float("inf")
    return time.monotonic() + (t - utcnow()).total_seconds()


class Run:
    """One attempt: execute() returns (HTTP status, answer dict)."""

    def __init__(self, app: "App", env: dict[str, Any], trace: Optional[str], claimed_at: Optional[float] = None,
                 traceparent: Optional[str] = None, refuse: Optional[StopRequested] = None) -> None:
        self.app = app
        # refuse: the handler is not run; the attempt (a claim's, already
        # started) is reported as if the handler had raised this at once.
        self.refuse = refuse
        # The W3C trace the callbacks continue: the delivery's, else a new one.
        m = _TRACEPARENT.match((traceparent or "").strip())
        if m and m.group(1) != "0" * 32:
            self.trace_id, self._trace_flags = m.group(1), m.group(3)
        else:
            self.trace_id, self._trace_flags = secrets.token_hex(16), "01"
        # claimed_at: the attempt came from a pull-pool claim, which was its
        # `started`; time.monotonic() when the claim's answer arrived.
        self.claimed_at = claimed_at
        self.env = env
        fields: dict[str, Any] = {"taskId": env["taskId"], "attempt": env["attempt"], "tenantId": env.get("tenantId", ""),
                                  "runId": env.get("runId", ""), "workerId": app.worker_id}
        if trace:
            fields["logging.googleapis.com/trace"] = trace
        self.log = FieldsAdapter(app.logger, fields)
        self.url_base = env["callbackBaseUrl"] + "/v1/tasks/" + urllib.parse.quote(env["taskId"], safe="") + "/"
        self.task = Task(env, app.worker_id, self.log, self._flush)
        self.done = threading.Event()
        self.status = 0
        self.answer: dict[str, Any] = {}

        self._mu = threading.Lock()
        self._tok: str = env["taskToken"]
        self._tok_until = _wall_to_mono(env["_tokenExpiresAt"])
        self._stop: Optional[StopRequested] = None  # lost authority: nothing more is reported
        self._cancel_seen = False
        self._flush_req = False
        self._wake = threading.Event()  # wakes the heartbeat loop
        self._quit = threading.Event()  # heartbeats must end (handler returned, or authority lost)
        self._sup_wake = threading.Event()  # wakes the supervisor
        self._sup_quit = False
        timeout_ms = env.get("heartbeatTimeoutMs") or 0
        self._hb_timeout = timeout_ms / 1000.0 if isinstance(timeout_ms, (int, float)) and timeout_ms > 0 else 0.0
        self._fence_at = float("inf")  # monotonic: last acknowledgement + heartbeatTimeoutMs
        # The last acknowledged answer's nextHeartbeatInMs, in seconds: how
        # long the next plain heartbeat may wait (0: the interval; an older
        # Servo). docs/contract.md §5.7.
        self._pace = 0.0

    # --- state ----------------------------------------------------------

    def _flush(self) -> None:
        with self._mu:
            self._flush_req = True
        self._wake.set()

    def _token(self) -> str:
        with self._mu:
            return self._tok

    def _token_until(self) -> float:
        with self._mu:
            return self._tok_until

    def _fence(self) -> float:
        with self._mu:
            return self._fence_at

    def _ack(self, at_: float) -> None:
        """Servo acknowledged (200 CONTINUE) a request sent at at_: the
        attempt is fenced heartbeatTimeoutMs later unless another one is
        acknowledged. Servo counts the lease from when it processed the
        request, no earlier than its sending: counting from the answer's
        arrival would let the worker outlive the lease by the answer's
        transit time."""
        if self._hb_timeout <= 0:
            return
        at = at_ + self._hb_timeout
        with self._mu:
            self._fence_at = at if self._fence_at == float("inf") else max(self._fence_at, at)
        self._sup_wake.set()

    def _adopt(self, rep: Reply) -> None:
        tok = rep.body.get("taskToken")
        if not isinstance(tok, str) or not tok:
            return
        exp = parse_time(rep.body.get("tokenExpiresAt")) or token_expiry(tok)
        with self._mu:
            self._tok = tok
            if exp is not None:
                self._tok_until = _wall_to_mono(exp)
        self.log.info("adopted a refreshed task token", fields={"tokenExpiresAt": format_time(exp) if exp else ""})

    def _paced(self, rep: Reply) -> None:
        """Records the pacing hint of an acknowledged answer (none: 0)."""
        hint = rep.body.get("nextHeartbeatInMs")
        pace = hint / 1000.0 if isinstance(hint, (int, float)) and not isinstance(hint, bool) and hint > 0 else 0.0
        with self._mu:
            self._pace = pace

    def _plain_wait(self, interval: float, wait: float) -> float:
        """How long after the last answer a plain heartbeat (nothing new)
        waits, when one that carries something new waits ``wait`` (the
        jittered interval): Servo's hint, jittered down by up to 15%, when
        it is longer than the interval; else ``wait``."""
        with self._mu:
            pace = self._pace
        if pace <= interval:
            return wait
        return max(wait, _jitter(pace))

    def _lose(self, cause: StopRequested) -> None:
        with self._mu:
            first = self._stop is None
            if first:
                self._stop = cause
        if first:
            self.log.warning("attempt lost its authority: cancelling the handler; nothing more will be reported",
                             fields={"cause": str(cause)})
        self.task._stop(cause)
        self._quit.set()
        self._wake.set()

    def stopped(self) -> Optional[StopRequested]:
        with self._mu:
            return self._stop

    def _cancel_by(self, reason: str) -> None:
        with self._mu:
            first = not self._cancel_seen
            self._cancel_seen = True
        if first:
            self.log.info("Servo asked to cancel the attempt; cancelling the handler", fields={"cancelReason": reason})
            self.task._stop(CancelRequested(reason))

    def _fenced(self) -> bool:
        """Whether no acknowledgement came within heartbeatTimeoutMs; if so
        the attempt is fenced (lease lost)."""
        if time.monotonic() < self._fence():
            return False
        self._lose(LeaseLostError("heartbeat_timeout",
                                  "no heartbeat acknowledged within heartbeatTimeoutMs: the lease may have passed to another attempt"))
        return True

    def _traceparent(self) -> str:
        """A traceparent for one callback: a new span of the attempt's trace."""
        return f"00-{self.trace_id}-{secrets.token_hex(8)}-{self._trace_flags}"

    def _post(self, op: str, body: Any, until: Any, stop: Optional[threading.Event]) -> Reply:
        cfg = self.app
        return _client.post(self.app._transport, self.url_base + op, op, body, self._token, until, stop,
                            cfg.backoff_initial, cfg.backoff_max, self.log, self._traceparent)

    # --- the attempt ----------------------------------------------------

    def execute(self) -> tuple[int, dict[str, Any]]:
        app = self.app
        started_at = utcnow()
        body = compact_json({"attempt": self.env["attempt"], "workerId": app.worker_id, "startedAt": format_time(started_at)})
        window_end = time.monotonic() + app.start_retry_window
        try:
            if self.claimed_at is not None:
                rep = Reply(status=200, disposition=CONTINUE, sent_at=self.claimed_at)
            else:
                rep = self._post("started", lambda: body, lambda: min(window_end, self._token_until()), None)
        except Unreachable as e:
            self.log.error("could not reach Servo to start the attempt; answering 503 so Cloud Tasks redelivers it",
                           fields={"error": str(e)})
            return 503, {"result": RESULT_UNREACHABLE, "detail": str(e)}
        self._adopt(rep)
        if rep.disposition == CANCELLED:
            self.log.info("Servo declined the attempt; the handler is not run",
                          fields={"status": rep.status, "code": rep.body.get("error"), "state": rep.body.get("state"),
                                  "message": rep.body.get("message")})
            return 200, _drop_empty({"result": RESULT_NOT_STARTED, "code": rep.body.get("error"), "finalState": rep.body.get("state")})
        if rep.disposition != CONTINUE:
            self.log.error("Servo rejected `started`; the handler is not run (protocol error, not retried)",
                           fields={"status": rep.status, "code": rep.body.get("error"), "field": rep.body.get("field"),
                                   "message": rep.body.get("message")})
            return 200, _drop_empty({"result": RESULT_REJECTED, "code": rep.body.get("error"), "detail": rep.body.get("message")})
        self._ack(rep.sent_at)
        self._paced(rep)

        hb = threading.Thread(target=self._heartbeat_loop, name="servo-heartbeat", daemon=True)
        sup = threading.Thread(target=self._supervise, name="servo-supervisor", daemon=True)
        hb.start()
        sup.start()
        cpu0 = _cpu_time()
        out: Any = None
        exc: Optional[BaseException] = None
        if self.refuse is not None:
            self.log.warning("attempt not started: " + str(self.refuse))
            self.task._stop(self.refuse)
            exc = self.refuse
        else:
            self.log.info("attempt started")
            try:
                out = call_handler(app.handler, self.task)
            except Exception as e:  # noqa: BLE001 - every failure is reported
                exc = e
        # Why the handler had to stop, as it saw it (a cancel answered after
        # it returned does not count).
        cause = self.task.cancel_cause
        metrics = _metrics(cpu0)
        # No new heartbeat; one in flight finishes (its answer counts: a 410
        # means nothing may be reported).
        self._quit.set()
        self._wake.set()
        hb.join()
        with self._mu:
            self._sup_quit = True
        self._sup_wake.set()
        sup.join()

        if self.stopped() is None:
            self._fenced()
        if (stop := self.stopped()) is not None:
            return 200, _lost_answer(stop)
        req = outcome(cause, out, exc, self.task)
        req.update({"attempt": self.env["attempt"], "workerId": app.worker_id, "completedAt": format_time(utcnow())})
        if metrics:
            req["metrics"] = metrics
        if req["outcome"] == "FAILED" and self.task._dirty():
            # Store the last checkpoint first: a retry resumes from it.
            self._heartbeat_once(None)
            if self.stopped() is None:
                self._fenced()
            if (stop := self.stopped()) is not None:
                return 200, _lost_answer(stop)
        elif self.task._progress_dirty():
            # The last progress the handler reported (throttled into the
            # next heartbeat, which never came): one last heartbeat, best
            # effort, so the attempt does not end showing an older one.
            self._heartbeat_once(None, final=True)
            if self.stopped() is None:
                self._fenced()
            if (stop := self.stopped()) is not None:
                return 200, _lost_answer(stop)
        outcome_ = req["outcome"]
        try:
            body = compact_json(req)
        except (TypeError, ValueError) as e:
            return 500, {"result": RESULT_INTERNAL, "detail": str(e)}
        try:
            rep = self._post("completed", lambda: body, self._token_until, None)
        except Unreachable as e:
            # Servo may have committed a try whose answer was lost; the
            # redelivery is settled by Servo (409 or 410 at started).
            self.log.error("could not report `completed`; answering 503 so Cloud Tasks redelivers",
                           fields={"outcome": outcome_, "error": str(e)})
            return 503, {"result": RESULT_UNREACHABLE, "outcome": outcome_, "detail": str(e)}
        if rep.disposition == COMMITTED:
            self.log.info("attempt reported", fields={"outcome": outcome_, "finalState": rep.body.get("finalState"),
                                                      "retryScheduled": rep.body.get("retryScheduled"),
                                                      "nextAttempt": rep.body.get("nextAttempt")})
            return 200, _drop_empty({"result": RESULT_COMMITTED, "outcome": outcome_, "finalState": rep.body.get("finalState")})
        if rep.disposition == CANCELLED:
            self.log.warning("Servo discarded the attempt's result: the attempt had no authority any more",
                             fields={"outcome": outcome_, "status": rep.status, "code": rep.body.get("error"),
                                     "message": rep.body.get("message")})
            return 200, _drop_empty({"result": RESULT_DISCARDED, "outcome": outcome_, "code": rep.body.get("error")})
        self.log.error("Servo rejected `completed` (protocol error, not retried)",
                       fields={"outcome": outcome_, "status": rep.status, "code": rep.body.get("error"),
                               "field": rep.body.get("field"), "message": rep.body.get("message")})
        return 200, _drop_empty({"result": RESULT_REJECTED, "outcome": outcome_, "code": rep.body.get("error"),
                                 "detail": rep.body.get("message")})

    def _supervise(self) -> None:
        """Fences the attempt when no acknowledgement came within
        heartbeatTimeoutMs, and stops the handler at the task's deadline."""
        deadline = _wall_to_mono(self.task.deadline)
        deadline_hit = False
        while True:
            with self._mu:
                if self._sup_quit:
                    return
            now = time.monotonic()
            if self.stopped() is None and now >= self._fence():
                self._fenced()
                return
            if not deadline_hit and now >= deadline:
                deadline_hit = True
                self.log.info("the task's deadline passed; stopping the handler")
                self.task._stop(DeadlineExceededError())
            wake = self._fence()
            if not deadline_hit:
                wake = min(wake, deadline)
            self._sup_wake.wait(None if wake == float("inf") else max(wake - now, 0.0) + 0.001)
            self._sup_wake.clear()

    def _heartbeat_loop(self) -> None:
        """Sends heartbeats until the handler returns or the attempt loses
        its authority: every interval (jittered down by up to 15%) while
        the progress or the message changed, early after a checkpoint (at
        most every interval/4), and otherwise (a plain heartbeat, nothing
        new to say) only once Servo's pacing hint (the last answer's
        nextHeartbeatInMs, docs/contract.md §5.7) has passed since that
        answer, when it is longer than the interval. Without a hint (an
        older Servo) every heartbeat comes at the interval."""
        interval = float(self.env["heartbeatIntervalMs"]) / 1000.0
        gap = interval / 4
        last = time.monotonic()
        wait = _jitter(interval)
        nxt, plain_at = last + wait, last + self._plain_wait(interval, wait)
        while True:
            self._wake.wait(max(nxt - time.monotonic(), 0.0))
            self._wake.clear()
            if self._quit.is_set():
                return
            with self._mu:
                flush, self._flush_req = self._flush_req, False
            now = time.monotonic()
            if flush:
                nxt = min(nxt, max(last + gap, now))
            if now < nxt:
                continue
            if now < plain_at and not self.task._changed():
                # Nothing new: wait for the hint, looking again every
                # interval in case the progress changes.
                nxt = min(plain_at, now + _jitter(interval))
                continue
            if not self._heartbeat_once(self._quit):
                return
            last = time.monotonic()
            wait = _jitter(interval)
            nxt, plain_at = last + wait, last + self._plain_wait(interval, wait)

    def _heartbeat_once(self, stop: Optional[threading.Event], final: bool = False) -> bool:
        """Sends one heartbeat with the latest progress and any unstored
        checkpoint, retrying until the token expires, the attempt is fenced
        or stop is set. Reports whether the attempt may go on.

        final: the last progress of an attempt whose handler is over,
        retried for FINAL_PROGRESS_WINDOW at most; not getting through
        then costs nothing but the progress (``completed`` follows)."""
        version = (0, 0)

        def body() -> bytes:
            nonlocal version
            b, version = self.task._heartbeat_body(self.app.worker_id, utcnow())
            return compact_json(b)

        window = time.monotonic() + FINAL_PROGRESS_WINDOW if final else float("inf")
        try:
            rep = self._post("heartbeat", body, lambda: min(self._token_until(), self._fence(), window), stop)
        except Stopped:
            return False
        except Unreachable as e:
            if final and time.monotonic() < min(self._token_until(), self._fence()):
                self.log.warning("could not send the attempt's last progress; reporting `completed` without it",
                                 fields={"error": str(e)})
                return True
            if self._fence() <= self._token_until():
                # The next try could not be acknowledged before the fence.
                self._lose(LeaseLostError("heartbeat_timeout", "no heartbeat acknowledged within heartbeatTimeoutMs: " + str(e)))
            else:
                self._lose(LeaseLostError("servo_unreachable", "Servo could not be reached before the task token expired: " + str(e)))
            return False
        self._adopt(rep)
        if rep.disposition == CONTINUE:
            if self.stopped() is not None:
                return False  # fenced meanwhile: a late acknowledgement does not undo it
            self._ack(rep.sent_at)
            self._paced(rep)
            self.task._acked(version)
            if rep.body.get("shouldCancel") is True:
                self._cancel_by(str(rep.body.get("cancelReason") or ""))
            return True
        if rep.disposition == CANCELLED:
            self._lose(LeaseLostError(str(rep.body.get("error") or ""), str(rep.body.get("message") or ""), rep.status))
        else:
            self._lose(RejectedError("heartbeat", rep.status, str(rep.body.get("error") or ""),
                                     str(rep.body.get("field") or ""), str(rep.body.get("message") or "")))
        return False


def call_handler(handler: Callable[[Task], Any], task: Task) -> Any:
    """Calls the handler; a coroutine it returns (an ``async def`` handler)
    is run to its end on an event loop of its own in this thread."""
    out = handler(task)
    if inspect.iscoroutine(out):
        out = _run_coroutine(out, task)
    return out


def _run_coroutine(coro: Coroutine[Any, Any, Any], task: Task) -> Any:
    """Runs an async handler's coroutine on a new event loop, as
    asyncio.run does, with the attempt's stop wired to it: the first
    reason the attempt must stop (Servo's cancel, lost lease, deadline, a
    pull worker's grace period) cancels the coroutine's task. If that
    cancellation ends it, the reason is raised here, as check_cancelled
    would raise it in a sync handler, so that outcomes are the same."""
    loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        main = loop.create_task(coro)
        task._bind_loop(loop, main)
        try:
            return loop.run_until_complete(main)
        except asyncio.CancelledError as e:
            cause = task._unbind_loop()
            if cause is None:
                raise RuntimeError("the handler's coroutine was cancelled (not by the SDK)") from e
            raise cause from e
        finally:
            task._unbind_loop()
            try:
                _cancel_all_tasks(loop)
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            except Exception:  # noqa: BLE001 - cleanup: the handler's result stands
                task.logger.exception("cleaning up the handler's event loop")
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def _cancel_all_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancels the tasks the handler left running (asyncio.run's way)."""
    left = asyncio.all_tasks(loop)
    if not left:
        return
    for t in left:
        t.cancel()
    loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
    for t in left:
        if not t.cancelled() and t.exception() is not None:
            loop.call_exception_handler({"message": "a task the handler left failed while being cancelled",
                                         "exception": t.exception(), "task": t})


def _jitter(d: float) -> float:
    return d - random.random() * 0.15 * d


def _drop_empty(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v not in (None, "")}


def _lost_answer(stop: StopRequested) -> dict[str, Any]:
    if isinstance(stop, RejectedError):
        return _drop_empty({"result": RESULT_REJECTED, "code": stop.code, "detail": str(stop)})
    code = stop.code if isinstance(stop, LeaseLostError) else ""
    return _drop_empty({"result": RESULT_LEASE_LOST, "code": code, "detail": str(stop)})


def _caused_by_stop(exc: BaseException) -> bool:
    seen = 0
    e: Optional[BaseException] = exc
    while e is not None and seen < 32:
        if isinstance(e, StopRequested):
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False


def _stack(exc: BaseException) -> str:
    s = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    b = s.encode("utf-8", "replace")
    if len(b) <= MAX_STACK_TRACE_BYTES:
        return s
    # Keep the end: the innermost frames and the exception itself.
    return b[-MAX_STACK_TRACE_BYTES:].decode("utf-8", "ignore")


def outcome(cause: Optional[StopRequested], out: Any, exc: Optional[BaseException], task: Task) -> dict[str, Any]:
    """Maps what the handler did to the `completed` report (without
    attempt, worker, time and metrics), as the Go SDK does:

    * returned: SUCCEEDED with the output (None: no output; not
      JSON-encodable or over 256 KiB: FAILED/USER_CODE, not retryable);
    * raised after Servo asked to cancel: CANCELLED with the last
      checkpoint as partialProgress and the phase as cancelledDuringPhase,
      unless it is a TaskError of another category not caused by the stop
      (a real failure found while winding down: FAILED with it);
    * raised a TaskCancelledError: CANCELLED (the worker's own cancel);
    * raised another TaskError: FAILED with its category and advice;
    * raised anything else after the deadline: FAILED/TIMEOUT;
    * raised anything else after a pull worker stopped it at the end of its
      grace period: FAILED/INFRASTRUCTURE, retryable;
    * raised anything else: FAILED/USER_CODE with the traceback.
    """
    def fail(category: str, msg: str, stack: str, retryable: Optional[bool]) -> dict[str, Any]:
        err: dict[str, Any] = {"category": category, "message": truncate(msg, MAX_MESSAGE_BYTES)}
        if stack:
            err["stackTrace"] = stack
        if retryable is not None:
            err["retryable"] = retryable
        return {"outcome": "FAILED", "error": err}

    def cancelled() -> dict[str, Any]:
        phase, cp = task._phase_and_checkpoint()
        r: dict[str, Any] = {"outcome": "CANCELLED"}
        if phase:
            r["cancelledDuringPhase"] = phase
        if cp is not None:
            r["partialProgress"] = cp
        return r

    if exc is None:
        if out is None:
            return {"outcome": "SUCCEEDED"}
        try:
            b = compact_json(out)
        except (TypeError, ValueError) as e:
            return fail(USER_CODE, f"encode output: {e}", "", False)
        if len(b) > MAX_OUTPUT_BYTES:
            return fail(USER_CODE, f"output is {len(b)} bytes; the limit is {MAX_OUTPUT_BYTES}", "", False)
        return {"outcome": "SUCCEEDED", "output": json.loads(b)}
    explicit = isinstance(exc, TaskError)
    msg = str(exc) if explicit else f"{type(exc).__name__}: {exc}"
    if isinstance(cause, CancelRequested) and (not explicit or exc.category == CAT_CANCELLED or _caused_by_stop(exc)):
        return cancelled()
    if explicit and exc.category == CAT_CANCELLED:
        return cancelled()
    if explicit:
        return fail(exc.category, msg or exc.category, _stack(exc), exc.retryable)
    if isinstance(cause, DeadlineExceededError):
        return fail(TIMEOUT, msg, _stack(exc), None)
    if isinstance(cause, WorkerStopping):
        return fail(INFRASTRUCTURE, msg, _stack(exc), True)
    return fail(USER_CODE, msg, _stack(exc), None)


def _cpu_time() -> float:
    if resource is not None:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime
    return time.process_time()


def _metrics(cpu0: float) -> dict[str, int]:
    """cpuTimeMs: the process's user+system CPU time while the handler ran;
    peakMemoryBytes: the process's peak resident set size so far. Both are
    process-wide: exact with one attempt per instance, an upper bound
    otherwise."""
    m: dict[str, int] = {}
    cpu = int(max(_cpu_time() - cpu0, 0.0) * 1000)
    if cpu > 0:
        m["cpuTimeMs"] = cpu
    if resource is not None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = peak if sys.platform == "darwin" else peak * 1024
        if peak > 0:
            m["peakMemoryBytes"] = int(peak)
    return m
