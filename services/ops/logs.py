"""The one logging setup of every gridledger service: text (default) or JSON lines.

``GRIDLEDGER_LOG_FORMAT=json`` (or ``--log-format json`` where a command takes
it) writes one JSON object per line: ``ts`` (UTC, ISO 8601), ``level``,
``logger``, ``service``, ``pid``, ``message``, and ``job_id``, ``attempt`` and
``event_id`` whenever they are known — passed as ``extra={...}`` to a log call,
or set for a whole block of work with :func:`log_context` (the agent's attempt
runner, the processors' per-record step, the API's submit). A traceback goes to
``error`` as one string, so a log shipper never splits an entry.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

CONTEXT_FIELDS = ("job_id", "attempt", "event_id")
_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "gridledger_log_context", default=None
)

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s%(context)s"


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Attach ``job_id``/``attempt``/``event_id`` to every line logged inside the block."""
    current = _context.get() or {}
    token = _context.set({**current, **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


def bind_context(**fields: Any) -> None:
    """Set context for the rest of the current task (a task copies its context at creation,
    so this never leaks into other tasks)."""
    current = _context.get() or {}
    _context.set({**current, **{k: v for k, v in fields.items() if v is not None}})


def context_of(record: logging.LogRecord) -> dict[str, Any]:
    """The record's job/attempt/event: explicit ``extra`` first, then the block's context."""
    found = dict(_context.get() or {})
    for name in CONTEXT_FIELDS:
        value = getattr(record, name, None)
        if value is not None:
            found[name] = value
    return {k: found[k] for k in CONTEXT_FIELDS if k in found}


class _ContextFilter(logging.Filter):
    """Renders the context for the text format (`` [job_id=… attempt=…]``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = context_of(record)
        record.context = (" [" + " ".join(f"{k}={v}" for k, v in ctx.items()) + "]") if ctx else ""
        return True


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "service": self.service,
            "pid": record.process,
            "message": record.getMessage(),
            **context_of(record),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["error"] = record.exc_text
        return json.dumps(entry, default=str, ensure_ascii=False)


def setup_logging(service: str, level: str = "INFO", fmt: str | None = None) -> None:
    """Configure the root logger once per process (stdout; the supervisor keeps the file).

    ``fmt`` is ``text`` or ``json``; None reads ``GRIDLEDGER_LOG_FORMAT`` (default text).
    """
    chosen = (fmt or os.environ.get("GRIDLEDGER_LOG_FORMAT") or "text").lower()
    if chosen not in ("text", "json"):
        raise ValueError(
            f"log format {chosen!r} is not known; use text or json (GRIDLEDGER_LOG_FORMAT)"
        )
    handler = logging.StreamHandler(sys.stdout)
    if chosen == "json":
        handler.setFormatter(JsonFormatter(service))
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
        handler.addFilter(_ContextFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
