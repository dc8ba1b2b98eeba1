"""``async def`` handlers in push, pull and job mode: the coroutine runs on
an event loop of its own with the guarantees of a sync handler
(heartbeats while it awaits, progress and checkpoints from inside it, the
stop raised into it as asyncio.CancelledError, the same outcomes and
fencing). They assert counts and events, never durations."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from typing import Any, Optional
from unittest import mock

import servo_worker as sw

from fake_servo import Answer, FakeServo, refuse
from test_pull_job import EMPTY, ClaimServer, quiet_logger
from test_protocol import Base


async def heartbeats(f: FakeServo, n: int) -> None:
    """Awaits until Servo got n heartbeats (the loop is free meanwhile)."""
    for _ in range(2000):
        if len(f.ops("heartbeat")) >= n:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{len(f.ops('heartbeat'))} heartbeats, want {n}")


def cancelling(op: str, n: int, b: Any) -> Optional[Answer]:
    if op == "heartbeat" and n >= 2:
        return Answer(200, {"acknowledged": True, "disposition": "CONTINUE", "shouldCancel": True, "cancelReason": "user_requested"})
    return None


class TestAsyncPush(Base):
    def test_runs_on_a_loop_while_heartbeats_go_on(self) -> None:
        f = self.servo()
        seen: dict[str, Any] = {}

        async def handle(t: sw.Task) -> Any:
            seen["loop"] = asyncio.get_running_loop()
            seen["thread"] = threading.current_thread()
            t.progress(10, "warming up")  # plain calls, from the coroutine
            t.checkpoint({"next": 1})
            await heartbeats(f, 3)
            t.progress(90, "almost")
            return {"rows": t.payload["rows"]}

        got = self.deliver(self.app(handle), f.envelope())
        self.assertAnswer(got, 200, "committed")
        done = f.ops("completed")
        self.assertEqual(len(done), 1)
        self.assertEqual((done[0].body["outcome"], done[0].body["output"]), ("SUCCEEDED", {"rows": 3}))
        beats = f.ops("heartbeat")
        self.assertGreaterEqual(len(beats), 3, "heartbeats went on while the coroutine awaited")
        self.assertTrue(any(b.body.get("checkpoint") == {"next": 1} for b in beats))
        self.assertEqual((beats[-1].body["progressPct"], beats[-1].body["message"]), (90, "almost"))
        self.assertIs(seen["thread"], threading.current_thread(), "the loop runs in the delivery's thread")
        self.assertTrue(seen["loop"].is_closed(), "the attempt's loop is closed after it")

    def test_servo_cancel_is_raised_into_the_coroutine(self) -> None:
        f = self.servo(cancelling)
        seen: list[Any] = []

        async def handle(t: sw.Task) -> Any:
            t.set_phase("processing")
            t.checkpoint({"nextPartition": 3})
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                seen.append(t.cancel_cause)
                raise

        got = self.deliver(self.app(handle), f.envelope())
        self.assertAnswer(got, 200, "committed")
        self.assertEqual(len(seen), 1)
        self.assertIsInstance(seen[0], sw.CancelRequested)
        done = f.ops("completed")
        self.assertEqual(len(done), 1)
        self.assertEqual((done[0].body["outcome"], done[0].body["cancelledDuringPhase"], done[0].body["partialProgress"]),
                         ("CANCELLED", "processing", {"nextPartition": 3}))

    def test_winding_down_after_the_cancel(self) -> None:
        # Caught: the coroutine may await more (saving state) and raise its
        # own exception; the rules of a sync handler apply.
        for name, ending, outcome in [("returns", "return", "SUCCEEDED"), ("raises plain", "raise", "CANCELLED"),
                                      ("raises DataQualityError", "dq", "FAILED")]:
            with self.subTest(name):
                f = self.servo(cancelling)

                async def handle(t: sw.Task, ending: str = ending) -> Any:
                    try:
                        await asyncio.sleep(30)
                    except asyncio.CancelledError:
                        await asyncio.sleep(0)
                        t.checkpoint({"saved": True})
                    if ending == "return":
                        return "done early"
                    if ending == "dq":
                        raise sw.DataQualityError("row 7 is corrupt")
                    raise RuntimeError("stopped")

                self.deliver(self.app(handle), f.envelope())
                body = f.ops("completed")[0].body
                self.assertEqual(body["outcome"], outcome)
                if outcome == "SUCCEEDED":
                    self.assertEqual(body["output"], "done early")
                if outcome == "CANCELLED":
                    self.assertEqual(body["partialProgress"], {"saved": True})
                if outcome == "FAILED":
                    self.assertEqual(body["error"]["category"], "DATA_QUALITY")

    def test_lost_lease_cancels_and_nothing_is_reported(self) -> None:
        f = self.servo(lambda op, n, b: refuse(410, "task_expired", "CANCELLED") if op == "heartbeat" else None)
        seen: list[Any] = []

        async def handle(t: sw.Task) -> Any:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                seen.append(t.cancel_cause)
                raise

        got = self.deliver(self.app(handle), f.envelope())
        self.assertAnswer(got, 200, "lease_lost")
        self.assertIsInstance(seen[0], sw.LeaseLostError)
        self.assertEqual(f.ops("completed"), [])

    def test_fenced_coroutine_reports_nothing(self) -> None:
        f = self.servo(lambda op, n, b: Answer(hijack=True) if op == "heartbeat" else None)

        async def handle(t: sw.Task) -> Any:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                pass
            return "finished anyway"

        got = self.deliver(self.app(handle), f.envelope(heartbeatIntervalMs=50, heartbeatTimeoutMs=1000))
        self.assertAnswer(got, 200, "lease_lost")
        self.assertEqual(got[1]["code"], "heartbeat_timeout")
        self.assertEqual(f.ops("completed"), [])

    def test_deadline_passed_is_timeout(self) -> None:
        f = self.servo()

        async def handle(t: sw.Task) -> Any:
            await asyncio.sleep(30)

        self.deliver(self.app(handle), f.envelope(deadline="2000-01-01T00:00:00Z"))
        err = f.ops("completed")[0].body["error"]
        self.assertEqual(err["category"], "TIMEOUT")

    def test_failures_are_categorised(self) -> None:
        for exc, category in [(sw.InfrastructureError("disk"), "INFRASTRUCTURE"), (ValueError("plain"), "USER_CODE")]:
            with self.subTest(category):
                f = self.servo()

                async def handle(t: sw.Task, e: BaseException = exc) -> Any:
                    await asyncio.sleep(0)
                    raise e

                self.deliver(self.app(handle), f.envelope())
                err = f.ops("completed")[0].body["error"]
                self.assertEqual(err["category"], category)
                self.assertIn(type(exc).__name__, err["stackTrace"])

    def test_tasks_left_running_are_cancelled(self) -> None:
        f = self.servo()
        left: list[str] = []

        async def background() -> None:
            try:
                await asyncio.sleep(30)
            finally:
                left.append("cancelled")

        async def handle(t: sw.Task) -> Any:
            asyncio.get_running_loop().create_task(background())
            await asyncio.sleep(0)
            return 1

        got = self.deliver(self.app(handle), f.envelope())
        self.assertAnswer(got, 200, "committed")
        self.assertEqual(left, ["cancelled"])

    def test_a_cancel_of_its_own_is_a_failure(self) -> None:
        f = self.servo()

        async def handle(t: sw.Task) -> Any:
            raise asyncio.CancelledError()

        got = self.deliver(self.app(handle), f.envelope())
        self.assertAnswer(got, 200, "committed")
        err = f.ops("completed")[0].body["error"]
        self.assertEqual(err["category"], "USER_CODE")

    def test_sync_handler_runs_without_a_loop(self) -> None:
        f = self.servo()
        seen: list[Any] = []

        def handle(t: sw.Task) -> Any:
            try:
                asyncio.get_running_loop()
                seen.append("loop")
            except RuntimeError:
                seen.append("no loop")
            return 1

        self.assertAnswer(self.deliver(self.app(handle), f.envelope()), 200, "committed")
        self.assertEqual(seen, ["no loop"])


class TestAsyncPullAndJob(Base):
    def test_pull(self) -> None:
        f = self.servo()
        env = f.envelope()
        c = ClaimServer(lambda n, b: (200, {"claimed": True, "envelope": env, "disposition": "CONTINUE"}, {}) if n == 1 else EMPTY)
        self.addCleanup(c.close)
        stop = threading.Event()

        async def handle(t: sw.Task) -> Any:
            await heartbeats(f, 2)
            return {"attempt": t.attempt}

        th = threading.Thread(target=lambda: sw.pull(handle, c.url, "gpu", stop=stop, worker_id="py-pull", logger=quiet_logger(),
                                                     dev_identity="me@example.com", max_wait=0.2, retry_backoff=(0.001, 0.01)),
                              daemon=True)
        th.start()
        f.wait_for(lambda calls: any(x.op == "completed" for x in calls))
        stop.set()
        th.join(20)
        self.assertFalse(th.is_alive())
        done = f.ops("completed")
        self.assertEqual(len(done), 1)
        self.assertEqual((done[0].body["outcome"], done[0].body["output"]), ("SUCCEEDED", {"attempt": 1}))

    def test_pull_grace_over_cancels_the_coroutine(self) -> None:
        f = self.servo()
        env = f.envelope()
        c = ClaimServer(lambda n, b: (200, {"claimed": True, "envelope": env, "disposition": "CONTINUE"}, {}) if n == 1 else EMPTY)
        self.addCleanup(c.close)
        stop = threading.Event()
        started = threading.Event()
        seen: list[Any] = []

        async def handle(t: sw.Task) -> Any:
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                seen.append(t.cancel_cause)
                raise

        th = threading.Thread(target=lambda: sw.pull(handle, c.url, "gpu", stop=stop, worker_id="py-pull", logger=quiet_logger(),
                                                     dev_identity="me@example.com", max_wait=0.2, grace=0.3,
                                                     retry_backoff=(0.001, 0.01)), daemon=True)
        th.start()
        self.assertTrue(started.wait(20))
        stop.set()
        th.join(30)
        self.assertFalse(th.is_alive())
        self.assertIsInstance(seen[0], sw.WorkerStopping)
        err = f.ops("completed")[0].body["error"]
        self.assertEqual((err["category"], err["retryable"]), ("INFRASTRUCTURE", True))

    def test_job(self) -> None:
        f = self.servo()

        async def handle(t: sw.Task) -> Any:
            t.progress(100, "all done")
            await asyncio.sleep(0)
            return {"n": 1}

        vars_ = {k: v for k, v in os.environ.items() if k != "SERVO_ENVELOPE"}
        vars_["SERVO_ENVELOPE"] = json.dumps(f.envelope())
        with mock.patch.dict(os.environ, vars_, clear=True):
            code = sw.run_job(handle, logger=quiet_logger(), retry_backoff=(0.001, 0.01))
        self.assertEqual(code, sw.EXIT_SETTLED)
        done = f.ops("completed")
        self.assertEqual(len(done), 1)
        self.assertEqual((done[0].body["outcome"], done[0].body["output"]), ("SUCCEEDED", {"n": 1}))


if __name__ == "__main__":
    import unittest
    unittest.main()
