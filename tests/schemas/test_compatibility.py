"""The schema compatibility gate: Avro's own resolution rules, in both directions."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from schemas import avro as avro_schemas
from schemas.avro import compatibility_problems, current_schemas, stored_schemas
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
        ordered = [versions[v] for v in sorted(versions)]
        for older in ordered:
            for newer in [*ordered, current[name][1]]:
                assert compatibility_problems(older, newer) == [], name
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
