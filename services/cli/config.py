"""The user's config file: API URL and token per profile, so the CLI works from any folder.

``$XDG_CONFIG_HOME/gridledger/config.toml`` (``~/.config/gridledger/config.toml``
when XDG_CONFIG_HOME is unset; ``GRIDLEDGER_CONFIG`` names another file)::

    default_profile = "prod"

    [profiles.prod]
    api_url = "https://gridledger.example.com"
    token = "..."

    [profiles.local]
    api_url = "http://127.0.0.1:8600"
    token = "..."

``gridledger login`` writes it (mode 0600: it holds tokens). Each of the URL
and the token is looked up on its own, first found wins:

1. the flag (``--api``, ``--token``);
2. the environment (``GRIDLEDGER_API_URL``, ``GRIDLEDGER_TOKEN``);
3. the profile: ``--profile``, else ``GRIDLEDGER_PROFILE``, else the file's
   ``default_profile``, else a profile named ``default``;
4. the local stack of ``GRIDLEDGER_HOME``: its API address and the ``dev``
   tenant's token in its tokens file.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from services import tokens
from services.cli.exits import CliError, Exit
from services.private_files import write_private
from services.settings import Settings

PROFILE_KEYS = ("api_url", "token")


def config_path() -> Path:
    """The user's config file: GRIDLEDGER_CONFIG, else the XDG config folder's
    gridledger/config.toml."""
    explicit = os.environ.get("GRIDLEDGER_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "gridledger" / "config.toml"


@dataclass(frozen=True)
class Profile:
    """One API to talk to, and the token to talk to it with (`gridledger login --profile NAME`)."""

    name: str
    api_url: str | None = None
    token: str | None = None


@dataclass
class UserConfig:
    """The user's config file: its profiles and which one is the default."""

    path: Path
    default_profile: str | None = None
    profiles: dict[str, Profile] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | None = None) -> UserConfig:
        """The file's profiles; an absent file is an empty config, a broken one an error."""
        path = path or config_path()
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            return cls(path)
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise CliError(f"{path}: {exc}; fix or delete the file", Exit.ERROR) from exc
        _keep_private(path)
        profiles: dict[str, Profile] = {}
        raw = data.get("profiles", {})
        if not isinstance(raw, dict):
            raise CliError(f"{path}: 'profiles' must be a table ([profiles.NAME])")
        for name, values in raw.items():
            if not isinstance(values, dict):
                raise CliError(f"{path}: [profiles.{name}] must be a table")
            unknown = sorted(set(values) - set(PROFILE_KEYS))
            if unknown:
                raise CliError(
                    f"{path}: [profiles.{name}] has unknown key(s) {', '.join(unknown)}; "
                    f"use {', '.join(PROFILE_KEYS)}"
                )
            profiles[name] = Profile(name, values.get("api_url"), values.get("token"))
        default = data.get("default_profile")
        return cls(path, str(default) if default else None, profiles)

    def save(self) -> None:
        """Write the file privately (it holds tokens): folder 0700, file 0600."""
        lines = ["# gridledger CLI profiles (written by `gridledger login`)."]
        if self.default_profile:
            lines.append(f"default_profile = {_quote(self.default_profile)}")
        for profile in self.profiles.values():
            lines += ["", f"[profiles.{_quote(profile.name)}]"]
            for key in PROFILE_KEYS:
                value = getattr(profile, key)
                if value:
                    lines.append(f"{key} = {_quote(value)}")
        write_private(self.path, "\n".join(lines) + "\n")

    def selected(self, explicit: str | None) -> Profile | None:
        """The profile in use; a named profile that does not exist is an error."""
        name = explicit or os.environ.get("GRIDLEDGER_PROFILE") or self.default_profile
        if not name:
            return self.profiles.get("default")
        if name in self.profiles:
            return self.profiles[name]
        known = ", ".join(sorted(self.profiles)) or "none"
        raise CliError(
            f"no profile {name!r} in {self.path} (profiles: {known}); "
            f"create it with `gridledger login --profile {name} --api URL`",
            Exit.USAGE,
        )


def _keep_private(path: Path) -> None:
    """A config file others can read (written by hand, or copied) is made 0600: it holds
    tokens. Said once on stderr."""
    mode = path.stat().st_mode & 0o777
    if not mode & 0o077:
        return
    try:
        path.chmod(0o600)
        done = "made it 0600"
    except OSError:
        done = f"run `chmod 600 {path}`"
    print(
        f"gridledger: {path} was readable by others (mode {mode:o}); {done}, as it holds tokens",
        file=sys.stderr,
    )


def _quote(value: str) -> str:
    """A TOML basic string (JSON's escapes are a subset of TOML's)."""
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class Target:
    """The API URL and token a command uses, and where each came from (for messages)."""

    api_url: str
    token: str | None
    url_from: str
    token_from: str
    withheld: str = ""
    """Why a saved token was not used for this URL (it belongs to another API), if one was."""


def origin(url: str) -> tuple[str, str, int | None]:
    """Scheme, host and port of ``url``: what a saved token is bound to."""
    parts = urllib.parse.urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    try:
        port = parts.port or default
    except ValueError:
        port = None
    return parts.scheme, (parts.hostname or "").lower(), port


def resolve(
    settings: Settings,
    *,
    token: str | None = None,
    api_url: str | None = None,
    profile: str | None = None,
    config: UserConfig | None = None,
) -> Target:
    """Apply the lookup order of the module docstring; ``token`` is None when none is found.

    A token given for this command (``--token``, ``GRIDLEDGER_TOKEN``) goes to whatever
    URL it names. A saved one is bound to its API: a profile's token to the profile's
    URL, the local stack's dev token to the local stack, and neither is sent to an
    ``--api`` that names another scheme, host or port.
    """
    config = config or UserConfig.load()
    chosen = config.selected(profile)
    where = f"profile {chosen.name!r} ({config.path})" if chosen else ""
    local = local_api_url(settings)
    url_candidates = (
        (api_url, "--api"),
        (os.environ.get("GRIDLEDGER_API_URL"), "GRIDLEDGER_API_URL"),
        (chosen.api_url if chosen else None, where),
    )
    url, url_from = next(
        ((v, src) for v, src in url_candidates if v),
        (local, "the local stack's settings"),
    )
    token_candidates = (
        (token, "--token", None),
        (os.environ.get("GRIDLEDGER_TOKEN"), "GRIDLEDGER_TOKEN", None),
        (chosen.token if chosen else None, where, (chosen.api_url if chosen else None) or local),
        (
            dev_token(settings),
            f"the local stack's dev token ({tokens.dev_tokens_path(settings.tokens_path)})",
            f"http://{settings.api_host}:{settings.api_port}",  # where the local API listens
        ),
    )
    withheld = [
        f"the token of {src} is for {bound}, not {url.rstrip('/')}"
        for value, src, bound in token_candidates
        if value and bound is not None and origin(bound) != origin(url)
    ]
    found, token_from = next(
        (
            (value, src)
            for value, src, bound in token_candidates
            if value and (bound is None or origin(bound) == origin(url))
        ),
        (None, ""),
    )
    return Target(url.rstrip("/"), found, url_from, token_from, "; ".join(withheld))


def local_api_url(settings: Settings) -> str:
    """The API address of the local stack's settings."""
    return settings.api_url or f"http://{settings.api_host}:{settings.api_port}"


def dev_token(settings: Settings) -> str | None:
    """The ``dev`` tenant's token that ``gridledger dev up`` kept, if this home has one."""
    return tokens.load_dev_tokens(settings.tokens_path).get("dev")


def no_token_advice(settings: Settings, withheld: str = "") -> str:
    """What to do when no token was found, naming every place that was looked in (and the
    saved tokens that were not sent because they belong to another API)."""
    why = f" ({withheld}; a saved token is only sent to its own API)" if withheld else ""
    return (
        f"no API token{why}. Log in once with `gridledger login --api URL` (it asks for the token "
        f"and writes {config_path()}), or pass --token / set GRIDLEDGER_TOKEN. On the machine "
        "of a running local stack, set GRIDLEDGER_HOME to its folder to use its dev token "
        f"(looked for {tokens.dev_tokens_path(settings.tokens_path)})."
    )
