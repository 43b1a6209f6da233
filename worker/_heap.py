"""How the worker's processes use the cyclic garbage collector: what is loaded at start is frozen, never scanned
again, and a collection short of a full one scans a bounded number of containers, so it pauses the event loop
briefly (about 0.4 µs per container on a slow host) however many open runs a partition holds; full collections
stay as rare as before (one per 105 million containers allocated and not freed), since records are processed by
the thousand and reference counting frees their containers."""

from __future__ import annotations

import gc

__all__ = ["freeze_heap"]

# A collection once 10,000 containers were allocated and not freed: a young one, or every third time a middle one,
# scanning the young and what the two young ones before it kept: about 30,000 containers whatever the heap holds.
# A full one, which scans every container of the open runs, in place of every 3,500th middle one (when those
# promoted since the last are a quarter of those it kept): once per 105 million, as with (50_000, 20, 100).
_THRESHOLDS = (10_000, 1, 3_500)


def freeze_heap(*, collect: bool = True) -> None:
    """Freeze what is alive now (after a collection, with `collect`) and bound what later collections scan."""
    if collect:
        gc.collect()
    gc.freeze()
    gc.set_threshold(*_THRESHOLDS)
