"""Waiting on a condition instead of sleeping a fixed time (the one helper tests share).

A fixed sleep is either too short on a loaded machine (a flake) or longer than
needed everywhere else; polling the condition the test actually needs, under a
generous bound, is neither. The bound is a failure with a message naming what
did not happen, never a timing assertion.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

_T = TypeVar("_T")


@overload
async def eventually(
    check: Callable[[], Awaitable[_T | None]],
    what: str,
    timeout: float = 30.0,
    interval: float = 0.05,
) -> _T: ...


@overload
async def eventually(
    check: Callable[[], _T | None],
    what: str,
    timeout: float = 30.0,
    interval: float = 0.05,
) -> _T: ...


async def eventually(
    check: Callable[[], Any],
    what: str,
    timeout: float = 30.0,
    interval: float = 0.05,
) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy, and return that."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        found = check()
        if inspect.isawaitable(found):
            found = await found
        if found:
            return found
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(interval)


def wait_until(
    check: Callable[[], _T | None], what: str, timeout: float = 30.0, interval: float = 0.25
) -> _T:
    """:func:`eventually` for code that is not async (tests driving real processes)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
