"""Settings of the shared stack with a home folder of the test's own.

Runs on one machine use the same node ids (the demo's ``node-a``, ``node-b``),
and an agent re-attaches at start to every unfinished attempt its journal under
``<home>/agent/<node>`` lists, so a test that starts agents on the shared home
inherits attempts another run left behind (holding GPUs, never finishing). With
a home of its own the journals, spools and work folders are the test's; the
broker, Postgres, the object store and the API tokens stay the shared stack's.
"""

from __future__ import annotations

from pathlib import Path

from services.settings import Settings


def with_own_home(settings: Settings, home: Path, **updates: object) -> Settings:
    return settings.model_copy(
        update={
            "home": home,
            "tokens_file": settings.tokens_path,
            "s3_credentials_file": settings.s3_credentials_path,
            **updates,
        }
    )
