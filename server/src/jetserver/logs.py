"""Structured logging on top of the standard :mod:`logging` module.

Call sites pass fields with ``extra=fields(stream="orders", partition=0)``; the formatters
print them as ``key=value`` pairs (text) or as JSON members (json). Configure once per
process with :func:`configure`.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping
from typing import Any

import orjson

FIELDS_ATTR = "jet_fields"


def fields(**values: Any) -> dict[str, Any]:
    """The ``extra=`` mapping that attaches ``values`` to a log record."""
    return {FIELDS_ATTR: values}


def _record_fields(record: logging.LogRecord) -> Mapping[str, Any]:
    value = getattr(record, FIELDS_ATTR, None)
    return value if isinstance(value, dict) else {}


def _text_value(value: Any) -> str:
    text = str(value)
    if not text or any(c.isspace() or c in '"=' for c in text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


class TextFormatter(logging.Formatter):
    """``2024-01-01T00:00:00.123Z INFO jetserver.x message key=value ...``."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [
            f"{stamp}.{int(record.msecs):03d}Z",
            f"{record.levelname:<7}",
            record.name,
            record.getMessage(),
        ]
        parts.extend(f"{k}={_text_value(v)}" for k, v in _record_fields(record).items())
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, then the fields."""

    def format(self, record: logging.LogRecord) -> str:
        obj: dict[str, Any] = {
            "ts": record.created,
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _record_fields(record).items():
            obj.setdefault(key, value)
        if record.exc_info:
            obj["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(obj, default=str).decode()


def configure(level: str = "INFO", fmt: str = "text") -> None:
    """Send ``jetserver`` logs to stderr with the given level and format (text or json)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger("jetserver")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    nats_logger = logging.getLogger("nats")
    nats_logger.handlers[:] = [handler]
    nats_logger.setLevel(logging.WARNING)
