"""``since`` and ``tail`` of the logs endpoint, on chunks as the read model holds them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.api.logs import select_chunks

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def chunk(seq: int, data: str, seconds: float, stream: str = "stdout") -> dict[str, object]:
    return {
        "attempt": 1,
        "stream": stream,
        "seq": seq,
        "first_line": 1 + seq * 10,
        "line_count": data.count("\n"),
        "data": data,
        "truncated": False,
        "occurred_at": T0 + timedelta(seconds=seconds),
    }


CHUNKS = [chunk(0, "a\nb\nc\n", 0), chunk(1, "d\ne\n", 1), chunk(2, "f\npartial", 2)]


def text(chunks: list[dict[str, object]]) -> str:
    return "".join(str(c["data"]) for c in chunks)


def test_tail_keeps_the_last_lines_and_cuts_the_first_chunk_served() -> None:
    served, cut = select_chunks(CHUNKS, None, 4)
    # The last four complete lines (c..f) and the line still being written.
    assert text(served) == "c\nd\ne\nf\npartial"
    assert served[0]["first_line"] == 3 and served[0]["line_count"] == 1
    assert cut == [] and CHUNKS[0]["data"] == "a\nb\nc\n", "the input is not modified"


def test_tail_zero_serves_nothing_and_marks_everything_cut() -> None:
    served, cut = select_chunks(CHUNKS, None, 0)
    assert served == [] and cut == CHUNKS


def test_a_tail_longer_than_the_log_serves_all_of_it() -> None:
    assert select_chunks(CHUNKS, None, 100) == (CHUNKS, [])


def test_since_cuts_what_was_read_before_and_combines_with_tail() -> None:
    served, cut = select_chunks(CHUNKS, T0 + timedelta(seconds=1), None)
    assert [c["seq"] for c in served] == [1, 2] and [c["seq"] for c in cut] == [0]
    served, cut = select_chunks(CHUNKS, T0 + timedelta(seconds=1), 1)
    assert text(served) == "f\npartial" and [c["seq"] for c in cut] == [0, 1]
