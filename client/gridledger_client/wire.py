"""The wire format of gridledger's records, and the stored schemas (fastavro only).

A record's value is Avro single-object encoded: the two bytes ``C3 01``, the 8-byte
little-endian CRC-64-AVRO fingerprint of the writer schema's parsing canonical form,
then the Avro binary body. Every version of every record's schema ever written is
stored under ``avro/`` beside this file (``<Record>.v<N>.avsc``); this folder is the
one copy, which the server reads too. A reader resolves whichever stored version wrote
a record to the newest stored one, so old records decode with new code.

The record type and the fingerprint also travel as Kafka headers, and every event
carries its CloudEvents attributes in binary content mode (``ce_*`` headers, see
:mod:`gridledger_client.cloudevents`).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import fastavro

AVRO_DIR = Path(__file__).parent / "avro"
"""The stored schemas: ``<Record>.v<N>.avsc``, never edited or removed."""

MAGIC = b"\xc3\x01"
HEADER_TYPE = "gridledger-type"
HEADER_FINGERPRINT = "gridledger-schema-fingerprint"
HEADER_CONTENT_TYPE = "content-type"
CONTENT_TYPE = b"application/vnd.apache.avro+binary;encoding=single-object"

CE_SPECVERSION = b"1.0"
CE_TYPE_PREFIX = "gridledger."
"""``ce_type`` is the Avro record's full name: ``gridledger.JobFailed``."""
CE_SOURCE_PREFIX = "/gridledger"
"""``ce_source`` is this plus the event's ``producer``: ``/gridledger/agent/gpu-1``."""

ENVELOPE = "envelope"
"""The field of an event's record that holds the fields every event shares."""

_EMPTY64 = 0xC15D213AA4D7A795


def _crc64_table() -> list[int]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_EMPTY64 & -(fp & 1))
        table.append(fp)
    return table


_TABLE = _crc64_table()


def crc64_avro(data: bytes) -> int:
    """CRC-64-AVRO (Rabin) fingerprint as defined by the Avro specification."""
    fp = _EMPTY64
    for byte in data:
        fp = (fp >> 8) ^ _TABLE[(fp ^ byte) & 0xFF]
    return fp


def fingerprint(schema: dict[str, Any]) -> int:
    """The schema's identity on the wire: the CRC-64-AVRO of its parsing canonical form."""
    canonical = fastavro.schema.to_parsing_canonical_form(schema)
    return crc64_avro(canonical.encode())


def load_schemas(directory: Path = AVRO_DIR) -> dict[str, dict[int, dict[str, Any]]]:
    """Every schema stored in ``directory``: record name -> version -> schema."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted(directory.glob("*.v*.avsc")):
        name, _, version = path.name.removesuffix(".avsc").rpartition(".v")
        out.setdefault(name, {})[int(version)] = json.loads(path.read_text())
    return out


def flatten(record: dict[str, Any]) -> dict[str, Any]:
    """An event's fields in one level: the envelope's (``event_id``, ``job_id``, ...)
    beside its own; a view's record unchanged."""
    envelope = record.pop(ENVELOPE, None)
    return {**envelope, **record} if isinstance(envelope, dict) else record


class DecodeError(ValueError):
    """A payload that is not a record of a stored schema (the message says which rule)."""


@dataclass(frozen=True)
class StoredSchema:
    """One stored version of a record's schema, parsed, with its wire fingerprint."""

    name: str
    version: int
    parsed: Any
    fingerprint: int

    @classmethod
    def of(cls, name: str, version: int, schema: dict[str, Any]) -> StoredSchema:
        """Parse one schema and compute its fingerprint."""
        return cls(name, version, fastavro.parse_schema(schema), fingerprint(schema))


@dataclass(frozen=True)
class Registry:
    """Writers by fingerprint (every stored version) and the reader of each record (its
    newest stored version)."""

    writers: dict[int, StoredSchema]
    readers: dict[str, StoredSchema]

    @classmethod
    def load(cls, directory: Path = AVRO_DIR) -> Registry:
        """The registry of the schemas stored in ``directory``."""
        writers: dict[int, StoredSchema] = {}
        readers: dict[str, StoredSchema] = {}
        for name, versions in load_schemas(directory).items():
            for version, schema in sorted(versions.items()):
                stored = StoredSchema.of(name, version, schema)
                writers[stored.fingerprint] = readers[name] = stored
        return cls(writers, readers)

    def writer(self, data: bytes) -> StoredSchema:
        """The stored schema that wrote ``data``; a DecodeError for a bad frame or an unknown
        fingerprint."""
        if not isinstance(data, bytes | bytearray | memoryview) or len(data) < 10:
            raise DecodeError(f"payload of {len(data or b'')} bytes is too short for a record")
        if bytes(data[:2]) != MAGIC:
            raise DecodeError(
                f"payload starts with {bytes(data[:2]).hex()}, not the Avro single-object "
                "marker c301"
            )
        writer = self.writers.get(int.from_bytes(data[2:10], "little"))
        if writer is None:
            raise DecodeError(
                f"unknown writer schema fingerprint {bytes(data[2:10]).hex()}: the payload was "
                "written by a schema this version of gridledger-client does not store"
            )
        return writer

    def read(self, data: bytes, writer: StoredSchema, reader: StoredSchema) -> dict[str, Any]:
        """The Avro body of ``data`` as ``reader`` sees it; a DecodeError when it is corrupt."""
        # Resolution costs about a third of the read; skip it when the writer is the reader.
        resolve = None if reader.fingerprint == writer.fingerprint else reader.parsed
        try:
            record = fastavro.schemaless_reader(io.BytesIO(data[10:]), writer.parsed, resolve)
        except Exception as exc:
            raise DecodeError(f"corrupt {writer.name} v{writer.version} body: {exc!r}") from exc
        if not isinstance(record, dict):
            raise DecodeError(f"{writer.name}: decoded body is not a record")
        return record

    def decode(self, data: bytes) -> tuple[str, dict[str, Any]]:
        """``(record type, fields)`` of a payload, resolved to the newest stored schema; an
        event's envelope fields are flattened beside its own (:func:`flatten`)."""
        data = bytes(data)
        writer = self.writer(data)
        return writer.name, flatten(self.read(data, writer, self.readers[writer.name]))


@cache
def registry() -> Registry:
    """The registry of the schemas shipped with this package (loaded once)."""
    return Registry.load()


def decode(data: bytes) -> tuple[str, dict[str, Any]]:
    """``(record type, fields)`` of any record gridledger writes (:meth:`Registry.decode`)."""
    return registry().decode(data)
