"""README and `-h` agree: every `gridledger ...` command the README shows names a real command
whose options exist, every command line of its code blocks parses as the CLI parses it, and
the ones that need no API (validate, completion) run and succeed."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from services.cli.main import COMMANDS, command, main
from services.cli.options import OutputFormat

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
OFFLINE = frozenset({"validate", "completion"})
"""Commands that need neither the API nor the stack: the test runs them."""
SHELL = frozenset({"<", ">", "|", "&&", ";", ")", '")'})


def words(line: str) -> list[str]:
    """The command's words: shell comments, redirections and what follows them cut off."""
    out = []
    for word in shlex.split(line, comments=True):
        if word in SHELL or word.startswith((">", "<", "$(")):
            break
        out.append(word)
    return out


def mentions() -> tuple[list[list[str]], list[list[str]]]:
    """(command lines of the code blocks, inline `gridledger ...` spans), both as words."""
    blocks, inline = [], []
    for block in re.findall(r"```[a-z]*\n(.*?)```", README, re.S):
        for line in block.splitlines():
            found = re.search(r"^gridledger (.*)", line)
            embedded = re.search(r"\$\(gridledger ([^)]*)\)", line)  # eval "$(gridledger ...)"
            if found or embedded:
                blocks.append(words("gridledger " + (found or embedded)[1]))  # type: ignore[index]
    prose = re.sub(r"```.*?```", "", README, flags=re.S)
    for span in re.findall(r"`(gridledger [^`]+)`", prose.replace("\n", " ")):
        inline.append(span.split())
    known = [w for w in blocks if len(w) > 1 and resolve(w) is not None]
    return known, [w for w in inline if resolve(w) is not None]


def resolve(argv: list[str]) -> tuple[click.Command, list[str], list[str]] | None:
    """The command ``argv`` names, its name path and the words after it; None when the words
    after `gridledger` are prose ("gridledger is multi-tenant"), not a command."""
    rest = argv[1:]
    if rest[:1] == ["--profile"]:
        rest = rest[2:]
    if not rest or rest[0] not in COMMANDS:
        return None
    found, path, rest = command(rest[0]), [rest[0]], rest[1:]
    while isinstance(found, click.Group) and rest and not rest[0].startswith("-"):
        sub = found.get_command(click.Context(found), rest[0])
        assert sub is not None, f"README: `gridledger {' '.join(path)} {rest[0]}` does not exist"
        found, path, rest = sub, [*path, rest[0]], rest[1:]
    return found, path, rest


def option(found: click.Command, name: str) -> click.Parameter | None:
    return next((p for p in found.params if name in (*p.opts, *p.secondary_opts)), None)


BLOCKS, INLINE = mentions()


def test_the_readme_shows_many_commands() -> None:
    assert len(BLOCKS) >= 50 and len(INLINE) >= 25, (len(BLOCKS), len(INLINE))
    shown = {resolve(w)[1][0] for w in BLOCKS + INLINE}  # type: ignore[index]
    assert {"submit", "validate", "download", "run", "status", "logs"} <= shown


@pytest.mark.parametrize("argv", INLINE, ids=" ".join)
def test_every_option_the_prose_names_exists(argv: list[str]) -> None:
    """And its value, where one is shown: a placeholder (DIR, N) only where any value goes."""
    found, path, rest = resolve(argv)  # type: ignore[misc]
    words = [w.strip("[],.;:") for w in rest]
    for at, word in enumerate(words):
        name, _, inline = word.partition("=")
        if not name.startswith("-") or len(name) == 1 or name in ("-h", "--help"):
            continue
        param = option(found, name)
        assert param is not None, f"`gridledger {' '.join(path)}` has no {name}"
        if getattr(param, "is_flag", False) or (not inline and at + 1 == len(words)):
            continue
        value = inline or words[at + 1]
        if value.isupper():  # a placeholder: the option must take any value
            assert not isinstance(param.type, click.Choice | OutputFormat), (
                f"`gridledger {' '.join(path)} {name} {value}`: {name} takes one of "
                f"{param.type.get_metavar(param, click.Context(found))}"
            )
        elif not value.startswith("-"):
            param.type.convert(value, param, click.Context(found))


@pytest.mark.parametrize("argv", BLOCKS, ids=" ".join)
def test_every_command_line_parses_and_the_offline_ones_run(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)  # the README's paths are the repository's
    found, path, rest = resolve(argv)  # type: ignore[misc]
    with found.make_context(" ".join(["gridledger", *path]), list(rest)):
        pass  # every option exists, every value converts, every required argument is there
    if path[0] in OFFLINE:
        assert main(argv[1:]) == 0, argv
        assert capsys.readouterr().out.strip()
