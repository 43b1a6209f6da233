"""The runs the gateway can find: each run's latest display record, where it is, and (most recent first) its value."""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Collection
from typing import Final, NamedTuple

__all__ = ["BYTES_PER_INDEXED_RUN", "DisplayPointer", "RunDirectory"]

# What one run the directory can find costs, kept at the cap (its id, its packed pointer, the ordered table's share
# as it stands after many runs came and went), measured by tests/gateway/test_directory.py with a 36-character run
# id and thread id as the worker's sample runs have; docs/sizing.md counts the gateway's memory with it.
BYTES_PER_INDEXED_RUN: Final = 360
_PACKED: Final = struct.Struct("<Iqqq")  # partition, offset, seq, timestamp; the thread id's UTF-8 follows


class DisplayPointer(NamedTuple):
    """Where a run's latest display record is (output and display partitions share the number), the agui-seq of
    the last event it covers, the record's timestamp and the run's thread."""

    partition: int
    offset: int
    seq: int
    timestamp_ms: int
    thread_id: str


class RunDirectory:
    """Run id -> latest display pointer, at most `max_runs` (least recently updated forgotten first), and the latest
    display values within `cache_bytes`. Updates come only from the display topic, in offset order. A pointer is
    kept packed in one bytes object: a million runs is what this table is for."""

    __slots__ = ("_cache", "_cache_bytes", "_cached", "_max_runs", "_pointers", "forgotten")

    def __init__(self, max_runs: int, cache_bytes: int) -> None:
        self._pointers: OrderedDict[str, bytes] = OrderedDict()
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._max_runs = max_runs
        self._cache_bytes = cache_bytes
        self._cached = 0
        self.forgotten = 0

    def __len__(self) -> int:
        return len(self._pointers)

    @property
    def cached_bytes(self) -> int:
        """Bytes of display values kept."""
        return self._cached

    def update(self, run_id: str, pointer: DisplayPointer, value: bytes | None) -> None:
        """A newer display record of `run_id`; a tombstone (`value` None) forgets the run."""
        pointers = self._pointers
        old = self._cache.pop(run_id, None)
        if old is not None:
            self._cached -= len(old)
        if value is None:
            pointers.pop(run_id, None)
            return
        if run_id in pointers:
            pointers.move_to_end(run_id)
        pointers[run_id] = _pack(pointer)
        while len(pointers) > self._max_runs:
            gone, _ = pointers.popitem(last=False)
            dropped = self._cache.pop(gone, None)
            if dropped is not None:
                self._cached -= len(dropped)
            self.forgotten += 1
        if len(value) <= self._cache_bytes:
            self._cache[run_id] = value
            self._cached += len(value)
            while self._cached > self._cache_bytes:
                _, evicted = self._cache.popitem(last=False)
                self._cached -= len(evicted)

    def forget(self, partitions: Collection[int]) -> None:
        """Forget the runs of these partitions (another replica serves them now)."""
        unpack = _PACKED.unpack_from
        for run_id in [rid for rid, packed in self._pointers.items() if unpack(packed)[0] in partitions]:
            del self._pointers[run_id]
            value = self._cache.pop(run_id, None)
            if value is not None:
                self._cached -= len(value)

    def pointer(self, run_id: str) -> DisplayPointer | None:
        """The run's latest display pointer, None when the gateway does not know the run."""
        packed = self._pointers.get(run_id)
        if packed is None:
            return None
        partition, offset, seq, timestamp_ms = _PACKED.unpack_from(packed)
        return DisplayPointer(partition, offset, seq, timestamp_ms, packed[_PACKED.size :].decode())

    def cached(self, run_id: str, pointer: DisplayPointer) -> bytes | None:
        """The value of the display record `pointer` names when it is still the cached one."""
        if self._pointers.get(run_id) != _pack(pointer):
            return None
        return self._cache.get(run_id)


def _pack(pointer: DisplayPointer) -> bytes:
    partition, offset, seq, timestamp_ms, thread_id = pointer
    return _PACKED.pack(partition, offset, seq, timestamp_ms) + thread_id.encode()
