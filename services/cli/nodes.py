"""``gridledger nodes``: the fleet as the API sees it."""

from __future__ import annotations

from typing import Any

import click

from services.cli import render
from services.cli.options import Connection, Output, api_options, output_options


def _nodes_table(nodes: list[dict[str, Any]], clock: render.Clock, wide: bool = False) -> str:
    """The fleet; ``wide`` (-o wide) adds the free GPU indices, host memory, the agent's
    version and the inventory note."""
    rows = []
    for n in nodes:
        models = sorted({g["model"] for g in n["gpus"]})
        # Only the tenant's own attempts, from the attempts read model: one the watchdog
        # declared lost is not counted (the API scopes /v1/nodes this way).
        running = len(n["your_attempts"])
        live = n["status"] == "ready"
        rows.append(
            [
                n["node_id"],
                render.status(n["status"]) if not live else n["status"],
                n["provider"],
                n["region"],
                f"{len(n['gpus'])}x {'/'.join(models)}",
                # A node that stopped reporting has no free GPUs to offer, and what it ran
                # is only what it last said (the watchdog decides about those attempts).
                len(n["free_gpu_indices"]) if live else "-",
                running if live or not running else f"{running} at last report",
                clock.format(n["last_heartbeat_at"]),
                n["inventory_source"],
            ]
        )
        if wide:
            rows[-1] += [
                ",".join(str(i) for i in n["free_gpu_indices"]) or "-",
                n.get("host_memory_mb"),
                n.get("agent_version"),
                n.get("inventory_note"),
            ]
    headers = ["NODE", "STATUS", "PROVIDER", "REGION", "GPUS", "FREE", "RUNNING"]
    headers += [clock.header("LAST HEARTBEAT"), "INVENTORY"]
    if wide:
        headers += ["FREE GPUS", "HOST MB", "AGENT", "INVENTORY NOTE"]
    return render.table(headers, rows)


@click.command("nodes")
@api_options
@output_options
def nodes(conn: Connection, out: Output) -> int:
    """The fleet: status, GPUs, free and running, last heartbeat, inventory source."""
    out.emit(
        conn.client.get("/v1/nodes")["nodes"],
        lambda n: _nodes_table(n, out.clock),
        wide=lambda n: _nodes_table(n, out.clock, wide=True),
    )
    return 0


COMMANDS = (nodes,)
