"""Per-delivery overhead of the Python SDK, measured like the Go SDK's
BenchmarkDelivery (worker/protocol_test.go): the same scripted callback
server (tests/fake_servo.py, accepting everything), a no-op handler
returning {"rows": 1}, deliveries made in-process through the WSGI app.

    python3 bench/bench_delivery.py [n]

prints one JSON line: deliveries, msPerDelivery, callbacksPerDelivery.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import servo_worker as sw  # noqa: E402
from fake_servo import FakeServo, wsgi_post  # noqa: E402


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    f = FakeServo()
    quiet = logging.getLogger("servo_worker.bench")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    app = sw.App(lambda t: {"rows": 1}, worker_id="bench", logger=quiet)
    body = json.dumps(f.envelope(heartbeatIntervalMs=100, heartbeatTimeoutMs=300)).encode()
    for _ in range(20):  # warm up
        wsgi_post(app, body)
    before = len(f.ops())
    t0 = time.perf_counter()
    for _ in range(n):
        status, ans, _ = wsgi_post(app, body)
        if status != 200 or ans["result"] != "committed":
            raise SystemExit(f"answer {status} {ans}")
    elapsed = time.perf_counter() - t0
    calls = len(f.ops()) - before
    app.close()
    f.close()
    print(json.dumps({"deliveries": n, "msPerDelivery": round(elapsed * 1000 / n, 4), "callbacksPerDelivery": calls / n}))


if __name__ == "__main__":
    main()
