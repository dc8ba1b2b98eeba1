"""Exceptions of the Servo worker SDK.

Two families:

* :class:`TaskError` and its subclasses are what a handler raises to report
  a failure with a category of docs/contract.md §6.1 (``FAILED``), or its
  own decision to cancel (:class:`TaskCancelledError`, outcome
  ``CANCELLED``).
* :class:`StopRequested` and its subclasses are raised by
  :meth:`servo_worker.Task.check_cancelled` (and are the task's
  ``cancel_cause``) when the attempt must stop: Servo asked to cancel
  (:class:`CancelRequested`), the attempt lost its authority
  (:class:`LeaseLostError`, :class:`RejectedError`: nothing is reported), or
  the task's deadline passed (:class:`DeadlineExceededError`).
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "TaskError",
    "UserCodeError",
    "DataQualityError",
    "InfrastructureError",
    "ConfigurationError",
    "TaskTimeoutError",
    "ConflictError",
    "TaskCancelledError",
    "StopRequested",
    "CancelRequested",
    "LeaseLostError",
    "RejectedError",
    "DeadlineExceededError",
    "WorkerStopping",
    "CheckpointTooLargeError",
]

# Categories (docs/contract.md §6.1) and their default retryability.
USER_CODE = "USER_CODE"
DATA_QUALITY = "DATA_QUALITY"
INFRASTRUCTURE = "INFRASTRUCTURE"
CONFIGURATION = "CONFIGURATION"
TIMEOUT = "TIMEOUT"
CONFLICT = "CONFLICT"
CANCELLED = "CANCELLED"


class TaskError(Exception):
    """A failure with a category. Raise a subclass from a handler.

    ``retryable`` is the worker's advice to Servo (``None``: the category's
    default); Servo decides.
    """

    category: str = USER_CODE

    def __init__(self, message: str = "", *, retryable: Optional[bool] = None) -> None:
        super().__init__(message)
        self.retryable = retryable


class UserCodeError(TaskError):
    """A bug or exception in the task's own code (retryable by default).
    Any exception that is not a TaskError is reported as USER_CODE too."""

    category = USER_CODE


class DataQualityError(TaskError):
    """Input that failed validation (not retryable by default)."""

    category = DATA_QUALITY


class InfrastructureError(TaskError):
    """A cloud service error, OOM, full disk (retryable by default)."""

    category = INFRASTRUCTURE


class ConfigurationError(TaskError):
    """Missing or invalid configuration (not retryable by default)."""

    category = CONFIGURATION


class TaskTimeoutError(TaskError):
    """Execution that exceeded a deadline (retryable by default)."""

    category = TIMEOUT


class ConflictError(TaskError):
    """A compare-and-swap or optimistic-concurrency conflict (retryable by
    default, with a backoff of its own)."""

    category = CONFLICT


class TaskCancelledError(TaskError):
    """The worker's own decision to cancel the task: the attempt is reported
    with outcome CANCELLED (and the last checkpoint as partialProgress)."""

    category = CANCELLED


class StopRequested(Exception):
    """Base of the reasons an attempt must stop (see the subclasses)."""


class CancelRequested(StopRequested):
    """Servo asked the attempt to stop (a heartbeat answered
    ``shouldCancel``). Stop soon: the SDK reports CANCELLED with the last
    checkpoint as partialProgress when the handler returns or raises."""

    def __init__(self, reason: str = "") -> None:
        super().__init__("task cancelled by Servo" + (": " + reason if reason else ""))
        self.reason = reason


class LeaseLostError(StopRequested):
    """The attempt no longer has authority: Servo answered 410 or 409, no
    heartbeat was acknowledged within heartbeatTimeoutMs (fenced), or the
    token expired while Servo could not be reached. Stop at once and make
    no side effects; nothing more is reported for the attempt."""

    def __init__(self, code: str, message: str = "", status: int = 0) -> None:
        super().__init__(f"lease lost: {code} (HTTP {status}): {message}")
        self.code = code
        self.status = status
        self.detail = message


class RejectedError(StopRequested):
    """Servo refused a callback as invalid (disposition REJECTED): a
    protocol error that retrying cannot fix. Nothing more is reported."""

    def __init__(self, op: str, status: int, code: str, field: str = "", message: str = "") -> None:
        text = f"callback rejected by Servo: {op}: {code} (HTTP {status})"
        if field:
            text += " field " + field
        if message:
            text += ": " + message
        super().__init__(text)
        self.op = op
        self.status = status
        self.code = code
        self.field = field
        self.detail = message


class DeadlineExceededError(StopRequested):
    """The task's deadline (envelope ``deadline``) passed. An exception
    raised after it is reported as FAILED/TIMEOUT."""

    def __init__(self) -> None:
        super().__init__("task deadline exceeded")


class WorkerStopping(StopRequested):
    """A pull worker is shutting down and the attempt's grace period is
    over (like the Go SDK's ErrStopping). An exception raised after it is
    reported as FAILED/INFRASTRUCTURE, retryable: Servo runs the attempt
    again from its last checkpoint, on another worker. Also the report of
    an attempt a claim brought after the worker began to stop: its handler
    is not run (see :func:`servo_worker.pull`)."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message or "worker stopping: the grace period for running tasks is over")


class CheckpointTooLargeError(ValueError):
    """A checkpoint's JSON exceeds 64 KiB."""
