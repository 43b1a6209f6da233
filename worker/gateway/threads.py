"""The threads this replica serves: the runs of every thread of its thread index partitions, in start order, and the
streams that wait for a thread's next run or a run's end.

The index partition of a thread is its partition in the output topic's count, so the replica owning output partition
p owns the threads of index partition p (the gateway group co-assigns them). Each gained partition is read from its
beginning and every record folded in offset order (`worker.contract.ThreadRuns`): a thread's runs are ordered by the
offsets of their start records, the same on every replica. Records come only from the tail, synchronously; a watch
is woken without waiting, never a socket write.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Collection
from typing import Final

from worker.contract import INDEX_START, IndexedRun, ThreadRuns, read_index_record

__all__ = ["BYTES_PER_INDEXED_THREAD_RUN", "ThreadIndex", "ThreadWatch"]

# What one run the index holds costs (its IndexedRun, its id, its place in the thread's list and table), measured by
# tests/gateway/test_thread_index.py with 36-character run ids, ten runs a thread; docs/gateway.md counts with it.
BYTES_PER_INDEXED_THREAD_RUN: Final = 400


class ThreadWatch:
    """One stream's wait on a thread: woken by every change to the thread's runs (a new run, a run's end), or once
    its partition went to another replica (`moved`). At most one waiting future: an idle stream holds no more."""

    __slots__ = ("_waiter", "changed", "moved", "thread_id")

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self.changed = False
        self.moved = False
        self._waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        self.changed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def move(self) -> None:
        self.moved = True
        self.wake()

    async def wait(self, timeout_s: float) -> bool:
        """Until the thread changed since the last wait (True), or False after `timeout_s` without a change."""
        if not self.changed:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(asyncio.shield(self._waiter), timeout_s)
            except TimeoutError:
                return False
            finally:
                self._waiter = None
        self.changed = False
        return True


class _Thread(ThreadRuns):
    """A thread's runs, the partition they are read from, and the streams watching it."""

    __slots__ = ("partition", "watches")

    def __init__(self, thread_id: str, partition: int) -> None:
        super().__init__(thread_id)
        self.partition = partition
        self.watches: list[ThreadWatch] = []


class ThreadIndex:
    """Thread id -> its runs in start order, for the threads of this replica's index partitions; at most `max_runs`
    runs in all (beyond, the least recently changed threads no one watches are forgotten, and answered 404).
    `on_notice(seconds)` is told, for every start record read live, the time from the record's timestamp (when the
    worker's producer appended it) to now: how late the thread's streams learn of a new run."""

    def __init__(self, max_runs: int, *, on_notice: Callable[[float], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:  # fmt: skip
        self._threads: OrderedDict[str, _Thread] = OrderedDict()
        self._max_runs = max_runs
        self._runs = 0
        self._loading: set[int] = set()  # gained partitions not read to their end offsets yet
        self._on_notice = on_notice
        self._clock = clock
        self.forgotten = 0

    def __len__(self) -> int:
        return len(self._threads)

    @property
    def runs(self) -> int:
        """Runs kept, over every thread."""
        return self._runs

    def gained(self, partitions: Collection[int]) -> None:
        """These partitions are read from their beginning now; until `loaded`, a start record is no new run."""
        self._loading.update(partitions)

    def loaded(self, partitions: Collection[int]) -> None:
        """These partitions were read to the end offsets taken when they came: later start records are new runs."""
        self._loading.difference_update(partitions)

    def update(self, partition: int, offset: int, key: bytes | None, value: bytes | None, *, thread_id: str,
               timestamp_ms: int) -> None:  # fmt: skip
        """One committed index record of `partition`, in offset order (`thread_id` from its header)."""
        entry = read_index_record(key, value, thread_id)
        if entry is None:
            return
        thread = self._threads.get(thread_id)
        if thread is None:
            thread = self._threads[thread_id] = _Thread(thread_id, partition)
        else:
            self._threads.move_to_end(thread_id)
        known = len(thread.by_run)
        thread.apply(entry, offset)
        self._runs += len(thread.by_run) - known
        if entry.kind == INDEX_START and partition not in self._loading and self._on_notice is not None:
            self._on_notice(max(0.0, self._clock() - timestamp_ms / 1000))
        for watch in thread.watches:
            watch.wake()
        self._shed()

    def _shed(self) -> None:
        if self._runs <= self._max_runs:
            return
        for thread_id in [tid for tid, thread in self._threads.items() if not thread.watches]:
            gone = self._threads.pop(thread_id)
            self._runs -= len(gone.by_run)
            self.forgotten += 1
            if self._runs <= self._max_runs:
                return

    def release(self, partitions: Collection[int]) -> None:
        """These partitions went to another replica: their threads' watches are moved and the threads forgotten."""
        self._loading.difference_update(partitions)
        for thread_id in [tid for tid, thread in self._threads.items() if thread.partition in partitions]:
            gone = self._threads.pop(thread_id)
            self._runs -= len(gone.by_run)
            for watch in gone.watches:
                watch.move()

    def runs_of(self, thread_id: str) -> list[IndexedRun] | None:
        """The thread's runs in start order (the list grows as runs start), None when no record names it here."""
        thread = self._threads.get(thread_id)
        return None if thread is None else thread.runs

    def run(self, thread_id: str, run_id: str) -> IndexedRun | None:
        """A run of the thread, started or not, None when the index names no such run of it."""
        thread = self._threads.get(thread_id)
        return None if thread is None else thread.by_run.get(run_id)

    def watch(self, thread_id: str) -> ThreadWatch:
        """A watch on the thread's changes (`unwatch` it when done); moved at once when the thread is not kept here."""
        watch = ThreadWatch(thread_id)
        thread = self._threads.get(thread_id)
        if thread is None:
            watch.move()
        else:
            thread.watches.append(watch)
        return watch

    def unwatch(self, watch: ThreadWatch) -> None:
        thread = self._threads.get(watch.thread_id)
        if thread is not None and watch in thread.watches:
            thread.watches.remove(watch)
