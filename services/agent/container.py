"""The container an attempt runs in, as the agent asks Docker for it: the job's image and
command, its environment (the job's, its secrets, and what the agent sets), limits that are
never Docker's "no limit", labels naming the attempt, its GPUs and its folders.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from schemas.spec import MIN_CPUS, MIN_MEMORY_GB, reserved_env
from services.agent.context import AgentContext
from services.agent.journal import JournalEntry
from services.agent.runtime import (
    LABEL_ATTEMPT,
    LABEL_JOB,
    LABEL_NODE,
    OUTPUT_DIR,
    RESUME_DIR,
    ContainerRequest,
    container_name,
)

log = logging.getLogger(__name__)

_MIN_MEMORY = int(MIN_MEMORY_GB * 1024**3)
_MIN_NANO_CPUS = int(MIN_CPUS * 1e9)


def container_request(
    ctx: AgentContext,
    record: JournalEntry,
    output: Path,
    resume_file: Path | None = None,
    secrets: dict[str, str] | None = None,
) -> ContainerRequest:
    """The container of the attempt ``record``, writing to ``output``; ``secrets`` (values by
    variable) go into its environment and nowhere else: the request is never journaled or
    spooled."""
    r, s = record, record.scheduled
    uid, gid = ctx.agent.user()
    for folder in (output, output / (s.runnable.checkpoints or ".")):
        # Owned by the container's (non-root) user, closed to every other uid on the node.
        folder.mkdir(parents=True, exist_ok=True)
        os.chown(folder, uid, gid)
        os.chmod(folder, 0o750)
    # The API refuses reserved names; a record it did not check (an older writer, the
    # trusted decode path) still never overrides what the agent sets.
    given = {**s.runnable.env, **(secrets or {})}
    env = {k: v for k, v in given.items() if not reserved_env(k)}
    if len(env) < len(given):
        log.warning(
            "attempt %s: reserved names dropped from the job's env: %s",
            r.key,
            ", ".join(sorted(k for k in given if reserved_env(k))),
        )
    gpus = list(r.gpu_indices) if ctx.inventory.has_real_gpus and s.gpu_count else None
    env.update(
        GRIDLEDGER_JOB_ID=s.job_id,
        GRIDLEDGER_ATTEMPT=str(s.attempt),
        GRIDLEDGER_OUTPUT_DIR=OUTPUT_DIR,
        # Whatever the image sets: the assigned GPUs only ("void": none at all).
        NVIDIA_VISIBLE_DEVICES=",".join(map(str, gpus)) if gpus else "void",
    )
    resume_target = ""
    if s.resume_from is not None and resume_file is not None:
        resume_target = f"{RESUME_DIR}/{s.resume_from.name}"
        env["GRIDLEDGER_RESUME_FROM"] = resume_target
    return ContainerRequest(
        name=container_name(ctx.node_id, s.job_id, s.attempt),
        image=s.runnable.image,
        command=list(s.runnable.command),
        env=env,
        labels={
            LABEL_JOB: s.job_id,
            LABEL_ATTEMPT: str(s.attempt),
            LABEL_NODE: ctx.node_id,
        },
        # Never 0 (Docker's "no limit"), even for a spec the API did not check.
        memory_limit_bytes=max(int(s.runnable.resources.memory_gb * 1024**3), _MIN_MEMORY),
        nano_cpus=max(int(s.runnable.resources.cpus * 1e9), _MIN_NANO_CPUS),
        output_dir=output,
        user=f"{uid}:{gid}",
        pids_limit=ctx.agent.pids_limit,
        resume_file=resume_file,
        resume_target=resume_target,
        gpu_indices=gpus,
    )
