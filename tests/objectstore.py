"""A private SeaweedFS S3 server for tests, on free ports with its own data folder.

Tests that stop the store (an outage) need their own; the agent tests share one
per session so they do not depend on the shared stack's store. The binary is
the one ``gridledger dev up`` built into the shared home (never rebuilt here).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from infra import processes, seaweedfs, tokens
from infra.private import free_s3_base
from services import s3client
from services.objectstore import CredentialsFile, ObjectRef
from services.settings import Settings


class PrivateStore:
    """``weed server -s3`` in a temporary home; ``settings`` point a service at it."""

    def __init__(self, shared: Settings) -> None:
        binary = seaweedfs.SeaweedPaths.of(shared)
        if not seaweedfs.binary_cached(shared):
            from tests.conftest import in_ci

            message = (
                f"no SeaweedFS binary at {binary.binary}; `gridledger dev up` builds it "
                f"(GRIDLEDGER_HOME={shared.home})"
            )
            if in_ci():
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
        # Not pytest's tmp_path: a short path outside it keeps logs easy to find on failure.
        self.home = Path(tempfile.mkdtemp(prefix="gl-s3-"))
        self.settings = Settings(
            home=self.home,
            s3_port=free_s3_base(),
            weed_binary=binary.binary,
            s3_max_attempts=2,
            s3_connect_timeout_s=2,
        )
        tokens.ensure_tokens(self.settings)

    def service_settings(self, base: Settings, **update: Any) -> Settings:
        """``base`` (a test's settings) pointed at this store."""
        return base.model_copy(
            update={
                "s3_port": self.settings.s3_port,
                "s3_endpoint": "",
                "s3_credentials_file": self.settings.s3_credentials_path,
                "s3_max_attempts": self.settings.s3_max_attempts,
                "s3_connect_timeout_s": self.settings.s3_connect_timeout_s,
                **update,
            }
        )

    @property
    def credentials(self) -> CredentialsFile:
        return CredentialsFile.load(self.settings.s3_credentials_path)

    async def start(self) -> None:
        await seaweedfs.up(self.settings)

    def kill(self) -> None:
        """The store process dies (SIGKILL): every later request is refused."""
        pid = seaweedfs.running_pid(self.settings)
        assert pid is not None, "the private store is not running"
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while processes.is_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not processes.is_alive(pid), f"SeaweedFS pid {pid} survived SIGKILL"

    def stop(self) -> None:
        # Its data is thrown away: no need for SeaweedFS's graceful stop (seconds).
        if seaweedfs.running_pid(self.settings) is not None:
            self.kill()
        shutil.rmtree(self.home, ignore_errors=True)

    def read(self, uri: str) -> bytes:
        """An object's bytes, read with the admin credential (what is really stored)."""
        admin = self.credentials.admin
        assert admin is not None
        ref = ObjectRef.parse(uri)
        client = s3client.make_client(self.settings, admin)
        return bytes(client.get_object(Bucket=ref.bucket, Key=ref.key)["Body"].read())

    def overwrite(self, uri: str, data: bytes) -> None:
        """Replace an object's bytes behind gridledger's back (a damaged checkpoint)."""
        admin = self.credentials.admin
        assert admin is not None
        ref = ObjectRef.parse(uri)
        client = s3client.make_client(self.settings, admin)
        client.put_object(Bucket=ref.bucket, Key=ref.key, Body=data)


async def started_store(shared: Settings) -> PrivateStore:
    store = PrivateStore(shared)
    try:
        await store.start()
    except BaseException:
        await asyncio.to_thread(store.stop)
        raise
    return store
