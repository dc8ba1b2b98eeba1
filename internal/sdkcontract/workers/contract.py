"""The contract worker of the shared SDK contract test (package sdkcontract),
on the Python SDK: python3 contract.py [--async] push PORT | pull API POOL
[MAX_WAIT_MS [GRACE_MS]] | job. With --async the handler is an async def
(the same steps, awaiting asyncio.sleep; a cancel arrives as
asyncio.CancelledError). A pull worker stops on SIGTERM (its stop event is
set) and then prints STOPPING."""

import asyncio
import os
import signal
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "sdk", "python"))

import servo_worker as sw  # noqa: E402

# The SDK's error classes by category name: payload failCategory (default
# INFRASTRUCTURE) is the class of the failAttempts' errors.
CATEGORIES = {
    "USER_CODE": sw.UserCodeError, "DATA_QUALITY": sw.DataQualityError, "INFRASTRUCTURE": sw.InfrastructureError,
    "CONFIGURATION": sw.ConfigurationError, "TIMEOUT": sw.TaskTimeoutError, "CONFLICT": sw.ConflictError,
    "CANCELLED": sw.TaskCancelledError,
}


def fail_class(p: dict) -> type:
    name = p.get("failCategory", "INFRASTRUCTURE")
    if name not in CATEGORIES:
        raise sw.DataQualityError(f"unknown failCategory {name!r}")
    return CATEGORIES[name]


def handle(t: sw.Task):
    p = t.payload or {}
    fail = fail_class(p)
    print(f"RUN {t.task_id} {t.attempt}", flush=True)
    steps, step_ms = int(p.get("steps", 3)), int(p.get("stepMs", 20))
    start = (t.resume_from or {}).get("next", 0)
    t.set_phase("processing")
    for i in range(start, steps):
        if t.wait(step_ms / 1000):
            t.check_cancelled()
        t.checkpoint({"next": i + 1})
        t.progress(100 * (i + 1) // steps)
        if i + 1 == steps // 2 and t.attempt <= int(p.get("crashAttempts", 0)):
            t.wait(1.0)  # the checkpoint's heartbeat goes out first
            os._exit(3)
        # Attempts up to failAttempts fail at the half-way step, or at their
        # first step when they resumed past it.
        if i + 1 >= steps // 2 and t.attempt <= int(p.get("failAttempts", 0)):
            raise fail(f"planned failure at step {i + 1}")
    return {"attempt": t.attempt, "resumedFrom": start, "processed": steps - start}


async def handle_async(t: sw.Task):
    p = t.payload or {}
    fail = fail_class(p)
    print(f"RUN {t.task_id} {t.attempt}", flush=True)
    steps, step_ms = int(p.get("steps", 3)), int(p.get("stepMs", 20))
    start = (t.resume_from or {}).get("next", 0)
    t.set_phase("processing")
    for i in range(start, steps):
        await asyncio.sleep(step_ms / 1000)  # a cancel raises CancelledError here
        t.checkpoint({"next": i + 1})
        t.progress(100 * (i + 1) // steps)
        if i + 1 == steps // 2 and t.attempt <= int(p.get("crashAttempts", 0)):
            await asyncio.sleep(1.0)  # the checkpoint's heartbeat goes out first
            os._exit(3)
        # Attempts up to failAttempts fail at the half-way step, or at their
        # first step when they resumed past it.
        if i + 1 >= steps // 2 and t.attempt <= int(p.get("failAttempts", 0)):
            raise fail(f"planned failure at step {i + 1}")
    return {"attempt": t.attempt, "resumedFrom": start, "processed": steps - start}


if __name__ == "__main__":
    if sys.argv[1] == "--async":
        handle = handle_async  # noqa: F811
        del sys.argv[1]
    mode = sys.argv[1]
    if mode == "push":
        srv = sw.make_server(sw.App(handle), int(sys.argv[2]), "127.0.0.1")
        print(f"listening on http://127.0.0.1:{srv.server_port}/", flush=True)
        srv.serve_forever()
    elif mode == "pull":
        max_wait = int(sys.argv[4]) / 1000 if len(sys.argv) > 4 else 2.0
        grace = int(sys.argv[5]) / 1000 if len(sys.argv) > 5 else 5.0
        stop = threading.Event()

        def on_signal(*_: object) -> None:
            stop.set()
            os.write(1, b"STOPPING\n")  # pull sees the stop from now on

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        sw.pull(handle, sys.argv[2], sys.argv[3], concurrency=2, max_wait=max_wait, grace=grace, stop=stop,
                dev_identity="contract-worker")
    elif mode == "job":
        sw.main_job(handle)
