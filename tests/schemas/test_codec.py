"""The codec: every model round-trips through Avro; old payloads decode with new readers."""

from __future__ import annotations

import io
import json
from urllib.parse import unquote

import fastavro
import pytest
from cloudevents.core.bindings.kafka import KafkaMessage, from_binary
from cloudevents.core.formats.json import JSONFormat
from pydantic import BaseModel

from schemas import codec
from schemas.avro import (
    AVRO_DIR,
    compatibility_problems,
    current_schemas,
    readers_first,
    stored_schemas,
)
from schemas.errors import EventDecodeError
from schemas.events import ENVELOPE_FIELDS, EVENT_TYPES, Event, JobSubmitted, ProcessExited
from services.simulator.histories import job_history
from services.simulator.mix import JobMix
from tests.schemas.samples import SPEC, T0, all_samples, sample


@pytest.mark.parametrize("obj", all_samples(), ids=lambda o: type(o).__name__)
def test_every_model_round_trips_through_avro(obj):
    data = codec.encode(obj)
    assert data[:2] == b"\xc3\x01"
    assert codec.decode(data) == obj


@pytest.mark.parametrize("obj", all_samples(), ids=lambda o: type(o).__name__)
def test_headers_name_the_type_and_the_writer_fingerprint(obj):
    data = codec.encode(obj)
    hdrs = dict(codec.headers(obj))
    assert hdrs[codec.HEADER_TYPE].decode() == type(obj).__name__
    assert bytes.fromhex(hdrs[codec.HEADER_FINGERPRINT].decode()) == data[2:10]


@pytest.mark.parametrize("obj", all_samples(), ids=lambda o: type(o).__name__)
def test_every_event_is_a_cloudevent_in_binary_mode_and_a_view_is_none(obj):
    """The SDK's Kafka binding reads the headers; odd producer names stay a valid URI."""
    hdrs = dict(codec.headers(obj))
    if not isinstance(obj, Event):
        assert not [name for name in hdrs if name.startswith("ce_")]
        return
    message = KafkaMessage(headers=hdrs, key=obj.key.encode(), value=codec.encode(obj))
    cloudevent = from_binary(message, JSONFormat())
    assert cloudevent.get_id() == obj.event_id
    assert cloudevent.get_type() == f"gridledger.{type(obj).__name__}"
    assert cloudevent.get_time() == obj.occurred_at
    assert cloudevent.get_subject() == (obj.key or None)
    source = cloudevent.get_source()
    assert " " not in source and unquote(source) == "/gridledger/" + obj.producer
    data = cloudevent.get_data()
    assert isinstance(data, bytes) and codec.decode(data) == obj


def test_every_event_type_has_a_sample_and_a_stored_schema():
    stored = stored_schemas()
    for name in EVENT_TYPES:
        assert name in stored, f"{name} has no .avsc under {AVRO_DIR}"


def test_stored_schemas_equal_the_generated_ones():
    assert codec.check_stored_schemas() == []


def test_every_stored_version_can_be_read_by_the_current_reader():
    current = current_schemas()
    for name, versions in stored_schemas().items():
        for version, schema in versions.items():
            latest, reader = current[name]
            problems = compatibility_problems(schema, reader, readers_first(name, version, latest))
            assert problems == [], f"{name} v{version}: {problems}"


def test_fingerprint_is_crc64_avro_of_the_canonical_form():
    schema = json.loads((AVRO_DIR / "Envelope.v1.avsc").read_text())
    canonical = fastavro.schema.to_parsing_canonical_form(schema)
    ours = codec.fingerprint(schema).to_bytes(8, "little").hex()
    assert ours == fastavro.schema.fingerprint(canonical, "CRC-64-AVRO")
    # test vector from the Avro specification: the schema "null"
    assert codec.crc64_avro(b'"null"') == 0x63DD24E7CC258F8A


def test_a_v1_process_exited_payload_decodes_with_the_v2_reader():
    v1 = json.loads((AVRO_DIR / "ProcessExited.v1.avsc").read_text())
    assert ProcessExited.SCHEMA_VERSION == 2
    assert "memory_limit_bytes" not in {f["name"] for f in v1["fields"]}
    record = {
        "envelope": {
            "event_id": "e-old",
            "job_id": "job-old",
            "attempt": 1,
            "type": "ProcessExited",
            "occurred_at": T0,
            "producer": "agent/old",
            "causation_id": None,
            "schema_version": 1,
        },
        "exit_code": 137,
        "signal": 9,
        "oom_killed": True,
        "runtime_s": 12.5,
        "last_log_lines": ["Killed"],
        "runtime_exceeded": False,
    }
    buf = io.BytesIO()
    buf.write(codec.MAGIC + codec.fingerprint(v1).to_bytes(8, "little"))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(v1), record)

    event = codec.decode_event(buf.getvalue())

    assert isinstance(event, ProcessExited)
    assert event.schema_version == 1
    assert event.exit_code == 137 and event.oom_killed is True
    assert event.memory_limit_bytes == 0  # the v2 default: unknown


def _same(trusted: BaseModel, validated: BaseModel) -> None:
    """Equal as models, and alike in everything pydantic keeps besides the values."""
    assert trusted == validated
    assert type(trusted) is type(validated)
    assert trusted.model_dump() == validated.model_dump()
    assert trusted.model_fields_set == validated.model_fields_set
    assert codec.encode(trusted) == codec.encode(validated)


@pytest.mark.parametrize("obj", all_samples(), ids=lambda o: type(o).__name__)
def test_the_trusted_decode_gives_the_validated_model(obj):
    data = codec.encode(obj)
    trusted = codec.decode(data, trusted=True)
    _same(trusted, codec.decode(data))
    assert trusted == obj


def test_the_trusted_decode_gives_the_validated_models_of_simulated_histories():
    # Defaults, empty lists and None in optional records, which the full samples never have.
    mix = JobMix.parse("success=40,user_error=20,oom=20,node_lost=20", duration="1-3")
    events = [e for i in range(40) for e in job_history(f"job-{i:03d}", T0, mix)]
    assert len({type(e) for e in events}) >= 10
    for event in events:
        data = codec.encode(event)
        _same(codec.decode(data, trusted=True), codec.decode(data))


def test_the_trusted_decode_resolves_an_old_writer_schema_like_the_validated_one():
    old = sample(ProcessExited).model_dump()
    v1 = json.loads((AVRO_DIR / "ProcessExited.v1.avsc").read_text())
    record = {"envelope": {k: old.pop(k) for k in ENVELOPE_FIELDS}, **old}
    record["envelope"]["schema_version"] = 1
    buf = io.BytesIO()
    buf.write(codec.MAGIC + codec.fingerprint(v1).to_bytes(8, "little"))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(v1), record)
    _same(codec.decode(buf.getvalue(), trusted=True), codec.decode(buf.getvalue()))


def test_only_the_untrusted_decode_checks_the_models_rules():
    # A body Avro accepts but the model does not: an image reference with spaces, written
    # by something other than codec.encode. From a client it is refused, naming the field.
    record = sample(JobSubmitted).model_dump()
    record["spec"]["image"] = "Not An Image"
    body = {"envelope": {k: record.pop(k) for k in ENVELOPE_FIELDS}, **record}
    writer = codec.registry().readers["JobSubmitted"]
    buf = io.BytesIO()
    buf.write(codec.MAGIC + writer.fingerprint.to_bytes(8, "little"))
    fastavro.schemaless_writer(buf, writer.parsed, body)

    with pytest.raises(EventDecodeError, match="spec.image"):
        codec.decode(buf.getvalue())
    trusted = codec.decode(buf.getvalue(), trusted=True)
    assert isinstance(trusted, JobSubmitted) and trusted.spec.image == "Not An Image"
    assert trusted.spec.resources == SPEC.resources


@pytest.mark.parametrize(
    "payload, message",
    [
        (b"", "too short"),
        (b"{'json': 'not avro'}", "not the Avro single-object marker"),
        (b"\xc3\x01" + b"\x00" * 8 + b"body", "unknown writer schema fingerprint"),
    ],
)
def test_undecodable_payloads_raise_event_decode_error(payload, message):
    with pytest.raises(EventDecodeError, match=message):
        codec.decode(payload)


def test_a_truncated_body_raises_event_decode_error():
    data = codec.encode(all_samples()[0])
    with pytest.raises(EventDecodeError):
        codec.decode(data[:14])
