"""A whole local installation for the launch and logs benchmarks: sink, api, scheduler,
processors and one real agent, on bench topics and a bench Postgres schema."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bench.common import peak_rss_mb
from schemas.errors import GridledgerError
from services.cli.client import ApiClient, base_url, resolve_token
from services.ops.specs import LOCAL_AGENT_ENV, ServiceSpec
from services.ops.supervisor import Supervisor
from services.settings import Settings


class BenchStack:
    """Start with :meth:`start`, read :attr:`api`, :meth:`rss` before :meth:`stop`."""

    def __init__(self, settings: Settings, node_id: str) -> None:
        self.settings = settings
        self.node_id = node_id
        self.workdir = settings.home / "bench" / settings.pg_schema
        self.services = Supervisor(settings, log_dir=self.workdir / "logs")
        self.api: ApiClient | None = None

    def start(self) -> BenchStack:
        """Start the services and the agent on bench topics and schema; wait until it registered."""
        s = self.settings
        inventory = self.workdir / "inventory.json"
        inventory.parent.mkdir(parents=True, exist_ok=True)
        gpus = [{"index": i, "model": "NVIDIA A10G", "memory_total_mb": 24576} for i in range(2)]
        inventory.write_text(json.dumps({"provider": "bench", "region": "local", "gpus": gpus}))
        self.services.start(ServiceSpec("sink", ["sink"]))
        self.services.start(
            ServiceSpec("api", ["api", "--host", s.api_host, "--port", str(s.api_port)])
        )
        self.services.start(ServiceSpec("scheduler", ["scheduler"]))
        self.services.start(ServiceSpec("processors", ["processors"]))
        self.services.start(
            ServiceSpec(
                "agent",
                [
                    "agent",
                    "--node-id",
                    self.node_id,
                    "--provider",
                    "bench",
                    "--region",
                    "local",
                    "--inventory",
                    str(inventory),
                ],
                LOCAL_AGENT_ENV,
            )
        )
        self.services.wait_for_api(90)
        self.api = ApiClient(base_url(s, None), resolve_token(s, None))
        self.wait(
            lambda: any(
                n.get("node_id") == self.node_id
                for n in self.client.get("/v1/nodes").get("nodes", [])
            ),
            90,
            "the agent to register",
        )
        return self

    @property
    def client(self) -> ApiClient:
        """The API client, once the stack runs."""
        if self.api is None:
            raise GridledgerError("bench stack not started")
        return self.api

    def wait(self, check: Any, timeout_s: float, what: str, every: float = 0.2) -> None:
        """Until ``check`` holds; a dead service or the bound ends the benchmark with an error
        naming ``what``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.services.check_alive()
            if check():
                return
            time.sleep(every)
        raise GridledgerError(
            f"timed out after {timeout_s:.0f} s waiting for {what}; logs in {self.services.log_dir}"
        )

    def submit(self, spec: dict[str, Any]) -> str:
        """Submit a job spec; its id."""
        return str(self.client.post("/v1/jobs", json.dumps(spec).encode())["job_id"])

    def rss(self) -> dict[str, float | None]:
        """Each service's peak resident memory, in MiB."""
        return {name: peak_rss_mb(svc.pids[-1]) for name, svc in self.services.children.items()}

    def stop(self) -> None:
        """Stop every service the stack started."""
        self.services.stop()

    @property
    def log_dir(self) -> Path:
        """Where the services' logs are."""
        return self.services.log_dir
