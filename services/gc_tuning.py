"""The garbage collector's settings for processes that hold many decoded models.

The sink keeps thousands of jobs' decoded histories in memory between batches, and a
rebuild holds every model it folds. Such processes allocate far more long-lived
objects than reference cycles, and Python's default thresholds (700, 10, 10) make
the collector re-scan the survivors over and over: in the sink it took about a third
of the CPU per record (``python -m bench.sink``: ~20 us of ~70 us per record); in a
rebuild of 65,000 records it doubled the CPU of reading and decoding (1.5 s against
0.7 s; 0.8 s with these settings). The processors worker holds each job's folded
state and history the same way (``services/cli/processors.py``).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

GC_THRESHOLDS = (50_000, 20, 100)
"""Collect the young generation every 50,000 net allocations instead of 700, and the
older ones correspondingly rarely: the cycles asyncio and the clients leave behind are
still collected (switching the collector off would leak them)."""


@contextlib.contextmanager
def tuned_gc() -> Iterator[None]:
    """Freeze what exists (imports, settings) and collect rarely; restore both afterwards.

    Process-wide: use it once around a service's or a benchmark's main loop, not nested.
    """
    before = gc.get_threshold()
    gc.freeze()  # objects from before the loop are never scanned again during it
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
