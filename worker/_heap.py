"""How the worker's processes use the cyclic garbage collector: what is loaded at start is frozen, never scanned
again, and a collection short of a full one scans a bounded number of containers, so it pauses the event loop
briefly (about 0.4 µs per container on a slow host) however many open runs a partition holds; full collections
stay as rare as before (one per 105 million containers allocated and not freed), since records are processed by
the thousand and reference counting frees their containers; the gateway adds a full collection every few seconds
(collect_cycles), for the garbage that reference counting cannot free."""

from __future__ import annotations

import asyncio
import contextlib
import gc

__all__ = ["collect_cycles", "freeze_heap"]

# A collection once 10,000 containers were allocated and not freed: a young one, or every third time a middle one,
# scanning the young and what the two young ones before it kept: about 30,000 containers whatever the heap holds.
# A full one, which scans every container of the open runs, in place of every 3,500th middle one (when those
# promoted since the last are a quarter of those it kept): once per 105 million, as with (50_000, 20, 100).
_THRESHOLDS = (10_000, 1, 3_500)

# The gateway's full collections, whatever the thresholds: its heap holds few containers (its runs' recent events
# and its tables are mostly bytes), so one costs milliseconds of CPU (about 8 ms for 68,000 containers), and the
# dropped fetches it frees come by the ten megabytes a minute under load.
FULL_COLLECTION_EVERY_S = 30.0


def freeze_heap(*, collect: bool = True) -> None:
    """Freeze what is alive now (after a collection, with `collect`) and bound what later collections scan."""
    if collect:
        gc.collect()
    gc.freeze()
    gc.set_threshold(*_THRESHOLDS)


async def collect_cycles(stop: asyncio.Event, every_s: float = FULL_COLLECTION_EVERY_S) -> None:
    """A full collection every `every_s` seconds until `stop`: the Kafka client's fetch that a seek or a bounded read
    leaves unread is a reference cycle holding its fetched bytes (up to a partition's fetch size), which the rare
    full collections of the thresholds above would keep for hours, so a reader that seeks often holds no more than
    one period of them."""
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
        if stop.is_set():
            return
        gc.collect()
