"""The schema compatibility gate: Avro's own resolution rules, in both directions."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from schemas import avro as avro_schemas
from schemas.avro import (
    compatibility_problems,
    current_schemas,
    readers_first,
    stored_schemas,
)
from schemas.errors import SchemaRegistryError

BASE: dict[str, Any] = {
    "type": "record",
    "name": "Thing",
    "namespace": "gridledger",
    "fields": [
        {"name": "count", "type": "long"},
        {
            "name": "items",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Item",
                    "namespace": "gridledger",
                    "fields": [
                        {"name": "path", "type": "string"},
                        {"name": "bytes", "type": "long", "default": 0},
                    ],
                },
            },
            "default": [],
        },
    ],
}


def changed(edit: Any) -> dict[str, Any]:
    schema = copy.deepcopy(BASE)
    edit(schema)
    return schema


def test_a_long_changed_to_a_string_is_rejected() -> None:
    def to_string(s: dict[str, Any]) -> None:
        s["fields"][0]["type"] = "string"

    problems = compatibility_problems(BASE, changed(to_string))
    assert problems, "long -> string must be refused"
    assert any("type_mismatch" in p and "/fields/0/type" in p for p in problems), problems


def test_a_field_renamed_inside_an_array_of_records_is_rejected() -> None:
    def rename(s: dict[str, Any]) -> None:
        s["fields"][1]["type"]["items"]["fields"][0]["name"] = "location"

    problems = compatibility_problems(BASE, changed(rename))
    assert any("reader_field_missing_default_value" in p for p in problems), problems
    assert any("/fields/1/type/items/fields/0" in p for p in problems), problems


def test_a_field_added_with_a_default_is_accepted_and_without_one_is_not() -> None:
    def add(default: bool) -> Any:
        def edit(s: dict[str, Any]) -> None:
            field: dict[str, Any] = {"name": "note", "type": "string"}
            if default:
                field["default"] = ""
            s["fields"].append(field)

        return edit

    assert compatibility_problems(BASE, changed(add(default=True))) == []
    problems = compatibility_problems(BASE, changed(add(default=False)))
    assert problems and "new readers cannot read old data" in problems[0]


def test_a_required_field_removed_breaks_old_readers() -> None:
    def drop(s: dict[str, Any]) -> None:
        del s["fields"][0]

    problems = compatibility_problems(BASE, changed(drop))
    assert problems and all("old readers cannot read new data" in p for p in problems)


def test_todays_stored_history_passes_pair_by_pair_and_against_the_current_model() -> None:
    current = current_schemas()
    checked = 0
    for name, versions in stored_schemas().items():
        ordered = [(v, versions[v]) for v in sorted(versions)]
        for old_version, older in ordered:
            # Each pair once, older first: the check reads both directions.
            for new_version, newer in [
                *ordered[ordered.index((old_version, older)) :],
                current[name],
            ]:
                waived = readers_first(name, old_version, new_version)
                assert compatibility_problems(older, newer, waived) == [], name
                checked += 1
    assert checked > len(current)


def test_write_new_versions_refuses_an_incompatible_model(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    name, (version, schema) = next(iter(current_schemas().items()))
    broken = copy.deepcopy(schema)
    first = broken["fields"][0]
    first["type"] = "boolean" if first["type"] != "boolean" else "long"
    (tmp_path / f"{name}.v{version}.avsc").write_text(json.dumps(schema))
    monkeypatch.setattr(avro_schemas, "AVRO_DIR", tmp_path)
    monkeypatch.setattr(avro_schemas, "current_schemas", lambda: {name: (version + 1, broken)})
    with pytest.raises(SchemaRegistryError, match=f"incompatible with stored v{version}"):
        avro_schemas.write_new_versions()
    assert not (tmp_path / f"{name}.v{version + 1}.avsc").exists()


def test_the_readers_first_waiver_covers_its_field_alone() -> None:
    """AttemptScheduled v6 made ``spec`` nullable (stored once, on JobSubmitted): old
    readers are excused that field only. Another required field made nullable the same
    way is still refused, and new readers read every old record."""
    v5 = stored_schemas()["AttemptScheduled"][5]
    v6 = current_schemas()["AttemptScheduled"][1]
    assert readers_first("AttemptScheduled", 5, 6) == ("spec",)
    assert readers_first("AttemptScheduled", 6, 7) == ()
    assert compatibility_problems(v5, v6, ("spec",)) == []
    unwaived = compatibility_problems(v5, v6)
    assert unwaived and all(p.startswith("old readers cannot read new data") for p in unwaived)

    def node_nullable(s: dict[str, Any]) -> None:
        field = next(f for f in s["fields"] if f["name"] == "node_id")
        field["type"], field["default"] = ["null", "string"], None

    problems = compatibility_problems(v5, changed_from(v6, node_nullable), ("spec",))
    assert any("old readers cannot read new data" in p for p in problems), problems


def changed_from(schema: dict[str, Any], edit: Any) -> dict[str, Any]:
    out = copy.deepcopy(schema)
    edit(out)
    return out
