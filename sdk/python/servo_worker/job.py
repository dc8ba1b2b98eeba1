"""Job mode: one attempt per Cloud Run Job execution, its envelope in the
environment (docs/contract.md §11), like the Go SDK's worker.RunJob."""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

from ._logs import default_logger
from ._run import RESULT_INTERNAL, RESULT_UNREACHABLE
from ._util import truncate
from .app import App, EnvelopeError, Handler, parse_envelope

__all__ = ["run_job", "main_job", "ENVELOPE_ENV", "EXIT_SETTLED", "EXIT_NOT_RUN"]

ENVELOPE_ENV = "SERVO_ENVELOPE"
"""The environment variable Servo's jobs dispatch puts the envelope in."""
EXIT_SETTLED = 0
"""The attempt's fate was settled with Servo (whatever it was)."""
EXIT_NOT_RUN = 1
"""No envelope, or the attempt could not be settled (Servo unreachable):
the attempt is still Servo's to re-drive."""


def job_worker_id() -> str:
    """The execution's worker id: CLOUD_RUN_EXECUTION, task index and
    Cloud Run's attempt of it ("" outside a job)."""
    ex = os.environ.get("CLOUD_RUN_EXECUTION", "")
    if not ex:
        return ""
    return "/".join([ex, "task-" + (os.environ.get("CLOUD_RUN_TASK_INDEX") or "0"),
                     "try-" + (os.environ.get("CLOUD_RUN_TASK_ATTEMPT") or "0")])


def run_job(handler: Handler, **app_options: Any) -> int:
    """Runs the one attempt of this Cloud Run Job execution: reads the
    envelope from ``SERVO_ENVELOPE`` and runs ``handler`` under the same
    protocol as push mode (``started``, heartbeats, cancel, the lease fence,
    exactly one ``completed``). Returns the process's exit code:
    :data:`EXIT_SETTLED` (0) once the attempt's fate was settled with
    Servo, whatever it was (committed, discarded, refused at ``started``,
    lost lease, rejected), so that Cloud Run's own task retries never run
    an attempt Servo has decided; :data:`EXIT_NOT_RUN` (1) when there is no
    valid envelope or Servo could not be reached. ``app_options`` are those
    of :class:`App`; the worker id defaults to the execution's."""
    log = app_options.get("logger") or default_logger()
    raw = os.environ.get(ENVELOPE_ENV, "")
    if not raw:
        log.error("no Servo envelope in %s: this process was not started by Servo's jobs dispatch", ENVELOPE_ENV)
        return EXIT_NOT_RUN
    try:
        env = parse_envelope(raw.encode())
    except EnvelopeError as e:
        log.error("the envelope in %s is not valid: %s", ENVELOPE_ENV, truncate(str(e), 1000))
        return EXIT_NOT_RUN
    if not app_options.get("worker_id") and job_worker_id():
        app_options["worker_id"] = job_worker_id()
    app = App(handler, **app_options)
    try:
        status, answer = app.deliver(env)
    finally:
        app.close()
    if answer.get("result") in (RESULT_UNREACHABLE, RESULT_INTERNAL):
        app.logger.error("job attempt not settled with Servo: %s (HTTP %d): %s", answer.get("result"), status,
                         answer.get("detail", ""))
        return EXIT_NOT_RUN
    app.logger.info("job attempt settled with Servo: %s", answer.get("result"))
    return EXIT_SETTLED


def main_job(handler: Handler, **app_options: Any) -> NoReturn:
    """``sys.exit(run_job(handler, ...))``: the whole main of a job worker."""
    sys.exit(run_job(handler, **app_options))
