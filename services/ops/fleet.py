"""The fleet file: which services a local deployment runs, with their flags.

``gridledger run --fleet FILE`` reads it (default: :data:`DEFAULT_FLEET`). YAML or JSON::

    env: {GRIDLEDGER_LOG_FORMAT: json}     # for every service (optional)
    restart: {initial_backoff_s: 0.5, max_backoff_s: 30}
    services:
      - {name: sink, command: [sink]}
      - {name: api, command: [api, --port, "8600"]}
      - {name: scheduler, command: [scheduler]}
      - {name: processors, command: [processors]}
    agents:
      - {node_id: gpu-1, provider: onprem, region: local, inventory: inventory.json}

``command`` is the ``gridledger`` arguments. Each agent becomes a service named
``agent-<node_id>``. Relative paths (``inventory``) are relative to the fleet
file's folder. ``ops_port`` is ``auto`` (a free port, chosen at each start of
the supervisor and recorded in its state file), a number, or 0 (no ops server).
Unknown fields are rejected with the field's name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from schemas.errors import GridledgerError
from services.ops.specs import ServiceSpec

OpsPort = int | Literal["auto"]


DEFAULT_FLEET = Path(__file__).with_name("fleet.yaml")
"""The fleet ``gridledger run`` supervises without ``--fleet``: sink, api, scheduler,
processors, notary, webhooks and one agent with the declared inventory beside it. Package
data, so it is there wherever gridledger is installed."""


class FleetError(GridledgerError):
    """The fleet file is missing or invalid; the message names the field and the fix."""


class RestartPolicy(BaseModel):
    """Capped exponential backoff between restarts of a crashed service."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    initial_backoff_s: float = Field(0.5, gt=0)
    max_backoff_s: float = Field(30.0, gt=0)
    stable_after_s: float = Field(30.0, gt=0)
    """A service that ran this long before crashing starts again from the initial backoff."""
    give_up_after: int | None = Field(None, ge=1)
    """Crashes in a row (none of them stable) after which the service is left stopped
    and reported failed; None: keep restarting."""

    def delay(self, crashes_in_a_row: int) -> float:
        """Wait before the restart that follows the n-th crash in a row (n >= 1)."""
        return min(self.max_backoff_s, self.initial_backoff_s * 2 ** max(0, crashes_in_a_row - 1))


class ServiceEntry(BaseModel):
    """One service of a fleet file: its command, environment, ops port and whether it restarts."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    ops_port: OpsPort = "auto"
    restart: bool = True


class AgentEntry(BaseModel):
    """One agent of a fleet file: its node, placement labels, inventory and extra flags."""

    model_config = ConfigDict(extra="forbid")

    node_id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    provider: str = ""
    region: str = ""
    inventory: Path | None = None
    args: list[str] = Field(default_factory=list)
    """More ``gridledger agent`` flags (``--pull-policy``, ``--shutdown-policy`` ...)."""
    env: dict[str, str] = Field(default_factory=dict)
    ops_port: OpsPort = "auto"


class Fleet(BaseModel):
    """A fleet file: what `gridledger run` starts and supervises, with the environment they
    share."""

    model_config = ConfigDict(extra="forbid")

    env: dict[str, str] = Field(default_factory=dict)
    restart: RestartPolicy = Field(default_factory=RestartPolicy)
    services: list[ServiceEntry] = Field(default_factory=list)
    agents: list[AgentEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_names(self) -> Fleet:
        names = [s.name for s in self.services] + [f"agent-{a.node_id}" for a in self.agents]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"service names must be unique; {', '.join(dupes)} appear twice")
        if not names:
            raise ValueError("the fleet lists no services and no agents")
        return self

    def specs(self, base: Path) -> list[ServiceSpec]:
        """Every service to run, agents last; relative paths resolved against ``base``."""
        specs = [
            ServiceSpec(s.name, list(s.command), {**self.env, **s.env}, s.ops_port, s.restart)
            for s in self.services
        ]
        for agent in self.agents:
            args = ["agent", "--node-id", agent.node_id]
            if agent.provider:
                args += ["--provider", agent.provider]
            if agent.region:
                args += ["--region", agent.region]
            if agent.inventory is not None:
                path = agent.inventory if agent.inventory.is_absolute() else base / agent.inventory
                args += ["--inventory", str(path.resolve())]
            specs.append(
                ServiceSpec(
                    f"agent-{agent.node_id}",
                    args + list(agent.args),
                    {**self.env, **agent.env},
                    agent.ops_port,
                )
            )
        return specs


def load_fleet(path: Path) -> Fleet:
    """Read and validate a fleet file; errors name the file, the field and the fix."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise FleetError(
            f"cannot read the fleet file {path}: {exc.strerror or exc}; "
            f"pass --fleet with an existing file (the default one is {DEFAULT_FLEET})"
        ) from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise FleetError(f"{path} is not valid YAML/JSON: {exc}") from exc
    try:
        return Fleet.model_validate(data or {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(file)'}: {e['msg']}" for e in exc.errors()
        )
        raise FleetError(f"{path}: {problems}") from exc
