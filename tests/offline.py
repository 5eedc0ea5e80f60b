"""`gridledger replay --file` where no part of the cluster can be reached: the proof that an
exported history replays from the file alone (tests/cli/test_audit.py, tests/e2e)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

NOWHERE = {
    "GRIDLEDGER_KAFKA_BOOTSTRAP": "127.0.0.1:9",
    "GRIDLEDGER_PG_DSN": "postgresql://nobody@127.0.0.1:9/none",
    "GRIDLEDGER_API_URL": "http://127.0.0.1:9",
    "NO_COLOR": "1",
}
"""Where the replay's process would find no broker, no database and no API."""


def replay_offline(path: Path) -> subprocess.CompletedProcess[str]:
    """Run `gridledger replay --file PATH` in a fresh process pointed at :data:`NOWHERE`."""
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", "replay", "--file", str(path)],
        env={**os.environ, **NOWHERE},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
