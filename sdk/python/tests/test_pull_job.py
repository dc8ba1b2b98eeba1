"""Pull mode and job mode against scripted servers: the claim is the
attempt's `started`, backoff and refusals of claims, the grace period, and
run_job's exit codes (as the Go SDK's worker.Pull and worker.RunJob). They
assert counts and events, never durations."""

from __future__ import annotations

import importlib
import json
import logging
import os
import socket
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional
from unittest import mock

import servo_worker as sw

# The module (servo_worker.pull is the function on the package).
pullmod = importlib.import_module("servo_worker.pull")

from fake_servo import FakeServo


class ClaimServer:
    """Answers POST /v1/pools/{pool}/claim with script(n, body) → (status, body, headers).
    A claim n for which hold(n) is true is answered only once the caller
    has closed the connection, or after 10 s (gone records which)."""

    def __init__(self, script: Callable[[int, dict[str, Any]], tuple[int, Any, dict[str, str]]],
                 hold: Optional[Callable[[int], bool]] = None) -> None:
        self.claims: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.gone: list[bool] = []
        self.cv = threading.Condition()
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw or b"{}")
                with outer.cv:
                    outer.claims.append(body)
                    outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                    n = len(outer.claims)
                    outer.cv.notify_all()
                if hold is not None and hold(n):
                    self.connection.settimeout(10)
                    try:
                        gone = self.connection.recv(1) == b""
                    except socket.timeout:
                        gone = False
                    except OSError:
                        gone = True
                    self.connection.settimeout(None)
                    with outer.cv:
                        outer.gone.append(gone)
                        outer.cv.notify_all()
                status, resp, hdrs = script(n, body) if self.path.endswith("/v1/pools/gpu/claim") else (404, {}, {})
                data = (resp if isinstance(resp, str) else json.dumps(resp)).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in hdrs.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    self.close_connection = True  # the caller left

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_held(self, n: int) -> None:
        """Waits until n held claims were decided (gone or not)."""
        with self.cv:
            if not self.cv.wait_for(lambda: len(self.gone) >= n, 20):
                raise AssertionError(f"{len(self.gone)} held claims decided, want {n}")

    def wait_claims(self, n: int) -> None:
        with self.cv:
            if not self.cv.wait_for(lambda: len(self.claims) >= n, 20):
                raise AssertionError(f"{len(self.claims)} claims, want {n}")


EMPTY = (200, {"claimed": False, "disposition": "CONTINUE"}, {})


def quiet_logger() -> logging.Logger:
    lg = logging.getLogger("servo_worker.test.pull")
    lg.propagate = False
    lg.handlers = [logging.NullHandler()]
    return lg


class TestPull(unittest.TestCase):
    def setUp(self) -> None:
        self.servo = FakeServo()
        self.addCleanup(self.servo.close)

    def claims(self, script: Callable[[int, dict[str, Any]], tuple[int, Any, dict[str, str]]],
               hold: Optional[Callable[[int], bool]] = None) -> ClaimServer:
        c = ClaimServer(script, hold)
        self.addCleanup(c.close)
        return c

    def pull(self, handler: Callable[[sw.Task], Any], api: str, stop: threading.Event, **kw: Any) -> threading.Thread:
        kw.setdefault("retry_backoff", (0.001, 0.01))
        kw.setdefault("max_wait", 0.2)
        self.errors: list[BaseException] = []

        def run() -> None:
            try:
                sw.pull(handler, api, "gpu", stop=stop, worker_id="py-pull", logger=quiet_logger(),
                        dev_identity="me@example.com", **kw)
            except BaseException as e:  # noqa: BLE001 - recorded for the test
                self.errors.append(e)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    def test_claimed_attempt_runs_without_started(self) -> None:
        env = self.servo.envelope()
        c = self.claims(lambda n, b: (200, {"claimed": True, "envelope": env, "disposition": "CONTINUE"}, {}) if n == 2 else EMPTY)
        stop = threading.Event()
        ran: list[int] = []
        t = self.pull(lambda task: ran.append(task.attempt) or {"ok": True}, c.url, stop)
        self.servo.wait_for(lambda calls: any(x.op == "completed" for x in calls))
        stop.set()
        t.join(20)
        self.assertFalse(t.is_alive())
        self.assertEqual(self.errors, [])
        self.assertEqual(ran, [1])
        self.assertEqual([x.op for x in self.servo.ops() if x.op != "heartbeat"], ["completed"], "the claim is `started`")
        self.assertEqual(self.servo.ops("completed")[0].body["outcome"], "SUCCEEDED")
        self.assertGreaterEqual(len(c.claims), 2)
        self.assertEqual(c.claims[0]["workerId"], "py-pull")
        self.assertEqual(c.claims[0]["maxWaitMs"], 200)
        self.assertEqual(c.headers[0].get("x-servo-dev-identity"), "me@example.com")

    def test_unavailable_claims_are_retried(self) -> None:
        env = self.servo.envelope()
        c = self.claims(lambda n, b: (503, {"disposition": "RETRY", "error": "unavailable"}, {"Retry-After": "0"}) if n <= 2
                        else (503, "<html>no healthy upstream</html>", {}) if n == 3
                        else (200, {"claimed": True, "envelope": env, "disposition": "CONTINUE"}, {}) if n == 4 else EMPTY)
        stop = threading.Event()
        t = self.pull(lambda task: 1, c.url, stop)
        self.servo.wait_for(lambda calls: any(x.op == "completed" for x in calls))
        stop.set()
        t.join(20)
        self.assertEqual(self.errors, [])
        self.assertGreaterEqual(len(c.claims), 4)

    def test_refused_claim_stops_pull(self) -> None:
        c = self.claims(lambda n, b: (403, {"disposition": "REJECTED", "error": "forbidden", "message": "not allowed"}, {}))
        t = self.pull(lambda task: 1, c.url, threading.Event())
        t.join(20)
        self.assertFalse(t.is_alive())
        self.assertEqual(len(self.errors), 1)
        e = self.errors[0]
        self.assertIsInstance(e, sw.ClaimRefused)
        assert isinstance(e, sw.ClaimRefused)
        self.assertEqual((e.status, e.code), (403, "forbidden"))
        self.assertEqual(len(c.claims), 1, "a refused claim is not retried")

    def test_grace_then_worker_stopping_is_retryable_infrastructure(self) -> None:
        env = self.servo.envelope()
        c = self.claims(lambda n, b: (200, {"claimed": True, "envelope": env, "disposition": "CONTINUE"}, {}) if n == 1 else EMPTY)
        stop = threading.Event()
        started = threading.Event()

        def handle(task: sw.Task) -> Any:
            task.checkpoint({"next": 7})
            started.set()
            task.cancelled.wait(30)
            task.check_cancelled()

        t = self.pull(handle, c.url, stop, grace=0.3)
        self.assertTrue(started.wait(20))
        stop.set()
        t.join(30)
        self.assertFalse(t.is_alive())
        done = self.servo.ops("completed")
        self.assertEqual(len(done), 1)
        self.assertEqual(done[0].body["outcome"], "FAILED")
        self.assertEqual(done[0].body["error"]["category"], "INFRASTRUCTURE")
        self.assertIs(done[0].body["error"]["retryable"], True)
        # The checkpoint was stored before `completed`: the retry resumes from it.
        self.assertTrue(any(x.body.get("checkpoint") == {"next": 7} for x in self.servo.ops("heartbeat")))

    def test_claim_open_at_stop_is_abandoned(self) -> None:
        # The first claim is a long-poll still open when the worker is told
        # to stop; the server then has a task for it. The SDK closes the
        # claim's connection at the stop, so the task never reaches it (a
        # real Servo hands the message back to the pool), and pull returns
        # without waiting for the long-poll.
        env = self.servo.envelope()
        c = self.claims(lambda n, b: (200, {"claimed": True, "envelope": env, "disposition": "CONTINUE"}, {}),
                        hold=lambda n: n == 1)
        stop = threading.Event()
        ran: list[int] = []
        t = self.pull(lambda task: ran.append(task.attempt), c.url, stop, max_wait=30)
        c.wait_claims(1)
        stop.set()
        t.join(20)
        self.assertFalse(t.is_alive())
        self.assertEqual(self.errors, [])
        c.wait_held(1)
        self.assertEqual(ran, [], "an attempt claimed after the stop was started")
        self.assertEqual(c.gone, [True], "the claim open at the stop was not abandoned")
        self.assertEqual(len(c.claims), 1, "no claim after the stop")
        self.assertEqual(self.servo.ops(), [], "the worker never saw the attempt")

    def test_attempt_claimed_after_stop_is_handed_back(self) -> None:
        # The claim's answer (a task) arrives after the stop, before the
        # SDK could abandon the claim (abandoning is disabled here): the
        # handler is not run, and the attempt is reported at once as
        # FAILED/INFRASTRUCTURE, retryable, so Servo retries it on another
        # worker without waiting for its lease to run out.
        env = self.servo.envelope()
        stop = threading.Event()

        def script(n: int, b: Any) -> tuple[int, Any, dict[str, str]]:
            if n == 1:
                stop.wait(10)
                return 200, {"claimed": True, "envelope": env, "disposition": "CONTINUE"}, {}
            return EMPTY

        c = self.claims(script)
        ran: list[int] = []
        with mock.patch.object(pullmod, "_abandon", lambda conn: None, create=True):
            t = self.pull(lambda task: ran.append(task.attempt), c.url, stop, max_wait=30)
            c.wait_claims(1)
            stop.set()
            t.join(20)
        self.assertFalse(t.is_alive())
        self.assertEqual(self.errors, [])
        self.assertEqual(ran, [], "an attempt claimed after the stop was started")
        self.assertEqual(len(c.claims), 1, "no claim after the stop")
        done = self.servo.ops("completed")
        self.assertEqual(len(done), 1)
        err = done[0].body["error"]
        self.assertEqual((done[0].body["outcome"], err["category"], err["retryable"]), ("FAILED", "INFRASTRUCTURE", True))
        self.assertIn("not started", err["message"])

    def test_then_pools_sent_in_order(self) -> None:
        # then_pools (docs/contract.md §10): more pools to claim from, in
        # priority order after the path's pool, on every claim; without
        # it the body has no thenPools key.
        for then_pools, want in ((["spot", "cpu", "a/b"], ["spot", "cpu", "a/b"]), (("spot",), ["spot"]),
                                 (None, None), ([], None)):
            with self.subTest(then_pools=then_pools):
                c = self.claims(lambda n, b: EMPTY)
                stop = threading.Event()
                kw: dict[str, Any] = {} if then_pools is None else {"then_pools": then_pools}
                t = self.pull(lambda task: 1, c.url, stop, **kw)
                c.wait_claims(2)
                stop.set()
                t.join(20)
                self.assertFalse(t.is_alive())
                self.assertEqual(self.errors, [])
                for body in c.claims:
                    self.assertEqual((body["workerId"], body["maxWaitMs"]), ("py-pull", 200))
                    if want is None:
                        self.assertNotIn("thenPools", body)
                    else:
                        self.assertEqual(body["thenPools"], want)

    def test_then_pools_refused_raises_claim_refused(self) -> None:
        c = self.claims(lambda n, b: (400, {"disposition": "REJECTED", "error": "invalid_request", "field": "thenPools[1]",
                                            "message": "a pool named twice"}, {}))
        t = self.pull(lambda task: 1, c.url, threading.Event(), then_pools=["cpu", "cpu"])
        t.join(20)
        self.assertFalse(t.is_alive())
        self.assertEqual(len(self.errors), 1)
        e = self.errors[0]
        assert isinstance(e, sw.ClaimRefused), e
        self.assertEqual((e.status, e.code, e.field), (400, "invalid_request", "thenPools[1]"))
        self.assertEqual(len(c.claims), 1, "a refused claim is not retried")
        self.assertEqual(c.claims[0]["thenPools"], ["cpu", "cpu"])

    def test_then_pools_is_not_one_string(self) -> None:
        with self.assertRaises(TypeError):
            sw.pull(lambda t: 1, "http://127.0.0.1:1", "gpu", then_pools="cpu", stop=threading.Event())

    def test_https_needs_an_id_token(self) -> None:
        with self.assertRaises(ValueError):
            sw.pull(lambda t: 1, "https://claim.example.com", "gpu", stop=threading.Event())


class TestRunJob(unittest.TestCase):
    def run_job(self, env: Optional[str], respond: Any = None) -> tuple[int, FakeServo]:
        f = FakeServo(respond)
        self.addCleanup(f.close)
        vars_ = {k: v for k, v in os.environ.items() if k != "SERVO_ENVELOPE"}
        if env is not None:
            vars_["SERVO_ENVELOPE"] = env.replace("FAKE_URL", f.url)
        vars_.update({"CLOUD_RUN_EXECUTION": "job-abc", "CLOUD_RUN_TASK_INDEX": "0", "CLOUD_RUN_TASK_ATTEMPT": "2"})
        with mock.patch.dict(os.environ, vars_, clear=True):
            code = sw.run_job(lambda t: {"n": 1}, logger=quiet_logger(), retry_backoff=(0.001, 0.01), start_retry_window=0.2)
        return code, f

    def test_exit_codes(self) -> None:
        f0 = FakeServo()
        self.addCleanup(f0.close)
        good = json.dumps(f0.envelope(callbackBaseUrl="FAKE_URL/"))
        code, f = self.run_job(good)
        self.assertEqual(code, sw.EXIT_SETTLED)
        self.assertEqual([c.op for c in f.ops()], ["started", "completed"])
        self.assertEqual(f.ops("started")[0].body["workerId"], "job-abc/task-0/try-2")

        code, f = self.run_job(good, lambda op, n, b: sw_refuse(409, "task_already_terminal") if op == "started" else None)
        self.assertEqual(code, sw.EXIT_SETTLED, "refused at started is settled: exit 0 so Cloud Run does not retry")

        code, _ = self.run_job(good, lambda op, n, b: sw_refuse(503, "unavailable", "RETRY"))
        self.assertEqual(code, sw.EXIT_NOT_RUN, "Servo unreachable: exit 1")

        self.assertEqual(self.run_job(None)[0], sw.EXIT_NOT_RUN, "no envelope: exit 1")
        self.assertEqual(self.run_job('{"taskId": 1}')[0], sw.EXIT_NOT_RUN, "a bad envelope: exit 1")


def sw_refuse(status: int, code: str, disposition: str = "CANCELLED") -> Any:
    from fake_servo import refuse
    return refuse(status, code, disposition)


if __name__ == "__main__":
    unittest.main()
