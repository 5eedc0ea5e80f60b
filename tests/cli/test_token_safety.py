"""The CLI sends a token only where it is meant to: real local HTTP servers that redirect
and record every header they are sent."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import subprocess
import sys
import termios
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from services import tokens
from services.cli.client import ApiClient, check_transport
from services.cli.config import Profile, UserConfig
from services.cli.exits import CliError, Exit
from services.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Recorder:
    """An HTTP server on 127.0.0.1 that answers every request with ``redirect`` (a Location)
    when set, else an empty job list, and records each request's path and Authorization."""

    server: ThreadingHTTPServer
    seen: list[tuple[str, str | None]] = field(default_factory=list)
    redirect: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def tokens_seen(self) -> list[str | None]:
        return [auth for _, auth in self.seen]


@pytest.fixture
def servers() -> Iterator[tuple[Recorder, Recorder]]:
    made: list[Recorder] = []

    def start() -> Recorder:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                recorder.seen.append((self.path, self.headers.get("Authorization")))
                if recorder.redirect:
                    self.send_response(302)
                    self.send_header("Location", recorder.redirect + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"jobs": [], "next_cursor": None}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        recorder = Recorder(ThreadingHTTPServer(("127.0.0.1", 0), Handler))
        threading.Thread(target=recorder.server.serve_forever, daemon=True).start()
        made.append(recorder)
        return recorder

    yield start(), start()
    for recorder in made:
        recorder.server.shutdown()
        recorder.server.server_close()


def test_a_redirect_is_not_followed_and_the_token_never_reaches_its_target(
    servers: tuple[Recorder, Recorder], capsys: pytest.CaptureFixture[str]
) -> None:
    api, elsewhere = servers
    for target in (elsewhere.url, api.url):  # another host, then the same one
        api.redirect = target
        api.seen.clear()
        code = main(["status", "-o", "json", "--api", api.url, "--token", "tok-secret"])
        assert code == Exit.ERROR
        err = capsys.readouterr().err
        assert f"redirecting to {target}/v1/jobs" in err and "never follows a redirect" in err
        assert api.tokens_seen == ["Bearer tok-secret"]  # asked once, never again
    assert elsewhere.seen == []


def test_a_profile_token_is_never_sent_to_an_api_the_profile_is_not_for(
    servers: tuple[Recorder, Recorder],
    private_config: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home_api, other_api = servers
    # The local stack's dev token belongs to the local API (here: home_api's port) ...
    home = tmp_path / "home"
    tokens.save_dev_tokens(home / "tokens.json", {"dev": "tok-local-dev"})
    monkeypatch.setenv("GRIDLEDGER_HOME", str(home))
    monkeypatch.setenv("GRIDLEDGER_API_PORT", home_api.url.rsplit(":", 1)[1])
    # ... and the profile's token to the profile's API (home_api with a trailing slash).
    UserConfig(private_config, "lab", {"lab": Profile("lab", home_api.url + "/", "tok-lab")}).save()

    assert main(["status", "-o", "json"]) == Exit.OK
    assert home_api.tokens_seen == ["Bearer tok-lab"]

    assert main(["status", "-o", "json", "--api", other_api.url]) == Exit.NOT_AUTHORISED
    err = capsys.readouterr().err
    assert f"the token of profile 'lab' ({private_config}) is for {home_api.url}/" in err
    assert f"not {other_api.url}" in err and "only sent to its own API" in err
    monkeypatch.setenv("GRIDLEDGER_API_URL", other_api.url)
    assert main(["status", "-o", "json"]) == Exit.NOT_AUTHORISED
    assert other_api.seen == []  # not a request, let alone a token

    # A token given for this very command goes where the command says.
    assert main(["status", "-o", "json", "--token", "tok-for-b"]) == Exit.OK
    assert other_api.tokens_seen == ["Bearer tok-for-b"]


def test_plain_http_is_refused_off_this_machine_unless_allowed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Refused before any connection is made: the name is never even looked up.
    for argv in (
        ["status", "--api", "http://gridledger.example.test", "--token", "t"],
        ["login", "--api", "http://10.1.2.3:8600", "--token", "t"],
    ):
        assert main(argv) == Exit.USAGE
        err = capsys.readouterr().err
        assert "refusing to send a token over plain http" in err and "--insecure-http" in err
    for allowed in ("http://127.0.0.1:1", "http://localhost:1", "http://[::1]:1", "https://a.b"):
        check_transport(allowed, insecure_http=False)
    check_transport("http://gridledger.example.test", insecure_http=True)
    with pytest.raises(CliError, match="not an http"):
        check_transport("file:///etc/passwd", insecure_http=True)
    assert not ApiClient("http://gridledger.example.test", "t").insecure_http
    monkeypatch.setenv("GRIDLEDGER_INSECURE_HTTP", "1")  # the flag's variable
    assert ApiClient("http://gridledger.example.test", "t").insecure_http


def test_at_a_terminal_the_token_for_the_other_api_is_asked_for(
    servers: tuple[Recorder, Recorder], private_config: Path, tmp_path: Path
) -> None:
    home_api, other_api = servers
    UserConfig(private_config, "lab", {"lab": Profile("lab", home_api.url, "tok-lab")}).save()
    env = {
        **os.environ,
        "GRIDLEDGER_CONFIG": str(private_config),
        "GRIDLEDGER_HOME": str(tmp_path / "no-stack"),
    }
    leader, follower = pty.openpty()  # a terminal for the CLI's stdin
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", "status", "-o", "json"]
            + ["--api", other_api.url],
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=ROOT,
            start_new_session=True,  # the pty becomes its controlling terminal (/dev/tty)
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        shown = b""
        # Type only once the hidden prompt is on the terminal: turning echo off flushes
        # what was typed before.
        while not shown:
            ready, _, _ = select.select([leader], [], [], 60)
            assert ready, f"no prompt on the terminal; it showed {shown!r}"
            shown += os.read(leader, 1024)
        os.write(leader, b"tok-typed-for-b\n")
        out, err = process.communicate(timeout=60)
    finally:
        os.close(leader)
        os.close(follower)
    assert process.returncode == Exit.OK, err.decode()
    assert b"is for " + home_api.url.encode() in err and b"token for " in err
    assert b"tok-typed-for-b" not in shown  # not echoed
    assert other_api.tokens_seen == ["Bearer tok-typed-for-b"]
    assert home_api.seen == []
