"""How the worker's processes use the cyclic garbage collector: what is loaded at start is frozen, never scanned
again, and collections are rare, since records are processed by the thousand and reference counting frees their
containers (a default-tuned collector took about 15% of a live worker's CPU)."""

from __future__ import annotations

import gc

__all__ = ["freeze_heap"]

# A young collection once 50,000 containers were allocated and not freed (instead of 700); older ones as rarely.
_THRESHOLDS = (50_000, 20, 100)


def freeze_heap(*, collect: bool = True) -> None:
    """Freeze what is alive now (after a collection, with `collect`) and make collections rare."""
    if collect:
        gc.collect()
    gc.freeze()
    gc.set_threshold(*_THRESHOLDS)
