"""The Task a handler receives: one attempt of a Servo task."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
import logging
import threading
from typing import Any, Callable, Mapping, Optional

from ._logs import FieldsAdapter
from ._util import MAX_CHECKPOINT_BYTES, MAX_MESSAGE_BYTES, compact_json, format_time, parse_time, truncate
from .errors import CheckpointTooLargeError, StopRequested

__all__ = ["Task"]


class Task:
    """One attempt of a Servo task as a handler sees it: the envelope, the
    payload, the checkpoint to resume from, and the means to report progress
    and checkpoints. Its methods are safe to call from any thread, and from
    an ``async def`` handler's coroutine: none of them awaits or blocks
    except :meth:`wait` (in a coroutine, ``await asyncio.sleep(...)``
    instead; it is interrupted by the cancellation the SDK raises into the
    coroutine when the attempt must stop).

    Attributes:
        payload: the task's payload (decoded JSON; None if none).
        resume_from: the last checkpoint of an earlier attempt (decoded JSON;
            None on a first attempt or when no earlier attempt checkpointed).
        attempt: the attempt number, from 1.
        deadline: the task's deadline (aware UTC datetime) or None.
        cancelled: a threading.Event set when the attempt must stop (Servo
            asked to cancel, the lease is lost, the deadline passed); see
            :attr:`cancel_cause` and :meth:`check_cancelled`. For an
            ``async def`` handler the SDK also cancels the handler's
            coroutine then (``asyncio.CancelledError`` at its current
            ``await``), once, at the first cause.
        logger: a LoggerAdapter whose records carry taskId, attempt,
            tenantId, runId and workerId.
    """

    def __init__(
        self,
        envelope: Mapping[str, Any],
        worker_id: str = "test-worker",
        logger: Optional[logging.Logger | logging.LoggerAdapter] = None,  # type: ignore[type-arg]
        flush: Optional[Callable[[], None]] = None,
    ) -> None:
        env = dict(envelope)
        env.pop("taskToken", None)
        self._env = env
        self.task_id: str = str(env.get("taskId", ""))
        self.run_id: str = str(env.get("runId", ""))
        self.tenant_id: str = str(env.get("tenantId", ""))
        self.workspace_id: str = str(env.get("workspaceId", ""))
        self.task_key: str = str(env.get("taskKey", ""))
        self.asset_id: str = str(env.get("assetId", "") or "")
        self.worker: str = str(env.get("worker", ""))
        self.attempt: int = int(env.get("attempt") or 0)
        self.payload: Any = env.get("payload")
        self.resources: Any = env.get("resources")
        self.resume_from: Any = env.get("resumeFrom")
        self.deadline: Optional[dt.datetime] = parse_time(env.get("deadline"))
        self.worker_id = worker_id
        if logger is None:
            logger = logging.getLogger("servo_worker")
        if not isinstance(logger, FieldsAdapter):
            base = logger.logger if isinstance(logger, logging.LoggerAdapter) else logger
            logger = FieldsAdapter(base, {"taskId": self.task_id, "attempt": self.attempt,
                                          "tenantId": self.tenant_id, "runId": self.run_id, "workerId": worker_id})
        self.logger: FieldsAdapter = logger
        self.cancelled = threading.Event()
        self._flush = flush
        self._mu = threading.Lock()
        self._cause: Optional[StopRequested] = None
        self._progress_pct: Optional[int] = None
        self._message = ""
        self._pr_version = 0  # progress() calls so far
        self._pr_acked = 0  # the latest of them Servo acknowledged in a heartbeat
        # An async handler's event loop and main task, while it runs; the
        # cause its cancellation delivered (None: not cancelled by the SDK).
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._main: Optional["asyncio.Task[Any]"] = None
        self._loop_cause: Optional[StopRequested] = None
        self._phase = ""
        self._checkpoint: Optional[bytes] = None
        self._cp_version = 0
        self._cp_acked = 0

    @property
    def envelope(self) -> dict[str, Any]:
        """A copy of the envelope Cloud Tasks delivered, without the task
        token (the SDK alone uses it)."""
        return copy.deepcopy(self._env)

    # --- stopping -------------------------------------------------------

    @property
    def cancel_cause(self) -> Optional[StopRequested]:
        """Why the attempt must stop (None while it may go on):
        CancelRequested, LeaseLostError, RejectedError or
        DeadlineExceededError. The first cause stays."""
        with self._mu:
            return self._cause

    def check_cancelled(self) -> None:
        """Raises :attr:`cancel_cause` if the attempt must stop."""
        cause = self.cancel_cause
        if cause is not None:
            raise cause

    def wait(self, seconds: float) -> bool:
        """Sleeps up to ``seconds``; returns True at once if the attempt must
        stop (then :meth:`check_cancelled` raises)."""
        return self.cancelled.wait(max(seconds, 0))

    def _stop(self, cause: StopRequested) -> bool:
        with self._mu:
            first = self._cause is None
            if first:
                self._cause = cause
                if self._main is not None and self._loop is not None:
                    # Under the lock: the loop is not closed meanwhile.
                    self._loop_cause = cause
                    self._loop.call_soon_threadsafe(self._main.cancel, str(cause))
        self.cancelled.set()
        return first

    def _bind_loop(self, loop: asyncio.AbstractEventLoop, main: "asyncio.Task[Any]") -> None:
        """An async handler's coroutine runs as ``main`` on ``loop`` (not
        yet running): a stop cancels it. A cause already set cancels it at
        its first await."""
        with self._mu:
            self._loop, self._main = loop, main
            if self._cause is not None:
                self._loop_cause = self._cause
                loop.call_soon(main.cancel, str(self._cause))

    def _unbind_loop(self) -> Optional[StopRequested]:
        """The coroutine is over; returns the cause its cancellation
        delivered, if the SDK cancelled it."""
        with self._mu:
            self._loop = self._main = None
            return self._loop_cause

    # --- reporting ------------------------------------------------------

    def progress(self, pct: int, message: str = "") -> None:
        """Records progress (pct clamped to 0–100, message truncated to
        4 KiB); the next heartbeat carries it. Calls between heartbeats are
        coalesced: only the latest is sent. The last progress recorded
        before the handler returns or raises is always sent (with a last
        heartbeat before ``completed`` when no heartbeat carried it yet)."""
        pct = min(max(int(pct), 0), 100)
        message = truncate(str(message), MAX_MESSAGE_BYTES)
        with self._mu:
            if (pct, message) != (self._progress_pct, self._message):
                self._progress_pct, self._message = pct, message
                self._pr_version += 1

    def set_phase(self, phase: str) -> None:
        """Names what the attempt is doing, reported as cancelledDuringPhase
        if it ends CANCELLED."""
        with self._mu:
            self._phase = truncate(str(phase), 256)

    def checkpoint(self, state: Any) -> None:
        """Records ``state`` (JSON-encodable, at most 64 KiB encoded) as the
        attempt's checkpoint: what a later attempt resumes from
        (:attr:`resume_from`) if this one fails and Servo retries.

        A checkpoint asks for an early heartbeat: sent at once unless one
        went out less than a quarter of the heartbeat interval ago (then when
        that quarter has passed), so a burst costs at most four heartbeats
        per interval. One Servo has not stored yet when the handler fails is
        flushed with a last heartbeat before ``completed``; a CANCELLED
        report carries it as partialProgress.
        """
        try:
            b = compact_json(state)
        except (TypeError, ValueError) as e:
            raise ValueError(f"servo_worker: checkpoint is not JSON-encodable: {e}") from e
        if len(b) > MAX_CHECKPOINT_BYTES:
            raise CheckpointTooLargeError(f"servo_worker: checkpoint is {len(b)} bytes; the limit is {MAX_CHECKPOINT_BYTES}")
        with self._mu:
            self._checkpoint = b
            self._cp_version += 1
        if self._flush is not None:
            self._flush()

    @property
    def last_checkpoint(self) -> Any:
        """The last checkpoint recorded (decoded), or None."""
        with self._mu:
            return None if self._checkpoint is None else json.loads(self._checkpoint)

    @property
    def last_progress(self) -> tuple[Optional[int], str]:
        """The last progress recorded: (pct or None, message)."""
        with self._mu:
            return self._progress_pct, self._message

    # --- for the SDK ----------------------------------------------------

    def _heartbeat_body(self, worker_id: str, now: dt.datetime) -> tuple[dict[str, Any], tuple[int, int]]:
        with self._mu:
            body: dict[str, Any] = {"attempt": self.attempt, "workerId": worker_id, "heartbeatAt": format_time(now)}
            if self._progress_pct is not None:
                body["progressPct"] = self._progress_pct
            if self._message:
                body["message"] = self._message
            if self._cp_version > self._cp_acked and self._checkpoint is not None:
                body["checkpoint"] = json.loads(self._checkpoint)
            return body, (self._cp_version, self._pr_version)

    def _acked(self, version: tuple[int, int]) -> None:
        with self._mu:
            self._cp_acked = max(self._cp_acked, version[0])
            self._pr_acked = max(self._pr_acked, version[1])

    def _dirty(self) -> bool:
        """Whether a checkpoint Servo has not stored is pending."""
        with self._mu:
            return self._cp_version > self._cp_acked

    def _changed(self) -> bool:
        """Whether a heartbeat would carry something new: a checkpoint, or
        a progress or message, Servo has not acknowledged. Only a plain
        heartbeat waits for Servo's pacing hint."""
        with self._mu:
            return self._cp_version > self._cp_acked or self._pr_version > self._pr_acked

    def _progress_dirty(self) -> bool:
        """Whether progress no acknowledged heartbeat carried is pending."""
        with self._mu:
            return self._pr_version > self._pr_acked

    def _phase_and_checkpoint(self) -> tuple[str, Any]:
        with self._mu:
            return self._phase, (None if self._checkpoint is None else json.loads(self._checkpoint))
