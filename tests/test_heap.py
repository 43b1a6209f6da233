"""The collector's policy bounds what a collection short of a full one scans, whatever the heap holds."""

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
