"""``gridledger notary`` (the sealing service) and ``gridledger audit keygen|verify``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from services.cli import render
from services.cli.exits import CliError, Exit
from services.cli.options import Output, output_options
from services.ops.logs import setup_logging
from services.settings import load_settings


@click.command("notary")
@click.option("--log-level", default="INFO", show_default=True)
def notary(log_level: str) -> int:
    """Seal the ledger until interrupted: every N records or T seconds per partition, an
    Ed25519-signed seal on ledger-seals and in the object store.

    Settings: GRIDLEDGER_NOTARY_KEY_FILE, GRIDLEDGER_NOTARY_SEAL_RECORDS,
    GRIDLEDGER_NOTARY_SEAL_INTERVAL_S. README "Audit".
    """
    setup_logging("notary", log_level, load_settings().log_format)
    asyncio.run(_serve())
    return 0


async def _serve() -> None:
    from services.notary.endpoints import notary_endpoints
    from services.notary.service import Notary
    from services.ops.server import serve_until_signalled

    settings = load_settings()
    await serve_until_signalled(settings, Notary(settings), notary_endpoints)


@click.group("audit")
def audit() -> None:
    """The tamper-evident ledger: the notary's key, and checking the seals (README "Audit")."""


@audit.command("keygen")
@click.option("--rotate", is_flag=True, help="Replace an existing key; its public key is kept.")
def keygen(rotate: bool) -> int:
    """Create the notary's Ed25519 signing key (0600) and record its public key."""
    from services.notary import keys

    kid, private, public = keys.keygen(load_settings(), rotate=rotate)
    click.echo(f"notary key {kid}: {private} (private, 0600); public key {public}")
    if rotate:
        click.echo("restart the notary to sign with it; keep the old public key for verify")
    return 0


@audit.command("verify")
@click.option("--from-store", is_flag=True, help="Read the seals from the object store.")
@click.option(
    "--public-key",
    "public_key",
    multiple=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="An accepted public key (PEM), repeatable; default: every key of the keys folder.",
)
@click.option(
    "--sealed-prefix",
    metavar="PREFIX",
    help="The topic prefix the seals were made for, to check a copy of the topics "
    "(default: GRIDLEDGER_TOPIC_PREFIX).",
)
@output_options
def verify(
    out: Output, from_store: bool, public_key: tuple[Path, ...], sealed_prefix: str | None
) -> int:
    """Recompute every seal from the topics: each seal's signature and chain, then which
    records were altered, deleted, reordered or inserted after sealing, and which are
    not sealed yet. Exits 1 on any problem."""
    from services.notary import keys
    from services.notary.verify import verify as run

    settings = load_settings()
    try:
        accepted = keys.public_keys(settings, public_key)
    except keys.NotaryKeyError as exc:
        raise CliError(str(exc), Exit.USAGE) from exc
    report = asyncio.run(run(settings, accepted, sealed_prefix, from_store))
    lines = report.lines()
    lines[-1] = render.paint(lines[-1], "32" if report.ok else "31")
    out.emit(report.to_json(), lambda _: "\n".join(lines))
    return 0 if report.ok else int(Exit.JOB_FAILED)


COMMANDS = (notary, audit)
