"""The example Servo worker in Python: the same `partitions` work and
payload contract as the Go example (examples/worker/partitions), on the
Python worker SDK (sdk/python, package servo_worker).

Payload: {"partitions": 10, "partitionMs": 500, "failAttempts": 1, "invalid": false}

  - partitions (1-10000) and partitionMs (0-600000): the work, simulated as
    a wait of partitionMs per partition;
  - failAttempts k: attempts 1..k fail with an INFRASTRUCTURE error half way
    through the partitions they have left, so a retry resumes from the
    checkpoint;
  - invalid: the payload fails validation (DATA_QUALITY, not retried).

Checkpoint: {"nextPartition": i}. Output:
{"partitions": n, "processed": p, "resumedFrom": i, "attempt": a, "digest": "..."}.

Run it: `python3 worker.py` (the standard library's server on $PORT,
default 8080; PORT=0 picks a free port and prints it), or under gunicorn:
`gunicorn --threads 8 worker:app`. GET /healthz answers 204.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import sys
import threading
from typing import Any, Callable, Iterable

import servo_worker as sw

MAX_PARTITIONS = 10000
MAX_PARTITION_MS = 600_000

log = logging.getLogger("partitions")


def _int(payload: dict[str, Any], name: str, default: int = 0) -> int:
    v = payload.get(name, default)
    if not isinstance(v, int) or isinstance(v, bool):
        raise sw.DataQualityError(f"{name} must be an integer, got {v!r}")
    return v


def validate(payload: Any) -> tuple[int, int, int]:
    """Checks the payload; returns (partitions, partitionMs, failAttempts)."""
    if not isinstance(payload, dict):
        raise sw.DataQualityError("the payload must be a JSON object")
    if payload.get("invalid") is True:
        raise sw.DataQualityError("the payload is marked invalid")
    n, ms, fail = _int(payload, "partitions"), _int(payload, "partitionMs"), _int(payload, "failAttempts")
    if not 1 <= n <= MAX_PARTITIONS:
        raise sw.DataQualityError(f"partitions must be between 1 and {MAX_PARTITIONS}, got {n}")
    if not 0 <= ms <= MAX_PARTITION_MS:
        raise sw.DataQualityError(f"partitionMs must be between 0 and {MAX_PARTITION_MS}, got {ms}")
    if fail < 0:
        raise sw.DataQualityError(f"failAttempts must not be negative, got {fail}")
    return n, ms, fail


def digest(n: int) -> str:
    """A checksum over the partitions' (simulated) results, the same as the
    Go example's and however many attempts the work took."""
    h = hashlib.sha256()
    for i in range(n):
        h.update(i.to_bytes(8, "big"))
    return h.hexdigest()[:16]


def process(task: sw.Task) -> dict[str, Any]:
    """The handler: process the partitions, checkpoint after each."""
    n, ms, fail_attempts = validate(task.payload)
    resume = task.resume_from if isinstance(task.resume_from, dict) else {}
    start = resume.get("nextPartition", 0)
    if not isinstance(start, int) or isinstance(start, bool):
        raise ValueError(f"resumeFrom.nextPartition is not an integer: {start!r}")  # our own checkpoint: USER_CODE
    start = min(max(start, 0), n)
    if task.resume_from is not None:
        task.logger.info("resuming from checkpoint", fields={"nextPartition": start, "partitions": n})
    fail_at = start + (n - start) // 2 if task.attempt <= fail_attempts else -1
    task.set_phase("processing")
    task.progress(100 * start // n, f"starting at partition {start + 1} of {n}")
    for i in range(start, n):
        # Between partitions: stop if Servo asked to, or the lease is gone.
        task.check_cancelled()
        if i == fail_at:
            raise sw.InfrastructureError(f"partition {i + 1}, attempt {task.attempt}: injected failure (failAttempts)")
        # The partition's work. Interrupted work is not checkpointed, so a
        # later attempt redoes this partition.
        if task.wait(ms / 1000.0):
            task.check_cancelled()
        task.checkpoint({"nextPartition": i + 1})
        task.progress(100 * (i + 1) // n, f"partition {i + 1} of {n} done")
    task.set_phase("done")
    return {"partitions": n, "processed": n - start, "resumedFrom": start, "attempt": task.attempt, "digest": digest(n)}


def with_healthz(app: sw.App) -> Callable[..., Iterable[bytes]]:
    """Serves GET /healthz (204) next to the SDK's application on /."""

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/healthz" and environ.get("REQUEST_METHOD") == "GET":
            start_response("204 No Content", [])
            return []
        return app(environ, start_response)

    return wsgi


sw.setup_logging(getattr(logging, os.environ.get("LOG_LEVEL", "INFO").upper(), logging.INFO))
app = with_healthz(sw.App(process))
"""The WSGI application (gunicorn worker:app)."""


def main() -> None:
    srv = sw.make_server(app, port=int(os.environ.get("PORT", "8080")), host=os.environ.get("HOST", "0.0.0.0"))
    # The port on stdout, for scripts and tests that pass PORT=0.
    print(f"listening on http://127.0.0.1:{srv.server_port}/", flush=True)

    def stop(signum: int, frame: Any) -> None:
        threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    try:
        srv.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
