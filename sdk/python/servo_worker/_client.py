"""One callback: POST with the task token, retries, and the answer's
disposition (docs/contract.md §4.7)."""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ._util import MAX_RESPONSE_BYTES

USER_AGENT = "servo-worker-python/1"

# Dispositions.
CONTINUE = "CONTINUE"
COMMITTED = "COMMITTED"
CANCELLED = "CANCELLED"
REJECTED = "REJECTED"
RETRY = "RETRY"
_FINAL = (CONTINUE, COMMITTED, CANCELLED, REJECTED)

# Statuses a gateway or proxy in front of Servo uses for transient failures.
# Without a Servo JSON body (no disposition), the request may never have
# reached Servo, so it is sent again (every callback is idempotent).
GATEWAY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass
class Reply:
    """Servo's answer to a callback."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)
    # disposition: the body's, or derived from the status (no Servo body).
    disposition: str = ""
    retry_after: float = 0.0
    # servo: the body is Servo's JSON (it carries a disposition).
    servo: bool = False
    # received_at: time.monotonic() when the answer arrived.
    received_at: float = 0.0
    # sent_at: time.monotonic() when the request that got this answer was
    # sent; Servo processed it (and counted any lease from) no earlier.
    sent_at: float = 0.0


class Unreachable(Exception):
    """A callback could not be delivered within its retry window."""


class Stopped(Exception):
    """Retries were abandoned because the stop event was set."""


def disposition(op: str, rep: Reply) -> str:
    """What the worker must do after a final answer."""
    d = rep.body.get("disposition")
    if d in _FINAL:
        return str(d)
    if 200 <= rep.status < 300:
        return COMMITTED if op == "completed" else CONTINUE
    if rep.status in (409, 410):
        return CANCELLED
    return REJECTED


def retryable(rep: Reply) -> bool:
    """Whether an answer means "not processed; the same request may succeed
    later": a Servo body with disposition RETRY (503 unavailable), or a
    gateway status without a Servo body. A Servo body with any other
    disposition is final whatever its status."""
    if rep.servo:
        return rep.body.get("disposition") == RETRY
    return rep.status in GATEWAY_STATUSES


def backoff(attempt: int, initial: float, max_delay: float) -> float:
    """Exponential from initial, capped at max_delay, jittered uniformly in
    [d/2, d)."""
    d = initial
    for _ in range(attempt):
        if d >= max_delay:
            break
        d *= 2
    d = min(d, max_delay)
    return d / 2 + random.random() * d / 2


def parse_retry_after(h: Optional[str]) -> float:
    """Retry-After in seconds (0 if absent or a date)."""
    try:
        s = int((h or "").strip())
    except ValueError:
        return 0.0
    return float(s) if s > 0 else 0.0


class Transport:
    """A small pool of kept-alive HTTP connections, shared by threads."""

    MAX_IDLE = 8

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._mu = threading.Lock()
        self._idle: dict[tuple[str, str], list[http.client.HTTPConnection]] = {}

    def close(self) -> None:
        """Closes the idle connections."""
        with self._mu:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for c in conns:
                c.close()

    def _take(self, key: tuple[str, str]) -> tuple[http.client.HTTPConnection, bool]:
        with self._mu:
            conns = self._idle.get(key)
            if conns:
                return conns.pop(), True
        cls = http.client.HTTPSConnection if key[0] == "https" else http.client.HTTPConnection
        return cls(key[1], timeout=self.timeout), False

    def _give(self, key: tuple[str, str], c: http.client.HTTPConnection) -> None:
        with self._mu:
            conns = self._idle.setdefault(key, [])
            if len(conns) < self.MAX_IDLE:
                conns.append(c)
                return
        c.close()

    def post(self, url: str, body: bytes, token: str, traceparent: str = "") -> tuple[int, dict[str, str], bytes]:
        """POSTs body; returns status, headers and at most 64 KiB of the
        answer. Raises OSError or http.client.HTTPException on a transport
        failure (a failure on a kept-alive connection is retried once on a
        fresh one first)."""
        u = urllib.parse.urlsplit(url)
        key = (u.scheme, u.netloc)
        path = u.path + ("?" + u.query if u.query else "")
        headers = {"Content-Type": "application/json", "Authorization": "Bearer " + token,
                   "User-Agent": USER_AGENT, "Content-Length": str(len(body))}
        if traceparent:
            headers["traceparent"] = traceparent
        while True:
            conn, reused = self._take(key)
            try:
                conn.request("POST", path, body=body, headers=headers)
                res = conn.getresponse()
                data = res.read(MAX_RESPONSE_BYTES)
                complete = res.isclosed() or not res.length
            except (OSError, http.client.HTTPException):
                conn.close()
                if not reused:
                    raise
                continue
            if complete and not res.will_close:
                self._give(key, conn)
            else:
                conn.close()
            return res.status, {k.lower(): v for k, v in res.getheaders()}, data


def read_reply(status: int, headers: dict[str, str], data: bytes, backoff_max: float) -> Reply:
    rep = Reply(status=status)
    try:
        body = json.loads(data) if data else None
    except ValueError:
        body = None  # a proxy's page is not JSON; the status decides
    if isinstance(body, dict):
        rep.body = body
        rep.servo = isinstance(body.get("disposition"), str) and body.get("disposition") != ""
    if status in (503, 429):
        rep.retry_after = min(parse_retry_after(headers.get("retry-after")), backoff_max)
    return rep


def post(
    transport: Transport,
    url: str,
    op: str,
    body: Callable[[], bytes],
    token: Callable[[], str],
    until: Callable[[], float],
    stop: Optional[threading.Event],
    backoff_initial: float,
    backoff_max: float,
    log: Any,
    traceparent: Optional[Callable[[], str]] = None,
) -> Reply:
    """Delivers one callback. Retries transport failures and retryable
    answers with backoff while the next try can start before until()
    (time.monotonic(), re-read each time: an adopted token extends it); the
    first try is always made. Returns the first final reply; raises
    Unreachable when the window closed, Stopped when stop was set between
    tries. A request in flight is never abandoned. Each try carries the
    W3C traceparent that traceparent() returns (a new span of the
    attempt's trace)."""
    try_ = 0
    while True:
        b = body()
        sent_at = time.monotonic()
        try:
            status, headers, data = transport.post(url, b, token(), traceparent() if traceparent else "")
        except (OSError, http.client.HTTPException) as e:
            rep, why = None, f"{type(e).__name__}: {e}"
        else:
            rep = read_reply(status, headers, data, backoff_max)
            rep.received_at = time.monotonic()
            rep.sent_at = sent_at
            log.debug("callback answered", fields={"op": op, "status": status, "disposition": rep.body.get("disposition"),
                                                   "code": rep.body.get("error")})
            if not retryable(rep):
                rep.disposition = disposition(op, rep)
                return rep
            why = f"HTTP {status} {rep.body.get('error', '')}".rstrip()
        delay = max(backoff(try_, backoff_initial, backoff_max), rep.retry_after if rep else 0.0)
        if time.monotonic() + delay >= until():
            log.error("servo unreachable; giving up on callback", fields={"op": op, "tries": try_ + 1, "lastError": why})
            raise Unreachable(f"servo unreachable: {op}: {try_ + 1} tries, last: {why}")
        log.warning("callback failed; retrying", fields={"op": op, "try": try_ + 1, "error": why, "retryInS": round(delay, 3)})
        if stop is not None:
            if stop.wait(delay):
                raise Stopped()
        else:
            time.sleep(delay)
        try_ += 1
