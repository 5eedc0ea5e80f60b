"""Run the demo: a local installation with two agents, the failure-mode jobs, a table.

Every number in the final table is read back from the API, i.e. from the read
models the sink derived from the ledger, never from this script's own state.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from infra import stack, tokens
from schemas.errors import GridledgerError
from schemas.views import TERMINAL_STATUSES
from services.cli import render
from services.cli.client import ApiClient, base_url, resolve_token
from services.clock import utcnow
from services.demo.scenarios import (
    ALL_JOBS,
    DEMO_TENANT,
    DENIED_TENANT,
    FLEET,
    HOLDER,
    JOBS,
    NO_CAPACITY,
    NODE_LOST,
    DemoJob,
)
from services.objectstore import Credential, CredentialsFile
from services.ops.fleet import RestartPolicy
from services.ops.specs import LOCAL_AGENT_ENV, ServiceSpec
from services.ops.supervisor import Supervisor, supervisor_alive
from services.private_files import write_private
from services.settings import Settings

DEMO_TIMINGS = {
    # Short, so the demo shows lost nodes and queue deadlines within minutes.
    "GRIDLEDGER_WATCHDOG_SILENCE_S": "3",
    "GRIDLEDGER_WATCHDOG_LOST_AFTER_S": "4",
    "GRIDLEDGER_SCHEDULER_NODE_TIMEOUT_S": "10",
    "GRIDLEDGER_SCHEDULER_DISPATCH_TIMEOUT_S": "30",
}
DEMO_RESTARTS = RestartPolicy(initial_backoff_s=0.5, max_backoff_s=5, give_up_after=3)
"""A crashed service is restarted; one that keeps crashing fails the demo with its log."""


@dataclass
class DemoResult:
    """Job key -> the API's job document (with its accounting summary)."""

    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)
    followed_lines: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0


class Demo:
    """Bring up the services, run the jobs, collect what the API says about them."""

    def __init__(
        self, settings: Settings, say: Callable[[str], None] = print, timeout_s: float = 300
    ) -> None:
        self.settings = settings
        self.say = say
        self.timeout_s = timeout_s
        self.run_id = uuid.uuid4().hex[:6]
        self.workdir = settings.home / "demo" / self.run_id
        # `gridledger health` reads <home>/run/fleet.json: the demo writes it unless a
        # `gridledger run` of this home owns it.
        state = settings.home / "run" / "fleet.json"
        self.services = Supervisor(
            settings,
            log_dir=self.workdir / "logs",
            policy=DEMO_RESTARTS,
            state_file=None if supervisor_alive(state) else state,
        )
        self.result = DemoResult()
        self.api: ApiClient | None = None
        self.tenant_clients: dict[str, ApiClient] = {}
        self.started_at = utcnow() - timedelta(seconds=1)

    # ------------------------------------------------------------------ services

    def start_services(self) -> None:
        """The sink, API, scheduler and processors, with the demo's short timings."""
        env = dict(DEMO_TIMINGS)
        self.services.start(ServiceSpec("sink", ["sink"], env))
        self.services.start(
            ServiceSpec(
                "api",
                ["api", "--host", self.settings.api_host, "--port", str(self.settings.api_port)],
                env,
            )
        )
        self.services.start(ServiceSpec("scheduler", ["scheduler"], env))
        self.services.start(ServiceSpec("processors", ["processors"], env))
        for node in FLEET:
            self.start_agent(node.node_id)
        self.services.wait_for_api()
        self.api = ApiClient(base_url(self.settings, None), resolve_token(self.settings, None))
        url = base_url(self.settings, None)
        self.tenant_clients = {
            tenant: ApiClient(url, tokens.token_for(self.settings, tenant))
            for tenant in {job.tenant for job in ALL_JOBS}
        }
        self.wait_for(lambda: self._fresh_nodes() >= len(FLEET), 60, "both agents to register")

    def start_agent(self, node_id: str) -> None:
        """One agent of the demo fleet, with its declared inventory written to a file."""
        node = next(n for n in FLEET if n.node_id == node_id)
        inventory = self.workdir / f"{node_id}.inventory.json"
        inventory.parent.mkdir(parents=True, exist_ok=True)
        inventory.write_text(json.dumps(node.inventory(), indent=2))
        args = ["agent", "--node-id", node_id, "--provider", node.provider, "--region",
                node.region, "--inventory", str(inventory)]  # fmt: skip
        env = {
            **DEMO_TIMINGS,
            **LOCAL_AGENT_ENV,
            "GRIDLEDGER_S3_CREDENTIALS_FILE": str(self.agent_credentials()),
        }
        self.services.start(ServiceSpec(f"agent-{node_id}", args, env))

    def agent_credentials(self) -> Path:
        """The stack's object-store credentials with :data:`DENIED_TENANT`'s agent key revoked.

        The store does not know the replacement key, so it refuses every upload of that
        tenant's jobs with its own error (InvalidAccessKeyId): a real store failure.
        """
        path = self.workdir / "agent-s3-credentials.json"
        if not path.is_file():
            creds = CredentialsFile.load(self.settings.s3_credentials_path)
            tenants = dict(creds.tenants)
            tenants[DENIED_TENANT] = tenants[DENIED_TENANT].model_copy(
                update={"agent": Credential(access_key="glrevoked" + uuid.uuid4().hex[:8],
                                            secret_key=uuid.uuid4().hex)}
            )  # fmt: skip
            write_private(path, CredentialsFile(tenants=tenants).model_dump_json(exclude_none=True))
        return path

    def kill_node(self, node_id: str) -> None:
        """The node disappears: its agent dies and its containers with it."""
        self.services.kill(f"agent-{node_id}", signal.SIGKILL, restart=False)
        subprocess.run(
            f"docker ps -q --filter label=gridledger.node_id={node_id} | xargs -r docker rm -f",
            shell=True,
            check=False,
            capture_output=True,
        )

    def _fresh_nodes(self) -> int:
        """Demo nodes that registered since this run started."""
        nodes = self.client.get("/v1/nodes").get("nodes", [])
        ids = {n.node_id for n in FLEET}
        return sum(
            1
            for n in nodes
            if n.get("node_id") in ids
            and n.get("registered_at")
            and datetime.fromisoformat(n["registered_at"]) >= self.started_at
        )

    @property
    def client(self) -> ApiClient:
        """The API client once the API is up; an error before that."""
        if self.api is None:
            raise GridledgerError("the demo's API client is not ready")
        return self.api

    # ------------------------------------------------------------------ jobs

    def client_for(self, key: str) -> ApiClient:
        """The API client of the tenant that owns the job ``key``."""
        tenant = next((j.tenant for j in ALL_JOBS if j.key == key), DEMO_TENANT)
        return self.tenant_clients.get(tenant, self.client)

    def submit(self, job: DemoJob) -> str:
        """Submit one demo job and remember its id under the job's key."""
        reply = self.client_for(job.key).post("/v1/jobs", json.dumps(job.spec).encode())
        job_id = str(reply["job_id"])
        self.result.ids[job.key] = job_id
        self.say(f"  submitted {job.key:<16} {job_id}  ({job.title})")
        return job_id

    def job(self, key: str) -> dict[str, Any]:
        """The job's document as the API returns it now (also kept for the closing table)."""
        doc: dict[str, Any] = self.client_for(key).get(f"/v1/jobs/{self.result.ids[key]}")
        self.result.jobs[key] = doc
        return doc

    def wait_for(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Until ``check`` holds; a service that died or a bound passed ends the demo with an error
        naming ``what``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.services.check_alive()
            if check():
                return
            time.sleep(0.5)
        raise GridledgerError(f"timed out after {timeout_s:.0f} s waiting for {what}")

    def settled(self, key: str) -> bool:
        """Whether the job ended and its accounting is final: the closing table only shows settled
        jobs."""
        doc = self.job(key)
        accounting = doc.get("accounting") or {}
        return doc.get("status") in TERMINAL_STATUSES and bool(accounting.get("final"))

    def follow_logs(self, key: str) -> threading.Thread:
        """Print one job's log lines as they arrive (the API's live follow)."""

        def run() -> None:
            path = f"/v1/jobs/{self.result.ids[key]}/logs?follow=true&format=ndjson"
            try:
                for item in self.client.stream(path):
                    if item.get("end"):
                        return
                    for line in str(item.get("data", "")).splitlines():
                        self.result.followed_lines.append(line)
                        self.say(f"  [{key} {item.get('stream')}] {line}")
            except GridledgerError as exc:
                self.say(f"  (log follow of {key} ended: {exc})")

        thread = threading.Thread(target=run, name=f"follow-{key}", daemon=True)
        thread.start()
        return thread

    # ------------------------------------------------------------------ the story

    def run(self, keep_running: bool = False) -> DemoResult:
        """Run the story; with ``keep_running`` the services stay up (call ``services.stop()``)."""
        began = time.monotonic()
        self.say(f"starting gridledger services (logs in {self.services.log_dir})")
        try:
            self.start_services()
            self.say("fleet: " + ", ".join(
                f"{n.node_id} ({n.provider}/{n.region}, {len(n.gpus)}x {n.gpus[0]['model']})"
                for n in FLEET))  # fmt: skip

            self.say("\n1. a long job takes one A100")
            self.submit(HOLDER)
            self.wait_for(lambda: self.job(HOLDER.key).get("status") == "running", 60,
                          "the long job to start")  # fmt: skip

            self.say("\n2. one job per failure mode, and one that needs both A100s")
            for job in JOBS:
                self.submit(job)
            self.submit(NO_CAPACITY)
            followers = [self.follow_logs(j.key) for j in JOBS if "follow" in j.tags]
            keys = [j.key for j in JOBS] + [NO_CAPACITY.key]
            self.wait_for(lambda: all(self.settled(k) for k in keys), self.timeout_s,
                          "the failure-mode jobs to finish")  # fmt: skip
            for thread in followers:
                thread.join(timeout=10)

            self.say("\n3. the user cancels the long job")
            self.client.post(f"/v1/jobs/{self.result.ids[HOLDER.key]}/cancel", b"{}")
            self.wait_for(lambda: self.settled(HOLDER.key), 60, "the cancel to take effect")

            self.say("\n4. a resumable job; its node disappears after the first checkpoint")
            self.submit(NODE_LOST)
            self.wait_for(lambda: bool(self.job(NODE_LOST.key).get("checkpoints")), 120,
                          "the first checkpoint")  # fmt: skip
            node = self.result.jobs[NODE_LOST.key]["attempts"][-1]["node_id"]
            self.say(f"  {node} disappears (agent killed, its containers gone)")
            self.kill_node(node)
            self.wait_for(lambda: self.settled(NODE_LOST.key), 120,
                          "the retry to finish")  # fmt: skip
        except BaseException:
            self.services.stop()
            raise
        if not keep_running:
            self.services.stop()
        self.result.elapsed_s = time.monotonic() - began
        return self.result


def table(result: DemoResult) -> str:
    """The closing table: one row per job, every number from the API."""
    rows = []
    for key, doc in result.jobs.items():
        failure = doc.get("failure") or {}
        accounting = doc.get("accounting") or {}
        attempts = len(doc.get("attempts") or [])
        rows.append(
            [
                key,
                render.status(str(doc.get("status"))),
                failure.get("failure_class", "-") if doc.get("status") != "succeeded" else "-",
                failure.get("attribution", "-") if doc.get("status") != "succeeded" else "-",
                f"yes ({attempts} attempts)" if attempts > 1 else "no",
                f"{accounting.get('billable_gpu_seconds') or 0:.1f}",
                f"{accounting.get('credited_gpu_seconds') or 0:.1f}",
                _short(failure.get("advice", "") if doc.get("status") != "succeeded" else ""),
            ]
        )
    headers = ["job", "status", "class", "side", "retried", "billed GPU-s", "credited GPU-s",
               "advice"]  # fmt: skip
    return render.table(headers, rows)


def _short(text: str, width: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def main(settings: Settings, keep_running: bool = False) -> int:
    """`gridledger demo`: the stack up, every demo job run to its end, then the closing table."""
    print("gridledger demo: bringing up the local stack")
    asyncio.run(stack.up(settings, report=lambda c: print(" ", c.line())))
    demo = Demo(settings, say=lambda line: print(line, flush=True))
    result = demo.run(keep_running=keep_running)
    print(f"\nall jobs settled in {result.elapsed_s:.0f} s; read back from the API:\n")
    print(table(result))
    example = result.ids.get("cuda-oom", "JOB")
    if not keep_running:
        print(
            f"\nexplain any job: gridledger explain {example}   (needs the api and sink: "
            "run `gridledger demo --keep-running`, or start `gridledger sink` and "
            "`gridledger api`)"
        )
        return 0
    print(
        f"\nservices are running (logs in {demo.services.log_dir}); try\n"
        f"  gridledger explain {example}\n  gridledger history {result.ids.get('node-lost')}\n"
        "  gridledger submit examples/hello.yaml --wait\n  gridledger health\n"
        "A crashed service is restarted; Ctrl-C stops them all."
    )
    try:
        while True:
            demo.services.check_alive()
            time.sleep(1)
    except KeyboardInterrupt:
        print("stopping the services")
    finally:
        demo.services.stop()
    return 0
