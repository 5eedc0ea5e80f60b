"""``gridledger dev up|down|status|topics``: the local stack of infra/ (Kafka, Postgres, Docker)."""

from __future__ import annotations

import asyncio
import time

import click

from infra import stack
from infra.status import ComponentStatus
from infra.topics import ensure_topics
from services.cli.options import Output, output_options
from services.settings import load_settings


@click.group("dev", short_help="start, stop or inspect the local stack (Kafka, Postgres, Docker)")
def dev() -> None:
    """The local stack used by services and tests.

    Its state lives in GRIDLEDGER_HOME (default ./.gridledger).
    """


def _print(component: ComponentStatus) -> None:
    click.echo(component.line())


@dev.command("up")
@click.option(
    "--brokers",
    type=click.IntRange(1, 9),
    help="Kafka brokers of the local KRaft cluster (default 1, or what the last `dev up` of "
    "this home used); 3 gives replication 3 and min.insync.replicas=2.",
)
def up(brokers: int | None) -> int:
    """Start what is not running, then check every component."""
    settings = load_settings(**({"kafka_brokers": brokers} if brokers else {}))
    began = time.monotonic()
    click.echo(f"gridledger local stack in {settings.home}")
    asyncio.run(stack.up(settings, report=_print))
    click.echo(f"settings: {stack.stack_env_path(settings)}")
    click.echo(f"tokens:   {settings.tokens_path}")
    click.echo(f"ready in {time.monotonic() - began:.1f} s")
    return 0


@dev.command("down")
def down() -> int:
    """Stop what `dev up` started in this home (data kept)."""
    settings = load_settings()
    click.echo(f"gridledger local stack in {settings.home}")
    stack.down(settings, report=_print)
    return 0


@dev.command("status")
@output_options
def status(out: Output) -> int:
    """State, address, pid and log of each component.

    Exit code 0 when every component runs, 1 otherwise.
    """
    settings = load_settings()
    components = asyncio.run(stack.status(settings))
    payload = {"home": str(settings.home), "components": {c.name: c.to_json() for c in components}}

    def text(_: object) -> str:
        lines = [f"gridledger local stack in {settings.home}"]
        return "\n".join(lines + [c.line() for c in components])

    out.emit(payload, text)
    return 0 if all(c.running for c in components) else 1


@dev.command(
    "topics",
    short_help="create every gridledger topic on the configured broker",
)
@output_options
def topics(out: Output) -> int:
    """Create every gridledger topic on the configured broker.

    For deployments whose Kafka is not started by `dev up` (e.g. docker-compose).
    """
    created = asyncio.run(ensure_topics(load_settings()))
    out.emit(
        {"topics": dict(sorted(created.items()))},
        lambda data: "\n".join(f"{n}: {p} partitions" for n, p in data["topics"].items()),
    )
    return 0


COMMANDS = (dev,)
