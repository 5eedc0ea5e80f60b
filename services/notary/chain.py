"""Seals: what the notary signs about one partition's records, and how anyone checks it.

Pure (listed in tests/test_import_rule.py): bytes in, digests, seals and verdicts out;
no broker, no store, no clock (``sealed_at`` is passed in). The byte layouts are the
contract in docs/wire-format.md ("Seals"), so a tool in another language can check a
seal without gridledger.

- A record's **leaf** is SHA-256 over its exact bytes as the broker holds them: its
  timestamp, key, value and headers (:func:`leaf`). Its offset is not in the leaf but
  beside it in the seal, so a deleted record does not change the leaves of the ones
  after it and the verifier can say which record went where.
- A seal's **running hash** continues the previous seal's over each (offset, leaf):
  one value that commits to the partition's whole sealed history.
- A seal's **hash** is SHA-256 over its canonical JSON without the signature; it names
  the previous seal's hash (``prev_seal``), so the seals of a partition form a chain,
  and its Ed25519 signature is over that hash.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

SEAL_VERSION = 1
LEAF_TAG = b"gridledger-record-v1\x00"
RUNNING_TAG = b"gridledger-running-v1\x00"

Header = tuple[str, bytes | None]


class SealError(ValueError):
    """A seal record that is not a seal: the message says which field and why."""


def _field(data: bytes | None) -> bytes:
    """Length-prefixed bytes; ``None`` (Kafka's null key, value or header) is length -1, so
    it differs from empty bytes."""
    if data is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(data)) + data


def leaf(
    timestamp_ms: int, key: bytes | None, value: bytes | None, headers: Iterable[Header]
) -> str:
    """The SHA-256 (hex) of one record's timestamp, key, value and headers, in order."""
    hdrs = list(headers or ())
    parts = [LEAF_TAG, struct.pack(">q", timestamp_ms), _field(key), _field(value)]
    parts.append(struct.pack(">i", len(hdrs)))
    for name, data in hdrs:
        parts += [_field(name.encode("utf-8", "surrogateescape")), _field(data)]
    return hashlib.sha256(b"".join(parts)).hexdigest()


def leaf_of(raw: Any) -> str:
    """:func:`leaf` of a consumed record (anything with timestamp, key, value, headers)."""
    headers = [(name, None if data is None else bytes(data)) for name, data in raw.headers or ()]
    return leaf(int(raw.timestamp), raw.key, raw.value, headers)


def running(previous: str, leaves: Iterable[tuple[int, str]]) -> str:
    """The running hash after ``leaves`` ((offset, leaf) in order), from ``previous`` (hex,
    empty before the first seal)."""
    state = bytes.fromhex(previous)
    for offset, digest in leaves:
        state = hashlib.sha256(
            RUNNING_TAG + state + struct.pack(">q", offset) + bytes.fromhex(digest)
        ).digest()
    return state.hex()


def key_id(public: Ed25519PublicKey) -> str:
    """A public key's id: the first 16 hex digits of SHA-256 over its 32 raw bytes."""
    return hashlib.sha256(public.public_bytes(Encoding.Raw, PublicFormat.Raw)).hexdigest()[:16]


@dataclass(frozen=True)
class Seal:
    """The notary's signed statement about records ``first_offset`` up to (not including)
    ``end_offset`` of one partition: each one's leaf, the running hash after them, the
    previous seal's hash."""

    prefix: str
    """The topic prefix of the installation sealed (its topics are ``prefix + topic``)."""
    topic: str
    """The topic's suffix, e.g. ``job-events``."""
    partition: int
    first_offset: int
    end_offset: int
    leaves: tuple[tuple[int, str], ...]
    running_hash: str
    prev_seal: str
    """The previous seal's :attr:`hash` of this partition; empty for the first seal."""
    sealed_at: str
    key_id: str
    signature: str = ""
    """Base64 Ed25519 signature over the bytes of :attr:`hash`; empty until signed."""
    version: int = SEAL_VERSION

    @property
    def body(self) -> dict[str, Any]:
        """Every field but the signature, as JSON values."""
        fields = asdict(self)
        fields.pop("signature")
        fields["leaves"] = [list(pair) for pair in self.leaves]
        return fields

    @property
    def hash(self) -> str:
        """SHA-256 (hex) of the canonical JSON of :attr:`body`: what the next seal names and
        what the signature covers."""
        return hashlib.sha256(canonical(self.body)).hexdigest()

    @property
    def where(self) -> str:
        """``job-events/3 [120, 620)``: the partition and the offsets, for reports."""
        return f"{self.topic}/{self.partition} [{self.first_offset}, {self.end_offset})"

    def signed(self, key: Ed25519PrivateKey) -> Seal:
        """This seal signed with ``key`` (its :attr:`key_id` set to the key's)."""
        unsigned = replace(self, key_id=key_id(key.public_key()), signature="")
        signature = key.sign(bytes.fromhex(unsigned.hash))
        return replace(unsigned, signature=base64.b64encode(signature).decode())

    def signed_by(self, keys: dict[str, Ed25519PublicKey]) -> bool:
        """Whether the signature verifies with the key of :attr:`key_id` among ``keys``."""
        public = keys.get(self.key_id)
        if public is None or not self.signature:
            return False
        try:
            public.verify(base64.b64decode(self.signature, validate=True), bytes.fromhex(self.hash))
        except (InvalidSignature, ValueError):
            return False
        return True

    def encode(self) -> bytes:
        """The record value on ``ledger-seals`` and the object in the store: canonical JSON."""
        return canonical({**self.body, "signature": self.signature})

    @classmethod
    def decode(cls, data: bytes | None) -> Seal:
        """A seal from its JSON; :class:`SealError` naming the field for anything else."""
        try:
            doc = json.loads(data or b"")
        except (ValueError, UnicodeDecodeError) as exc:
            raise SealError(f"not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise SealError("not a JSON object")
        fields: dict[str, Any] = {}
        for name, kind in _FIELDS.items():
            value = doc.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise SealError(f"field {name!r} is missing or not {kind.__name__}")
            fields[name] = value
        if fields["version"] != SEAL_VERSION:
            raise SealError(f"field 'version' is {fields['version']}, this reader knows 1")
        leaves = []
        for item in doc.get("leaves") or ():
            if not (
                isinstance(item, list)
                and len(item) == 2
                and isinstance(item[0], int)
                and _is_digest(item[1])
            ):
                raise SealError("field 'leaves' holds an entry that is not [offset, sha256]")
            leaves.append((item[0], item[1]))
        if not leaves:
            raise SealError("field 'leaves' is missing or empty")
        for name in ("running_hash",):
            if not _is_digest(fields[name]):
                raise SealError(f"field {name!r} is not a SHA-256 in hex")
        seal = cls(**fields, leaves=tuple(leaves))
        if canonical({**seal.body, "signature": seal.signature}) != canonical(doc):
            raise SealError("has fields a version 1 seal does not have")
        return seal


_FIELDS: dict[str, type] = {
    "prefix": str,
    "topic": str,
    "partition": int,
    "first_offset": int,
    "end_offset": int,
    "running_hash": str,
    "prev_seal": str,
    "sealed_at": str,
    "key_id": str,
    "signature": str,
    "version": int,
}


def _is_digest(value: object) -> bool:
    return (
        isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
    )


def canonical(value: Any) -> bytes:
    """JSON with sorted keys, no spaces, ASCII only: for a seal's integers and ASCII
    strings the same bytes as RFC 8785's canonical JSON."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def next_seal(
    previous: Seal | None,
    prefix: str,
    topic: str,
    partition: int,
    leaves: Sequence[tuple[int, str]],
    sealed_at: str,
    key: Ed25519PrivateKey,
) -> Seal:
    """The signed seal that follows ``previous`` (None: the partition's first) over
    ``leaves``, the records after it in offset order."""
    first = previous.end_offset if previous is not None else leaves[0][0]
    return Seal(
        prefix=prefix,
        topic=topic,
        partition=partition,
        first_offset=first,
        end_offset=leaves[-1][0] + 1,
        leaves=tuple(leaves),
        running_hash=running(previous.running_hash if previous else "", leaves),
        prev_seal=previous.hash if previous else "",
        sealed_at=sealed_at,
        key_id="",
    ).signed(key)


def follows(seal: Seal, previous: Seal | None) -> str:
    """Why ``seal`` does not continue the chain after ``previous`` (None: it should be the
    first); empty when it does."""
    if previous is None:
        if seal.prev_seal:
            return f"names a previous seal {seal.prev_seal[:16]}… that is not there"
    elif seal.prev_seal != previous.hash:
        return (
            f"names previous seal {seal.prev_seal[:16] or '(none)'}…, but the seal before it "
            f"is {previous.hash[:16]}… ({previous.where})"
        )
    elif seal.first_offset != previous.end_offset:
        return (
            f"starts at offset {seal.first_offset}, the seal before it ends at "
            f"{previous.end_offset}"
        )
    offsets = [offset for offset, _ in seal.leaves]
    if offsets != sorted(set(offsets)) or not (
        seal.first_offset <= offsets[0] and offsets[-1] < seal.end_offset
    ):
        return "its leaves' offsets are not increasing inside its range"
    if seal.running_hash != running(previous.running_hash if previous else "", seal.leaves):
        return "its running hash does not follow from the previous one and its leaves"
    return ""
