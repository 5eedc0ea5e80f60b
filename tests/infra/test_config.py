"""Unit tests of the local stack's generated files and helpers (no stack needed)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time

import click
import pytest

from infra import kafka, processes, stack, tokens
from infra.status import ComponentStatus
from schemas.errors import StackError
from schemas.topics import COMPACTED_TOPICS, TOPIC_NAMES
from services import tokens as token_file
from services.cli.config import Profile, UserConfig
from services.cli.main import command
from services.ledger.topics import topic_specs
from services.ops.specs import free_port
from services.private_files import write_private
from services.settings import Settings, load_settings


def _props(text: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#")
    )


def test_server_properties_make_a_single_kraft_node_on_the_settings_ports(tmp_path):
    settings = Settings(
        home=tmp_path, kafka_bootstrap="127.0.0.1:19092", kafka_controller_port=19093
    )
    props = _props(kafka.render_server_properties(settings))
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["auto.create.topics.enable"] == "false"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["log.dirs"] == str(tmp_path / "kafka" / "data")


def test_broker_logs_go_to_the_homes_log_folder(tmp_path):
    log4j = _props(kafka.render_log4j(Settings(home=tmp_path)))
    assert log4j["log4j.appender.file.File"] == str(tmp_path / "logs" / "kafka.log")


def test_a_bootstrap_without_port_is_refused_with_the_variable_to_fix():
    with pytest.raises(StackError, match="GRIDLEDGER_KAFKA_BOOTSTRAP"):
        kafka.broker_address(Settings(kafka_bootstrap="localhost"))


def test_cluster_ids_have_kafkas_format_and_never_look_like_an_option():
    ids = [kafka.new_cluster_id() for _ in range(2000)]
    assert all(len(cluster_id) == 22 and "=" not in cluster_id for cluster_id in ids)
    assert not any(cluster_id.startswith("-") for cluster_id in ids)


def test_topic_specs_cover_every_topic_with_explicit_partitions_and_policies():
    settings = Settings(topic_prefix="x.", job_partitions=4, node_partitions=3)
    specs = {spec.name: spec for spec in topic_specs(settings)}
    assert set(specs) == {f"x.{name}" for name in TOPIC_NAMES}
    assert specs["x.job-events"].partitions == 4
    assert specs["x.node-commands"].partitions == 3
    assert specs["x.node-events"].partitions == 3
    assert specs["x.dead-letter"].partitions == 1
    for name in TOPIC_NAMES:
        expected = "compact" if name in COMPACTED_TOPICS else "delete"
        assert specs[f"x.{name}"].configs["cleanup.policy"] == expected


def test_stack_env_is_read_back_by_load_settings_and_the_environment_wins(tmp_path, monkeypatch):
    for key in ("GRIDLEDGER_KAFKA_BOOTSTRAP", "GRIDLEDGER_PG_PORT", "GRIDLEDGER_TOKENS_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("GRIDLEDGER_HOME", str(tmp_path))
    written = Settings(home=tmp_path, kafka_bootstrap="127.0.0.1:19092", pg_port=55499)
    (tmp_path / "stack.env").write_text(stack.render_stack_env(written))

    loaded = load_settings()
    assert loaded.kafka_bootstrap == "127.0.0.1:19092"
    assert loaded.pg_port == 55499
    assert loaded.dsn == "postgresql://gridledger@127.0.0.1:55499/gridledger"
    assert loaded.tokens_path == tmp_path / "tokens.json"

    monkeypatch.setenv("GRIDLEDGER_PG_PORT", "55500")
    assert load_settings().pg_port == 55500


def test_tokens_are_written_once_privately_for_both_tenants(tmp_path):
    settings = Settings(home=tmp_path)
    assert tokens.ensure_tokens(settings) is True
    first = settings.tokens_path.read_text()
    kept = token_file.dev_tokens_path(settings.tokens_path)
    for path in (settings.tokens_path, kept):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert tokens.ensure_tokens(settings) is False
    assert settings.tokens_path.read_text() == first
    served = token_file.load(settings.tokens_path)
    assert served.tenants == {"dev", "other"}
    other = tokens.token_for(settings, "other")
    assert other not in first and served.tenant(other) == "other"


def test_a_broken_tokens_file_is_reported_not_replaced(tmp_path):
    settings = Settings(home=tmp_path)
    settings.tokens_path.write_text("{not json")
    with pytest.raises(StackError, match="fix or delete it"):
        tokens.ensure_tokens(settings)
    assert settings.tokens_path.read_text() == "{not json"


def test_a_zombie_or_a_reused_pid_is_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while processes.is_alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # exits but stays a zombie until reaped below
    assert not processes.is_alive(child.pid)
    child.wait()

    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE,
    )
    try:
        # Until the child has exec'd, /proc/<pid>/cmdline is still this process's: wait
        # for the child to speak, which it can only do once it runs its own program.
        assert sleeper.stdout is not None and sleeper.stdout.readline() == b"ready\n"
        assert processes.is_alive(sleeper.pid, "time.sleep(30)")
        assert not processes.is_alive(sleeper.pid, "kafka.Kafka")
        assert processes.stop(sleeper.pid, timeout=5)
        assert not processes.is_alive(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
        sleeper.stdout.close()


async def test_kafka_readiness_fails_with_the_log_path_when_nothing_answers(tmp_path):
    port = free_port()
    settings = Settings(home=tmp_path, kafka_bootstrap=f"127.0.0.1:{port}")
    with pytest.raises(StackError, match=str(tmp_path / "logs" / "kafka.log")):
        await kafka.wait_ready(settings, timeout=1.0)


def test_component_lines_say_who_started_it():
    line = ComponentStatus("docker", True, "unix:///x.sock", pid=7).line()
    assert "pid 7, not started by gridledger" in line
    assert "stopped" in ComponentStatus("kafka", False).line()


def test_the_cli_has_the_dev_group():
    dev = command("dev")
    assert isinstance(dev, click.Group)
    assert {"up", "down", "status", "topics"} <= set(dev.commands)
    options = {opt for param in dev.commands["status"].params for opt in param.opts}
    assert {"--json", "-o"} <= options


def test_credential_files_are_private_from_the_first_byte_whatever_the_umask(tmp_path):
    old = os.umask(0)  # a umask that would leave a plain open() world-readable
    try:
        target = tmp_path / "new" / "folder" / "secret.json"
        write_private(target, "{}")
        write_private(target, '{"k": 1}')  # a rewrite replaces it, still private
        settings = Settings(home=tmp_path / "home")
        tokens.ensure_tokens(settings)
        config = UserConfig(tmp_path / "cfg" / "gridledger" / "config.toml")
        config.profiles["p"] = Profile("p", "https://api.example", "tok")
        config.save()
        write_private(settings.home / "stack.env", stack.render_stack_env(settings))
    finally:
        os.umask(old)
    for folder in (target.parent, target.parent.parent, config.path.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    files = [
        target,
        config.path,
        settings.tokens_path,
        token_file.dev_tokens_path(settings.tokens_path),
        settings.home / "stack.env",
    ]
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert target.read_text() == '{"k": 1}'
    assert sorted(p.name for p in target.parent.iterdir()) == ["secret.json"]
