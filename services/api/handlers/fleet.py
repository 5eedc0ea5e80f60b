"""The fleet as a tenant sees it: every node's capacity, only the tenant's own attempts."""

from __future__ import annotations

from datetime import datetime

from aiohttp import web

from services.api import queries
from services.api.deps import POOL, SETTINGS, json_text, tenant_of
from services.clock import utcnow


async def list_nodes(request: web.Request) -> web.Response:
    """The fleet as a tenant sees it (see ``services.api.models.NodeDocument``).

    Capacity is shared, so every tenant sees every node, its GPUs and how many are
    busy; whose work runs there is not shared, so the only attempts listed are the
    tenant's own, read from the attempts read model. That is also why a node that
    went silent never shows an attempt the watchdog already declared lost: the
    node's last heartbeat still names it, the attempts table does not.
    """
    silent_after = request.app[SETTINGS].scheduler_node_timeout_s
    pool = request.app[POOL]
    nodes = await queries.nodes(pool)
    mine = await queries.tenant_live_attempts(pool, tenant_of(request))
    now = utcnow()
    out = []
    for node in nodes:
        status = node.get("status")
        # The read model keeps the last status a node reported; a node that stopped
        # reporting is shown as silent, as the scheduler sees it (not placeable).
        last = node.get("last_heartbeat_at") or node.get("registered_at")
        if (
            status == "ready"
            and last
            and (now - datetime.fromisoformat(last)).total_seconds() > silent_after
        ):
            status = "silent"
        free = list(node.get("free_gpu_indices") or []) if status == "ready" else []
        out.append(
            {
                **{k: node.get(k) for k in NODE_FIELDS},
                "status": status,
                "free_gpu_indices": free,
                "busy_gpu_count": len(node.get("gpus") or [])
                - len(node.get("free_gpu_indices") or []),
                "your_attempts": mine.get(node["node_id"], []),
            }
        )
    return web.json_response({"nodes": out}, dumps=json_text)


NODE_FIELDS = (
    "node_id",
    "provider",
    "region",
    "inventory_source",
    "inventory_note",
    "gpus",
    "host_memory_mb",
    "agent_version",
    "heartbeat_interval_s",
    "registered_at",
    "last_heartbeat_at",
    "drained_at",
    "drain_reason",
)
"""What a tenant sees of a node's row; ``running_attempts`` and ``gpu_usage`` name or
reveal other tenants' work and stay out."""
