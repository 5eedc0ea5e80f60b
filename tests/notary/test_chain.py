"""Seals as values: leaves, the running hash, the chain, signatures, the wire form (pure)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from services.notary.chain import Seal, SealError, follows, key_id, leaf, next_seal

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
OTHER = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
KEYS = {key_id(KEY.public_key()): KEY.public_key()}


def leaves(start: int, count: int) -> list[tuple[int, str]]:
    return [
        (o, leaf(1_700_000_000_000 + o, b"job-1", b"v%d" % o, []))
        for o in range(start, start + count)
    ]


def chain(*sizes: int) -> list[Seal]:
    seals: list[Seal] = []
    offset = 0
    for size in sizes:
        seal = next_seal(
            seals[-1] if seals else None, "p.", "job-events", 3, leaves(offset, size), "t", KEY
        )
        seals.append(seal)
        offset += size
    return seals


def test_every_part_of_a_record_changes_its_leaf() -> None:
    base = leaf(1, b"k", b"v", [("type", b"JobSubmitted")])
    variants = [
        leaf(2, b"k", b"v", [("type", b"JobSubmitted")]),
        leaf(1, b"K", b"v", [("type", b"JobSubmitted")]),
        leaf(1, b"k", b"w", [("type", b"JobSubmitted")]),
        leaf(1, b"k", b"v", [("type", b"JobQueued")]),
        leaf(1, b"k", b"v", [("typ", b"JobSubmitted")]),
        leaf(1, b"k", b"v", []),
        leaf(1, None, b"v", [("type", b"JobSubmitted")]),
        leaf(1, b"k", None, [("type", b"JobSubmitted")]),
        leaf(1, b"k", b"v", [("type", None)]),
        # Lengths are prefixed: moving a byte from the key to the value is another record.
        leaf(1, b"", b"kv", [("type", b"JobSubmitted")]),
    ]
    assert len({base, *variants}) == len(variants) + 1


def test_a_chain_of_seals_follows_and_verifies() -> None:
    seals = chain(3, 2, 4)
    assert [follows(s, p) for s, p in zip(seals, [None, *seals[:-1]], strict=True)] == ["", "", ""]
    assert all(s.signed_by(KEYS) for s in seals)
    assert (seals[1].first_offset, seals[1].end_offset) == (3, 5)
    assert seals[2].prev_seal == seals[1].hash


def test_the_running_hash_commits_to_every_earlier_seal() -> None:
    one = chain(3, 2)
    other = next_seal(None, "p.", "job-events", 3, leaves(0, 3)[:2] + leaves(9, 1), "t", KEY)
    assert one[0].running_hash != other.running_hash
    assert follows(one[1], other) != ""


def test_a_seal_out_of_its_chain_says_why() -> None:
    first, second, third = chain(3, 2, 4)
    assert "names previous seal" in follows(third, first)
    assert "not there" in follows(second, None)
    moved = Seal(**{**second.__dict__, "first_offset": 4})
    assert "starts at offset 4" in follows(moved, first)
    lying = Seal(**{**second.__dict__, "running_hash": first.running_hash})
    assert "running hash" in follows(lying, first)


def test_a_changed_field_or_another_key_fails_the_signature() -> None:
    seal = chain(3)[0]
    assert seal.signed_by(KEYS)
    assert not Seal(**{**seal.__dict__, "end_offset": 4}).signed_by(KEYS)
    forged = seal.signed(OTHER)
    assert not forged.signed_by(KEYS)
    # Claiming the real key's id does not help a signature made with another key.
    assert not Seal(**{**forged.__dict__, "key_id": seal.key_id}).signed_by(KEYS)
    assert not Seal(**{**seal.__dict__, "signature": "not base64!"}).signed_by(KEYS)


def test_the_wire_form_round_trips_and_is_canonical() -> None:
    seal = chain(3)[0]
    data = seal.encode()
    assert Seal.decode(data) == seal
    assert data == json.dumps(json.loads(data), sort_keys=True, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda d: d.pop("partition"), "'partition'"),
        (lambda d: d.update(partition="3"), "'partition'"),
        (lambda d: d.update(version=2), "'version'"),
        (lambda d: d.update(leaves=[]), "'leaves'"),
        (lambda d: d.update(leaves=[[0, "xyz"]]), "'leaves'"),
        (lambda d: d.update(running_hash="00"), "'running_hash'"),
        (lambda d: d.update(extra=1), "fields"),
    ],
)
def test_a_record_that_is_not_a_seal_is_refused_naming_the_field(
    change: Callable[[dict[str, Any]], object], named: str
) -> None:
    doc = json.loads(chain(3)[0].encode())
    change(doc)
    with pytest.raises(SealError, match=named):
        Seal.decode(json.dumps(doc).encode())
    with pytest.raises(SealError, match="JSON"):
        Seal.decode(b"\x00\x01garbage")
