"""``Idempotency-Key`` on ``POST /v1/jobs``: one key, one job, even with Postgres down.

The rule, in three layers, each holding without the next:

1. **Ids derived from the key.** A submission of tenant T with key K names job
   ``job-`` + HMAC-SHA256(id key, T NUL K)[:32 hex] (128 bits; the id key is the
   operator's ``api_id_key``, which every replica shares, so nobody without it can
   tell which key names which job) and event ``derived_event_id("T:K", "api-submit")``.
   Whatever happens — two API replicas racing, an API that crashed between the
   broker's acknowledgement and its answer, a client retrying after a timeout or
   a 503 — every JobSubmitted for (T, K) carries the same job id and event id,
   and every consumer (sink, processors, scheduler) drops a repeated event id:
   at most one job, ever, without asking Postgres.
2. **One flight per key in a process.** Concurrent requests with the same (T, K)
   reaching one API process share the first one's append: the others wait for
   its outcome and answer the same job (or the same 503). That process appends
   exactly one JobSubmitted.
3. **Remembered keys.** The process remembers the keys it appended (bounded,
   least recent forgotten first); beyond that, the read model says whether the
   job exists when Postgres answers. A repeat answers 200 with the job; the same
   key with another spec answers 409, so a key cannot silently name two jobs.

What remains possible: two replicas that both see a key for the first time at the
same moment (or one that forgot it while Postgres is down) each append; the
ledger then holds two identical JobSubmitted records that are one job
(layer 1). Keys are scoped to the tenant: the same key of another tenant is
another job.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from schemas.events import derived_event_id
from schemas.spec import character_problem
from services.settings import Settings

REMEMBERED_KEYS = 100_000
"""Keys one API process remembers (about 100 bytes each)."""


MAX_KEY_CHARS = 200
"""Longest Idempotency-Key (a UUID is 36)."""

JOB_ID_HEX = 32
"""Hex digits of a job id after ``job-``: 128 bits, so ids do not collide (ids of 12
digits, from before, stay valid everywhere)."""


def new_job_id() -> str:
    """A fresh random job id (a submit without an Idempotency-Key)."""
    return f"job-{secrets.token_hex(JOB_ID_HEX // 2)}"


def key_problem(key: str) -> str | None:
    """Why ``key`` cannot be an Idempotency-Key, or None."""
    if len(key) > MAX_KEY_CHARS:
        return f"is {len(key)} characters; at most {MAX_KEY_CHARS} are allowed"
    return character_problem(key)


def id_key(settings: Settings) -> bytes:
    """The HMAC key of keyed job ids: ``api_id_key``, else the key file (created once)."""
    if settings.api_id_key:
        return settings.api_id_key.encode()
    path = settings.api_id_key_file or settings.home / "api-id-key"
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_key(path)  # another replica made it first
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_hex(32) + "\n")
    return _read_key(path)


class IdKey:
    """:func:`id_key`, read (or made) at the first keyed submit, not when the app is built."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._key: bytes | None = None

    def get(self) -> bytes:
        """The key."""
        if self._key is None:
            self._key = id_key(self.settings)
        return self._key


def _read_key(path: Path) -> bytes:
    key = path.read_text().strip().encode()
    if not key:
        raise ValueError(f"the id key file {path} is empty; write a random key in it")
    return key


def job_id_for(secret: bytes, tenant: str, key: str) -> str:
    """The job id of a keyed submit: the same tenant and key always name the same job."""
    digest = hmac.new(secret, f"{tenant}\0{key}".encode(), hashlib.sha256).hexdigest()
    return "job-" + digest[:JOB_ID_HEX]


def event_id_for(tenant: str, key: str) -> str:
    """The JobSubmitted id of a keyed submit, so a retried append is the same event, not a second
    one."""
    return derived_event_id(f"{tenant}:{key}", "api-submit")


@dataclass(frozen=True)
class Known:
    """A key already taken: the digest of the spec it was taken with."""

    digest: str


class Submissions:
    """Layers 2 and 3 of the rule for one API process."""

    def __init__(self, remember: int = REMEMBERED_KEYS) -> None:
        self.remember = remember
        self._flights: dict[tuple[str, str], asyncio.Future[Known]] = {}
        self._known: OrderedDict[tuple[str, str], Known] = OrderedDict()

    async def once(
        self,
        tenant: str,
        key: str,
        lookup: Callable[[], Awaitable[Known | None]],
        append: Callable[[], Awaitable[Known]],
    ) -> tuple[Known, bool]:
        """``(known, appended_here)``: the key's spec digest, and whether this call appended.

        ``lookup`` asks the read model (None: not found, or Postgres away); ``append``
        puts the JobSubmitted on the ledger. A failure of ``append`` reaches every
        request of the flight, and the key is not remembered: the next try appends.
        """
        slot = (tenant, key)
        flight = self._flights.get(slot)
        if flight is not None:
            # Another request with this key is in flight: its outcome is ours.
            return await asyncio.shield(flight), False
        known = self._known.get(slot)
        if known is not None:
            self._known.move_to_end(slot)
            return known, False
        flight = asyncio.get_running_loop().create_future()
        # An outcome nobody else waited for must not be reported as never retrieved.
        flight.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._flights[slot] = flight
        try:
            known = await lookup()
            appended = known is None
            if known is None:
                known = await append()
            self._remember(slot, known)
            flight.set_result(known)
        except Exception as exc:
            flight.set_exception(exc)
            raise
        except BaseException:
            flight.cancel()  # this request was cancelled: the others are told so
            raise
        else:
            return known, appended
        finally:
            del self._flights[slot]

    def _remember(self, slot: tuple[str, str], known: Known) -> None:
        self._known[slot] = known
        self._known.move_to_end(slot)
        while len(self._known) > self.remember:
            self._known.popitem(last=False)
