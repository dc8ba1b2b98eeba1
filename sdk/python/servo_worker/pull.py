"""Pull mode: claim attempts from a pull pool (docs/contract.md §10) and run
them under the same protocol as push mode, like the Go SDK's worker.Pull."""

from __future__ import annotations

import http.client
import json
import logging
import signal
import socket
import threading
import time
import urllib.parse
import urllib.request
from typing import Any, Callable, Optional, Sequence

from . import _client
from ._logs import FieldsAdapter
from ._run import Run
from ._util import MAX_ENVELOPE_BYTES, MAX_RESPONSE_BYTES
from .app import App, EnvelopeError, Handler, parse_envelope
from .errors import WorkerStopping

__all__ = ["pull", "ClaimRefused", "metadata_id_token", "DEV_IDENTITY_HEADER"]

DEFAULT_MAX_WAIT = 20.0
MAX_CLAIM_WAIT = 60.0
DEFAULT_GRACE = 30.0
DEV_IDENTITY_HEADER = "X-Servo-Dev-Identity"
"""Carries ``dev_identity``: the identity `servo dev` takes on trust
(production ignores it)."""


class ClaimRefused(Exception):
    """A claim refused for good (a 4xx: unknown pool, caller not allowed,
    bad request): :func:`pull` stops and raises it."""

    def __init__(self, status: int, code: str, message: str = "", field: str = "") -> None:
        super().__init__(f"claim refused: HTTP {status} {code}" + (f" field {field}" if field else "") +
                         (f": {message}" if message else ""))
        self.status = status
        self.code = code
        self.field = field
        self.detail = message


def metadata_id_token(audience: str) -> Callable[[], str]:
    """Returns a function that fetches an ID token for ``audience`` (the
    claim API's URL) from the metadata server (Cloud Run, GKE, Compute
    Engine), cached until five minutes before it expires. Pass it as
    ``id_token`` to :func:`pull` against a deployed API."""
    url = ("http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/identity?audience="
           + urllib.parse.quote(audience, safe="") + "&format=full")
    mu = threading.Lock()
    cached: list[Any] = ["", 0.0]

    def get() -> str:
        with mu:
            if cached[0] and time.monotonic() < cached[1]:
                return str(cached[0])
            req = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
            with urllib.request.urlopen(req, timeout=10) as res:  # noqa: S310 - the metadata server
                tok = res.read().decode()
            cached[0], cached[1] = tok, time.monotonic() + 55 * 60
            return tok

    return get


class _Abandoned(Exception):
    """The claim was not sent: the worker is stopping."""


def _abandon(conn: http.client.HTTPConnection) -> None:
    """Shuts down an open claim's connection (from another thread: the
    claiming thread's read ends at once; it closes the connection itself).
    Servo sees the caller leave and hands back a message it receives
    after that instead of claiming it."""
    sock = conn.sock
    if sock is None:
        return
    try:
        # socket.socket's shutdown, not SSLSocket's (which would also drop
        # the TLS object under the reading thread's feet).
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class _ClaimGuard:
    """Abandons the open claim when ``stop`` is set: a watcher thread shuts
    its connection down, so that a long-poll open at SIGTERM does not bring
    an attempt the worker would start while stopping."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self._mu = threading.Lock()
        self._conn: Optional[http.client.HTTPConnection] = None
        self._done = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="servo-pull-stop", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        while not self.stop.wait(0.05):
            if self._done.is_set():
                return
        with self._mu:
            conn = self._conn
            if conn is not None:
                _abandon(conn)

    def open(self, conn: http.client.HTTPConnection) -> None:
        """Registers a connected claim; raises _Abandoned when stopping."""
        with self._mu:
            if self.stop.is_set():
                raise _Abandoned()
            self._conn = conn

    def closed(self) -> None:
        with self._mu:
            self._conn = None

    def close(self) -> None:
        self._done.set()
        self._watcher.join()


def _claim(api: str, pool: str, then_pools: list[str], worker_id: str, max_wait: float, timeout: float,
           dev_identity: Optional[str], id_token: Optional[Callable[[], str]],
           guard: _ClaimGuard) -> tuple[int, dict[str, str], bytes]:
    u = urllib.parse.urlsplit(api.rstrip("/") + "/v1/pools/" + urllib.parse.quote(pool, safe="") + "/claim")
    req: dict[str, Any] = {"workerId": worker_id, "maxWaitMs": int(max_wait * 1000)}
    if then_pools:
        req["thenPools"] = then_pools
    body = json.dumps(req).encode()
    headers = {"Content-Type": "application/json", "User-Agent": _client.USER_AGENT, "Content-Length": str(len(body))}
    if dev_identity:
        headers[DEV_IDENTITY_HEADER] = dev_identity
    if id_token is not None:
        headers["Authorization"] = "Bearer " + id_token()
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    conn = cls(u.netloc, timeout=timeout)
    try:
        conn.connect()
        guard.open(conn)
        try:
            conn.request("POST", u.path, body=body, headers=headers)
            res = conn.getresponse()
        finally:
            # The long-poll is over once the answer has begun: a stop from
            # now on lets it be read (an attempt in it is handed back).
            guard.closed()
        data = res.read(MAX_ENVELOPE_BYTES + MAX_RESPONSE_BYTES)
        return res.status, {k.lower(): v for k, v in res.getheaders()}, data
    finally:
        conn.close()


def pull(
    handler: Handler,
    api: str,
    pool: str,
    *,
    then_pools: Sequence[str] = (),
    concurrency: int = 1,
    max_wait: float = DEFAULT_MAX_WAIT,
    grace: float = DEFAULT_GRACE,
    stop: Optional[threading.Event] = None,
    dev_identity: Optional[str] = None,
    id_token: Optional[Callable[[], str]] = None,
    **app_options: Any,
) -> None:
    """Claims attempts from the pull pool ``pool`` at ``api`` (the ServoClaim
    function's URL, or `servo dev`'s address) and runs ``handler`` for each,
    at most ``concurrency`` at a time, with the machinery of push mode
    (heartbeats, checkpoints, cancel, the lease fence, exactly one
    ``completed``). The claim is the attempt's ``started``: no ``started``
    is sent.

    ``then_pools`` names further pull pools to claim from, in priority order
    after ``pool``: each claim takes an attempt of the first of ``pool``,
    ``then_pools[0]``, ``then_pools[1]``, ... that has one (docs/contract.md
    §10). At most 9, distinct, none equal to ``pool``, each one the caller
    may claim from: Servo refuses the claim otherwise (400
    ``invalid_request``, or 403 ``permission_denied`` for a pool the caller
    may not claim from; the field is ``thenPools[i]``, or ``thenPools`` for
    too many), and :class:`ClaimRefused` is raised. Empty (the default):
    ``pool`` alone.

    Each claim is a long-poll of ``max_wait`` seconds (at most 60), made
    only while a slot is free. An empty claim is followed by a short pause,
    a 503 or a transport failure by the exponential backoff (at least the
    Retry-After); a claim refused for good (4xx) raises
    :class:`ClaimRefused`.

    A deployed API needs an ID token on every claim: ``id_token`` returns
    one (:func:`metadata_id_token` on Google Cloud); locally,
    ``dev_identity`` names the caller instead.

    When ``stop`` is set (by default: on SIGTERM or SIGINT, when called from
    the main thread) no new claim is made, and the claim open then is
    abandoned: its connection is closed at once, so Servo hands a message
    that comes after that back to the pool instead of claiming it for this
    worker. An attempt that arrives anyway (claimed as the worker stopped)
    is not started: its handler is not run and it is reported at once as
    FAILED/INFRASTRUCTURE, retryable (:class:`~servo_worker.WorkerStopping`),
    so that Servo schedules its retry for another worker without waiting
    for its lease to run out. Running attempts have ``grace`` seconds to
    finish, then their handlers are stopped with
    :class:`~servo_worker.WorkerStopping` and reported FAILED/INFRASTRUCTURE
    (retryable: Servo runs them again from their last checkpoint).
    ``pull`` returns once every report is in.

    ``app_options`` are those of :class:`App` (worker_id, logger,
    request_timeout, retry_backoff).
    """
    if not api or not pool:
        raise ValueError("servo_worker.pull: api and pool are required")
    if isinstance(then_pools, (str, bytes)):
        raise TypeError("servo_worker.pull: then_pools is a sequence of pool names, not one string")
    pools = [str(p) for p in (then_pools or ())]
    if urllib.parse.urlsplit(api).scheme == "https" and id_token is None:
        raise ValueError(f"servo_worker.pull: id_token is required for the https API {api}: claims need an ID token "
                         "(servo_worker.metadata_id_token(api) on Google Cloud)")
    app = App(handler, **app_options)
    concurrency = max(int(concurrency), 1)
    max_wait = min(max(float(max_wait), 0.001), MAX_CLAIM_WAIT)
    if stop is None:
        stop = threading.Event()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())  # type: ignore[union-attr]
    log_fields: dict[str, Any] = {"pool": pool, "workerId": app.worker_id}
    if pools:
        log_fields["thenPools"] = pools
    log = FieldsAdapter(app.logger, log_fields)
    slots = threading.Semaphore(concurrency)
    mu = threading.Lock()
    running: dict[Run, threading.Thread] = {}
    fatal: Optional[ClaimRefused] = None
    empty = 0

    def run_one(r: Run) -> None:
        try:
            key = (r.env["taskId"], r.env["attempt"])
            with app._mu:
                app._inflight[key] = r
            try:
                r.status, r.answer = r.execute()
            except Exception:  # noqa: BLE001 - not expected: logged
                r.log.exception("internal error running the attempt")
            finally:
                with app._mu:
                    app._inflight.pop(key, None)
                r.done.set()
        finally:
            with mu:
                running.pop(r, None)
            slots.release()

    log.info("pulling", fields={"concurrency": concurrency})
    guard = _ClaimGuard(stop)
    try:
        while not stop.is_set():
            if not slots.acquire(timeout=0.2):
                continue
            if stop.is_set():
                slots.release()
                break
            wait = 0.0
            err = ""
            try:
                status, headers, data = _claim(api, pool, pools, app.worker_id, max_wait,
                                               max_wait + app.request_timeout, dev_identity, id_token, guard)
            except _Abandoned:
                slots.release()
                break
            except (OSError, ValueError, http.client.HTTPException) as e:
                if stop.is_set():
                    # Shut down by the stop (or failed as it came).
                    log.info("claim abandoned: the worker is stopping", fields={"error": repr(e)})
                    slots.release()
                    break
                if isinstance(e, ValueError):
                    raise
                status, headers, data, err = 0, {}, b"", f"{type(e).__name__}: {e}"
            claimed_at = time.monotonic()
            env: Optional[dict[str, Any]] = None
            if not err:
                try:
                    body = json.loads(data) if data else None
                except ValueError:
                    body = None
                servo = isinstance(body, dict) and body.get("disposition") in ("CONTINUE", "COMMITTED", "CANCELLED",
                                                                               "REJECTED", "RETRY")
                if status == 200 and servo:
                    assert isinstance(body, dict)
                    if body.get("claimed") and isinstance(body.get("envelope"), dict):
                        try:
                            env = parse_envelope(json.dumps(body["envelope"]).encode())
                        except EnvelopeError as e:
                            # Unusable: its lease expires and Servo retries it.
                            err = f"claimed an envelope that is not valid: {e}"
                elif (servo and isinstance(body, dict) and body.get("disposition") == "RETRY") or \
                        (not servo and status in _client.GATEWAY_STATUSES):
                    err = f"claim answered {status}"
                    wait = _client.parse_retry_after(headers.get("retry-after"))
                elif stop.is_set() and not servo:
                    # An answer cut short by the abandonment, not a refusal.
                    log.info("claim abandoned: the worker is stopping", fields={"status": status})
                    slots.release()
                    break
                else:
                    b = body if isinstance(body, dict) else {}
                    fatal = ClaimRefused(status, str(b.get("error") or ""), str(b.get("message") or ""),
                                         str(b.get("field") or ""))
                    log.error("claim refused; stopping", fields={"status": status, "code": fatal.code,
                                                                 "field": fatal.field, "message": fatal.detail})
                    slots.release()
                    break
            if env is None:
                slots.release()
                empty += 1
                if err:
                    log.warning("claim failed; backing off", fields={"error": err})
                    wait = max(wait, _client.backoff(empty, app.backoff_initial, app.backoff_max))
                else:
                    wait = max(wait, _client.backoff(min(empty, 3), app.backoff_initial, app.backoff_max))
                stop.wait(wait)
                continue
            empty = 0
            refuse = None
            if stop.is_set():
                # Claimed as the worker stopped: not started, handed back
                # (reported retryable at once; the loop ends after it).
                refuse = WorkerStopping("worker stopping: the attempt was claimed as the worker began to stop; "
                                        "not started, handed back for a retry")
            r = Run(app, env, None, claimed_at=claimed_at, refuse=refuse)
            t = threading.Thread(target=run_one, args=(r,), name="servo-pull-attempt", daemon=True)
            with mu:
                running[r] = t
            t.start()
    finally:
        guard.close()
        _wind_down(log, mu, running, grace)
        app.close()
    if fatal is not None:
        raise fatal


def _wind_down(log: logging.LoggerAdapter[Any], mu: threading.Lock, running: dict[Run, threading.Thread],
               grace: float) -> None:
    """Lets running attempts finish within grace, then stops them
    (WorkerStopping) and waits for their reports."""
    until = time.monotonic() + max(grace, 0.0)
    while True:
        with mu:
            threads = list(running.values())
        if not threads or time.monotonic() >= until:
            break
        threads[0].join(max(min(until - time.monotonic(), 0.2), 0.0))
    with mu:
        runs = list(running.items())
    for r, _ in runs:
        r.log.warning("grace period over; stopping the handler")
        r.task._stop(WorkerStopping())
    for _, t in runs:
        t.join()
