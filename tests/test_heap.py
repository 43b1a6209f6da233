"""The collector's policy bounds what a collection short of a full one scans, whatever the heap holds, and the
gateway's periodic full collection frees the Kafka client's dropped fetches that policy would keep."""

from __future__ import annotations

import json
import subprocess
import sys

# A collection scans about 0.4 µs per container on the benchmarks' 2-core host (bench/README.md, the event loop's
# turns): 32,000 keep a young or middle collection near 13 ms, a quarter of a turn's 50 ms budget.
SCANNED_AT_MOST = 32_000

_SCRIPT = """
import gc, json
from worker._heap import freeze_heap

freeze_heap()
largest = [0, 0]  # containers in the generations a collection of generation 0, 1 scans


def seen(phase, info):
    generation = info["generation"]
    if phase == "start" and generation < 2:
        scanned = sum(len(gc.get_objects(g)) for g in range(generation + 1))
        largest[generation] = max(largest[generation], scanned)


gc.callbacks.append(seen)
kept = [[i] for i in range(300_000)]  # containers that stay, as the open runs of a partition do
print(json.dumps(largest))
"""


def test_young_and_middle_collections_scan_a_bounded_number_of_containers_while_the_heap_grows() -> None:
    out = subprocess.run([sys.executable, "-c", _SCRIPT], check=True, capture_output=True, text=True).stdout
    young, middle = json.loads(out)
    assert 0 < young <= SCANNED_AT_MOST
    assert 0 < middle <= SCANNED_AT_MOST


_DROPPED_FETCH = """
import asyncio, gc, json, weakref
from aiokafka.consumer.fetcher import PartitionRecords
from worker._heap import collect_cycles, freeze_heap


class Fetched:  # a fetch's records, holding its bytes
    def __init__(self):
        self.data = bytearray(1 << 20)

    def has_next(self):
        return False


freeze_heap()
fetched = Fetched()
dropped = weakref.ref(fetched)
fetch = PartitionRecords(None, fetched, [], 0, None, None, False, 0)
gc.collect(1)  # buffered in the consumer for a while: it lived through collections and is old now
del fetch, fetched  # the reader sought elsewhere: the fetch is dropped unread
churn = [[i] for i in range(100_000)]  # young and middle collections come and go
del churn
kept_by_the_thresholds = dropped() is not None


async def periods():
    stop = asyncio.Event()
    task = asyncio.create_task(collect_cycles(stop, every_s=0.01))
    await asyncio.sleep(0.1)
    stop.set()
    await task


asyncio.run(periods())
print(json.dumps([kept_by_the_thresholds, dropped() is None]))
"""


def test_a_dropped_fetch_outlives_the_thresholds_collections_and_not_the_periodic_full_one() -> None:
    out = subprocess.run([sys.executable, "-c", _DROPPED_FETCH], check=True, capture_output=True, text=True).stdout
    kept_by_the_thresholds, freed = json.loads(out)
    assert kept_by_the_thresholds  # why the gateway collects: its bytes would stay for hours
    assert freed
