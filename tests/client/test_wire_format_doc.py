"""The decoder docs/wire-format.md shows non-Python readers decodes every record we write."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from schemas import codec
from tests.schemas.samples import all_samples

DOC = Path(__file__).resolve().parents[2] / "docs" / "wire-format.md"


def test_the_documented_decoder_reads_every_record_type() -> None:
    (snippet,) = re.findall(r"```python\n(import io.*?)```", DOC.read_text(), re.S)
    namespace: dict[str, Any] = {}
    exec(snippet, namespace)  # our own documentation
    for obj in all_samples():
        name, record = namespace["decode"](codec.encode(obj))
        assert name == type(obj).__name__
        if "envelope" in record:
            assert record["envelope"]["event_id"] == obj.event_id  # type: ignore[attr-defined]
