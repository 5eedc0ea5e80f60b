"""What the CloudEvents headers cost each appended event: ``python -m bench.headers [EVENTS]``.

Over the pipeline benchmark's simulated histories (:func:`bench.load.histories`), in one
process: the CPU of ``schemas.codec.headers`` with its CloudEvents part against the routing
headers alone (type, fingerprint, content type), the CPU of ``codec.encode`` for scale,
and the header bytes each record carries. Best of 5 passes; needs no stack.
"""

from __future__ import annotations

import sys
import timeit
from collections.abc import Callable

from bench.load import histories
from schemas import codec
from schemas.events import Event


def _per_event_us(fn: Callable[[Event], object], events: list[Event]) -> float:
    best = min(timeit.repeat(lambda: [fn(e) for e in events], number=1, repeat=5))
    return best / len(events) * 1e6


def _routing_only(event: Event) -> list[tuple[str, bytes]]:
    """The headers before the CloudEvents ones were added: type, fingerprint, content type."""
    common, _ = codec._record_headers(codec.record_name(event))  # noqa: SLF001 - the baseline
    return list(common)


def main(count: int = 20_000) -> None:
    """Print the figures for at least ``count`` events."""
    events = [e for history in histories(count) for e in history]
    with_ce = _per_event_us(codec.headers, events)
    routing = _per_event_us(_routing_only, events)
    encode = _per_event_us(codec.encode, events)
    size = sum(len(k) + len(v) for e in events for k, v in codec.headers(e)) / len(events)
    routing_size = sum(len(k) + len(v) for e in events for k, v in _routing_only(e)) / len(events)
    print(f"{len(events)} events")
    print(
        f"codec.headers: {with_ce:.2f} us/event, routing headers alone {routing:.2f} us/event "
        f"(CloudEvents: +{with_ce - routing:.2f}); codec.encode {encode:.2f} us/event"
    )
    print(f"header bytes per record: {size:.0f}, of which CloudEvents {size - routing_size:.0f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)
