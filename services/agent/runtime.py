"""The container runtime: the docker SDK behind a small, blocking interface.

Every method blocks; the agent calls them off the event loop (its own thread
pool). Two traps of the SDK are handled here: ``containers.run`` pulls a missing
image on its own, so the image is always checked with ``images.get`` first and
pulled only when the policy says so; and a container whose entrypoint does not
exist is *created* fine but fails to *start* (HTTP 400, "no such file or
directory" / "executable file not found", exit code 127 in its state), so start
errors are mapped to an ``error_kind``.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
import requests.exceptions

from services.agent.errors import ContainerStartError, ImageUnavailableError
from services.agent.settings import PullPolicy

log = logging.getLogger(__name__)

LABEL_JOB = "gridledger.job_id"
LABEL_ATTEMPT = "gridledger.attempt"
LABEL_NODE = "gridledger.node_id"
OUTPUT_DIR = "/gridledger/output"
RESUME_DIR = "/gridledger/resume"

_NOT_FOUND = re.compile(
    r"not found|manifest unknown|pull access denied|repository does not exist|"
    r"requested access to the resource is denied|no such image|invalid reference",
    re.IGNORECASE,
)


def pull_failure_reason(exc: Exception) -> str:
    """``not_found`` when the registry answered that the image does not exist (or is
    denied), ``registry_unreachable`` for connection errors, timeouts and anything else."""
    if isinstance(exc, docker.errors.NotFound | docker.errors.ImageNotFound):
        return "not_found"
    if isinstance(exc, docker.errors.APIError):
        text = str(exc.explanation or exc)
        if _NOT_FOUND.search(text) and not re.search(
            r"dial tcp|connection refused|i/o timeout|no such host|TLS handshake|"
            r"Client.Timeout|context deadline exceeded",
            text,
            re.IGNORECASE,
        ):
            return "not_found"
    return "registry_unreachable"


def start_error_kind(message: str) -> str:
    """Classify docker's create/start error message (kept verbatim in the event)."""
    text = message.lower()
    if "executable file not found" in text or (
        "no such file or directory" in text and "exec" in text
    ):
        return "entrypoint_not_found"
    if "permission denied" in text and "exec" in text:
        return "entrypoint_not_executable"
    if "invalid" in text or "bad request" in text:
        return "invalid_config"
    return "daemon_error"


def parse_docker_time(value: str | None) -> datetime | None:
    """Docker's RFC 3339 nano timestamps; the zero time ``0001-01-01...`` is None."""
    if not value or value.startswith("0001-"):
        return None
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", value)
    if not match:
        return None
    base, frac, zone = match.groups()
    micros = int((frac or "0")[:6].ljust(6, "0"))
    parsed = datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone))
    return parsed.replace(microsecond=micros).astimezone(UTC)


@dataclass(frozen=True)
class ContainerRequest:
    """Everything needed to create one attempt's container."""

    name: str
    image: str
    command: list[str]
    env: dict[str, str]
    labels: dict[str, str]
    memory_limit_bytes: int
    nano_cpus: int
    output_dir: Path
    user: str = ""
    """uid:gid the process runs as."""
    pids_limit: int = 0
    """Processes and threads at most (0: Docker's default, unlimited)."""
    resume_file: Path | None = None
    resume_target: str = ""
    gpu_indices: list[int] | None = None
    """None: no GPU device request (declared inventory); a list: those NVML indices."""


@dataclass(frozen=True)
class ContainerState:
    """What Docker says of a container: its status, exit code and OOM flag."""

    status: str
    """created, running, exited, dead ..."""
    exit_code: int
    oom_killed: bool
    started_at: datetime | None
    finished_at: datetime | None
    error: str = ""
    memory_limit_bytes: int = 0

    @property
    def running(self) -> bool:
        """Whether the container's process may still produce output."""
        return self.status in ("running", "restarting", "paused")


@dataclass(frozen=True)
class OwnContainer:
    """A container this node's agent created, found by its labels."""

    id: str
    job_id: str
    attempt: int
    status: str


@dataclass
class Stats:
    """One reading of a container's memory and CPU use."""

    memory_used_mb: int = 0
    cpu_pct: float = 0.0
    cpu_sample: tuple[int, int] | None = field(default=None, repr=False)
    """The container's and the host's CPU counters at this reading: Docker reports totals,
    so the next reading's percentage is the difference against this one."""


class DockerRuntime:
    """Blocking docker operations for the agent."""

    def __init__(self, docker_host: str = "") -> None:
        kwargs: dict[str, Any] = {"max_pool_size": 64, "timeout": 60}
        self.client = (
            docker.DockerClient(base_url=docker_host, **kwargs)
            if docker_host
            else docker.from_env(**kwargs)
        )

    def close(self) -> None:
        """Close the Docker client."""
        self.client.close()

    # ----------------------------------------------------------------- images

    def resolve_image(self, image: str, policy: PullPolicy) -> tuple[str, bool]:
        """``(image id, pulled)``; raises ImageUnavailableError. Never pulls under ``never``."""
        try:
            return self.client.images.get(image).id, False
        except docker.errors.ImageNotFound as exc:
            if policy == "never":
                raise ImageUnavailableError(
                    image,
                    "not_found",
                    f"image {image} is not on this node and the pull policy is 'never' "
                    f"(docker: {exc.explanation})",
                ) from exc
        except docker.errors.APIError as exc:
            raise ImageUnavailableError(image, "registry_unreachable", str(exc)) from exc
        repository, tag = _split_tag(image)
        try:
            pulled = self.client.images.pull(repository, tag=tag)
        except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
            reason = pull_failure_reason(exc)
            text = exc.explanation if isinstance(exc, docker.errors.APIError) else str(exc)
            raise ImageUnavailableError(image, reason, f"pull of {image} failed: {text}") from exc
        return pulled.id, True

    # ----------------------------------------------------------------- containers

    def create(self, request: ContainerRequest) -> str:
        """Create the attempt's container (limits, labels, output and resume mounts); return its
        id."""
        volumes = {str(request.output_dir): {"bind": OUTPUT_DIR, "mode": "rw"}}
        if request.resume_file is not None:
            volumes[str(request.resume_file)] = {"bind": request.resume_target, "mode": "ro"}
        device_requests = None
        if request.gpu_indices is not None:
            device_requests = [
                docker.types.DeviceRequest(
                    device_ids=[str(i) for i in request.gpu_indices], capabilities=[["gpu"]]
                )
            ]
        try:
            container = self.client.containers.create(
                request.image,
                request.command or None,
                name=request.name,
                environment=request.env,
                labels=request.labels,
                mem_limit=request.memory_limit_bytes,
                nano_cpus=request.nano_cpus or None,
                network_mode="none",
                user=request.user or None,
                pids_limit=request.pids_limit or None,
                security_opt=["no-new-privileges"],
                cap_drop=["ALL"],
                volumes=volumes,
                device_requests=device_requests,
                detach=True,
            )
        except docker.errors.ImageNotFound as exc:
            raise ContainerStartError("image_missing", str(exc.explanation)) from exc
        except docker.errors.APIError as exc:
            text = str(exc.explanation or exc)
            raise ContainerStartError(start_error_kind(text), text) from exc
        return str(container.id)

    def start(self, container_id: str) -> None:
        """Start a created container; Docker's refusal is raised with its error kind."""
        try:
            self.client.api.start(container_id)
        except docker.errors.APIError as exc:
            text = str(exc.explanation or exc)
            raise ContainerStartError(start_error_kind(text), text) from exc

    def state(self, container_id: str) -> ContainerState:
        """The container's state now."""
        attrs = self.client.api.inspect_container(container_id)
        state = attrs.get("State", {})
        return ContainerState(
            status=state.get("Status", ""),
            exit_code=int(state.get("ExitCode", 0) or 0),
            oom_killed=bool(state.get("OOMKilled", False)),
            started_at=parse_docker_time(state.get("StartedAt")),
            finished_at=parse_docker_time(state.get("FinishedAt")),
            error=state.get("Error", "") or "",
            memory_limit_bytes=int(attrs.get("HostConfig", {}).get("Memory", 0) or 0),
        )

    def wait(self, container_id: str, timeout: float) -> bool:
        """True once the container has exited; False if still running after ``timeout``."""
        try:
            self.client.api.wait(container_id, timeout=timeout)
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            # A busy daemon can be slower than ``timeout`` even for an exited container.
            return not self.state(container_id).running
        return True

    def stop(self, container_id: str, grace_s: float) -> None:
        """Stop the container, giving it ``grace_s`` before the kill; one already gone is fine."""
        with contextlib.suppress(docker.errors.NotFound):
            self.client.api.stop(container_id, timeout=int(max(0, round(grace_s))))

    def remove(self, container_id: str) -> None:
        """Remove the container, even if it still runs."""
        try:
            self.client.api.remove_container(container_id, force=True)
        except docker.errors.APIError as exc:
            if not removal_settled(exc):
                raise

    def follow_logs(self, container_id: str, stream: str) -> Any:
        """A closable iterator of raw frames (timestamp-prefixed) of one stream, from the start."""
        return self.client.api.logs(
            container_id,
            stdout=stream == "stdout",
            stderr=stream == "stderr",
            stream=True,
            follow=True,
            timestamps=True,
        )

    def tail(self, container_id: str, lines: int, max_line_chars: int = 2000) -> list[str]:
        """The last ``lines`` lines of stdout and stderr together, each cut to a sane length."""
        raw = self.client.api.logs(container_id, stdout=True, stderr=True, tail=lines)
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
        out = []
        for line in text.splitlines()[-lines:]:
            out.append(line if len(line) <= max_line_chars else line[:max_line_chars] + "…")
        return out

    def stats(self, container_id: str, previous: Stats | None = None) -> Stats:
        """Memory in use now and CPU since ``previous`` (Docker reports CPU as running totals)."""
        raw = self.client.api.stats(container_id, stream=False, one_shot=True)
        memory = raw.get("memory_stats", {}) or {}
        used = int(memory.get("usage", 0) or 0) - int(
            (memory.get("stats", {}) or {}).get("total_inactive_file", 0) or 0
        )
        cpu = raw.get("cpu_stats", {}) or {}
        total = int((cpu.get("cpu_usage", {}) or {}).get("total_usage", 0) or 0)
        system = int(cpu.get("system_cpu_usage", 0) or 0)
        online = int(cpu.get("online_cpus", 1) or 1)
        pct = 0.0
        if previous is not None and previous.cpu_sample is not None:
            d_total, d_system = total - previous.cpu_sample[0], system - previous.cpu_sample[1]
            if d_total > 0 and d_system > 0:
                pct = d_total / d_system * online * 100.0
        return Stats(
            memory_used_mb=max(0, used) // (1024 * 1024), cpu_pct=pct, cpu_sample=(total, system)
        )

    def list_own(self, node_id: str) -> list[OwnContainer]:
        """Every container (running or not) this node's agent created."""
        found = []
        for attrs in self.client.api.containers(
            all=True, filters={"label": f"{LABEL_NODE}={node_id}"}
        ):
            labels = attrs.get("Labels") or {}
            try:
                attempt = int(labels.get(LABEL_ATTEMPT, ""))
            except ValueError:
                continue
            found.append(
                OwnContainer(
                    attrs["Id"], labels.get(LABEL_JOB, ""), attempt, attrs.get("State", "")
                )
            )
        return found


def iter_frames(stream: Any) -> Iterator[bytes]:
    """Frames of a docker log stream; ends quietly when the stream is closed under it."""
    try:
        yield from stream
    except (requests.exceptions.RequestException, OSError, AttributeError, ValueError):
        return


def _split_tag(image: str) -> tuple[str, str | None]:
    if "@" in image:
        return image, None
    name, sep, tag = image.rpartition(":")
    if sep and "/" not in tag:
        return name, tag
    return image, "latest"


def container_name(node_id: str, job_id: str, attempt: int) -> str:
    """A container name unique per node, job and attempt, with only the characters Docker allows."""
    raw = f"gl-{node_id}-{job_id}-{attempt}"
    name = "".join(c if c.isalnum() or c in "_.-" else "-" for c in raw)
    return name[:200]


def removal_settled(exc: docker.errors.APIError) -> bool:
    """True when a failed remove still leaves the container gone or going: it was not
    there (404), or the daemon is already removing it (409, e.g. auto-remove or a second
    remover racing this one)."""
    if isinstance(exc, docker.errors.NotFound):
        return True
    return exc.status_code == 409 and "already in progress" in str(exc.explanation or "")
