"""``gridledger prices load FILE | list | show [--at TIME]``: the price catalog.

``load`` is for operators: it checks the file (``projections.prices.parse_catalog``),
folds the ledger's ``prices`` topic into the price book, refuses what the book would
refuse (an old version, another currency, a row before now: a price change never
changes a past period) and appends one PriceCatalogPublished, then reads the topic
back to confirm the book took it (two loads at once: the second is refused). It needs
the stack (Kafka) like ``replay``, never a tenant token, so no tenant can change a
price. ``list`` and ``show`` read the API, like every tenant command.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from projections.prices import Catalog, CatalogError, Problem
from services.cli import render
from services.cli.exits import CliError, Exit
from services.cli.options import Connection, Output, api_options, output_options
from services.cli.usage import _utc_time

MAX_FILE_BYTES = 4 << 20


def _refused(path: Path, problems: list[Problem]) -> CliError:
    lines = [f"  {field}: {why}" for field, why in problems]
    return CliError(
        f"the price catalog {path} was refused:\n" + "\n".join(lines), Exit.INVALID_SPEC
    )


def read_catalog(path: Path) -> Catalog:
    """The checked catalog of a YAML or JSON file; CliError (exit 3) naming each problem."""
    from projections.prices import parse_catalog
    from services.api.problems import BodyError, parse_body

    raw = path.read_bytes()
    if len(raw) > MAX_FILE_BYTES:
        raise _refused(path, [("(file)", f"{len(raw)} bytes; at most {MAX_FILE_BYTES}")])
    media = "application/json" if path.suffix == ".json" else "application/yaml"
    try:
        return parse_catalog(parse_body(raw, media))
    except BodyError as exc:
        raise _refused(path, [(p.field, p.problem) for p in exc.problems]) from None
    except CatalogError as exc:
        raise _refused(path, exc.problems) from None


async def publish(settings: Any, path: Path) -> dict[str, Any]:
    """Check ``path`` against the ledger's price book and append it as the next version."""
    from projections.prices import PriceBook, publication_problems
    from schemas.events import PriceCatalogPublished
    from services.clock import utcnow
    from services.ledger import Ledger, compose

    catalog = read_catalog(path)
    async with Ledger(settings, "prices") as ledger:
        topic = settings.topic(PriceCatalogPublished.TOPIC)

        async def book() -> PriceBook:
            return PriceBook(
                [
                    r.value
                    async for r in compose.read_partitions(ledger, topic, consumer_name="prices")
                    if isinstance(r.value, PriceCatalogPublished)
                ]
            )

        event = PriceCatalogPublished(
            occurred_at=utcnow(),
            producer="cli/prices",
            version=catalog.version,
            currency=catalog.currency,
            entries=list(catalog.entries),
            source=path.name[:200],
        )
        problems = publication_problems(await book(), event)
        if problems:
            raise _refused(path, problems)
        await ledger.append(event)
        after = await book()
    if event not in after.catalogs:
        why = next((p for e, p in after.refused if e.event_id == event.event_id), [])
        raise _refused(path, why or [("version", "another load took this version first")])
    return {
        "version": event.version,
        "currency": event.currency,
        "rows": len(event.entries),
        "published_at": event.occurred_at.isoformat(),
        "event_id": event.event_id,
    }


@click.group("prices")
def prices() -> None:
    """The price catalog: price per GPU-hour by provider, GPU model and region, versioned."""


@prices.command("load")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@output_options
def load(out: Output, file: Path) -> int:
    """Publish FILE (YAML or JSON) as the next version of the catalog, on the ledger.

    For operators: it writes to Kafka directly (the stack's settings), as replay reads
    it. Every row takes effect on a whole UTC hour at or after now.
    """
    from services.settings import load_settings

    done = asyncio.run(publish(load_settings(), file))
    out.emit(
        done,
        lambda d: (
            f"published version {d['version']} ({d['rows']} rows, {d['currency']}) "
            f"at {d['published_at']}"
        ),
    )
    return 0


def _versions_text(data: dict[str, Any]) -> str:
    if not data["versions"]:
        return "no price catalog yet: usage is unpriced (an operator runs `gridledger prices load`)"
    rows = [
        [
            v["version"],
            v["currency"],
            v["published_at"],
            len(v["entries"]),
            "yes" if v["accepted"] else "refused: " + "; ".join(p["field"] for p in v["problems"]),
            v["source"],
        ]
        for v in data["versions"]
    ]
    return render.table(
        ["VERSION", "CURRENCY", "PUBLISHED (UTC)", "ROWS", "IN FORCE", "FILE"], rows
    )


@prices.command("list")
@api_options
@output_options
def list_versions(conn: Connection, out: Output) -> int:
    """Every version of the catalog, oldest first, and whether the price book took it."""
    out.emit(conn.client.get("/v1/prices"), _versions_text)
    return 0


def _in_force_text(data: dict[str, Any]) -> str:
    rows = [
        [
            p["provider"],
            p["gpu_model"],
            p["region"] or "(any)",
            f"{p['per_gpu_hour']} {data['currency']}",
            p["effective_from"],
            p["version"],
        ]
        for p in data["prices"]
    ]
    headers = ["PROVIDER", "GPU MODEL", "REGION", "PER GPU-HOUR", "SINCE (UTC)", "VERSION"]
    return f"prices at {data['at']}\n" + render.table(headers, rows)


@prices.command("show")
@click.option("--at", metavar="TIME", callback=_utc_time, help="The moment (default: now).")
@api_options
@output_options
def show(conn: Connection, out: Output, at: str | None) -> int:
    """The price per GPU-hour in force at TIME for each provider, GPU model and region."""
    query = f"?at={at.replace('+', '%2B')}" if at else ""
    out.emit(conn.client.get(f"/v1/prices/in-force{query}"), _in_force_text)
    return 0


COMMANDS = (prices,)
