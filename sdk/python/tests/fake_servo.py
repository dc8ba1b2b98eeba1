"""A scripted stand-in for Servo's callbacks (http.server in a thread) that
records what the SDK sent. Unit tests only: the Go integration test
(python_test.go) drives the example worker against the real stack."""

from __future__ import annotations

import datetime as dt
import io
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional

TOKEN = "tok-SECRET-4f9a1c.initial"


@dataclass
class Call:
    op: str
    auth: str
    body: dict[str, Any]
    raw: bytes
    seq: int


@dataclass
class Answer:
    status: int = 0
    body: Optional[dict[str, Any]] = None
    raw: Optional[str] = None  # replaces the JSON body (a proxy's page)
    headers: dict[str, str] = field(default_factory=dict)
    hijack: bool = False  # close the connection without an answer


def accept(op: str) -> Answer:
    if op == "completed":
        return Answer(200, {"acknowledged": True, "disposition": "COMMITTED", "finalState": "SUCCEEDED"})
    if op == "heartbeat":
        return Answer(200, {"acknowledged": True, "disposition": "CONTINUE", "shouldCancel": False})
    return Answer(200, {"acknowledged": True, "disposition": "CONTINUE"})


def refuse(status: int, code: str, disposition: str, **extra: Any) -> Answer:
    body = {"acknowledged": False, "disposition": disposition, "error": code, "message": code + " (fake)"}
    body.update(extra)
    return Answer(status, body)


class FakeServo:
    def __init__(self, respond: Optional[Callable[[str, int, dict[str, Any]], Optional[Answer]]] = None) -> None:
        self.respond = respond
        self.calls: list[Call] = []
        self.cv = threading.Condition()
        fake = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                parts = self.path.strip("/").split("/")
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n)
                if len(parts) != 4 or parts[:2] != ["v1", "tasks"]:
                    self.send_error(404)
                    return
                op = parts[3]
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {}
                with fake.cv:
                    nth = 1 + sum(1 for c in fake.calls if c.op == op)
                    fake.calls.append(Call(op, self.headers.get("Authorization", ""), body, raw, len(fake.calls)))
                    fake.cv.notify_all()
                a = fake.respond(op, nth, body) if fake.respond else None
                if a is None or (a.status == 0 and not a.hijack):
                    a = accept(op)
                if a.hijack:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if a.raw is not None:
                    data = a.raw.encode()
                    ctype = "text/html"
                else:
                    b = dict(a.body or {})
                    b["serverTime"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                    data = json.dumps(b).encode()
                    ctype = "application/json"
                self.send_response(a.status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for k, v in a.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def ops(self, op: str = "") -> list[Call]:
        with self.cv:
            return [c for c in self.calls if not op or c.op == op]

    def wait_for(self, pred: Callable[[list[Call]], bool], timeout: float = 10.0) -> None:
        with self.cv:
            if not self.cv.wait_for(lambda: pred(self.calls), timeout):
                raise AssertionError(f"timed out waiting; calls so far: {[c.op for c in self.calls]}")

    def envelope(self, **over: Any) -> dict[str, Any]:
        exp = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
        env: dict[str, Any] = {
            "taskId": "task_01TEST", "runId": "run_01TEST", "taskKey": "k", "tenantId": "acme", "workspaceId": "ws",
            "attempt": 1, "worker": "py", "payload": {"rows": 3}, "enqueuedAt": "2025-01-01T00:00:00Z",
            "callbackBaseUrl": self.url + "/", "taskToken": TOKEN,
            "tokenExpiresAt": exp.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "heartbeatIntervalMs": 100, "heartbeatTimeoutMs": 60000, "cancelGracePeriodMs": 300,
        }
        env.update(over)
        return {k: v for k, v in env.items() if v is not None}


def wsgi_post(app: Any, body: bytes, method: str = "POST") -> tuple[int, dict[str, Any], dict[str, str]]:
    """Calls a WSGI app with a delivery; returns status, JSON answer, headers."""
    got: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        got["status"] = int(status.split()[0])
        got["headers"] = dict(headers)

    environ = {"REQUEST_METHOD": method, "CONTENT_LENGTH": str(len(body)), "CONTENT_TYPE": "application/json",
               "PATH_INFO": "/", "wsgi.input": io.BytesIO(body), "SERVER_NAME": "t", "SERVER_PORT": "80",
               "wsgi.url_scheme": "http"}
    out = b"".join(app(environ, start_response))
    return got["status"], json.loads(out), got["headers"]
