"""``gridledger webhooks``: your webhook subscriptions (add, list, rm, rotate, enable,
deliveries), and the operators' delivery service (``serve``).

Deliveries are signed the Standard Webhooks way (``webhook-id``, ``webhook-timestamp``,
``webhook-signature``) with the secret ``add`` prints once; the body is the event as
CloudEvents JSON. services/webhooks/ says how they are queued, retried and disabled.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from typing import Any

import click

from services.cli import render
from services.cli.options import Connection, Output, api_options, output_options
from services.ops.logs import setup_logging
from services.settings import load_settings


def _path(sid: str, tail: str = "") -> str:
    return f"/v1/webhooks/{urllib.parse.quote(sid, safe='')}{tail}"


def _state(w: dict[str, Any]) -> str:
    return "enabled" if w["enabled"] else w["disabled_reason"] or "disabled"


def _webhooks_table(found: list[dict[str, Any]], clock: render.Clock) -> str:
    rows = [
        [w["id"], w["url"], ",".join(w["events"]), w["pending"], clock.format(w["created_at"]),
         _state(w)]
        for w in found
    ]  # fmt: skip
    return render.table(["ID", "URL", "EVENTS", "PENDING", clock.header("CREATED"), "STATE"], rows)


def _deliveries_table(found: list[dict[str, Any]], clock: render.Clock) -> str:
    rows = [
        [clock.format(d["at"]), d["event_type"], d["event_id"], d["attempt"],
         d["status_code"] if d["status_code"] is not None else "-", d["latency_ms"],
         "ok" if d["ok"] else d["error"]]
        for d in found
    ]  # fmt: skip
    return render.table(
        [clock.header("AT"), "EVENT", "WEBHOOK-ID", "TRY", "STATUS", "MS", "RESULT"], rows
    )


@click.group("webhooks", short_help="your webhooks: add, list, rm, rotate, enable, deliveries")
def webhooks() -> None:
    """Job events POSTed to your URLs, signed (Standard Webhooks), as CloudEvents JSON."""


@webhooks.command("add", short_help="subscribe a URL to job events (prints the secret once)")
@click.argument("url")
@click.option(
    "--events",
    required=True,
    metavar="TYPE,...",
    help="Job event types, comma-separated, e.g. JobFailed,JobSucceeded.",
)
@api_options
@output_options
def add(conn: Connection, out: Output, url: str, events: str) -> int:
    """POST each of your jobs' EVENTS to URL, signed with a secret printed once.

    The URL is http(s) with no credentials in it, and its host must be a public
    address: loopback, private and link-local addresses are refused (an operator
    allows loopback with GRIDLEDGER_WEBHOOKS_ALLOW_LOOPBACK=1 for local use). Verify
    deliveries with the secret (the `standardwebhooks` package); `webhook-id` is the
    event id, the same on every retry.
    """
    names = [e.strip() for e in events.split(",") if e.strip()]
    body = json.dumps({"url": url, "events": names}).encode()
    made = conn.client.send("POST", "/v1/webhooks", body)
    out.emit(
        made,
        lambda w: (
            f"webhook {w['id']} added for {','.join(w['events'])}\n"
            f"secret (shown once; keep it): {w['secret']}"
        ),
    )
    return 0


@webhooks.command("list", short_help="your webhooks: URL, events, pending, enabled or why not")
@api_options
@output_options
def list_webhooks(conn: Connection, out: Output) -> int:
    """Your webhooks; STATE says why one was disabled and how to enable it again."""
    found = conn.client.get("/v1/webhooks")["webhooks"]
    out.emit(found, lambda f: _webhooks_table(f, out.clock))
    return 0


@webhooks.command("rm", short_help="remove a webhook, its queue and its log")
@click.argument("webhook_id")
@api_options
@output_options
def remove(conn: Connection, out: Output, webhook_id: str) -> int:
    """Remove WEBHOOK_ID; nothing more is delivered to it."""
    out.emit(conn.client.send("DELETE", _path(webhook_id)), lambda r: f"webhook {r['id']} removed")
    return 0


@webhooks.command(
    "rotate", short_help="a new signing secret (the previous one keeps signing for a while)"
)
@click.argument("webhook_id")
@api_options
@output_options
def rotate(conn: Connection, out: Output, webhook_id: str) -> int:
    """Give WEBHOOK_ID a new secret, printed once. Until the time printed, deliveries carry
    two signatures (new and previous secret), so receivers can switch without a gap."""
    done = conn.client.send("POST", _path(webhook_id, "/rotate"))
    out.emit(
        done,
        lambda r: (
            f"webhook {r['id']}: new secret (shown once): {r['secret']}\n"
            f"the previous secret signs too until {out.clock.format(r['previous_valid_until'])}"
        ),
    )
    return 0


@webhooks.command("enable", short_help="deliver to a disabled webhook again")
@click.argument("webhook_id")
@api_options
@output_options
def enable(conn: Connection, out: Output, webhook_id: str) -> int:
    """Enable WEBHOOK_ID again after fixing its receiver; what was queued is delivered."""
    done = conn.client.send("POST", _path(webhook_id, "/enable"))
    out.emit(done, lambda r: f"webhook {r['id']} enabled")
    return 0


@webhooks.command("deliveries", short_help="a webhook's latest delivery attempts")
@click.argument("webhook_id")
@api_options
@output_options
def deliveries(conn: Connection, out: Output, webhook_id: str) -> int:
    """WEBHOOK_ID's latest attempts, newest first: status code, latency, error."""
    found = conn.client.get(_path(webhook_id, "/deliveries"))["deliveries"]
    out.emit(found, lambda f: _deliveries_table(f, out.clock))
    return 0


@webhooks.command("serve", short_help="operators: run the webhooks delivery service")
def serve() -> int:
    """Deliver the tenants' job events to their webhooks (runs until Ctrl-C).

    Needs the secrets key (as the API does), the broker and Postgres; serves /healthz,
    /readyz and /metrics on GRIDLEDGER_OPS_PORT.
    """
    from services.webhooks.service import serve as run

    settings = load_settings()
    setup_logging("webhooks", "INFO", settings.log_format)
    asyncio.run(run(settings))
    return 0


COMMANDS = (webhooks,)
