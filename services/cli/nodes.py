"""``gridledger nodes``: the fleet as the API sees it."""

from __future__ import annotations

from typing import Any

import click

from services.cli import render
from services.cli.options import Connection, Output, api_options, output_options

HEADERS = [
    "NODE",
    "STATUS",
    "PROVIDER",
    "REGION",
    "GPUS",
    "FREE",
    "RUNNING",
    "LAST HEARTBEAT",
    "INVENTORY",
]


def _nodes_table(nodes: list[dict[str, Any]]) -> str:
    rows = []
    for n in nodes:
        models = sorted({g["model"] for g in n["gpus"]})
        rows.append(
            [
                n["node_id"],
                n["status"],
                n["provider"],
                n["region"],
                f"{len(n['gpus'])}x {'/'.join(models)}",
                len(n["free_gpu_indices"]),
                len(n["running_attempts"]),
                (n["last_heartbeat_at"] or "")[:19],
                n["inventory_source"],
            ]
        )
    return render.table(HEADERS, rows)


@click.command("nodes", short_help="the fleet, with its inventory source")
@api_options
@output_options
def nodes(conn: Connection, out: Output) -> int:
    """The fleet: status, GPUs, free and running, last heartbeat, inventory source."""
    out.emit(conn.client.get("/v1/nodes")["nodes"], _nodes_table)
    return 0


COMMANDS = (nodes,)
