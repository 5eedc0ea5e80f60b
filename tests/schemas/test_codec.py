"""The codec: every model round-trips through Avro; old payloads decode with new readers."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from schemas import codec
from schemas.avro import AVRO_DIR, compatibility_problems, current_schemas, stored_schemas
from schemas.errors import EventDecodeError
from schemas.events import EVENT_TYPES, ProcessExited
from tests.schemas.samples import T0, all_samples


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
            problems = compatibility_problems(schema, current[name][1])
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
