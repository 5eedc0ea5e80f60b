"""The position a log reader resumes after: one text format, parsed strictly."""

from __future__ import annotations

import pytest

from schemas.log_position import format_position, has, parse_position


def test_a_position_reads_back_as_written_and_keeps_the_highest_seq() -> None:
    position = parse_position("1:stdout:41,1:stderr:3,2:system:0,1:stdout:7")
    assert position == {(1, "stdout"): 41, (1, "stderr"): 3, (2, "system"): 0}
    assert parse_position(format_position(position)) == position
    assert has(position, 1, "stdout", 41) and not has(position, 1, "stdout", 42)
    assert not has(position, 3, "stdout", 0)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("1:stdin:4", "'1:stdin:4' is not ATTEMPT:STREAM:SEQ"),
        ("1:stdout:-1", "is not ATTEMPT:STREAM:SEQ"),
        ("1:stdout:4\x00", "'1:stdout:4\\x00'"),
        (",".join(["1:stdout:1"] * 65), "65 items; at most 64"),
    ],
)
def test_a_wrong_position_says_which_item_and_why(text: str, says: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_position(text)
    assert says in str(raised.value)
