"""An attempt's files in the object store: its folder on this node, the declared outputs
stored after the exit, and the one upload path checkpoints and outputs share.

Every file the job wrote is hostile: it is stored confined to the attempt's folder and
within the caps (:func:`services.agent.artifacts.put_confined`); a file that is not stored
is an OutputFailed naming the path and the rule, never a silent gap.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from schemas.events import OutputFailed, OutputStored
from services.agent.artifacts import StoredArtifact, put_confined
from services.agent.confine import Caps
from services.agent.context import AgentContext
from services.agent.emitters import Emitter
from services.agent.errors import ArtifactMissingError, ArtifactRefusedError, ArtifactStoreError
from services.agent.journal import JournalEntry

log = logging.getLogger(__name__)


def output_dir(work_dir: Path, record: JournalEntry) -> Path:
    """The attempt's output folder on this node (its parent holds the resume download)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in record.job_id)
    return work_dir / f"{safe}.{record.attempt}" / "output"


class Outputs:
    """Stores the files of one attempt (``record``) and reports each outcome."""

    def __init__(self, ctx: AgentContext, record: JournalEntry, emit: Emitter) -> None:
        self.ctx = ctx
        self.record = record
        self.emit = emit
        self.dir = output_dir(ctx.work_dir, record)

    async def store(self) -> None:
        """Store each declared output after the exit: OutputStored or OutputFailed, once each,
        all within ``upload_timeout_s``."""
        r, ctx = self.record, self.ctx
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ctx.agent.upload_timeout_s
        for spec in r.scheduled.runnable.outputs:
            try:
                stored = await self.put(spec.path, deadline - loop.time())
            except ArtifactMissingError:
                await self.emit.fact(
                    OutputFailed,
                    path=spec.path,
                    reason="missing",
                    required=spec.required,
                    message=f"{spec.path} was not under $GRIDLEDGER_OUTPUT_DIR after the exit",
                )
                continue
            except ArtifactRefusedError as exc:
                await self.refused(exc, required=spec.required)
                continue
            except ArtifactStoreError as exc:
                await self.emit.fact(
                    OutputFailed,
                    path=spec.path,
                    reason="store_failed",
                    required=spec.required,
                    message=str(exc),
                )
                continue
            await self.emit.fact(
                OutputStored,
                path=spec.path,
                uri=stored.uri,
                sha256=stored.sha256,
                bytes=stored.bytes,
            )

    async def put(self, path: str, deadline_s: float) -> StoredArtifact:
        """Store the job's file ``path`` (relative to its output folder), confined and capped."""
        r, ctx = self.record, self.ctx
        if deadline_s <= 0:
            raise ArtifactStoreError(
                f"{path} was not stored within upload_timeout_s ({ctx.agent.upload_timeout_s:g} s)"
            )
        caps = Caps(ctx.agent.max_output_file_bytes, ctx.agent.max_output_job_bytes)
        stored = await ctx.blocking(
            put_confined,
            ctx.store,
            r.scheduled.tenant,
            r.job_id,
            r.attempt,
            self.dir,
            path,
            caps,
            r.stored_bytes,
            deadline_s,
        )
        r.stored_bytes += stored.bytes
        return stored

    async def refused(self, exc: ArtifactRefusedError, required: bool) -> None:
        """What the job wrote or declared is not stored: an OutputFailed naming path and rule."""
        log.info("attempt %s: %s not stored: %s", self.record.key, exc.path, exc.message)
        await self.emit.fact(
            OutputFailed,
            path=exc.path,
            reason=exc.reason,
            required=required,
            message=exc.message,
        )
