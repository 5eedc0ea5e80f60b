"""``gridledger agent``: run the node agent until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from services.ops.logs import bind_context, setup_logging

if TYPE_CHECKING:
    from services.agent.settings import AgentSettings


@click.command("agent")
@click.option("--node-id", help="This node's id (default: the host name).")
@click.option("--provider", help="Provider label (default: from the inventory or 'local').")
@click.option("--region", help="Region label (default: from the inventory or 'local').")
@click.option(
    "--inventory",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Declared GPU inventory (JSON or YAML), used when NVML is unavailable.",
)
@click.option("--pull-policy", type=click.Choice(["never", "if_not_present"]))
@click.option("--heartbeat-interval", "heartbeat_interval_s", type=float, metavar="S")
@click.option("--meter-interval", "meter_interval_s", type=float, metavar="S")
@click.option("--log-quota-bytes", type=int)
@click.option("--shutdown-policy", type=click.Choice(["detach", "stop"]))
@click.option("--log-level", default="INFO", show_default=True)
def agent(log_level: str, inventory: Path | None, **options: Any) -> int:
    """Run the node agent until SIGTERM/SIGINT.

    Every option also reads GRIDLEDGER_AGENT_<NAME> (e.g.
    GRIDLEDGER_AGENT_PULL_POLICY); options win. On shutdown running containers
    are left running and re-attached by the next start (--shutdown-policy stop
    stops them).
    """
    from services.agent.settings import AgentSettings
    from services.settings import load_settings

    options["inventory_file"] = inventory
    overrides = {name: value for name, value in options.items() if value is not None}
    agent_settings = AgentSettings(**overrides)
    settings = load_settings()
    setup_logging(f"agent-{agent_settings.node_id}", log_level, settings.log_format)
    asyncio.run(_serve(settings, agent_settings))
    return 0


async def _serve(settings: Any, agent_settings: AgentSettings) -> None:
    from services.agent.bootstrap import run_agent
    from services.ops.server import stop_on_signals

    # Every line this agent logs names its node; its tasks inherit it (and the attempt
    # runners add the job and the attempt).
    bind_context(node_id=agent_settings.node_id)
    await run_agent(settings, agent_settings, stop_on_signals())


COMMANDS = (agent,)
