"""Servo's Python worker SDK: the worker side of Servo's callback contract
(docs/contract.md §4, §14), behaving like the Go SDK (``worker/``).

    import servo_worker

    def handle(task: servo_worker.Task):
        rows = task.payload["rows"]
        start = (task.resume_from or {}).get("next", 0)
        for i in range(start, rows):
            task.check_cancelled()      # Servo asked to stop, or the lease is gone
            do_row(i)
            task.checkpoint({"next": i + 1})
            task.progress(100 * (i + 1) // rows, "rows")
        return {"rows": rows}           # SUCCEEDED with this output

    app = servo_worker.App(handle)      # push: WSGI, gunicorn --threads 8 module:app
    # or, locally: app.serve(port=8080)
    # pull: servo_worker.pull(handle, api, pool, concurrency=4)
    # job:  servo_worker.main_job(handle)  (a Cloud Run Job execution)
    # A handler may be `async def`: it runs on an event loop of its own and
    # is cancelled (asyncio.CancelledError) when the attempt must stop.

Workers do work, not truth: Servo alone decides a task's state.
"""

from ._logs import JsonFormatter, TextFormatter, setup_logging
from .app import App, EnvelopeError, Handler, default_worker_id, make_server, parse_envelope, serve
from .errors import (CancelRequested, CheckpointTooLargeError, ConfigurationError, ConflictError, DataQualityError,
                     DeadlineExceededError, InfrastructureError, LeaseLostError, RejectedError, StopRequested,
                     TaskCancelledError, TaskError, TaskTimeoutError, UserCodeError, WorkerStopping)
from .job import EXIT_NOT_RUN, EXIT_SETTLED, main_job, run_job
from .pull import ClaimRefused, metadata_id_token, pull
from .task import Task

__version__ = "0.2.0"

__all__ = [
    "App", "Handler", "Task", "serve", "pull", "run_job", "main_job", "EXIT_SETTLED", "EXIT_NOT_RUN",
    "ClaimRefused", "metadata_id_token", "WorkerStopping", "make_server", "parse_envelope", "default_worker_id", "EnvelopeError",
    "TaskError", "UserCodeError", "DataQualityError", "InfrastructureError", "ConfigurationError",
    "TaskTimeoutError", "ConflictError", "TaskCancelledError",
    "StopRequested", "CancelRequested", "LeaseLostError", "RejectedError", "DeadlineExceededError",
    "CheckpointTooLargeError",
    "setup_logging", "JsonFormatter", "TextFormatter",
]
