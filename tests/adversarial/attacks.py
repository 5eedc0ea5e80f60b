"""The hostile jobs of issue 21 (b), as rows: what the attacker's job does and declares.

Each :class:`Attack` is a job of the attacker. ``{home}``, ``{work}``, ``{canary}``,
``{creds}`` and ``{victim_out}`` in its script are filled in with the installation's
host paths (the agent's home, its nodes' work folders, the host canary file, the
store's credentials file, a victim job's stored output on the node), so a link points
where an attacker who knows the layout would point it. ``refused`` are the declared
paths that must not be stored, each named in the job's outputs or failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.hostile import FORK_BOMB
from tests.system.conftest import PYTHON


@dataclass(frozen=True)
class Attack:
    """One hostile job: its script, its declared outputs and checkpoint folder."""

    name: str
    script: str
    outputs: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    checkpoints: str | None = None
    log_says: str = ""
    """A regular expression the job's logs must match (what stopped it)."""
    quick: bool = False
    """Part of the CI subset (the rest runs with GRIDLEDGER_ADVERSARIAL_FULL=1)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """More spec fields (image, command, limits)."""


ATTACKS = (
    Attack(
        "links-to-the-host",
        'cd "$GRIDLEDGER_OUTPUT_DIR"; ln -s ../../../../tokens.json t1.json;'
        " ln -s {home}/tokens.json t2.json; ln -s {creds} creds.json; ln -s {home} home;"
        " ln -s /etc/passwd passwd; ln -s /etc etc; ln -s {canary} canary.txt;"
        " ln -s {victim_out} stolen.bin; ln -s {work} work; echo mine > own.txt",
        outputs=(
            "t1.json",
            "t2.json",
            "creds.json",
            "home",
            "passwd",
            "etc",
            "canary.txt",
            "stolen.bin",
            "work",
            "own.txt",
        ),  # fmt: skip
        refused=(
            "t1.json",
            "t2.json",
            "creds.json",
            "home",
            "passwd",
            "etc",
            "canary.txt",
            "stolen.bin",
            "work",
        ),  # fmt: skip
        quick=True,
    ),
    Attack(
        "checkpoint-folder-replaced-by-a-link",
        'cd "$GRIDLEDGER_OUTPUT_DIR"; rm -rf ckpt; ln -s {home} ckpt; sleep 3',
        checkpoints="ckpt",
    ),
    Attack(
        "links-inside-the-checkpoint-folder",
        'cd "$GRIDLEDGER_OUTPUT_DIR"; ln -s /etc/passwd ckpt/step-1.pt;'
        " ln -s {home}/tokens.json ckpt/step-2.pt; sleep 3",
        checkpoints="ckpt",
    ),
    Attack(
        "special-files",
        # A sparse 1 PiB file where the filesystem allows it (ext4 stops at 16 TiB).
        'cd "$GRIDLEDGER_OUTPUT_DIR"; mkfifo pipe.bin; ln -s /dev/zero zero.bin;'
        f" for n in {1024**5} {15 * 1024**4} {1024**4}; do"
        " truncate -s $n sparse.bin 2>/dev/null && break; done",
        outputs=("pipe.bin", "zero.bin", "sparse.bin"),
        refused=("pipe.bin", "zero.bin", "sparse.bin"),
        quick=True,
    ),
    Attack(
        "outputs-over-the-caps",
        'cd "$GRIDLEDGER_OUTPUT_DIR"; head -c 1100000 /dev/urandom > big.bin;'
        " head -c 900000 /dev/urandom > a.bin; head -c 900000 /dev/urandom > b.bin;"
        " head -c 900000 /dev/urandom > c.bin",
        outputs=("big.bin", "a.bin", "b.bin", "c.bin"),
        refused=("big.bin", "c.bin"),
    ),
    Attack(
        "a-declared-folder",
        'cd "$GRIDLEDGER_OUTPUT_DIR"; echo model > model.pt',
        outputs=("model.pt", "."),
        refused=(".",),
    ),
    Attack(
        "a-fork-bomb",
        "",
        # It forked, and it stopped below the suite's pids limit (64).
        log_says=r"forked ([1-9]|[1-5][0-9]|6[0-3]): Resource temporarily unavailable",
        extra={
            "image": PYTHON,
            "command": ["python3", "-c", FORK_BOMB],
            "resources": {"gpus": 1, "memory_gb": 0.5, "cpus": 0.5},
        },  # fmt: skip
    ),
)


def spec_fields(attack: Attack) -> dict[str, Any]:
    """The attack's outputs and checkpoints as spec fields (every output optional, so a
    refusal is the agent's verdict on the file, not a missing required output)."""
    fields: dict[str, Any] = {"outputs": [{"path": p, "required": False} for p in attack.outputs]}
    if attack.checkpoints:
        fields["checkpoints"] = attack.checkpoints
    return {**fields, **attack.extra}
