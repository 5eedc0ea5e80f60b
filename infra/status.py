"""What ``gridledger dev status`` reports about one component of the local stack."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ComponentStatus:
    """State of one component (kafka, postgres, docker, images, tokens)."""

    name: str
    running: bool
    address: str = ""
    """Where clients reach it: bootstrap servers, DSN, docker socket, file path."""
    pid: int | None = None
    log: Path | None = None
    started_by_us: bool = False
    """True when this home's ``dev up`` started it, so ``dev down`` will stop it."""
    detail: str = ""
    """One human line: what ``dev up`` did or found ("already running", "started in 4.2 s")."""

    def to_json(self) -> dict[str, Any]:
        """The status as JSON-ready data (`dev status -o json`)."""
        data = asdict(self)
        data["log"] = str(self.log) if self.log else None
        return data

    def line(self) -> str:
        """One line for the terminal: name, state, address, pid, log, detail."""
        state = "running" if self.running else "stopped"
        parts = [f"{self.name:<9} {state:<8}"]
        if self.address:
            parts.append(self.address)
        if self.pid is not None:
            owner = "" if self.started_by_us else ", not started by gridledger"
            parts.append(f"pid {self.pid}{owner}")
        if self.log:
            parts.append(f"log {self.log}")
        if self.detail:
            parts.append(f"({self.detail})")
        return "  ".join(parts)
