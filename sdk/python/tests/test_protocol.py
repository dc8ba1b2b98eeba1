"""Protocol unit tests of servo_worker against a scripted callback server
(docs/contract.md §4.4 as the worker sees it). They assert counts and events, never
durations."""

from __future__ import annotations

import io
import json
import logging
import threading
import time
import unittest
from typing import Any, Callable, Optional
from unittest import mock

import servo_worker as sw
import servo_worker._run as runmod
from servo_worker._logs import JsonFormatter, TextFormatter

from fake_servo import TOKEN, Answer, FakeServo, accept, refuse, wsgi_post

REFRESHED = "tok-SECRET-77b2e0.refreshed"

# The refusals of docs/contract.md §4.4: (status, error, disposition).
CANCEL_ROWS = [
    (409, "task_already_terminal", "CANCELLED"),
    (409, "attempt_mismatch", "CANCELLED"),
    (409, "attempt_already_started", "CANCELLED"),
    (410, "task_expired", "CANCELLED"),
]
REJECT_ROWS = [
    (409, "completion_conflict", "REJECTED"),
    (400, "invalid_request", "REJECTED"),
    (401, "invalid_token", "REJECTED"),
    (401, "token_expired", "REJECTED"),
    (403, "token_scope_mismatch", "REJECTED"),
    (404, "task_not_found", "REJECTED"),
    (413, "payload_too_large", "REJECTED"),
    (415, "unsupported_media_type", "REJECTED"),
    (500, "internal", "REJECTED"),  # a Servo body is final whatever its status
]
UNAVAILABLE = refuse(503, "unavailable", "RETRY")
UNAVAILABLE.headers = {"Retry-After": "0"}
GATEWAY = [
    Answer(502, raw="<html><body>502 Bad Gateway</body></html>"),
    Answer(504, raw=""),
    Answer(429, raw="Too Many Requests"),
    Answer(503, raw="no healthy upstream"),
]


class LogCapture:
    """Captures the SDK's records, formatted as JSON and as text."""

    def __init__(self) -> None:
        self.stream = io.StringIO()
        self.records: list[logging.LogRecord] = []
        self.logger = logging.getLogger("servo_worker.test." + str(id(self)))
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False
        outer = self

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                outer.records.append(record)

        for fmt in (JsonFormatter(), TextFormatter()):
            h = logging.StreamHandler(self.stream)
            h.setFormatter(fmt)
            self.logger.addHandler(h)
        self.logger.addHandler(Keep())

    def text(self) -> str:
        return self.stream.getvalue()

    def fields(self, message: str) -> list[dict[str, Any]]:
        return [getattr(r, "servo", {}) for r in self.records if r.getMessage() == message]


class Base(unittest.TestCase):
    def servo(self, respond: Optional[Callable[[str, int, dict[str, Any]], Optional[Answer]]] = None) -> FakeServo:
        f = FakeServo(respond)
        self.addCleanup(f.close)
        return f

    def app(self, handler: Callable[[sw.Task], Any], **kw: Any) -> sw.App:
        self.logs = LogCapture()
        kw.setdefault("retry_backoff", (0.001, 0.01))
        kw.setdefault("request_timeout", 5)
        app = sw.App(handler, worker_id="py-test", logger=self.logs.logger, **kw)
        self.addCleanup(app.close)
        return app

    def deliver(self, app: sw.App, env: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        status, ans, _ = wsgi_post(app, json.dumps(env).encode())
        self.assertNotIn(TOKEN, json.dumps(ans))
        self.assertNotIn(TOKEN, self.logs.text(), "a task token was logged")
        self.assertNotIn(REFRESHED, self.logs.text(), "a task token was logged")
        return status, ans

    def assertAnswer(self, got: tuple[int, dict[str, Any]], status: int, result: str) -> None:
        self.assertEqual((got[0], got[1].get("result")), (status, result), got[1])


def wait_cancelled(t: sw.Task) -> Any:
    if not t.cancelled.wait(10):
        raise AssertionError("the handler was never cancelled")
    t.check_cancelled()
    return None


class TestSuccess(Base):
    def test_started_then_completed_once(self) -> None:
        f = self.servo()
        seen: dict[str, Any] = {}

        def handle(t: sw.Task) -> Any:
            seen.update(payload=t.payload, attempt=t.attempt, resume=t.resume_from, id=t.task_id)
            return {"rows": t.payload["rows"]}

        got = self.deliver(self.app(handle), f.envelope())
        self.assertAnswer(got, 200, "committed")
        self.assertEqual(got[1]["outcome"], "SUCCEEDED")
        self.assertEqual(got[1]["workerId"], "py-test")
        self.assertEqual([c.op for c in f.ops()], ["started", "completed"])
        self.assertEqual(seen, {"payload": {"rows": 3}, "attempt": 1, "resume": None, "id": "task_01TEST"})
        done = f.ops("completed")[0].body
        self.assertEqual((done["outcome"], done["output"], done["attempt"], done["workerId"]), ("SUCCEEDED", {"rows": 3}, 1, "py-test"))
        for c in f.ops():
            self.assertEqual(c.auth, "Bearer " + TOKEN)
        self.assertEqual(f.ops("started")[0].body["workerId"], "py-test")

    def test_resume_from_and_deadline(self) -> None:
        f = self.servo()
        seen: dict[str, Any] = {}

        def handle(t: sw.Task) -> Any:
            seen.update(resume=t.resume_from, deadline=t.deadline.year if t.deadline else None)

        got = self.deliver(self.app(handle), f.envelope(attempt=2, resumeFrom={"nextPartition": 3}, deadline="2999-01-01T00:00:00.123456789Z"))
        self.assertAnswer(got, 200, "committed")
        self.assertEqual(seen, {"resume": {"nextPartition": 3}, "deadline": 2999})
        self.assertNotIn("output", f.ops("completed")[0].body)


class TestStartedRows(Base):
    """`started` answered with each row of docs/contract.md §4.4."""

    def test_refusals_do_not_run_the_handler(self) -> None:
        for status, code, disp in CANCEL_ROWS + REJECT_ROWS:
            with self.subTest(code=code, status=status):
                f = self.servo(lambda op, n, b, a=refuse(status, code, disp, state="SUCCEEDED"): a if op == "started" else None)
                ran = []
                got = self.deliver(self.app(lambda t: ran.append(1)), f.envelope())
                self.assertAnswer(got, 200, "not_started" if disp == "CANCELLED" else "rejected")
                self.assertEqual(got[1].get("code"), code)
                self.assertEqual(ran, [])
                self.assertEqual([c.op for c in f.ops()], ["started"], "a final answer is not retried; nothing follows it")

    def test_unavailable_is_retried(self) -> None:
        f = self.servo(lambda op, n, b: UNAVAILABLE if op == "started" and n <= 2 else None)
        got = self.deliver(self.app(lambda t: 1), f.envelope())
        self.assertAnswer(got, 200, "committed")
        self.assertEqual([c.op for c in f.ops()], ["started"] * 3 + ["completed"])
        self.assertEqual(len({c.raw for c in f.ops("started")}), 1, "the same body on every retry")

    def test_unreachable_answers_503(self) -> None:
        f = self.servo(lambda op, n, b: Answer(hijack=True))
        ran = []
        got = self.deliver(self.app(lambda t: ran.append(1), start_retry_window=0.5), f.envelope())
        self.assertAnswer(got, 503, "servo_unreachable")
        self.assertEqual(ran, [])
        self.assertGreater(len(f.ops("started")), 1, "transport failures are retried")


class TestHeartbeatRows(Base):
    """A heartbeat answered with each row of docs/contract.md §4.4 while the
    handler runs."""

    def test_cancelled_rows_abort_and_never_complete(self) -> None:
        for status, code, disp in CANCEL_ROWS:
            with self.subTest(code=code):
                f = self.servo(lambda op, n, b, a=refuse(status, code, disp): a if op == "heartbeat" else None)
                causes: list[Any] = []

                def handle(t: sw.Task) -> Any:
                    try:
                        wait_cancelled(t)
                    except sw.StopRequested as e:
                        causes.append(e)
                        raise

                got = self.deliver(self.app(handle), f.envelope())
                self.assertAnswer(got, 200, "lease_lost")
                self.assertEqual(len(causes), 1)
                self.assertIsInstance(causes[0], sw.LeaseLostError)
                self.assertEqual((causes[0].code, causes[0].status), (code, status))
                self.assertEqual(len(f.ops("heartbeat")), 1, "nothing is sent after a final answer")
                self.assertEqual(f.ops("completed"), [], "completed is never reported after the lease is lost")

    def test_rejected_rows_stop_and_never_complete(self) -> None:
        for status, code, disp in REJECT_ROWS:
            with self.subTest(code=code):
                f = self.servo(lambda op, n, b, a=refuse(status, code, disp): a if op == "heartbeat" else None)
                causes: list[Any] = []
                got = self.deliver(self.app(lambda t: causes.append(t.cancelled.wait(10) and t.cancel_cause)), f.envelope())
                self.assertAnswer(got, 200, "rejected")
                self.assertIsInstance(causes[0], sw.RejectedError)
                self.assertEqual(len(f.ops("heartbeat")), 1)
                self.assertEqual(f.ops("completed"), [])

    def test_unavailable_is_retried_and_the_attempt_goes_on(self) -> None:
        f = self.servo(lambda op, n, b: UNAVAILABLE if op == "heartbeat" and n <= 2 else None)

        def handle(t: sw.Task) -> Any:
            f.wait_for(lambda calls: sum(c.op == "heartbeat" for c in calls) >= 4)
            self.assertFalse(t.cancelled.is_set())
            return "ok"

        got = self.deliver(self.app(handle), f.envelope())
        self.assertAnswer(got, 200, "committed")


class TestCompletedRows(Base):
    def test_final_answers_are_sent_once(self) -> None:
        rows = [(s, c, d, "discarded") for s, c, d in CANCEL_ROWS] + [(s, c, d, "rejected") for s, c, d in REJECT_ROWS]
        for status, code, disp, result in rows:
            with self.subTest(code=code):
                f = self.servo(lambda op, n, b, a=refuse(status, code, disp): a if op == "completed" else None)
                got = self.deliver(self.app(lambda t: {"ok": True}), f.envelope())
                self.assertAnswer(got, 200, result)
                self.assertEqual(len(f.ops("completed")), 1)

    def test_retry_scheduled_is_committed(self) -> None:
        a = Answer(200, {"acknowledged": True, "disposition": "COMMITTED", "finalState": "QUEUED", "retryScheduled": True, "nextAttempt": 2})
        f = self.servo(lambda op, n, b: a if op == "completed" else None)
        got = self.deliver(self.app(lambda t: (_ for _ in ()).throw(sw.InfrastructureError("disk full"))), f.envelope())
        self.assertAnswer(got, 200, "committed")
        self.assertEqual((got[1]["outcome"], got[1]["finalState"]), ("FAILED", "QUEUED"))
        self.assertEqual(len(f.ops("completed")), 1)

    def test_exactly_once_same_body_on_retry(self) -> None:
        answers = {1: Answer(hijack=True), 2: UNAVAILABLE, 3: GATEWAY[0]}
        f = self.servo(lambda op, n, b: answers.get(n) if op == "completed" else None)
        got = self.deliver(self.app(lambda t: {"n": 1}), f.envelope())
        self.assertAnswer(got, 200, "committed")
        done = f.ops("completed")
        self.assertEqual(len(done), 4)
        self.assertEqual(len({c.raw for c in done}), 1, "every retry carries the same body")
        self.assertEqual(f.ops()[-1].op, "completed", "nothing after COMMITTED")

    def test_unreachable_until_token_expiry_answers_503(self) -> None:
        import datetime as dt
        exp = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        f = self.servo(lambda op, n, b: Answer(hijack=True) if op == "completed" else None)
        got = self.deliver(self.app(lambda t: 1), f.envelope(tokenExpiresAt=exp, heartbeatIntervalMs=60000))
        self.assertAnswer(got, 503, "servo_unreachable")
        self.assertGreater(len(f.ops("completed")), 1)

    def test_duplicate_delivery_joins_the_running_attempt(self) -> None:
        f = self.servo()
        release = threading.Event()
        runs = []

        def handle(t: sw.Task) -> Any:
            runs.append(1)
            release.wait(10)
            return {"n": len(runs)}

        app = self.app(handle)
        env = f.envelope(heartbeatIntervalMs=60000)
        first: list[Any] = []
        th = threading.Thread(target=lambda: first.append(self.deliver(app, env)))
        th.start()
        f.wait_for(lambda calls: any(c.op == "started" for c in calls))
        second: list[Any] = []
        th2 = threading.Thread(target=lambda: second.append(self.deliver(app, env)))
        th2.start()
        release.set()
        th.join()
        th2.join()
        self.assertEqual(runs, [1])
        self.assertEqual(first, second)
        self.assertEqual(len(f.ops("started")), 1)
        self.assertEqual(len(f.ops("completed")), 1)


class TestRetryRules(Base):
    def test_gateway_answers_are_retried_for_every_callback(self) -> None:
        for op_ in ("started", "heartbeat", "completed"):
            with self.subTest(op=op_):
                f = self.servo(lambda op, n, b, o=op_: GATEWAY[n - 1] if op == o and n <= len(GATEWAY) else None)

                def handle(t: sw.Task, o: str = op_) -> Any:
                    if o == "heartbeat":
                        f.wait_for(lambda calls: sum(c.op == "heartbeat" for c in calls) > len(GATEWAY))
                    return 1

                got = self.deliver(self.app(handle), f.envelope())
                self.assertAnswer(got, 200, "committed")
                self.assertGreaterEqual(len(f.ops(op_)), len(GATEWAY) + 1)

    def test_servo_body_is_final_whatever_the_status(self) -> None:
        cases = [
            ("started", refuse(500, "internal", "REJECTED"), "rejected", False),
            ("started", refuse(429, "rate_limited", "REJECTED"), "rejected", False),
            ("started", refuse(502, "task_already_terminal", "CANCELLED"), "not_started", False),
            ("heartbeat", refuse(429, "rate_limited", "REJECTED"), "rejected", True),
            ("heartbeat", refuse(504, "task_expired", "CANCELLED"), "lease_lost", True),
            ("completed", refuse(500, "internal", "REJECTED"), "rejected", True),
            ("completed", refuse(503, "whatever", "REJECTED"), "rejected", True),
            ("completed", refuse(502, "attempt_mismatch", "CANCELLED"), "discarded", True),
            ("completed", refuse(500, "weird", "COMMITTED"), "committed", True),
        ]
        for op_, ans, result, ran_ in cases:
            with self.subTest(op=op_, status=ans.status, disp=ans.body["disposition"]):
                ans.headers = {"Retry-After": "0"}
                f = self.servo(lambda op, n, b, o=op_, a=ans: a if op == o else None)
                ran = []

                def handle(t: sw.Task, o: str = op_) -> Any:
                    ran.append(1)
                    if o == "heartbeat":
                        t.cancelled.wait(10)
                    return 1

                got = self.deliver(self.app(handle), f.envelope())
                self.assertAnswer(got, 200, result)
                self.assertEqual(len(f.ops(op_)), 1, "sent exactly once")
                self.assertEqual(bool(ran), ran_)
                if op_ != "completed":
                    self.assertEqual(f.ops("completed"), [])

    def test_retry_after_is_honoured(self) -> None:
        a = refuse(503, "unavailable", "RETRY")
        a.headers = {"Retry-After": "1"}
        f = self.servo(lambda op, n, b: a if op == "started" and n == 1 else None)
        got = self.deliver(self.app(lambda t: 1, retry_backoff=(0.001, 5)), f.envelope())
        self.assertAnswer(got, 200, "committed")
        waits = self.logs.fields("callback failed; retrying")
        self.assertEqual(len(waits), 1)
        self.assertGreaterEqual(waits[0]["retryInS"], 1.0, "the retry waits at least Retry-After")


class TestHeartbeats(Base):
    def test_checkpoints_and_progress_are_coalesced(self) -> None:
        f = self.servo()

        def handle(t: sw.Task) -> Any:
            for i in range(200):
                t.progress(i // 2, f"row {i}")
                t.checkpoint({"i": i})
            f.wait_for(lambda calls: any(c.op == "heartbeat" and c.body.get("checkpoint") == {"i": 199} for c in calls))
            return 1

        got = self.deliver(self.app(handle), f.envelope(heartbeatIntervalMs=2000))
        self.assertAnswer(got, 200, "committed")
        beats = f.ops("heartbeat")
        self.assertLessEqual(len(beats), 3, f"200 checkpoints cost {len(beats)} heartbeats")
        last = [c for c in beats if "checkpoint" in c.body][-1].body
        self.assertEqual((last["checkpoint"], last["progressPct"], last["message"]), ({"i": 199}, 99, "row 199"))

    def test_stored_checkpoint_is_not_resent(self) -> None:
        f = self.servo()

        def handle(t: sw.Task) -> Any:
            t.checkpoint({"next": 1})
            f.wait_for(lambda calls: sum(c.op == "heartbeat" for c in calls) >= 3)
            return 1

        self.assertAnswer(self.deliver(self.app(handle), f.envelope()), 200, "committed")
        with_cp = [c for c in f.ops("heartbeat") if "checkpoint" in c.body]
        self.assertEqual(len(with_cp), 1)
        self.assertEqual(with_cp[0].body["checkpoint"], {"next": 1})

    def test_failure_flushes_the_last_checkpoint_first(self) -> None:
        f = self.servo()

        def handle(t: sw.Task) -> Any:
            t.checkpoint({"nextPartition": 3})
            raise sw.InfrastructureError("boom")

        self.assertAnswer(self.deliver(self.app(handle), f.envelope(heartbeatIntervalMs=60000)), 200, "committed")
        ops = [c.op for c in f.ops()]
        self.assertEqual(ops[-2:], ["heartbeat", "completed"])
        self.assertEqual(f.ops("heartbeat")[-1].body["checkpoint"], {"nextPartition": 3})

    def test_last_progress_is_sent_before_completed(self) -> None:
        # "step 7/8" went out with a heartbeat; "step 8/8", reported just
        # before the handler returned, fell within the heartbeat throttle:
        # it is sent with a last heartbeat before `completed`, so the
        # attempt does not end showing 87 %.
        f = self.servo()

        def handle(t: sw.Task) -> Any:
            t.progress(87, "step 7/8")
            t.checkpoint({"step": 7})  # an early heartbeat (a quarter interval in), then none for 3.4 s or more
            f.wait_for(lambda calls: any(c.op == "heartbeat" for c in calls))
            t.progress(100, "step 8/8")
            return {"steps": 8}

        got = self.deliver(self.app(handle), f.envelope(heartbeatIntervalMs=4000))
        self.assertAnswer(got, 200, "committed")
        self.assertEqual([c.op for c in f.ops()], ["started", "heartbeat", "heartbeat", "completed"])
        last = f.ops("heartbeat")[-1].body
        self.assertEqual((last["progressPct"], last["message"]), (100, "step 8/8"))
        self.assertNotIn("checkpoint", last, "a stored checkpoint is not sent again")

        # Progress a heartbeat already carried costs nothing more.
        f = self.servo()

        def handle2(t: sw.Task) -> Any:
            t.progress(100, "done")
            t.checkpoint({"step": 8})
            f.wait_for(lambda calls: any(c.op == "heartbeat" for c in calls))
            t.progress(100, "done")
            return 1

        self.assertAnswer(self.deliver(self.app(handle2), f.envelope(heartbeatIntervalMs=4000)), 200, "committed")
        self.assertEqual([c.op for c in f.ops()], ["started", "heartbeat", "completed"])

    def test_last_progress_is_best_effort(self) -> None:
        # The last progress cannot get through: `completed` is sent anyway.
        f = self.servo(lambda op, n, b: UNAVAILABLE if op == "heartbeat" else None)
        with mock.patch.object(runmod, "FINAL_PROGRESS_WINDOW", 0.2, create=True):
            got = self.deliver(self.app(lambda t: t.progress(100, "done") or 1), f.envelope(heartbeatIntervalMs=60000))
        self.assertAnswer(got, 200, "committed")
        self.assertGreaterEqual(len(f.ops("heartbeat")), 1)
        self.assertEqual(f.ops()[-1].op, "completed")
        self.assertEqual(f.ops("completed")[0].body["outcome"], "SUCCEEDED")
        self.assertEqual(len(self.logs.fields("could not send the attempt's last progress; reporting `completed` without it")), 1)

    def test_last_progress_of_a_cancelled_attempt(self) -> None:
        f = self.servo(TestCancellation.cancelling)

        def handle(t: sw.Task) -> Any:
            t.cancelled.wait(10)
            t.progress(40, "stopped at 40 %")
            t.check_cancelled()

        self.assertAnswer(self.deliver(self.app(handle), f.envelope()), 200, "committed")
        self.assertEqual(f.ops()[-1].op, "completed")
        self.assertEqual(f.ops("completed")[0].body["outcome"], "CANCELLED")
        self.assertEqual(f.ops("heartbeat")[-1].body.get("message"), "stopped at 40 %")

    def test_token_refresh_is_adopted(self) -> None:
        refreshed = Answer(200, {"acknowledged": True, "disposition": "CONTINUE", "shouldCancel": False,
                                 "taskToken": REFRESHED, "tokenExpiresAt": "2999-01-01T00:00:00Z"})
        f = self.servo(lambda op, n, b: refreshed if op == "heartbeat" and n == 1 else None)

        def handle(t: sw.Task) -> Any:
            f.wait_for(lambda calls: sum(c.op == "heartbeat" for c in calls) >= 3)
            return 1

        self.assertAnswer(self.deliver(self.app(handle), f.envelope()), 200, "committed")
        auths = [(c.op, c.auth) for c in f.ops()]
        self.assertEqual(auths[:2], [("started", "Bearer " + TOKEN), ("heartbeat", "Bearer " + TOKEN)])
        for op, auth in auths[2:]:
            self.assertEqual(auth, "Bearer " + REFRESHED, op)
        self.assertEqual(len(self.logs.fields("adopted a refreshed task token")), 1)


class TestCancellation(Base):
    @staticmethod
    def cancelling(op: str, n: int, b: Any) -> Optional[Answer]:
        if op == "heartbeat" and n >= 2:
            return Answer(200, {"acknowledged": True, "disposition": "CONTINUE", "shouldCancel": True, "cancelReason": "user_requested"})
        return None

    def test_should_cancel_reports_cancelled_with_partial_progress(self) -> None:
        f = self.servo(self.cancelling)
        causes: list[Any] = []

        def handle(t: sw.Task) -> Any:
            t.set_phase("processing")
            t.checkpoint({"nextPartition": 3})
            try:
                wait_cancelled(t)
            except sw.CancelRequested as e:
                causes.append(e)
                raise

        got = self.deliver(self.app(handle), f.envelope())
        self.assertAnswer(got, 200, "committed")
        self.assertEqual(got[1]["outcome"], "CANCELLED")
        self.assertEqual(causes[0].reason, "user_requested")
        done = f.ops("completed")
        self.assertEqual(len(done), 1)
        self.assertEqual((done[0].body["outcome"], done[0].body["cancelledDuringPhase"], done[0].body["partialProgress"]),
                         ("CANCELLED", "processing", {"nextPartition": 3}))
        self.assertNotIn("error", done[0].body)
        self.assertEqual(len(self.logs.fields("Servo asked to cancel the attempt; cancelling the handler")), 1)

    def test_explicit_failure_while_winding_down_is_failed(self) -> None:
        f = self.servo(self.cancelling)

        def handle(t: sw.Task) -> Any:
            t.cancelled.wait(10)
            raise sw.DataQualityError("row 7 is corrupt")

        self.deliver(self.app(handle), f.envelope())
        body = f.ops("completed")[0].body
        self.assertEqual((body["outcome"], body["error"]["category"]), ("FAILED", "DATA_QUALITY"))

    def test_returning_after_a_cancel_succeeds(self) -> None:
        f = self.servo(self.cancelling)
        self.deliver(self.app(lambda t: t.cancelled.wait(10) and "done early"), f.envelope())
        body = f.ops("completed")[0].body
        self.assertEqual((body["outcome"], body["output"]), ("SUCCEEDED", "done early"))

    def test_own_cancel(self) -> None:
        f = self.servo()

        def handle(t: sw.Task) -> Any:
            t.checkpoint({"n": 1})
            raise sw.TaskCancelledError("no longer needed")

        self.deliver(self.app(handle), f.envelope(heartbeatIntervalMs=60000))
        body = f.ops("completed")[0].body
        self.assertEqual((body["outcome"], body["partialProgress"]), ("CANCELLED", {"n": 1}))


class TestFencing(Base):
    """No acknowledged heartbeat for heartbeatTimeoutMs: the attempt is
    fenced (the handler is cancelled) and completed is never reported."""

    def test_fenced_when_heartbeats_are_not_acknowledged(self) -> None:
        for name, bad in [("transport failure", Answer(hijack=True)), ("unavailable", UNAVAILABLE), ("gateway", GATEWAY[0])]:
            with self.subTest(name):
                f = self.servo(lambda op, n, b, a=bad: a if op == "heartbeat" else None)
                causes: list[Any] = []

                def handle(t: sw.Task) -> Any:
                    try:
                        wait_cancelled(t)
                    except sw.LeaseLostError as e:
                        causes.append(e)
                    return "finished anyway"  # even a success is not reported

                got = self.deliver(self.app(handle), f.envelope(heartbeatIntervalMs=50, heartbeatTimeoutMs=1000))
                self.assertAnswer(got, 200, "lease_lost")
                self.assertEqual(got[1]["code"], "heartbeat_timeout")
                self.assertEqual(len(causes), 1)
                self.assertEqual(causes[0].code, "heartbeat_timeout")
                self.assertGreater(len(f.ops("heartbeat")), 1, "heartbeats were retried before fencing")
                self.assertEqual(f.ops("completed"), [], "a fenced attempt never reports completed")

    def test_not_fenced_while_heartbeats_are_acknowledged(self) -> None:
        f = self.servo()

        def handle(t: sw.Task) -> Any:
            # Three times as many heartbeats as fit in one heartbeatTimeoutMs
            # (whose margin over the interval absorbs a loaded machine's stalls).
            f.wait_for(lambda calls: sum(c.op == "heartbeat" for c in calls) >= 60, timeout=20)
            t.check_cancelled()
            return 1

        got = self.deliver(self.app(handle), f.envelope(heartbeatIntervalMs=50, heartbeatTimeoutMs=1000))
        self.assertAnswer(got, 200, "committed")


    def test_fence_counted_from_sending(self) -> None:
        # Every heartbeat answered CONTINUE only after 1 s (D), interval I =
        # 0.2 s, heartbeatTimeoutMs T = 1.8 s: D+I < T < 2D+I. Counted from
        # the answers' arrival the fence never falls (one every D+I);
        # counted from the sending, as Servo counts the lease, it falls
        # before the second heartbeat's answer.
        def slow(op: str, n: int, b: dict[str, Any]) -> Optional[Answer]:
            if op == "heartbeat":
                time.sleep(1.0)
            return None

        f = self.servo(slow)
        causes: list[Any] = []

        def handle(t: sw.Task) -> Any:
            if t.wait(12):  # about ten slow acknowledgements
                causes.append(t.cancel_cause)
            return 1

        got = self.deliver(self.app(handle), f.envelope(heartbeatIntervalMs=200, heartbeatTimeoutMs=1800))
        self.assertAnswer(got, 200, "lease_lost")
        self.assertEqual(got[1]["code"], "heartbeat_timeout")
        self.assertEqual(len(causes), 1)
        self.assertEqual(f.ops("completed"), [], "a fenced attempt never reports completed")


class TestOutcomes(Base):
    def test_categories(self) -> None:
        cases: list[tuple[BaseException, str, Optional[bool]]] = [
            (sw.UserCodeError("bug"), "USER_CODE", None),
            (sw.DataQualityError("bad row"), "DATA_QUALITY", None),
            (sw.InfrastructureError("disk", retryable=False), "INFRASTRUCTURE", False),
            (sw.ConfigurationError("no bucket"), "CONFIGURATION", None),
            (sw.TaskTimeoutError("slow"), "TIMEOUT", None),
            (sw.ConflictError("version moved"), "CONFLICT", None),
            (ValueError("plain"), "USER_CODE", None),
        ]
        for exc, category, retryable in cases:
            with self.subTest(category=category, exc=type(exc).__name__):
                f = self.servo()

                def handle(t: sw.Task, e: BaseException = exc) -> Any:
                    raise e

                got = self.deliver(self.app(handle), f.envelope())
                self.assertAnswer(got, 200, "committed")
                err = f.ops("completed")[0].body["error"]
                self.assertEqual(err["category"], category)
                self.assertEqual(err.get("retryable"), retryable)
                self.assertIn(type(exc).__name__, err["stackTrace"])
        self.assertEqual(err["message"], "ValueError: plain")

    def test_deadline_passed_is_timeout(self) -> None:
        f = self.servo()

        def handle(t: sw.Task) -> Any:
            wait_cancelled(t)

        self.deliver(self.app(handle), f.envelope(deadline="2000-01-01T00:00:00Z"))
        err = f.ops("completed")[0].body["error"]
        self.assertEqual(err["category"], "TIMEOUT")

    def test_output_not_json_is_failed_not_retryable(self) -> None:
        f = self.servo()
        self.deliver(self.app(lambda t: {1, 2}), f.envelope())
        err = f.ops("completed")[0].body["error"]
        self.assertEqual((err["category"], err["retryable"]), ("USER_CODE", False))


class TestDeliveries(Base):
    def test_bad_deliveries(self) -> None:
        f = self.servo()
        app = self.app(lambda t: 1)
        good = f.envelope()
        cases = [
            (b"not json", 400, "bad_envelope"),
            (json.dumps({**good, "taskId": ""}).encode(), 400, "bad_envelope"),
            (json.dumps({**good, "attempt": 0}).encode(), 400, "bad_envelope"),
            (json.dumps({k: v for k, v in good.items() if k != "taskToken"}).encode(), 400, "bad_envelope"),
            (json.dumps({**good, "heartbeatIntervalMs": 0}).encode(), 400, "bad_envelope"),
            (json.dumps({**good, "callbackBaseUrl": "ftp://x"}).encode(), 400, "bad_envelope"),
            (json.dumps({k: v for k, v in good.items() if k != "tokenExpiresAt"}).encode(), 400, "bad_envelope"),
            (b"x" * ((1 << 20) + 1), 413, "envelope_too_large"),
        ]
        for body, status, result in cases:
            with self.subTest(result=result, body=body[:40]):
                got = wsgi_post(app, body)
                self.assertEqual((got[0], got[1]["result"]), (status, result))
        got = wsgi_post(app, b"", method="GET")
        self.assertEqual((got[0], got[1]["result"], got[2]["Allow"]), (405, "method_not_allowed", "POST"))
        self.assertEqual(f.ops(), [])
        self.assertNotIn(TOKEN, self.logs.text())

    def test_any_malformed_envelope_is_an_envelope_error(self) -> None:
        # Nested past Python's recursion limit, and fields of the wrong
        # type: each an EnvelopeError, never another exception.
        deep = b'{"taskId": "t", "payload": ' + b"[" * 100000 + b"]" * 100000 + b"}"
        for body in (deep, b'{"taskId": "t", "attempt": 1, "taskToken": "a.b.c", "heartbeatIntervalMs": 1, "callbackBaseUrl": 7}',
                     b'{"taskId": "t", "attempt": 1, "taskToken": "x", "heartbeatIntervalMs": 1, "callbackBaseUrl": "http://x", "tokenExpiresAt": 5}'):
            with self.assertRaises(sw.EnvelopeError):
                sw.parse_envelope(body)

    def test_token_expiry_from_the_jwt(self) -> None:
        import base64
        claims = base64.urlsafe_b64encode(json.dumps({"exp": 4102444800}).encode()).rstrip(b"=").decode()
        env = sw.parse_envelope(json.dumps({"taskId": "t", "attempt": 1, "taskToken": f"h.{claims}.s", "heartbeatIntervalMs": 1,
                                            "callbackBaseUrl": "http://x/"}).encode())
        self.assertEqual((env["_tokenExpiresAt"].year, env["callbackBaseUrl"]), (2100, "http://x"))

    def test_cloud_logging_json(self) -> None:
        f = self.servo(lambda op, n, b: UNAVAILABLE if op == "started" and n == 1 else None)
        self.deliver(self.app(lambda t: 1), f.envelope())
        lines = [json.loads(l) for l in self.logs.text().splitlines() if l.startswith("{")]
        retry = [l for l in lines if l["message"] == "callback failed; retrying"][0]
        self.assertEqual((retry["severity"], retry["taskId"], retry["attempt"], retry["op"]), ("WARNING", "task_01TEST", 1, "started"))


class TestTokensNeverLogged(Base):
    def test_no_token_in_any_log_line(self) -> None:
        refreshed = Answer(200, {"acknowledged": True, "disposition": "CONTINUE", "shouldCancel": False,
                                 "taskToken": REFRESHED, "tokenExpiresAt": "2999-01-01T00:00:00Z"})
        script = {("started", 1): Answer(hijack=True), ("started", 2): UNAVAILABLE, ("heartbeat", 1): refreshed,
                  ("heartbeat", 2): GATEWAY[0], ("completed", 1): refuse(401, "invalid_token", "REJECTED")}
        f = self.servo(lambda op, n, b: script.get((op, n)))

        def handle(t: sw.Task) -> Any:
            t.logger.info("handler log", fields={"envelope": t.envelope})
            f.wait_for(lambda calls: sum(c.op == "heartbeat" for c in calls) >= 3)
            raise RuntimeError("boom")

        got = self.deliver(self.app(handle), f.envelope())  # deliver() asserts no token in the logs
        self.assertAnswer(got, 200, "rejected")
        self.assertGreater(len(self.logs.records), 5)


if __name__ == "__main__":
    unittest.main()
