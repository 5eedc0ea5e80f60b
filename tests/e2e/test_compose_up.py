"""docker-compose.yml brought up for real, with images built here instead of pulled.

Its base images (apache/kafka, postgres, python, golang, debian) come from a
registry this machine may not reach, so the test builds stand-ins from what
``gridledger dev up`` already has: Kafka from Debian's OpenJDK and the Maven
Central jars, Postgres and the services' base from Debian packages on the local
``gridledger/python`` image, the object store from the built ``weed``. Everything
else is the file as written (resolved by ``docker-compose config``), except the
GPU reservation (no NVIDIA runtime here), the published ports (free ones) and
the image names (the project's own, so no shared image is replaced).

It then runs a job through the API, downloads its output through a signed URL,
takes the deployment down and up again, and checks that the ledger, the read
models and the artifact are all still there. It builds six images and runs a
dozen containers, so it runs only with GRIDLEDGER_COMPOSE_E2E=1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from infra import kafka, seaweedfs
from services.ops.specs import free_ports
from services.settings import Settings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
LOCAL = REPO / "deploy" / "local"
BUSYBOX = Path("/bin/busybox")


def _wait(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (OSError, urllib.error.URLError, ValueError, KeyError) as exc:
            last = exc
        time.sleep(2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


class Deployment:
    def __init__(self, settings: Settings, root: Path) -> None:
        self.project = f"glcompose{uuid.uuid4().hex[:6]}"
        self.root = root
        self.api_port, self.s3_port = free_ports(2)
        self.agent_home = root / "agent-home"
        self.file = root / "compose.yml"
        self.shared = settings

    def compose(self, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["docker-compose", "-p", self.project, "-f", str(self.file), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert result.returncode == 0, f"docker-compose {' '.join(args)}:\n{result.stderr[-4000:]}"
        return result

    def contexts(self) -> dict[str, Path]:
        """Build contexts of the stand-in images, assembled from what dev up built."""
        made = {}

        def context(name: str, dockerfile: Path, *extra: tuple[Path, str]) -> None:
            folder = self.root / name
            folder.mkdir()
            shutil.copyfile(dockerfile, folder / "Dockerfile")
            for source, target in extra:
                if source.is_dir():
                    shutil.copytree(source, folder / target)
                else:
                    try:
                        os.link(source, folder / target)
                    except OSError:
                        shutil.copy2(source, folder / target)
            made[name] = folder

        context(
            "kafka",
            LOCAL / "kafka.Dockerfile",
            (kafka.KafkaPaths.of(self.shared).lib, "lib"),
            (LOCAL / "kafka-entrypoint.py", "kafka-entrypoint.py"),
        )
        context(
            "postgres",
            LOCAL / "postgres.Dockerfile",
            (LOCAL / "postgres-entrypoint.sh", "postgres-entrypoint.sh"),
        )
        context(
            "objectstore",
            LOCAL / "seaweedfs.Dockerfile",
            (seaweedfs.SeaweedPaths.of(self.shared).binary, "weed"),
        )
        context("job-busybox", REPO / "infra/images/busybox/Dockerfile", (BUSYBOX, "busybox"))
        context("job-python", LOCAL / "job-python.Dockerfile")
        return made

    def write(self) -> None:
        env = {
            **os.environ,
            "GRIDLEDGER_AGENT_HOME": str(self.agent_home),
            "GRIDLEDGER_S3_PUBLIC_ENDPOINT": f"http://127.0.0.1:{self.s3_port}",
        }
        resolved = subprocess.run(
            ["docker-compose", "config"], cwd=REPO, env=env, capture_output=True, text=True
        )
        assert resolved.returncode == 0, resolved.stderr
        config = yaml.safe_load(resolved.stdout)
        services = config["services"]
        base = f"{self.project}/pybase:latest"
        pybase = self.root / "pybase"
        pybase.mkdir()
        shutil.copyfile(LOCAL / "pybase.Dockerfile", pybase / "Dockerfile")
        trust = os.environ.get("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")
        shutil.copyfile(trust, pybase / "ca-certificates.crt")
        client = docker.from_env()
        try:
            client.images.build(path=str(pybase), tag=base, rm=True, pull=False)
        finally:
            client.close()
        for name, folder in self.contexts().items():
            services[name]["build"] = {"context": str(folder)}
            services[name]["image"] = f"{self.project}/{name}:latest"
        for service in services.values():
            build = service.get("build")
            if isinstance(build, dict) and Path(build.get("context", "")) == REPO:
                service["build"] = {"context": str(REPO), "args": {"BASE": base}}
                service["image"] = f"{self.project}/services:latest"
        services["kafka"]["healthcheck"]["test"] = [
            "CMD", "python3", "-c", "import socket; socket.create_connection(('127.0.0.1', 9092))"
        ]  # fmt: skip
        services["agent"].pop("deploy", None)  # no NVIDIA runtime on this machine
        services["api"]["ports"] = [f"127.0.0.1:{self.api_port}:8600"]
        services["objectstore"]["ports"] = [f"127.0.0.1:{self.s3_port}:8333"]
        self.file.write_text(yaml.safe_dump(config, sort_keys=False))

    # ------------------------------------------------------------------ API

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def token(self) -> str:
        tokens = json.loads(
            self.compose("exec", "-T", "api", "cat", "/etc/gridledger/dev-tokens.json").stdout
        )
        return str(tokens["dev"])

    def call(self, token: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode() if body is not None else None,
            method="POST" if body is not None else "GET",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read())

    def all_healthy(self) -> bool:
        """Every container with a healthcheck reports healthy (the one-shots have none)."""
        client = docker.from_env()
        try:
            found = client.containers.list(
                filters={"label": f"com.docker.compose.project={self.project}"}
            )
            states = {
                c.labels["com.docker.compose.service"]: c.attrs["State"]
                .get("Health", {})
                .get("Status")
                for c in found
            }
        finally:
            client.close()
        checked = {name: state for name, state in states.items() if state is not None}
        expected = {"kafka", "postgres", "objectstore", "api", "scheduler", "processors",
                    "sink", "agent"}  # fmt: skip
        return set(checked) >= expected and all(s == "healthy" for s in checked.values())

    def healthy(self) -> bool:
        with urllib.request.urlopen(self.url + "/healthz", timeout=5) as reply:
            return reply.status == 200


@pytest.fixture(scope="module")
def deployment(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    if os.environ.get("GRIDLEDGER_COMPOSE_E2E") != "1":
        pytest.skip("builds six images and runs a dozen containers: set GRIDLEDGER_COMPOSE_E2E=1")
    if shutil.which("docker-compose") is None:
        pytest.fail("docker-compose is not installed (`apt-get install docker-compose`)")
    if (
        not seaweedfs.binary_cached(settings)
        or not (kafka.KafkaPaths.of(settings).lib / kafka.KAFKA_JAR).is_file()
    ):
        pytest.fail("run `gridledger dev up` first: the jars and the weed binary are reused")
    root = tmp_path_factory.mktemp("compose")
    root.chmod(0o755)
    deployment = Deployment(settings, root)
    deployment.write()
    try:
        deployment.compose("up", "-d", "--build")
        yield deployment
    finally:
        logs = subprocess.run(
            ["docker-compose", "-p", deployment.project, "-f", str(deployment.file), "logs",
             "--tail", "30"], capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        print(logs.stdout[-20000:])
        subprocess.run(
            ["docker-compose", "-p", deployment.project, "-f", str(deployment.file), "down",
             "-v", "--rmi", "all"], capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        client = docker.from_env()
        try:
            client.images.remove(f"{deployment.project}/pybase:latest", force=True)
        except docker.errors.DockerException:
            pass
        finally:
            client.close()
        subprocess.run(["rm", "-rf", str(deployment.agent_home)], check=False)


def test_a_job_runs_stores_its_output_and_everything_survives_down_and_up(
    deployment: Deployment,
) -> None:
    _wait(deployment.healthy, 900, "the API to answer /healthz")
    token = deployment.token()
    spec = {
        "name": "compose-e2e",
        "image": f"{deployment.project}/job-busybox:latest",
        "command": ["sh", "-c", 'echo from compose > "$GRIDLEDGER_OUTPUT_DIR/out.txt"'],
        "outputs": [{"path": "out.txt"}],
        "resources": {"gpus": 1, "memory_gb": 0.1},
    }
    job = deployment.call(token, "/v1/jobs", spec)["job_id"]
    done = _wait(
        lambda: (
            (d := deployment.call(token, f"/v1/jobs/{job}"))["status"]
            in {"succeeded", "failed", "succeeded_with_errors"}
            and d
        ),
        600,
        "the job to end",
    )
    assert done["status"] == "succeeded", done.get("failure")
    signed = deployment.call(token, f"/v1/jobs/{job}/artifacts/url?path=out.txt")
    with urllib.request.urlopen(signed["url"], timeout=30) as reply:
        assert reply.read() == b"from compose\n"
    events = deployment.call(token, f"/v1/jobs/{job}/events")["events"]
    _wait(deployment.all_healthy, 180, "every long-running service's healthcheck to pass")

    deployment.compose("down")  # containers gone, volumes kept
    deployment.compose("up", "-d")
    _wait(deployment.healthy, 600, "the API to answer again after down/up")
    again = deployment.call(token, f"/v1/jobs/{job}")
    assert again["status"] == "succeeded"
    # The ledger itself survived (Kafka's data volume), not only the read models.
    replay = deployment.compose("exec", "-T", "api", "gridledger", "replay", "--job", job, "--json")
    history = json.loads(replay.stdout)["history"]
    assert [e["event_id"] for e in history] == [e["event_id"] for e in events]
    signed = deployment.call(token, f"/v1/jobs/{job}/artifacts/url?path=out.txt")
    with urllib.request.urlopen(signed["url"], timeout=30) as reply:
        assert reply.read() == b"from compose\n"
