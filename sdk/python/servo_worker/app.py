"""Push mode: the WSGI application Cloud Tasks delivers to, and serve()."""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import socketserver
import threading
import urllib.parse
from typing import Any, Callable, Iterable, Optional
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server as _make_server

from . import _client
from ._logs import FieldsAdapter, default_logger
from ._run import RESULT_INTERNAL, Run
from ._util import MAX_ENVELOPE_BYTES, parse_time, token_expiry, truncate
from .task import Task

__all__ = ["App", "Handler", "WSGIApp", "serve", "make_server", "EnvelopeError", "parse_envelope", "default_worker_id"]

Handler = Callable[[Task], Any]
"""A handler does the work of one attempt: it returns the output
(JSON-encodable; None for none) or raises (see servo_worker.errors). It may
be an ``async def`` (a callable returning a coroutine): the SDK runs the
coroutine on an event loop of its own and cancels it when the attempt must
stop (see the README, "asyncio handlers")."""

DEFAULT_REQUEST_TIMEOUT = 30.0
DEFAULT_BACKOFF_INITIAL = 0.25
DEFAULT_BACKOFF_MAX = 15.0
DEFAULT_START_RETRY_WINDOW = 60.0

_REASONS = {200: "OK", 400: "Bad Request", 405: "Method Not Allowed", 413: "Payload Too Large",
            500: "Internal Server Error", 503: "Service Unavailable"}


class EnvelopeError(ValueError):
    """A delivery that is not a valid Servo envelope."""


def parse_envelope(body: bytes) -> dict[str, Any]:
    """Decodes and checks a delivery like the Go SDK's parseEnvelope. The
    returned dict has callbackBaseUrl without a trailing slash and
    ``_tokenExpiresAt`` (a datetime: the envelope's tokenExpiresAt, or the
    token's exp claim). Any malformed envelope, whatever fails in its
    decoding (a RecursionError on deep nesting included), is an
    EnvelopeError."""
    try:
        return _parse_envelope(body)
    except EnvelopeError:
        raise
    except Exception as e:  # noqa: BLE001 - every failure is the envelope's
        raise EnvelopeError(f"malformed envelope: {type(e).__name__}: {e}") from None


def _parse_envelope(body: bytes) -> dict[str, Any]:
    try:
        env = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise EnvelopeError(f"decode envelope: {e}") from None
    if not isinstance(env, dict):
        raise EnvelopeError("decode envelope: not a JSON object")
    tid, attempt, tok, hb = env.get("taskId"), env.get("attempt"), env.get("taskToken"), env.get("heartbeatIntervalMs")
    if not isinstance(tid, str) or not tid or len(tid.encode()) > 256:
        raise EnvelopeError("taskId is required (at most 256 bytes)")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        raise EnvelopeError("attempt must be a positive integer")
    if not isinstance(tok, str) or not tok:
        raise EnvelopeError("taskToken is required")
    if not isinstance(hb, (int, float)) or isinstance(hb, bool) or hb <= 0:
        raise EnvelopeError("heartbeatIntervalMs must be positive")
    base = env.get("callbackBaseUrl")
    u = urllib.parse.urlsplit(base) if isinstance(base, str) else None
    if u is None or u.scheme not in ("http", "https") or not u.netloc:
        raise EnvelopeError("callbackBaseUrl must be an absolute http(s) URL")
    env["callbackBaseUrl"] = base.rstrip("/")
    exp = parse_time(env.get("tokenExpiresAt")) or token_expiry(tok)
    if exp is None:
        raise EnvelopeError("tokenExpiresAt is required")
    env["_tokenExpiresAt"] = exp
    return env


def default_worker_id() -> str:
    """``$K_REVISION/hostname-<random>``, like the Go SDK."""
    parts = []
    if os.environ.get("K_REVISION"):
        parts.append(os.environ["K_REVISION"])
    host = socket.gethostname()
    if host and host != "localhost":
        parts.append(host)
    if not parts:
        parts.append("worker")
    return truncate("/".join(parts), 200) + "-" + secrets.token_hex(4)


class App:
    """The WSGI application that receives Cloud Tasks pushes of a Servo
    envelope and runs ``handler`` for the attempt under the callback
    protocol (docs/contract.md §4, §14): ``started`` (the handler runs only
    if Servo answers CONTINUE), heartbeats while it runs, then exactly one
    ``completed``.

    Run it under gunicorn with threads (``--threads``: each delivery holds
    a thread while the handler runs) or locally with :func:`serve`.

    Args:
        handler: ``def handle(task: Task) -> output``.
        worker_id: reported to Servo; unique per process (default
            :func:`default_worker_id`), at most 256 bytes.
        logger: a logging.Logger (default ``logging.getLogger("servo_worker")``).
        request_timeout: seconds per callback request (default 30).
        retry_backoff: (initial, max) seconds of the callbacks' exponential
            backoff (default 0.25, 15), jittered in [d/2, d).
        start_retry_window: seconds ``started`` is retried while Servo
            cannot be reached before the delivery is answered 503 (default 60).
    """

    def __init__(
        self,
        handler: Handler,
        *,
        worker_id: Optional[str] = None,
        logger: Optional[logging.Logger] = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        retry_backoff: tuple[float, float] = (DEFAULT_BACKOFF_INITIAL, DEFAULT_BACKOFF_MAX),
        start_retry_window: float = DEFAULT_START_RETRY_WINDOW,
    ) -> None:
        if not callable(handler):
            raise TypeError("servo_worker: App needs a callable handler")
        self.handler = handler
        self.worker_id = truncate(worker_id or default_worker_id(), 256)
        self.logger = logger or default_logger()
        self.request_timeout = max(float(request_timeout), 0.001)
        self.backoff_initial = max(float(retry_backoff[0]), 0.001)
        self.backoff_max = max(float(retry_backoff[1]), self.backoff_initial)
        self.start_retry_window = float(start_retry_window)
        self._transport = _client.Transport(self.request_timeout)
        self._project = os.environ.get("GOOGLE_CLOUD_PROJECT", "")
        self._mu = threading.Lock()
        self._inflight: dict[tuple[str, int], Run] = {}

    def close(self) -> None:
        """Closes the kept-alive connections to Servo."""
        self._transport.close()

    def serve(self, port: int = 8080, host: str = "0.0.0.0") -> None:
        """Serves this application with :func:`serve` (local use) on
        host:port. ``host`` defaults to ``"0.0.0.0"``: every IPv4 interface,
        as a container needs; ``"127.0.0.1"`` accepts local connections
        only."""
        serve(self, port, host)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        status, answer, headers = self.handle_delivery(environ)
        answer["workerId"] = self.worker_id
        data = (json.dumps(answer) + "\n").encode()
        hdrs = [("Content-Type", "application/json"), ("Content-Length", str(len(data)))] + headers
        start_response(f"{status} {_REASONS.get(status, '')}".rstrip(), hdrs)
        return [data]

    def handle_delivery(self, environ: dict[str, Any]) -> tuple[int, dict[str, Any], list[tuple[str, str]]]:
        """Handles one WSGI request; returns the status, the JSON answer and
        extra headers."""
        log = FieldsAdapter(self.logger, {"workerId": self.worker_id})
        if environ.get("REQUEST_METHOD") != "POST":
            return 405, {"result": "method_not_allowed"}, [("Allow", "POST")]
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > MAX_ENVELOPE_BYTES:
            log.error("BAD DELIVERY: envelope too large; Cloud Tasks retries 4xx answers until the queue's retry limit",
                      fields={"limit": MAX_ENVELOPE_BYTES})
            return 413, {"result": "envelope_too_large"}, []
        try:
            body = environ["wsgi.input"].read(length) if length > 0 else b""
        except OSError as e:
            log.warning("could not read the delivery", fields={"error": str(e)})
            return 400, {"result": "bad_envelope", "detail": str(e)}, []
        try:
            env = parse_envelope(body)
        except EnvelopeError as e:
            # Cloud Tasks retries 4xx like 5xx: a broken envelope is
            # redelivered until the queue's retry limit. Say so loudly.
            log.error("BAD DELIVERY: not a valid Servo envelope; answering 400 (Cloud Tasks retries it until the "
                      "queue's retry limit: check the queue's target and Servo's worker configuration)",
                      fields={"error": str(e)})
            return 400, {"result": "bad_envelope", "detail": str(e)}, []
        status, answer = self.deliver(env, self._trace(environ), environ.get("HTTP_TRACEPARENT"))
        return status, answer, []

    def _trace(self, environ: dict[str, Any]) -> Optional[str]:
        tid = ""
        tp = environ.get("HTTP_TRACEPARENT", "")
        if tp and len(tp.split("-")) == 4:
            tid = tp.split("-")[1]
        elif environ.get("HTTP_X_CLOUD_TRACE_CONTEXT"):
            tid = environ["HTTP_X_CLOUD_TRACE_CONTEXT"].split("/")[0]
        if not tid:
            return None
        return f"projects/{self._project}/traces/{tid}" if self._project else tid

    def deliver(self, env: dict[str, Any], trace: Optional[str] = None,
                traceparent: Optional[str] = None) -> tuple[int, dict[str, Any]]:
        """Runs the attempt of a parsed envelope, or joins this process's
        run of it when Cloud Tasks delivers the same attempt again while it
        runs: the duplicate waits and gets the same answer; the handler runs
        once. Every callback carries a W3C traceparent continuing
        ``traceparent`` (the delivery's; a new trace without one)."""
        key = (env["taskId"], env["attempt"])
        with self._mu:
            cur = self._inflight.get(key)
            if cur is None:
                run = Run(self, env, trace, traceparent=traceparent)
                self._inflight[key] = run
        if cur is not None:
            cur.log.info("duplicate delivery of an attempt this worker is running; waiting for it")
            cur.done.wait()
            return cur.status, dict(cur.answer)
        try:
            run.status, run.answer = run.execute()
        except Exception as e:  # noqa: BLE001 - not expected; answer like the Go SDK's internal error
            run.log.exception("internal error running the attempt")
            run.status, run.answer = 500, {"result": RESULT_INTERNAL, "detail": f"{type(e).__name__}: {e}"}
        finally:
            with self._mu:
                self._inflight.pop(key, None)
            run.answer.update({"taskId": env["taskId"], "attempt": env["attempt"]})
            run.done.set()
        return run.status, dict(run.answer)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    """wsgiref's server with a thread per request (a delivery holds its
    request open while the handler runs)."""

    daemon_threads = True
    allow_reuse_address = True


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def make_server(app: WSGIApp, port: int = 8080, host: str = "0.0.0.0") -> ThreadingWSGIServer:
    """Returns a threading wsgiref server for a WSGI application (an
    :class:`App`, or one that wraps it) bound to host:port (port 0 picks a
    free one: ``server.server_port``). Call ``serve_forever()`` on it."""
    srv = _make_server(host, port, app, server_class=ThreadingWSGIServer, handler_class=_QuietHandler)
    return srv  # type: ignore[return-value]


def serve(app: WSGIApp, port: int = 8080, host: str = "0.0.0.0") -> None:
    """Serves a WSGI application (an :class:`App`) with the standard
    library's server, a thread per delivery, until interrupted. For local
    use; on Cloud Run use gunicorn."""
    srv = make_server(app, port, host)
    logging.getLogger("servo_worker").info("worker listening on %s:%d", host, srv.server_port)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
