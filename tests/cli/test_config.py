"""The config file, its lookup order, the exit-code table, times and completion (no stack)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from services.cli import render
from services.cli.config import Profile, UserConfig, config_path, resolve
from services.cli.exits import MEANINGS, Exit
from services.cli.main import main
from services.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def stack_home(tmp_path: Path, token: str | None = "tok-stack") -> Settings:
    home = tmp_path / "stack"
    home.mkdir()
    if token:
        (home / "tokens.json").write_text(json.dumps({token: "dev", "tok-o": "other"}))
    return Settings(home=home, api_port=18600)


def test_the_file_honours_xdg_config_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GRIDLEDGER_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config_path() == tmp_path / "xdg" / "gridledger" / "config.toml"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert config_path() == tmp_path / "home" / ".config" / "gridledger" / "config.toml"


def test_profiles_round_trip_privately(private_config: Path) -> None:
    config = UserConfig(private_config, "prod")
    config.profiles["prod"] = Profile("prod", "https://g.example.com", 'tok "quoted" \\ é')
    config.profiles["local"] = Profile("local", "http://127.0.0.1:8600", None)
    config.save()
    assert stat.S_IMODE(private_config.stat().st_mode) == 0o600
    assert UserConfig.load() == config


def test_the_lookup_order_is_flag_env_profile_then_the_local_stack(
    private_config: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = stack_home(tmp_path)
    # Nothing configured: the local stack's address and dev token.
    target = resolve(settings)
    assert (target.api_url, target.token) == ("http://127.0.0.1:18600", "tok-stack")
    assert "tokens.json" in target.token_from

    config = UserConfig(private_config, "prod")
    config.profiles["prod"] = Profile("prod", "https://prod.example", "tok-prod")
    config.profiles["lab"] = Profile("lab", "https://lab.example", "tok-lab")
    config.save()
    assert resolve(settings).token == "tok-prod"
    assert resolve(settings).url_from.startswith("profile 'prod'")
    monkeypatch.setenv("GRIDLEDGER_PROFILE", "lab")
    assert resolve(settings).api_url == "https://lab.example"
    assert resolve(settings, profile="prod").api_url == "https://prod.example"
    monkeypatch.setenv("GRIDLEDGER_TOKEN", "tok-env")
    monkeypatch.setenv("GRIDLEDGER_API_URL", "http://env.example/")
    target = resolve(settings)
    assert (target.api_url, target.token) == ("http://env.example", "tok-env")
    target = resolve(settings, token="tok-flag", api_url="http://flag.example")
    assert (target.api_url, target.token, target.token_from) == (
        "http://flag.example",
        "tok-flag",
        "--token",
    )


def test_a_named_profile_that_does_not_exist_is_an_error_naming_the_known_ones(
    private_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    UserConfig(private_config, None, {"lab": Profile("lab", "http://x", "t")}).save()
    assert main(["--profile", "prod", "status"]) == Exit.USAGE
    err = capsys.readouterr().err
    assert "no profile 'prod'" in err and "profiles: lab" in err
    assert "gridledger login --profile prod" in err


def test_a_broken_config_file_is_named_not_replaced(
    private_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    private_config.parent.mkdir(parents=True)
    private_config.write_text("[profiles.x\n")
    assert main(["status"]) == Exit.ERROR
    assert str(private_config) in capsys.readouterr().err
    assert private_config.read_text() == "[profiles.x\n"


def test_without_any_token_the_advice_is_login_not_a_second_stack(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("GRIDLEDGER_HOME", str(elsewhere / ".gridledger"))
    assert main(["status"]) == Exit.NOT_AUTHORISED
    err = capsys.readouterr().err
    assert "gridledger login" in err and "GRIDLEDGER_HOME" in err
    assert "dev up" not in err and "Traceback" not in err


def test_an_unreachable_api_has_its_own_exit_code(
    unused_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["status", "--api", f"http://127.0.0.1:{unused_port}", "--token", "t"])
    assert code == Exit.API_UNREACHABLE
    assert f"cannot reach the gridledger API at http://127.0.0.1:{unused_port}" in (
        capsys.readouterr().err
    )


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_missing_spec_file_is_a_usage_error_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["submit", str(tmp_path / "nope.yaml"), "--token", "t"]) == Exit.USAGE
    err = capsys.readouterr().err
    assert "nope.yaml' does not exist" in err and "Traceback" not in err


def test_the_readme_and_help_list_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    readme = (ROOT / "README.md").read_text()
    rows = dict(re.findall(r"^\| `(\d+)` \| (.+?) \|$", readme, flags=re.M))
    assert {int(code) for code in rows} == {int(code) for code in Exit}
    for code, meaning in MEANINGS.items():
        assert rows[str(int(code))] == meaning, code
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for code in Exit:
        assert re.search(rf"^\s+{int(code)}\s+\S", out, flags=re.M), code


def test_times_are_local_with_the_zone_unless_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    at = "2026-12-01T09:30:00.250000+00:00"
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    local = render.Clock()
    assert local.format(at) == "2026-12-01 15:00:00" and local.zone == "IST"
    assert local.stamp(at) == "2026-12-01 15:00:00 IST"
    assert local.header("TIME") == "TIME (IST)"
    assert local.format(at, "%H:%M:%S.%f") == "15:00:00.250"
    utc = render.Clock(utc=True)
    assert utc.stamp(at) == "2026-12-01 09:30:00 UTC" and utc.header("TIME") == "TIME (UTC)"


def test_since_takes_durations_times_of_day_and_date_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TZ", "Europe/Paris")
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    clock = render.Clock()
    assert render.parse_since("1h30m", clock, now) == datetime(2026, 12, 1, 10, 30, tzinfo=UTC)
    assert render.parse_since("90s", clock, now) == datetime(2026, 12, 1, 11, 58, 30, tzinfo=UTC)
    # Times without a zone are local (Paris is UTC+1 in December) ...
    assert render.parse_since("12:05", clock, now) == datetime(2026, 12, 1, 11, 5, tzinfo=UTC)
    assert render.parse_since("2026-07-01T12:00", clock, now) == datetime(
        2026, 7, 1, 10, 0, tzinfo=UTC
    )  # ... with that date's summer time
    assert render.parse_since("2026-12-01T12:00Z", clock, now) == datetime(
        2026, 12, 1, 12, 0, tzinfo=UTC
    )
    assert render.parse_since("12:05", render.Clock(utc=True), now) == datetime(
        2026, 12, 1, 12, 5, tzinfo=UTC
    )
    with pytest.raises(ValueError, match="neither a duration"):
        render.parse_since("yesterday", clock, now)
    assert render.parse_duration("10x") is None and render.parse_duration("2d") == 172800


def _complete(words: str, env: dict[str, str] | None = None) -> list[str]:
    """What bash completion offers for ``words`` (click's protocol, as the shell runs it)."""
    result = subprocess.run(
        [sys.executable, "-m", "services.cli.main"],
        env={
            **os.environ,
            **(env or {}),
            "_GRIDLEDGER_COMPLETE": "bash_complete",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return [line.split(",", 1)[1] for line in result.stdout.splitlines() if line]


def test_shell_completion_offers_commands_options_and_choices(
    capsys: pytest.CaptureFixture[str], unused_port: int
) -> None:
    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    assert "_GRIDLEDGER_COMPLETE=bash_complete" in script and "complete " in script
    assert main(["completion", "zsh"]) == 0 and "compdef" in capsys.readouterr().out
    assert {"status", "submit"} <= set(_complete("gridledger s"))
    assert "--status" in _complete("gridledger status --st")
    assert _complete("gridledger status --status fai") == ["failed"]
    assert "yaml" in _complete("gridledger nodes -o ")
    # Job ids come from the API; an API that is down offers nothing and prints nothing.
    down = {"GRIDLEDGER_API_URL": f"http://127.0.0.1:{unused_port}", "GRIDLEDGER_TOKEN": "t"}
    assert _complete("gridledger logs job-", down) == []


def test_a_config_file_others_can_read_is_made_private_with_a_note(
    private_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    private_config.parent.mkdir(parents=True)
    private_config.write_text('[profiles.p]\napi_url = "https://a.example"\ntoken = "tok"\n')
    private_config.chmod(0o644)  # e.g. written by hand
    assert UserConfig.load().profiles["p"].token == "tok"
    assert stat.S_IMODE(private_config.stat().st_mode) == 0o600
    assert "was readable by others (mode 644); made it 0600" in capsys.readouterr().err
    UserConfig.load()
    assert capsys.readouterr().err == ""
