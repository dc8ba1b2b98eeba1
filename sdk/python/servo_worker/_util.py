"""Small helpers: RFC 3339 times, UTF-8 truncation, JWT expiry, limits."""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from typing import Any, Optional

# Limits of the callback contract (task/policy.go).
MAX_CHECKPOINT_BYTES = 64 << 10
MAX_OUTPUT_BYTES = 256 << 10
MAX_STACK_TRACE_BYTES = 16 << 10
MAX_MESSAGE_BYTES = 4 << 10
MAX_ENVELOPE_BYTES = 1 << 20
MAX_RESPONSE_BYTES = 64 << 10

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$"
)


def parse_time(s: Any) -> Optional[dt.datetime]:
    """Parses an RFC 3339 time (nanoseconds allowed) into an aware UTC
    datetime; None for anything else or Go's zero time (year 1)."""
    if not isinstance(s, str):
        return None
    m = _RFC3339.match(s.strip())
    if not m:
        return None
    year, mon, day, hh, mm, ss = (int(m.group(i)) for i in range(1, 7))
    frac = (m.group(7) or "")[:6].ljust(6, "0")
    zone = m.group(8)
    if zone in ("Z", "z"):
        tz = dt.timezone.utc
    else:
        sign = 1 if zone[0] == "+" else -1
        tz = dt.timezone(sign * dt.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    try:
        t = dt.datetime(year, mon, day, hh, mm, ss, int(frac), tzinfo=tz)
    except ValueError:
        return None
    if t.year <= 1:
        return None
    return t.astimezone(dt.timezone.utc)


def format_time(t: dt.datetime) -> str:
    """Formats an aware datetime as RFC 3339 UTC with microseconds."""
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def token_expiry(tok: str) -> Optional[dt.datetime]:
    """Reads the exp claim of a JWT without verifying it (the worker cannot;
    it only needs to know how long to keep retrying)."""
    parts = tok.split(".")
    if len(parts) != 3:
        return None
    raw = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(raw.encode("ascii")))
        exp = claims.get("exp") if isinstance(claims, dict) else None
    except (ValueError, UnicodeError):
        return None
    if not isinstance(exp, (int, float)) or isinstance(exp, bool) or exp <= 0:
        return None
    return dt.datetime.fromtimestamp(exp, dt.timezone.utc)


def truncate(s: str, n: int) -> str:
    """Cuts s to at most n bytes of UTF-8 without splitting a character."""
    b = s.encode("utf-8", "replace")
    if len(b) <= n:
        return s
    return b[:n].decode("utf-8", "ignore")


def compact_json(v: Any) -> bytes:
    """Encodes v as compact JSON (raises TypeError/ValueError if it cannot)."""
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
