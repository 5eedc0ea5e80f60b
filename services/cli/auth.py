"""``gridledger login``, ``logout`` and ``profiles``: the user's config file of API profiles."""

from __future__ import annotations

import os
from typing import Any

import click

from services.cli import render
from services.cli.client import ApiClient, check_transport
from services.cli.config import Profile, UserConfig, local_api_url
from services.cli.options import Output, insecure_http_option, output_options
from services.settings import load_settings


def _profile_name(explicit: str | None, config: UserConfig) -> str:
    root = click.get_current_context().find_root().params.get("profile")
    return (
        explicit
        or root
        or os.environ.get("GRIDLEDGER_PROFILE")
        or config.default_profile
        or "default"
    )


@click.command("login")
@click.option("--api", "api_url", metavar="URL", help="API base URL (default: the profile's).")
@click.option(
    "--token",
    metavar="TOKEN",
    help="API token (default: asked for, without echo; or $GRIDLEDGER_TOKEN).",
)
@click.option("--profile", metavar="NAME", help="Profile to write (default: the one in use).")
@click.option("--default", "make_default", is_flag=True, help="Make it the default profile.")
@insecure_http_option
@output_options
def login(
    out: Output,
    api_url: str | None,
    token: str | None,
    profile: str | None,
    make_default: bool,
    insecure_http: bool,
) -> int:
    """Check a token against the API, then save it with the URL in the config file.

    The file is ~/.config/gridledger/config.toml ($XDG_CONFIG_HOME honoured,
    $GRIDLEDGER_CONFIG overrides), written with mode 0600. Nothing is written
    when the API refuses the token or cannot be reached. The first profile
    saved becomes the default.
    """
    config = UserConfig.load()
    name = _profile_name(profile, config)
    existing = config.profiles.get(name)
    settings = load_settings()
    url = (
        api_url
        or (existing.api_url if existing else None)
        or os.environ.get("GRIDLEDGER_API_URL")
        or local_api_url(settings)
    ).rstrip("/")
    # Refused before the token is asked for when it could not be sent safely.
    client = ApiClient(url, "", token_from="the token given to login", insecure_http=insecure_http)
    check_transport(url, client.insecure_http)
    token = token or os.environ.get("GRIDLEDGER_TOKEN")
    if not token:
        token = click.prompt(f"token for {url}", hide_input=True).strip()
    # Any authenticated read proves the token; the smallest one.
    client.token = token
    client.get("/v1/jobs?limit=1")
    config.profiles[name] = Profile(name, url, token)
    if make_default or not config.default_profile:
        config.default_profile = name
    config.save()
    payload = {
        "profile": name,
        "api_url": url,
        "config": str(config.path),
        "default": config.default_profile == name,
    }
    out.emit(
        payload,
        lambda p: (
            f"logged in to {p['api_url']}; profile {p['profile']!r} saved in {p['config']}"
            + (" (default)" if p["default"] else "")
        ),
    )
    return 0


@click.command("logout")
@click.option("--profile", metavar="NAME", help="Profile (default: the one in use).")
def logout(profile: str | None) -> int:
    """Remove the token of a profile from the config file (its URL is kept)."""
    config = UserConfig.load()
    name = _profile_name(profile, config)
    existing = config.selected(name)
    if existing is None or not existing.token:
        click.echo(f"profile {name!r} has no token in {config.path}; nothing to do")
        return 0
    config.profiles[name] = Profile(name, existing.api_url, None)
    config.save()
    click.echo(f"removed the token of profile {name!r} from {config.path}")
    return 0


def _mask(token: str | None) -> str:
    return f"{token[:4]}…" if token and len(token) > 8 else ("set" if token else "")


def _profiles_table(data: dict[str, Any]) -> str:
    rows = [
        [("* " if p["default"] else "  ") + p["name"], p["api_url"] or "", p["token"]]
        for p in data["profiles"]
    ]
    if not rows:
        return f"no profiles in {data['config']}; `gridledger login --api URL` adds one"
    return render.table(["PROFILE", "API", "TOKEN"], rows) + f"\n(* default; {data['config']})"


@click.command("profiles")
@output_options
def profiles(out: Output) -> int:
    """List the config file's profiles; the default one is starred."""
    config = UserConfig.load()
    payload = {
        "config": str(config.path),
        "default_profile": config.default_profile,
        "profiles": [
            {
                "name": p.name,
                "api_url": p.api_url,
                "token": _mask(p.token),
                "default": p.name == config.default_profile,
            }
            for p in config.profiles.values()
        ],
    }
    out.emit(payload, _profiles_table)
    return 0


COMMANDS = (login, logout, profiles)
