"""``gridledger completion bash|zsh|fish``: the shell completion script (click's)."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

SHELLS = ("bash", "zsh", "fish")


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> int:
    """Print the completion script for SHELL; load it from the shell's startup file.

    \b
      bash: eval "$(gridledger completion bash)"    (in ~/.bashrc)
      zsh:  eval "$(gridledger completion zsh)"     (in ~/.zshrc)
      fish: gridledger completion fish > ~/.config/fish/completions/gridledger.fish

    Commands, options, choices and file names complete; job ids complete from
    the API (your most recent jobs).
    """  # noqa: D301 - click's \b is a backspace character: a raw string would break it
    root = click.get_current_context().find_root().command
    shell_class = get_completion_class(shell)
    assert shell_class is not None  # SHELLS are click's built-in ones
    script = shell_class(root, {}, "gridledger", "_GRIDLEDGER_COMPLETE").source()
    click.echo(script)
    return 0


COMMANDS = (completion,)
