"""``gridledger dev up|down|status|topics|init|bucket``: the local stack of infra/ (Kafka,
Postgres, the object store, Docker), and the first-start steps of other deployments."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from schemas.errors import GridledgerError
from services.cli.options import Output, output_options
from services.settings import load_settings

if TYPE_CHECKING:
    from infra.status import ComponentStatus

# The stack's modules (Docker, S3, Postgres and Kafka clients) are imported by the
# command that uses them, so `gridledger dev -h` and its completion load none of them.


@click.group("dev")
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
    from infra import stack

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
    from infra import stack

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
    from infra import stack

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
    from services.ledger.topics import ensure_topics

    created = asyncio.run(ensure_topics(load_settings()))
    out.emit(
        {"topics": dict(sorted(created.items()))},
        lambda data: "\n".join(f"{n}: {p} partitions" for n, p in data["topics"].items()),
    )
    return 0


@dev.command(
    "init",
    short_help="first start of a deployment: tokens, S3 credentials, secrets and notary keys",
)
@click.option(
    "--s3-identities",
    type=click.Path(dir_okay=False, path_type=Path),
    help="also write SeaweedFS's -s3.config (its identities) here",
)
def init(s3_identities: Path | None) -> int:
    """Write the API tokens, the per-tenant object-store credentials, the secrets key and
    the notary's signing key unless they exist.

    For deployments whose parts `dev up` does not start (docker-compose). Existing files
    are kept: tokens and credentials stay valid across restarts.
    """
    from infra import seaweedfs, tokens

    settings = load_settings()
    wrote = tokens.ensure_tokens(settings)
    click.echo(f"tokens:         {settings.tokens_path} ({'created' if wrote else 'kept'})")
    wrote = seaweedfs.ensure_credentials(settings)
    click.echo(f"s3 credentials: {settings.s3_credentials_path} ({'written' if wrote else 'kept'})")
    from services import secretstore

    wrote = secretstore.ensure_key(settings)
    where = "GRIDLEDGER_SECRETS_KEY" if settings.secrets_key else secretstore.key_path(settings)
    click.echo(f"secrets key:    {where} ({'created' if wrote else 'kept'})")
    from services.notary import keys

    wrote = keys.ensure_key(settings)
    click.echo(f"notary key:     {settings.notary_key_path} ({'created' if wrote else 'kept'})")
    if s3_identities is not None:
        wrote = seaweedfs.write_s3_config(settings, s3_identities)
        click.echo(f"s3 identities:  {s3_identities} ({'written' if wrote else 'kept'})")
    return 0


@dev.command("bucket", short_help="create the artifact bucket and its retention rules")
def bucket() -> int:
    """Create the bucket on GRIDLEDGER_S3_ENDPOINT with the admin credential, check that
    writes work, and set each tenant's retention (for docker-compose)."""
    from services import s3client
    from services.objectstore import CredentialsFile

    settings = load_settings()
    admin = CredentialsFile.load(settings.s3_credentials_path).admin
    if admin is None:
        raise GridledgerError(
            f"{settings.s3_credentials_path} has no admin credential; create the bucket "
            f"{settings.s3_bucket} yourself (it is not gridledger's to create on this store)"
        )
    s3client.ensure_bucket(settings, admin)
    click.echo(f"bucket {settings.s3_bucket} ready on {settings.s3_url}")
    return 0


COMMANDS = (dev,)
