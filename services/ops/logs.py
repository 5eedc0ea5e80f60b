"""The one logging setup of every gridledger service: text (default) or JSON lines.

``GRIDLEDGER_LOG_FORMAT=json`` (or ``--log-format json`` where a command takes
it) writes one JSON object per line: ``ts`` (UTC, ISO 8601), ``level``,
``logger``, ``service``, ``pid``, ``message``, and ``job_id``, ``attempt``,
``event_id`` and ``node_id`` whenever they are known — passed as ``extra={...}``
to a log call (:func:`event_context` gives them for an event), or set for a
whole block of work with :func:`log_context` / :func:`bind_context` (the agent's
attempt runner and node, the API's submit). A traceback goes to ``error`` as one
string, so a log shipper never splits an entry.

A crash is usually logged far from the record that caused it (a service's main
loop logs what its consumer loop raised). So an exception leaving a
:func:`log_context` block, or passed through :func:`attach_context` by a loop
that handles one record at a time (the scheduler, the processors, the sink),
carries that context with it, and the line that logs it names the job, attempt,
event and node. ``try``/``except`` costs nothing until something raises, which is
why the hot loops use :func:`attach_context` rather than a block per record.
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

CONTEXT_FIELDS = ("job_id", "attempt", "event_id", "node_id")
_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "gridledger_log_context", default=None
)

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s%(context)s"


_EXC_CONTEXT = "gridledger_log_context"
"""The attribute an exception carries its context in (see :func:`attach_context`)."""


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Attach ``job_id``/``attempt``/``event_id``/``node_id`` to every line logged inside
    the block, and to an exception that leaves it."""
    current = _context.get() or {}
    token = _context.set({**current, **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    except Exception as exc:
        attach_context(exc, **(_context.get() or {}))
        raise
    finally:
        _context.reset(token)


def event_context(event: object) -> dict[str, Any]:
    """The context fields an event names: its job, attempt and id, and its node if any.

    For ``extra=`` of a log line about ``event``, or :func:`attach_context`. Empty
    values (a node event's job) are left out.
    """
    found = {name: getattr(event, name, None) for name in CONTEXT_FIELDS}
    if not found["job_id"]:  # a node event: no job, and its attempt 0 means nothing
        found["job_id"] = found["attempt"] = None
    return {k: v for k, v in found.items() if v not in (None, "")}


def attach_context(exc: BaseException, **fields: Any) -> BaseException:
    """Let ``exc`` carry the context of the work that raised it, for whoever logs it.

    The innermost context wins: a field already attached (by a block nearer the
    raise) is kept. Returns ``exc``, so ``raise attach_context(exc, ...)`` reads well.
    """
    carried: dict[str, Any] = getattr(exc, _EXC_CONTEXT, None) or {}
    merged = {**{k: v for k, v in fields.items() if v is not None}, **carried}
    with contextlib.suppress(AttributeError, TypeError):  # a built-in that takes no attributes
        setattr(exc, _EXC_CONTEXT, merged)
    return exc


def bind_context(**fields: Any) -> None:
    """Set context for the rest of the current task (a task copies its context at creation,
    so this never leaks into other tasks)."""
    current = _context.get() or {}
    _context.set({**current, **{k: v for k, v in fields.items() if v is not None}})


def context_of(record: logging.LogRecord) -> dict[str, Any]:
    """The record's job/attempt/event/node: explicit ``extra`` first, then what the logged
    exception carries (:func:`attach_context`), then the block's context."""
    found = dict(_context.get() or {})
    found.update(_carried(record.exc_info[1] if record.exc_info else None))
    for name in CONTEXT_FIELDS:
        value = getattr(record, name, None)
        if value is not None:
            found[name] = value
    return {k: found[k] for k in CONTEXT_FIELDS if k in found}


def _carried(error: BaseException | None) -> dict[str, Any]:
    """The context the exception, or the one it was raised from, carries."""
    seen = 0
    while error is not None and seen < 16:  # a chain is short; a cycle must not hang us
        carried = getattr(error, _EXC_CONTEXT, None)
        if carried:
            return dict(carried)
        error, seen = error.__cause__ or error.__context__, seen + 1
    return {}


class _ContextFilter(logging.Filter):
    """Renders the context for the text format (`` [job_id=… attempt=…]``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = context_of(record)
        record.context = (" [" + " ".join(f"{k}={v}" for k, v in ctx.items()) + "]") if ctx else ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the service's name and the job context a record carries."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        """The record as one JSON line; a traceback becomes one ``error`` string."""
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


_service: str | None = None
"""The service :func:`setup_logging` configured this process for (None: a CLI command)."""


def log_fatal(exc: BaseException) -> bool:
    """Log why a service stops, in its own log format and with the context ``exc``
    carries (the record it was handling). False when this process is no service
    (nothing set up logging), so the caller prints the error itself."""
    if _service is None:
        return False
    logging.getLogger("gridledger.service").critical(
        "%s stopped: %s: %s", _service, type(exc).__name__, exc, exc_info=exc
    )
    return True


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
    global _service
    _service = service
