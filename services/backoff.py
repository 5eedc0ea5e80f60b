"""Riding out a dependency's outage: capped exponential backoff with jitter, told once.

Every long-running service (api, scheduler, sink, processors, agent) meets the
same two dependencies going away: the broker and Postgres. They all retry the
same way, from here:

- :class:`Backoff` is the schedule: ``initial_s`` doubling up to ``cap_s``, each
  delay drawn uniformly from its upper half ("equal jitter"), so a fleet of
  clients that lost the broker together does not come back in lockstep, and no
  delay is ever shorter than half the nominal one;
- :class:`Outage` is what the log says: one warning when a dependency goes away
  (with the error), one info line when it is back (with how long it was away
  and how many tries it took), and nothing per retry in between;
- :func:`retrying` runs an operation until it succeeds, telling an
  :class:`Outage` and sleeping on a :class:`Backoff` between tries.

What counts as an outage is the caller's to say (``transient``): an error that
means "not reachable now" is retried; anything else is a bug or a bad
configuration and is raised, so the service exits with a message naming it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

log = logging.getLogger("gridledger.outage")

_T = TypeVar("_T")


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff with equal jitter.

    Retry ``n`` waits a uniform time in [d/2, d] where d = min(cap, initial·factorⁿ).
    """

    initial_s: float = 0.2
    cap_s: float = 10.0
    factor: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.initial_s <= self.cap_s:
            raise ValueError(
                f"backoff needs 0 < initial_s <= cap_s (got {self.initial_s}, {self.cap_s})"
            )
        if self.factor < 1:
            raise ValueError(f"backoff factor must be at least 1 (got {self.factor})")

    def nominal(self, attempt: int) -> float:
        """The un-jittered delay before retry ``attempt`` (0 for the first retry)."""
        # min() before the power would overflow for a long outage: cap the exponent.
        return min(self.cap_s, self.initial_s * self.factor ** min(attempt, 64))

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """The jittered delay before retry ``attempt``: uniform in [nominal/2, nominal]."""
        nominal = self.nominal(attempt)
        return nominal / 2 + rand() * nominal / 2


@dataclass
class Outage:
    """One dependency's availability as a service sees it, logged on change only.

    ``down(exc)`` on every failed try, ``up()`` on the first success after: the
    log gets one line when the dependency goes away and one when it is back.
    """

    what: str
    """The dependency in the user's terms, e.g. ``Kafka at 127.0.0.1:9092``."""
    logger: logging.Logger = field(default=log, repr=False)
    since: float | None = None
    """``time.monotonic()`` of the first failure of the current outage (None: reachable)."""
    tries: int = 0
    last_error: str = ""

    @property
    def is_down(self) -> bool:
        """Whether the dependency is away now (reported down, not yet up again)."""
        return self.since is not None

    def down(self, exc: BaseException | str) -> None:
        """Record a failed try; only the first of an outage logs, so a long one is one line, not
        thousands."""
        self.last_error = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        self.tries += 1
        if self.since is None:
            self.since = time.monotonic()
            self.logger.warning(
                "%s is unreachable (%s); retrying with backoff until it is back",
                self.what,
                self.last_error,
            )

    def up(self) -> None:
        """Record that the dependency answers again; logs how long it was away, once."""
        if self.since is None:
            return
        away = time.monotonic() - self.since
        self.logger.info(
            "%s is back after %.1f s (%d failed tries)",
            self.what,
            away,
            self.tries,
        )
        self.since, self.tries, self.last_error = None, 0, ""


_OUTAGES: dict[str, Outage] = {}


def outage_of(what: str) -> Outage:
    """The process's one :class:`Outage` for a dependency, shared by every client of it.

    A service holds several clients of the same broker (producers, consumers, the
    agent's spool lanes); one shared record keeps the log at one line per outage.
    """
    found = _OUTAGES.get(what)
    if found is None:
        found = _OUTAGES[what] = Outage(what)
    return found


_CONNECTION_TROUBLE = re.compile(
    r"connect|not ready|NodeNotReady|Unable to update metadata|timed out",
    re.IGNORECASE,
)


class _IntoOutage(logging.Filter):
    """Turns a client library's per-retry connection errors into one :class:`Outage`."""

    def __init__(self, outage: Outage) -> None:
        super().__init__()
        self.outage = outage

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        message = record.getMessage()
        if not _CONNECTION_TROUBLE.search(message):
            return True
        error = record.exc_info[1] if record.exc_info else None
        # The exception, when the record carries one, says more than the library's line.
        self.outage.down(error if error is not None else message.splitlines()[0][:300])
        return False


_ROUTED: set[tuple[str, str]] = set()


def route_client_logs(logger_name: str, outage: Outage) -> None:
    """Send ``logger_name``'s connection errors (and its children's) to ``outage``.

    aiokafka logs an error per failed connection try, several a second for as long
    as the broker is away; the outage's two lines say the same once. Other warnings
    of the library pass through untouched.
    """
    if (logger_name, outage.what) in _ROUTED:
        return
    _ROUTED.add((logger_name, outage.what))
    routed = _IntoOutage(outage)
    # A logger's filter does not see its children's records, so it goes on every
    # logger of the library that exists now (a library creates them at import).
    names = [logger_name] + [
        n for n in logging.Logger.manager.loggerDict if n.startswith(logger_name + ".")
    ]
    for name in names:
        logging.getLogger(name).addFilter(routed)


async def retrying(
    operation: Callable[[], Awaitable[_T]],
    *,
    outage: Outage,
    transient: Callable[[BaseException], bool],
    backoff: Backoff,
    on_failure: Callable[[], Awaitable[None]] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> _T:
    """``await operation()`` until it returns; retry only errors ``transient`` accepts.

    ``on_failure`` runs after every transient failure, before the wait (e.g. drop
    a producer whose state the failure left unknown). Cancellation is never
    swallowed, so a service that is asked to stop stops in the middle of an outage.
    """
    attempt = 0
    while True:
        try:
            result = await operation()
        except Exception as exc:
            if not transient(exc):
                raise
            outage.down(exc)
            if on_failure is not None:
                await on_failure()
            await sleep(backoff.delay(attempt))
            attempt += 1
            continue
        outage.up()
        return result


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait for ``event`` at most ``timeout`` seconds; True if it is set.

    A backoff's sleep that a stop request cuts short. Not ``asyncio.wait_for``: on
    Python 3.11 it can swallow a cancellation that races its timeout, which leaves
    the cancelled task running forever.
    """
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()
    return event.is_set()
