"""Logging: the standard ``logging`` module, JSON lines for Cloud Logging.

Every SDK log record carries its fields in ``record.servo`` (a dict:
taskId, attempt, tenantId, runId, workerId, and the event's own). Task
tokens are never put in a record.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any, Mapping, MutableMapping, Optional

LOGGER_NAME = "servo_worker"

_SEVERITY = {
    logging.DEBUG: "DEBUG",
    logging.INFO: "INFO",
    logging.WARNING: "WARNING",
    logging.ERROR: "ERROR",
    logging.CRITICAL: "CRITICAL",
}


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line Cloud Logging understands
    (``severity``, ``message``, ``time``, the record's ``servo`` fields,
    ``logging.googleapis.com/trace`` when known)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": _SEVERITY.get(record.levelno, record.levelname),
            "message": record.getMessage(),
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + ".%03dZ" % record.msecs,
            "logger": record.name,
        }
        fields = getattr(record, "servo", None)
        if isinstance(fields, Mapping):
            for k, v in fields.items():
                entry.setdefault(k, v)
        if record.exc_info:
            entry["stackTrace"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)

    converter = time.gmtime


class TextFormatter(logging.Formatter):
    """A readable line: time, level, message, then key=value fields."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "servo", None)
        if isinstance(fields, Mapping) and fields:
            line += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        return line


def setup_logging(level: int = logging.INFO, stream: Any = None) -> logging.Handler:
    """Sends the ``servo_worker`` logger's records (and the root logger's)
    to stderr: JSON lines for Cloud Logging when ``K_SERVICE`` is set (Cloud
    Run), readable lines otherwise. Returns the handler it installed."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if os.environ.get("K_SERVICE") else TextFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    return handler


class FieldsAdapter(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A LoggerAdapter that merges fixed fields with per-call ``fields``
    into ``record.servo``."""

    def __init__(self, logger: logging.Logger, fields: Mapping[str, Any]) -> None:
        super().__init__(logger, dict(fields))

    def with_fields(self, **fields: Any) -> "FieldsAdapter":
        merged = dict(self.extra or {})
        merged.update(fields)
        return FieldsAdapter(self.logger, merged)

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        fields = dict(self.extra or {})
        more: Optional[Mapping[str, Any]] = kwargs.pop("fields", None)
        if more:
            fields.update({k: v for k, v in more.items() if v is not None and v != ""})
        extra = dict(kwargs.get("extra") or {})
        extra["servo"] = fields
        kwargs["extra"] = extra
        return msg, kwargs


def default_logger() -> logging.Logger:
    """The SDK's logger. On Cloud Run (``K_SERVICE`` set) with no handler
    configured anywhere, it gets a JSON handler on stderr of its own."""
    log = logging.getLogger(LOGGER_NAME)
    if os.environ.get("K_SERVICE") and not log.handlers and not logging.getLogger().handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(JsonFormatter())
        log.addHandler(h)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log
