"""The notary's ops endpoints.

Built by the service's composition root; what a check and an ops server are:
:mod:`services.ops.checks`, :mod:`services.ops.server`.
"""

from __future__ import annotations

from typing import Any

from schemas.topics import SEALED_TOPICS
from services.ledger.health import kafka_check
from services.ops.checks import Check, StateCheck, lag_check, probe_hook
from services.ops.server import OpsEndpoints
from services.settings import Settings


def notary_endpoints(settings: Settings, notary: Any) -> OpsEndpoints:
    """Notary: broker with the sealed topics and ledger-seals, sealing live, lag."""

    def sealing() -> tuple[bool, str]:
        if notary.ready.is_set() and notary.consumer is not None:
            unstored = f", {len(notary.unstored)} not stored yet" if notary.unstored else ""
            signed = f"{notary.seals} seal(s) signed{unstored}"
            return True, f"sealing {len(notary.last)} partition(s), {signed}"
        return False, "resuming from ledger-seals (broker away?)"

    lag = lag_check(settings, lambda: notary.consumer)
    checks: list[Check] = [
        kafka_check(settings, (*SEALED_TOPICS, "ledger-seals")),
        StateCheck("sealing", sealing),
        lag,
    ]
    return OpsEndpoints("notary", checks, [probe_hook(lag)])
