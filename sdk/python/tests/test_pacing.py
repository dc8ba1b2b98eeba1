"""Paced heartbeats (docs/contract.md §5.7): a plain heartbeat (nothing new)
waits for the last answer's nextHeartbeatInMs when it is longer than the
interval; changed progress still goes out at the interval, a checkpoint at
once; without the field (an older Servo) or with a hint under the interval,
every heartbeat comes at the interval. The handler runs 2.5 s with a 100 ms
interval: some 25 heartbeats at the interval, 2 or 3 a second apart. Counts
with wide margins, no durations: a loaded machine only makes timers late,
so fewer heartbeats."""

from __future__ import annotations

import json
import time
import unittest
from typing import Any, Optional

import servo_worker as sw

from fake_servo import Answer, FakeServo, accept, wsgi_post

RUN = 2.5

# (name, the started answer's hint, every heartbeat answer's hint (None:
# absent), progress changing, a checkpoint, min heartbeats, max heartbeats)
CASES = [
    ("paced: plain heartbeats wait for the hint", None, 1000, False, False, 1, 4),
    ("paced from the started answer", 1000, 1000, False, False, 1, 3),
    ("no hint (an older Servo): the interval", None, None, False, False, 8, 100),
    ("a hint under the interval: the interval", None, 50, False, False, 8, 100),
    ("changing progress: the interval", None, 1000, True, False, 8, 100),
    ("a checkpoint goes out at once", 5000, 5000, False, True, 1, 1),
]


class TestPacedHeartbeats(unittest.TestCase):
    def test_paced_heartbeats(self) -> None:
        for name, started, hint, progress, checkpoint, lo, hi in CASES:
            with self.subTest(name):
                def respond(op: str, n: int, body: dict[str, Any], started: Optional[int] = started,
                            hint: Optional[int] = hint) -> Answer:
                    a = accept(op)
                    h = started if op == "started" else hint if op == "heartbeat" else None
                    if h is not None and a.body is not None:
                        a.body["nextHeartbeatInMs"] = h
                    return a

                f = FakeServo(respond)
                self.addCleanup(f.close)

                def handle(t: sw.Task, progress: bool = progress, checkpoint: bool = checkpoint) -> Any:
                    end = time.monotonic() + RUN
                    i = 0
                    while time.monotonic() < end:
                        if progress:
                            t.progress(i % 100)
                        if checkpoint and i == 10:
                            t.checkpoint({"i": i})
                        time.sleep(0.02)
                        i += 1
                    return 1

                app = sw.App(handle, worker_id="py-test", retry_backoff=(0.001, 0.01), request_timeout=5)
                self.addCleanup(app.close)
                status, ans, _ = wsgi_post(app, json.dumps(f.envelope()).encode())
                self.assertEqual((status, ans.get("result")), (200, "committed"), ans)
                # The last progress is flushed before completed: only the
                # heartbeats of the run count.
                beats = [c for c in f.ops("heartbeat")]
                if progress and beats:
                    beats = beats[:-1]
                self.assertTrue(lo <= len(beats) <= hi, f"{len(beats)} heartbeats in {RUN} s, want {lo} to {hi}")
                if checkpoint:
                    self.assertEqual(beats[0].body.get("checkpoint"), {"i": 10})


if __name__ == "__main__":
    unittest.main()
