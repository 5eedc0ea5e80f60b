"""``gridledger audit verify``: recompute every seal from the topics and say what differs.

1. The seals are read from ``ledger-seals`` (or, ``--from-store``, the object store) of
   the installation whose topic prefix they name (``--sealed-prefix``; default this
   one's). A record that is not a seal, a seal whose signature no given public key
   verifies (forged), and a seal that does not continue its partition's chain (a seal
   deleted, rewritten or inserted) are problems; only the chained seals count on.
2. Each sealed partition of this installation's topics is read whole, each record's
   leaf computed from its bytes, and compared with the leaves of its seals
   (services/notary/findings.py): altered, deleted, reordered and inserted records
   are problems, each at its sealed offset and where it is now; the records after the
   last seal are reported as unsealed (the notary has not got there yet), and so are
   partitions no seal covers.

Exit 0 when there are no problems (unsealed records alone are not one), 1 otherwise.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from schemas.topics import SEALED_TOPICS
from services.ledger import Ledger
from services.notary.chain import Seal, SealError, follows, leaf_of
from services.notary.findings import Finding, Unsealed, compare
from services.notary.store import SealStore
from services.settings import Settings

SHOWN_PER_KIND = 50
"""Findings of one kind the text report lists before it counts the rest."""


@dataclass(frozen=True)
class SealProblem:
    """A seal record that is not trusted: where it is and why."""

    source: str
    """``ledger-seals@12`` or the store's object key."""
    kind: str
    """``unreadable``, ``forged`` or ``chain``."""
    detail: str


@dataclass
class Report:
    """What ``audit verify`` found."""

    sealed_prefix: str
    topic_prefix: str
    source: str
    seals: int = 0
    records: int = 0
    sealed_records: int = 0
    seal_problems: list[SealProblem] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    unsealed: list[Unsealed] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No seal problem and no finding (unsealed records alone are not a problem)."""
        return not self.seal_problems and not self.findings

    def to_json(self) -> dict[str, Any]:
        """The report for ``-o json``: every problem, finding and unsealed tail."""
        return {
            "ok": self.ok,
            "sealed_prefix": self.sealed_prefix,
            "topic_prefix": self.topic_prefix,
            "seals_from": self.source,
            "seals": self.seals,
            "records": self.records,
            "sealed_records": self.sealed_records,
            "seal_problems": [asdict(p) for p in self.seal_problems],
            "findings": [asdict(f) for f in self.findings],
            "unsealed": [asdict(u) for u in self.unsealed],
        }

    def lines(self) -> list[str]:
        """The text report, ending in VERIFIED or FAILED."""
        out = [
            f"seals of {self.sealed_prefix}* from {self.source}: {self.seals} chained, "
            f"covering {self.sealed_records} record(s); {self.records} record(s) read "
            f"from {self.topic_prefix}*"
        ]
        for problem in self.seal_problems:
            out.append(f"seal {problem.source}: {problem.kind}: {problem.detail}")
        by_kind: dict[str, list[Finding]] = defaultdict(list)
        for finding in self.findings:
            by_kind[finding.kind].append(finding)
        for kind, found in by_kind.items():
            out.append(f"{len(found)} record(s) {kind} after sealing:")
            out += [f"  {f.line()}" for f in found[:SHOWN_PER_KIND]]
            if len(found) > SHOWN_PER_KIND:
                out.append(f"  ... and {len(found) - SHOWN_PER_KIND} more (-o json lists all)")
        for tail in self.unsealed:
            out.append(
                f"unsealed: {tail.topic}/{tail.partition}: {tail.count} record(s) from offset "
                f"{tail.first_offset} (no seal covers them yet)"
            )
        out.append("VERIFIED" if self.ok else "FAILED")
        return out


def chain_seals(
    items: Iterable[tuple[str, bytes | None]], prefix: str, keys: dict[str, Ed25519PublicKey]
) -> tuple[dict[tuple[str, int], list[Seal]], list[SealProblem]]:
    """The chained seals per (topic, partition) of ``items`` ((where, bytes) in order), and
    the problems of the others."""
    chains: dict[tuple[str, int], list[Seal]] = defaultdict(list)
    problems: list[SealProblem] = []
    for where, data in items:
        try:
            seal = Seal.decode(data)
        except SealError as exc:
            problems.append(SealProblem(where, "unreadable", str(exc)))
            continue
        if seal.prefix != prefix:
            continue  # another installation's seal: not ours to judge
        if not seal.signed_by(keys):
            problems.append(
                SealProblem(
                    where,
                    "forged",
                    f"{seal.where}: signature of key {seal.key_id or '(none)'} does not "
                    "verify with any accepted public key",
                )
            )
            continue
        chain = chains[(seal.topic, seal.partition)]
        why = follows(seal, chain[-1] if chain else None)
        if why:
            problems.append(SealProblem(where, "chain", f"{seal.where}: {why}"))
            continue
        chain.append(seal)
    return chains, problems


async def verify(
    settings: Settings,
    keys: dict[str, Ed25519PublicKey],
    sealed_prefix: str | None = None,
    from_store: bool = False,
) -> Report:
    """Check the seals of ``sealed_prefix`` (default: the settings' prefix) against the
    topics of the settings' prefix."""
    prefix = sealed_prefix or settings.topic_prefix
    sealed_settings = settings.model_copy(update={"topic_prefix": prefix})
    async with Ledger(settings, "audit") as ledger:
        if from_store:
            store = SealStore(settings)
            stored = await asyncio.to_thread(store.all, prefix)
            items: list[tuple[str, bytes | None]] = list(stored)
            source = f"s3://{settings.s3_bucket}/seals/"
        else:
            topic = sealed_settings.topic("ledger-seals")
            items = [(f"{topic}@{raw.offset}", raw.value) async for raw in ledger.read_raw(topic)]
            source = topic
        chains, problems = chain_seals(items, prefix, keys)
        report = Report(prefix, settings.topic_prefix, source, seal_problems=problems)
        report.seals = sum(len(chain) for chain in chains.values())
        for suffix in SEALED_TOPICS:
            topic = settings.topic(suffix)
            found: dict[int, list[tuple[int, str]]] = defaultdict(list)
            async for raw in ledger.read_raw(topic):
                found[raw.partition].append((raw.offset, leaf_of(raw)))
            partitions = sorted(set(found) | {p for t, p in chains if t == suffix})
            for partition in partitions:
                chain = chains.get((suffix, partition), [])
                sealed = [pair for seal in chain for pair in seal.leaves]
                findings, tail = compare(suffix, partition, sealed, found.get(partition, []))
                report.records += len(found.get(partition, []))
                report.sealed_records += len(sealed)
                report.findings += findings
                if tail is not None:
                    report.unsealed.append(tail)
    return report
