"""The one codec: events and views to bytes plus Kafka headers, and back.

Wire format: Avro single-object encoding — the two bytes ``C3 01``, the 8-byte
little-endian CRC-64-AVRO fingerprint of the writer schema's canonical form,
then the Avro binary body. Any stored schema version can be the writer; the
reader is always the current model's schema, so old payloads decode with new
code. The event type and the fingerprint also travel as Kafka headers so other
services can route without decoding, and every event carries the CloudEvents
attributes in binary content mode (``ce_*`` headers, the Kafka protocol binding;
the value stays the Avro record): :func:`headers` is the one place a record's
headers are made, for the ledger's appends and the agent's spool alike.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any
from urllib.parse import quote

import fastavro
from gridledger_client import wire
from pydantic import BaseModel, ValidationError

from schemas.avro import current_schemas, stored_schemas
from schemas.errors import EventDecodeError, EventEncodeError, SchemaRegistryError
from schemas.events import ENVELOPE_FIELDS, EVENT_TYPES, Event
from schemas.trusted import builder
from schemas.views import VIEW_TYPES

# The wire's constants and its fingerprint are the client's (one definition for both).
MAGIC = wire.MAGIC
HEADER_TYPE = wire.HEADER_TYPE
HEADER_FINGERPRINT = wire.HEADER_FINGERPRINT
HEADER_CONTENT_TYPE = wire.HEADER_CONTENT_TYPE
CONTENT_TYPE = wire.CONTENT_TYPE
CE_SPECVERSION = wire.CE_SPECVERSION
CE_TYPE_PREFIX = wire.CE_TYPE_PREFIX
CE_SOURCE_PREFIX = wire.CE_SOURCE_PREFIX
crc64_avro = wire.crc64_avro
fingerprint = wire.fingerprint


@cache
def registry() -> wire.Registry:
    """Every stored writer schema by fingerprint, and each record's reader: the schema of
    its current model."""
    writers: dict[int, wire.StoredSchema] = {}
    readers: dict[str, wire.StoredSchema] = {}
    for name, versions in stored_schemas().items():
        for version, schema in versions.items():
            parsed = wire.StoredSchema.of(name, version, schema)
            writers[parsed.fingerprint] = parsed
    for name, (version, schema) in current_schemas().items():
        parsed = wire.StoredSchema.of(name, version, schema)
        readers[name] = parsed
        writers.setdefault(parsed.fingerprint, parsed)
    return wire.Registry(writers, readers)


@cache
def _sources() -> dict[str, dict[int, dict[str, Any]]]:
    """Every schema a writer may have used, as stored: record name -> version -> schema."""
    out = {name: dict(versions) for name, versions in stored_schemas().items()}
    for name, (version, schema) in current_schemas().items():
        out.setdefault(name, {}).setdefault(version, schema)
    return out


def fingerprint_hex(fp: int) -> str:
    """A fingerprint as the ``gridledger-schema-fingerprint`` header and exports write it:
    its 8 little-endian bytes in hex (as they follow ``C3 01`` in a payload)."""
    return fp.to_bytes(8, "little").hex()


def writer_of(data: bytes) -> tuple[int, str, int, dict[str, Any]] | None:
    """(fingerprint, record name, version, schema) of the schema that wrote ``data``, or
    None when the payload is no single-object record of a schema this build stores."""
    if len(data) < 10 or data[:2] != MAGIC:
        return None
    fp = int.from_bytes(data[2:10], "little")
    found = registry().writers.get(fp)
    if found is None:
        return None
    return fp, found.name, found.version, _sources()[found.name][found.version]


def check_stored_schemas() -> list[str]:
    """Records whose current model has no identical stored ``.avsc`` (should be empty)."""
    stored = stored_schemas()
    problems = []
    for name, (version, schema) in current_schemas().items():
        if stored.get(name, {}).get(version) != schema:
            problems.append(
                f"{name} v{version} is not stored as generated; "
                "run `python -m schemas.avro --write`"
            )
    return problems


@dataclass(frozen=True, slots=True)
class Datum:
    """A view's Avro datum made straight from the state it was folded in
    (``projections.fold.JobState.datum``): encoded as it is, with no model and no
    ``model_dump`` in between. Encodes, and carries headers, as the view ``record`` would."""

    record: str
    """The view's record name (``JobView``)."""
    job_id: str
    value: dict[str, Any]


Encodable = BaseModel | Datum
"""What :func:`encode` and :func:`headers` take."""


def _to_avro(obj: Encodable) -> dict[str, Any]:
    if isinstance(obj, Datum):
        return obj.value
    data = obj.model_dump()
    if isinstance(obj, Event):
        envelope = {name: data.pop(name) for name in ENVELOPE_FIELDS}
        return {"envelope": envelope, **data}
    return data


def record_name(obj: Encodable) -> str:
    """The record ``obj`` is encoded as: its model's name (a :class:`Datum` names it)."""
    name = obj.record if isinstance(obj, Datum) else type(obj).__name__
    if name not in EVENT_TYPES and name not in VIEW_TYPES:
        raise EventEncodeError(f"{name} is not a registered event or view")
    return name


def encode(obj: Encodable) -> bytes:
    """Single-object Avro encoding of an event or a view."""
    schema = registry().readers[record_name(obj)]
    buf = io.BytesIO()
    buf.write(MAGIC)
    buf.write(schema.fingerprint.to_bytes(8, "little"))
    try:
        fastavro.schemaless_writer(buf, schema.parsed, _to_avro(obj))
    except (ValueError, TypeError) as exc:
        raise EventEncodeError(f"cannot encode {schema.name}: {exc}") from exc
    return buf.getvalue()


@cache
def _record_headers(name: str) -> tuple[list[tuple[str, bytes]], bytes]:
    """What every record of one type carries (its type, fingerprint and content type), and
    its ``ce_type``."""
    schema = registry().readers[name]
    return [
        (HEADER_TYPE, schema.name.encode()),
        (HEADER_FINGERPRINT, fingerprint_hex(schema.fingerprint).encode()),
        (HEADER_CONTENT_TYPE, CONTENT_TYPE),
    ], (CE_TYPE_PREFIX + schema.name).encode()


def type_header(headers: Iterable[tuple[str, bytes]] | None) -> str | None:
    """The record type a record's headers name (:data:`HEADER_TYPE`), readable without
    decoding it; None without one (decode it and let the codec judge)."""
    for name, value in headers or ():
        if name == HEADER_TYPE:
            return bytes(value).decode(errors="replace")
    return None


@lru_cache(maxsize=4096)
def _ce_source(producer: str) -> bytes:
    """A URI-reference naming who wrote the event (producers are few: cached)."""
    return (CE_SOURCE_PREFIX + ("/" + quote(producer, safe="/") if producer else "")).encode()


def headers(obj: Encodable) -> list[tuple[str, bytes]]:
    """Kafka headers: the record type and writer-schema fingerprint, readable without
    decoding; for an event also its CloudEvents attributes in binary content mode
    (``ce_specversion``, ``ce_id`` = event id, ``ce_source``, ``ce_type``, ``ce_time`` =
    ``occurred_at``, ``ce_subject`` = the key: the job id, or the node id of a node event).
    Views (on the compacted topics) are no events and carry no ``ce_*`` header."""
    common, ce_type = _record_headers(record_name(obj))
    if not isinstance(obj, Event):
        return list(common)
    time = obj.occurred_at.isoformat()
    hdrs = [
        *common,
        ("ce_specversion", CE_SPECVERSION),
        ("ce_id", obj.event_id.encode()),
        ("ce_source", _ce_source(obj.producer)),
        ("ce_type", ce_type),
        ("ce_time", (time[:-6] + "Z" if time.endswith("+00:00") else time).encode()),
    ]
    if obj.key:  # a CloudEvents subject, when present, is never empty
        hdrs.append(("ce_subject", obj.key.encode()))
    return hdrs


def cloudevent(event: Event) -> dict[str, Any]:
    """The event as a CloudEvents JSON object (structured content mode, as webhooks carry
    it): the attributes :func:`headers` gives the record, ``datacontenttype``
    ``application/json`` and ``data``, the event as JSON."""
    attributes = {name[3:]: value.decode() for name, value in headers(event) if name[:3] == "ce_"}
    return {
        **attributes,
        "datacontenttype": "application/json",
        "data": event.model_dump(mode="json"),
    }


def decode(data: bytes, *, trusted: bool = False) -> BaseModel:
    """Decode any registered event or view, resolving its writer schema to the current one.

    ``trusted``: the payload was read from one of gridledger's own topics, which only
    :func:`encode` writes, from validated models. The model is then built from the
    decoded record without pydantic validation (:mod:`schemas.trusted`); the result is
    the same model. Payloads from anywhere else (a client, a file, a test) validate.
    An unknown writer schema or a corrupt body is an error either way.
    """
    reg = registry()
    try:
        writer = reg.writer(data)
        reader = reg.readers.get(writer.name)
        if reader is None:
            raise SchemaRegistryError(f"record {writer.name} has stored schemas but no model")
        record = reg.read(bytes(data), writer, reader)
    except wire.DecodeError as exc:
        raise EventDecodeError(str(exc)) from exc
    return _from_avro(writer.name, record, trusted)


def _from_avro(name: str, record: dict[str, Any], trusted: bool = False) -> BaseModel:
    record = wire.flatten(record)
    model: type[BaseModel] = EVENT_TYPES[name] if name in EVENT_TYPES else VIEW_TYPES[name]
    if trusted:
        return builder(model)(record)
    try:
        return model.model_validate(record)
    except ValidationError as exc:
        raise EventDecodeError(f"{name} does not validate: {exc}") from exc


def decode_written(data: bytes, name: str, version: int, schema: dict[str, Any]) -> Event:
    """Decode an event written with ``schema`` (one this build may not store: an exported
    file's), resolved to the current model's schema and validated. Any problem with the
    schema or the body is an :class:`EventDecodeError`."""
    reg = registry()
    reader = reg.readers.get(name)
    if reader is None or name not in EVENT_TYPES:
        raise EventDecodeError(f"{name!r} is no event this build knows")
    try:
        writer = wire.StoredSchema.of(name, version, schema)
    except Exception as exc:  # fastavro raises many types for a malformed schema
        raise EventDecodeError(f"not an Avro schema of {name}: {exc!r}") from exc
    if bytes(data[2:10]) != writer.fingerprint.to_bytes(8, "little"):
        raise EventDecodeError(f"the payload was not written with this {name} schema")
    try:
        record = reg.read(bytes(data), writer, reader)
    except wire.DecodeError as exc:
        raise EventDecodeError(str(exc)) from exc
    event = _from_avro(name, record)
    assert isinstance(event, Event)  # name is one of EVENT_TYPES
    return event


def decode_event(data: bytes, *, trusted: bool = False) -> Event:
    """Decode bytes that must hold an event (not a view); ``trusted`` as for :func:`decode`."""
    obj = decode(data, trusted=trusted)
    if not isinstance(obj, Event):
        raise EventDecodeError(f"expected an event, got a {type(obj).__name__}")
    return obj


def to_json(obj: BaseModel) -> str:
    """Readable JSON for humans and logs (not the wire format)."""
    return json.dumps(obj.model_dump(mode="json"), sort_keys=True)
