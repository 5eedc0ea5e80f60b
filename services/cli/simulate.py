"""``gridledger simulate --nodes N --jobs M --mix ...``: a simulated fleet on the real ledger."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import click

from services.cli.options import Output, output_options
from services.simulator.mix import DEFAULT_MIX


@click.command("simulate")
@click.option("--nodes", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--jobs", type=click.IntRange(min=0), default=200, show_default=True)
@click.option(
    "--mix",
    default=DEFAULT_MIX,
    show_default=True,
    help="Outcome weights (names: success, user_error, oom, node_lost).",
)
@click.option("--duration", default="1-3", show_default=True, help="Job run time range in s.")
@click.option("--gpus", default="1", show_default=True, help="GPUs per job, cycled (e.g. 1,1,2).")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--heartbeat", type=float, default=1.0, show_default=True, help="Heartbeat (s).")
@click.option("--tick", type=float, default=1.0, show_default=True, help="Meter tick (s).")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--timeout", type=float, default=300.0, show_default=True)
@click.option(
    "--with-services",
    is_flag=True,
    help="Start a scheduler and processors on fresh sim-<id>. topics.",
)
@output_options
def simulate(
    out: Output,
    nodes: int,
    jobs: int,
    mix: str,
    duration: str,
    gpus: str,
    gpus_per_node: int,
    heartbeat: float,
    tick: float,
    seed: int,
    timeout: float,
    with_services: bool,
) -> int:
    """Simulated agents for thousands of nodes in one process.

    They register, heartbeat, accept, hold, meter, log, exit and release like
    the real agent. Without --with-services they join the installation of the
    current settings (run `gridledger scheduler` and `gridledger processors`);
    with it, a scheduler and a processors worker are started on fresh topics
    that are deleted afterwards. Prints a JSON summary; exit 0 when every job
    ended.
    """
    from services.settings import load_settings
    from services.simulator.mix import JobMix
    from services.simulator.run import simulate as run_simulation

    try:
        job_mix = JobMix.parse(mix, duration, gpus, seed)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--mix/--duration/--gpus") from None
    settings = load_settings()
    say = (lambda line: None) if out.machine else (lambda line: click.echo(line))

    def go(s: Any) -> Any:
        return run_simulation(
            s,
            nodes,
            jobs,
            job_mix,
            timeout_s=timeout,
            heartbeat_interval_s=heartbeat,
            tick_s=tick,
            gpus_per_node=gpus_per_node,
            say=say,
        )

    if with_services:
        from services.ledger.topics import delete_topics, ensure_topics
        from services.simulator.run import run_with_services

        tag = uuid.uuid4().hex[:8]
        scoped = settings.model_copy(
            update={"topic_prefix": f"sim-{tag}.", "processors_app_id": f"sim-{tag}"}
        )
        asyncio.run(ensure_topics(scoped))
        try:
            summary = run_with_services(scoped, settings.home / "simulate" / tag / "logs", go)
        finally:
            asyncio.run(delete_topics(scoped))
            import shutil

            for path in (scoped.home / "faust").glob(f"sim-{tag}*-data"):
                shutil.rmtree(path, ignore_errors=True)
    else:
        summary = asyncio.run(go(settings))
    out.emit(summary)
    return 0 if summary["terminal"] == summary["jobs"] else 1


COMMANDS = (simulate,)
