"""Avro schemas generated from the pydantic models, and the stored versions.

The pydantic models are the source of truth. Each top-level record (every event,
plus the envelope and the published views) gets one ``.avsc`` file per version
named ``<Record>.v<N>.avsc`` in the client distribution's package
(``client/gridledger_client/avro/``, the one copy: subscribers read the same files).
Stored versions are never edited or removed: readers resolve any stored writer schema
to the current one.

Run ``python -m schemas.avro --write`` after changing a model; it stores a new
version when the generated schema differs from the latest stored one, and
refuses changes that would break readers in either direction, as Avro's
schema resolution decides (:func:`compatibility_problems`).
"""

from __future__ import annotations

import json
import sys
import types
import typing
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType
from gridledger_client import wire
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from schemas.errors import SchemaRegistryError


def _stored_dir() -> Path:
    """The stored schemas: a source checkout's ``client/gridledger_client/avro`` (where
    ``--write`` must store a new version, never into an installed package), else the
    installed client's."""
    checkout = Path(__file__).resolve().parent.parent / "client" / "gridledger_client" / "avro"
    return checkout if checkout.is_dir() else wire.AVRO_DIR


AVRO_DIR: Path = _stored_dir()
NAMESPACE = "gridledger"
ENVELOPE_RECORD = "Envelope"

AvroSchema = dict[str, Any]


def _is_model(tp: object) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _avro_type(tp: Any, seen: set[str]) -> Any:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        # Validation rules (a string's characters, its length) do not change the wire type.
        return _avro_type(typing.get_args(tp)[0], seen)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) != 1:
            raise SchemaRegistryError(f"only Optional[X] unions are supported, got {tp}")
        return ["null", _avro_type(non_null[0], seen)]
    if origin is Literal:
        if not all(isinstance(a, str) for a in args):
            raise SchemaRegistryError(f"only string literals are supported, got {tp}")
        return "string"
    if origin is list:
        return {"type": "array", "items": _avro_type(args[0], seen)}
    if origin is dict:
        if _unannotated(args[0]) is not str:
            raise SchemaRegistryError(f"map keys must be strings, got {tp}")
        return {"type": "map", "values": _avro_type(args[1], seen)}
    if tp is str:
        return "string"
    if tp is bool:
        return "boolean"
    if tp is int:
        return "long"
    if tp is float:
        return "double"
    if tp is datetime:
        return {"type": "long", "logicalType": "timestamp-micros"}
    if _is_model(tp):
        full = f"{NAMESPACE}.{tp.__name__}"
        if full in seen:
            return full
        seen.add(full)
        return _record(tp, seen)
    raise SchemaRegistryError(f"no Avro mapping for {tp!r}")


def _unannotated(tp: Any) -> Any:
    return typing.get_args(tp)[0] if typing.get_origin(tp) is typing.Annotated else tp


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return {k: _json_default(v) for k, v in value}
    if isinstance(value, list):
        return [_json_default(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_default(v) for k, v in value.items()}
    if isinstance(value, datetime):
        raise SchemaRegistryError("datetime defaults are not supported")
    return value


def _field(name: str, info: Any, seen: set[str]) -> AvroSchema:
    avro_t = _avro_type(info.annotation, seen)
    field: AvroSchema = {"name": name, "type": avro_t}
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if extra.get("avro_default") is False:
        return field  # a generated default (a fresh uuid) has no place in a schema
    if info.default is not PydanticUndefined:
        default = _json_default(info.default)
    elif info.default_factory is not None:
        default = _json_default(info.default_factory())
    else:
        return field
    if isinstance(avro_t, list) and default is not None:
        # Avro: a union's default must match its first branch.
        field["type"] = [b for b in avro_t if b != "null"] + ["null"]
    field["default"] = default
    return field


def _record(model: type[BaseModel], seen: set[str], skip: tuple[str, ...] = ()) -> AvroSchema:
    return {
        "type": "record",
        "name": model.__name__,
        "namespace": NAMESPACE,
        "fields": [
            _field(name, info, seen)
            for name, info in model.model_fields.items()
            if name not in skip
        ],
    }


def envelope_schema() -> AvroSchema:
    """The envelope record shared by every event."""
    from schemas.events import ENVELOPE_FIELDS, Event

    record = _record(Event, set())
    record["name"] = ENVELOPE_RECORD
    record["fields"] = [f for f in record["fields"] if f["name"] in ENVELOPE_FIELDS]
    return record


def event_schema(model: type[BaseModel]) -> AvroSchema:
    """Schema of an event: ``envelope`` (the Envelope record) then the event's own fields."""
    from schemas.events import ENVELOPE_FIELDS

    seen = {f"{NAMESPACE}.{ENVELOPE_RECORD}"}
    record = _record(model, seen, skip=ENVELOPE_FIELDS)
    record["fields"].insert(0, {"name": "envelope", "type": envelope_schema()})
    return record


def record_schema(model: type[BaseModel]) -> AvroSchema:
    """Schema of a plain record (a published view such as JobView)."""
    return _record(model, set())


def current_schemas() -> dict[str, tuple[int, AvroSchema]]:
    """Every top-level record name -> (current version, generated schema)."""
    from schemas.events import ENVELOPE_VERSION, EVENT_TYPES
    from schemas.views import VIEW_TYPES

    out: dict[str, tuple[int, AvroSchema]] = {
        ENVELOPE_RECORD: (ENVELOPE_VERSION, envelope_schema())
    }
    for name, cls in EVENT_TYPES.items():
        out[name] = (cls.SCHEMA_VERSION, event_schema(cls))
    for name, view in VIEW_TYPES.items():
        out[name] = (getattr(view, "SCHEMA_VERSION", 1), record_schema(view))
    return out


def stored_schemas() -> dict[str, dict[int, AvroSchema]]:
    """Every stored schema: record name -> version -> schema."""
    return wire.load_schemas(AVRO_DIR)


READERS_FIRST: dict[tuple[str, int], tuple[str, ...]] = {
    ("AttemptScheduled", 6): ("spec",),
}
"""The one exception to "both directions", record version by record version and field by
field: a version that made a required field nullable, which a reader still on an older
schema of the record cannot read when it is null. New readers read every old record as
always; for these fields alone, readers update before the writer does
(docs/wire-format.md, "How schemas change"). AttemptScheduled v6: the spec stored once,
null on job-events (docs/architecture.md, "The spec, stored once")."""


def readers_first(name: str, old_version: int, new_version: int) -> tuple[str, ...]:
    """The fields :data:`READERS_FIRST` waives between two versions of record ``name``."""
    return tuple(
        field
        for (record, version), fields in READERS_FIRST.items()
        if record == name and old_version < version <= new_version
        for field in fields
    )


def compatibility_problems(
    old: AvroSchema, new: AvroSchema, waived: tuple[str, ...] = ()
) -> list[str]:
    """Why ``new`` and ``old`` cannot read each other's data (empty when both directions work).

    Both directions, because both happen: a new consumer reads payloads an old
    producer wrote (the topics keep them, replay reads from offset 0), and an old
    consumer still running during a deploy reads what a new producer writes. The
    check is Avro's own schema-resolution rules (``avro.compatibility``), so a type
    change (``long`` to ``string``), a field renamed inside an array or map of
    records, or a union that lost a branch are caught wherever they are nested.
    ``waived``: top-level fields (:func:`readers_first`) whose change old readers are not
    asked to read; every other field still is, and new readers read all of the old.
    """
    problems = []
    old_parsed, new_parsed = _parse_avro(old), _parse_avro(new)
    for direction, reader, writer in (
        ("new readers cannot read old data", new_parsed, old_parsed),
        ("old readers cannot read new data", old_parsed, _parse_avro(_as_in(new, old, waived))),
    ):
        result = ReaderWriterCompatibilityChecker().get_compatibility(reader, writer)
        if result.compatibility is SchemaCompatibilityType.incompatible:
            kinds = ", ".join(sorted({k.value for k in result.incompatibilities}))
            where = ", ".join(sorted(result.locations))
            what = "; ".join(sorted(result.messages))
            problems.append(f"{direction}: {kinds} at {where} ({what})")
    return problems


def _as_in(new: AvroSchema, old: AvroSchema, fields: tuple[str, ...]) -> AvroSchema:
    """``new`` with its top-level ``fields`` as ``old`` has them."""
    if not fields:
        return new
    before = {f["name"]: f for f in old.get("fields", [])}
    return {
        **new,
        "fields": [
            before[f["name"]] if f["name"] in fields and f["name"] in before else f
            for f in new["fields"]
        ],
    }


def _parse_avro(schema: AvroSchema) -> avro.schema.Schema:
    return avro.schema.parse(json.dumps(schema))


def write_new_versions() -> list[str]:
    """Store a new version of every record whose generated schema changed."""
    stored = stored_schemas()
    written = []
    AVRO_DIR.mkdir(exist_ok=True)
    for name, (version, schema) in current_schemas().items():
        versions = stored.get(name, {})
        if version in versions:
            if versions[version] != schema:
                raise SchemaRegistryError(
                    f"{name}: the model changed but SCHEMA_VERSION is still {version}; "
                    f"bump {name}.SCHEMA_VERSION to {max(versions) + 1}"
                )
            continue
        # Every stored version, not just the latest: replay reads the topics from offset 0.
        for old_version, old in sorted(versions.items()):
            problems = compatibility_problems(
                old, schema, readers_first(name, old_version, version)
            )
            if problems:
                raise SchemaRegistryError(
                    f"{name} v{version} is incompatible with stored v{old_version}: "
                    f"{'; '.join(problems)}. Add fields with defaults instead of changing or "
                    "renaming them"
                )
        path = AVRO_DIR / f"{name}.v{version}.avsc"
        path.write_text(json.dumps(schema, indent=2) + "\n")
        written.append(str(path))
    return written


if __name__ == "__main__":
    if "--write" in sys.argv:
        for line in write_new_versions():
            print("stored", line)
    else:
        print(json.dumps({k: v[1] for k, v in current_schemas().items()}, indent=2))
