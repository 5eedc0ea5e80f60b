"""An attempt's checkpoints: the one it resumes from, downloaded and verified before the
container starts, and the ones it writes, stored while it runs and once more after it ends.

A file is stored once its size and mtime held still across two polls (or at the final
scan), each revision once (CheckpointStored keyed by name and mtime). The folder is the
job's: a folder that is a link, a file refused by the confinement rules, or more files than
``max_checkpoint_files`` is an OutputFailed naming the path and the rule, and a file the
store refused three times is given up.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from schemas.events import CheckpointStored
from services.agent.artifacts import checkpoint_step
from services.agent.confine import list_files
from services.agent.context import AgentContext
from services.agent.emitters import Emitter
from services.agent.errors import (
    ArtifactChecksumError,
    ArtifactMissingError,
    ArtifactRefusedError,
    ArtifactStoreError,
    ContainerStartError,
)
from services.agent.journal import JournalEntry
from services.agent.outputs import Outputs

log = logging.getLogger(__name__)

SKIPPED = (".tmp", ".partial", ".part", ".swp")
"""Checkpoint files still being written, by the usual suffixes: never stored."""


class Checkpoints:
    """The checkpoints of one attempt (``record``), stored through its :class:`Outputs`."""

    def __init__(
        self, ctx: AgentContext, record: JournalEntry, emit: Emitter, outputs: Outputs
    ) -> None:
        self.ctx = ctx
        self.record = record
        self.emit = emit
        self.outputs = outputs
        self._pending: dict[str, tuple[int, int]] = {}
        self._failures: dict[str, int] = {}
        self._folder_refused = False

    async def fetch_resume(self) -> Path | None:
        """Download the checkpoint to resume from into the attempt's folder, verified.

        It comes from the object store, not from this node's disk, so a retry on
        another host resumes the same way. A sha256 mismatch stops the attempt: a
        job never silently resumes from bytes that are not its checkpoint.
        """
        r, s, ctx = self.record, self.record.scheduled, self.ctx
        ref = s.resume_from
        if ref is None:
            return None
        target = self.outputs.dir.parent / "resume" / ref.name
        try:
            await ctx.blocking(ctx.store.fetch, s.tenant, ref.uri, ref.sha256, target)
        except ArtifactChecksumError as exc:
            raise ContainerStartError(
                "checkpoint_checksum_mismatch",
                f"checkpoint {ref.name} of job {ref.job_id} (attempt {ref.attempt}): {exc}",
            ) from exc
        except ArtifactStoreError as exc:
            raise ContainerStartError(
                "resume_checkpoint_unavailable",
                f"checkpoint {ref.name} of job {ref.job_id} (attempt {ref.attempt}) could not "
                f"be downloaded to node {ctx.node_id}: {exc}",
            ) from exc
        log.info("attempt %s resumes from %s (%s)", r.key, ref.uri, ref.sha256[:12])
        return target

    async def watch(self) -> None:
        """Scan the checkpoint folder every ``checkpoint_poll_s`` while the container runs."""
        while True:
            await asyncio.sleep(self.ctx.agent.checkpoint_poll_s)
            await self.scan(final=False)

    async def scan(self, final: bool) -> None:
        """Store what changed in the folder and held still (``final``: whatever is there)."""
        r, ctx = self.record, self.ctx
        prefix = r.scheduled.runnable.checkpoints or ""
        if self._folder_refused:
            return
        try:
            listing = await ctx.blocking(list_files, self.outputs.dir, prefix, SKIPPED)
        except ArtifactRefusedError as exc:  # the folder itself is a link (or passes through one)
            self._folder_refused = True  # for good: nothing below it is stored
            await self.outputs.refused(exc, required=False)
            return
        except ArtifactMissingError:
            return
        for name, signature in sorted(listing.items()):
            if r.checkpoints.get(name) == list(signature):
                continue
            if name not in r.checkpoints and self._files() >= ctx.agent.max_checkpoint_files:
                await self._too_many(prefix)
                return
            stable = self._pending.get(name) == signature
            self._pending[name] = signature
            if not (stable or final) or self._failures.get(name, 0) >= 3:
                continue
            await self._store(f"{prefix}/{name}", name, signature)

    def _files(self) -> int:
        """Checkpoint files of this attempt stored or given up on, each counted once."""
        return len(self.record.checkpoints.keys() | self._failures.keys())

    async def _too_many(self, prefix: str) -> None:
        """Refuse the checkpoint folder for good once the attempt reached its count."""
        self._folder_refused = True
        limit = self.ctx.agent.max_checkpoint_files
        message = (
            f"'{prefix}' holds more checkpoint files than the {limit} an attempt may store "
            "(max_checkpoint_files); later ones are not stored: keep fewer (overwrite or "
            "delete old ones)"
        )
        await self.outputs.refused(
            ArtifactRefusedError(prefix, "over_checkpoint_count", message), False
        )

    async def _store(self, path: str, name: str, signature: tuple[int, int]) -> None:
        r, ctx = self.record, self.ctx
        try:
            stored = await self.outputs.put(path, ctx.agent.upload_timeout_s)
        except ArtifactMissingError:
            return  # gone since the listing (a job replacing its checkpoint)
        except ArtifactRefusedError as exc:
            self._failures[name] = 3  # the job's file: never tried again
            await self.outputs.refused(exc, required=False)
            return
        except ArtifactStoreError as exc:
            self._failures[name] = self._failures.get(name, 0) + 1
            log.warning("checkpoint %s of %s not stored: %s", name, r.key, exc)
            return
        await self.emit.fact(
            CheckpointStored,
            revision=signature[1],
            name=name,
            step=checkpoint_step(name),
            uri=stored.uri,
            sha256=stored.sha256,
            bytes=stored.bytes,
        )
        r.checkpoints[name] = list(signature)
        ctx.journal.save(r)
