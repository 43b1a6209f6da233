"""The run directory without a broker: its bounds (runs, cached display bytes), what it forgets first, and its
memory per run at the cap."""

from __future__ import annotations

import gc
import hashlib
import tracemalloc

from worker.gateway.directory import BYTES_PER_INDEXED_RUN, DisplayPointer, RunDirectory


def _run_id(n: int) -> str:
    return f"run-{hashlib.sha256(b'%d' % n).hexdigest()[:32]}"  # as the sample runs' copies: 36 characters


def _pointer(n: int, offset: int = 0) -> DisplayPointer:
    thread = f"thread_{hashlib.sha256(b'-%d' % n).hexdigest()[:32]}"
    return DisplayPointer(n % 3, 1_000_000 + 7 * n + offset, 40 + n % 300, 1_765_000_000_000 + n, thread)


def test_a_pointer_comes_back_as_it_was_given_and_a_tombstone_forgets_the_run() -> None:
    directory = RunDirectory(10, 1024)
    pointer = DisplayPointer(2, 2**40, -1, 1_765_000_000_123, "thread-é")
    directory.update("run-a", pointer, b"{}")
    assert directory.pointer("run-a") == pointer and directory.cached("run-a", pointer) == b"{}"
    assert directory.cached("run-a", pointer._replace(offset=2**40 + 1)) is None  # an older or newer record
    directory.update("run-a", pointer._replace(offset=2**40 + 5), None)
    assert directory.pointer("run-a") is None and len(directory) == 0 and directory.cached_bytes == 0


def test_the_directory_stays_at_its_cap_forgetting_the_least_recently_updated_runs() -> None:
    directory = RunDirectory(100, 0)
    for n in range(100):
        directory.update(_run_id(n), _pointer(n), b"{}")
    directory.update(_run_id(0), _pointer(0, offset=1), b"{}")  # run 0 is now the most recently updated
    for n in range(100, 1_000):
        directory.update(_run_id(n), _pointer(n), b"{}")
        assert len(directory) == 100
    assert directory.forgotten == 900
    kept = [n for n in range(1_000) if directory.pointer(_run_id(n)) is not None]
    assert kept == list(range(900, 1_000))  # run 0 went once 100 runs were updated after it


def test_cached_display_values_stay_within_their_bytes_and_a_value_over_them_is_not_cached() -> None:
    directory = RunDirectory(1_000, 10_000)
    for n in range(500):
        directory.update(_run_id(n), _pointer(n), b"x" * 1_000)
        assert directory.cached_bytes <= 10_000
    assert directory.cached_bytes == 10_000
    assert [n for n in range(500) if directory.cached(_run_id(n), _pointer(n))] == list(range(490, 500))
    directory.update("big", _pointer(1), b"x" * 10_001)
    assert directory.pointer("big") is not None and directory.cached("big", _pointer(1)) is None


def test_forgetting_partitions_drops_their_runs_and_cached_values() -> None:
    directory = RunDirectory(1_000, 1_000_000)
    for n in range(30):
        directory.update(_run_id(n), _pointer(n), b"x" * 10)
    directory.forget({0, 2})
    assert sorted(n for n in range(30) if directory.pointer(_run_id(n))) == [n for n in range(30) if n % 3 == 1]
    assert directory.cached_bytes == 100


def test_a_run_costs_at_most_its_stated_bytes_at_the_cap_after_many_runs_came_and_went() -> None:
    """The table at its cap, fed twice as many runs as it holds (ids made as a record's key is decoded, so the
    directory owns them): what it holds then, per run. 44,000 runs is where the table's slots are emptiest."""
    runs = 44_000
    gc.collect()
    tracemalloc.start()
    try:
        directory = RunDirectory(runs, 0)
        before = tracemalloc.get_traced_memory()[0]
        for n in range(2 * runs):
            directory.update(_run_id(n), _pointer(n), b"{}")
        gc.collect()
        per_run = (tracemalloc.get_traced_memory()[0] - before) / runs
    finally:
        tracemalloc.stop()
    assert len(directory) == runs
    assert per_run <= BYTES_PER_INDEXED_RUN, per_run
