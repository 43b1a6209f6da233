"""A live partition's transactions over time (steps 1 to 7 of the commit protocol in `transaction.py`): processed
records in, commits out, a commit never stopping consumption.

The pipeline holds finished records only: it never sees the partition's state. Its owner, the partition task,
hands it each processed record (`Processed`) with the replay start after it, and a `CheckpointCut` that the pipeline
calls when it fixes a commit's offset; every call into the pipeline that may fix one (`add`, `tick`, `close`) is
the task's own, so the checkpoint is cut in the task, with the state exactly at that offset.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer

from worker.client import ProducerView, observe_producer
from worker.live.publishing import Destinations, Sent, put_outcome
from worker.live.transaction import Transaction
from worker.ops import Metrics
from worker.settings import Settings
from worker.stream import Outcome, encode_replay_metadata

__all__ = ["Changelog", "CheckpointCut", "CommitPipeline", "CommitPolicy"]

Changelog = list[tuple[bytes, bytes | None]]
# (offset, final) -> changelog records, None: no checkpoint; the owner may let other partitions run while it cuts
CheckpointCut = Callable[[int, bool], Awaitable[Changelog | None]]
OnFailure = Callable[[BaseException], None]  # must not wait: the partition's own task contains the failure
_SLICE_S = 0.005  # the longest the pipeline puts records into a transaction before other partitions get the loop


class CommitPolicy:
    """When a partition's transaction commits and when it checkpoints (steps 4 and 6): decided from the settings,
    the transaction's age and size, and the last checkpoint, never from what the records hold."""

    __slots__ = ("changelog", "checkpoint_s", "interval_s", "max_records")

    def __init__(self, settings: Settings) -> None:
        self.interval_s = settings.commit_interval_ms / 1000
        self.max_records = settings.max_records_per_transaction
        self.checkpoint_s = settings.checkpoint_interval_ms / 1000
        self.changelog = settings.changelog

    def interval_start(self, consumed_at: float, late_s: float) -> float:
        """When a record's commit interval starts: at its source timestamp, so the delay before consumption counts,
        but at most half an interval before it was consumed; a record over an interval late (a partition catching
        up) starts it on consumption, so catching up keeps full transactions."""
        if 0.0 < late_s <= self.interval_s:
            return consumed_at - min(late_s, self.interval_s / 2)
        return consumed_at

    def earliest_start(self, consumed_at: float, now_s: float, timestamps_ms: Iterable[int]) -> float:
        """The earliest `interval_start` of records consumed at `consumed_at` with source timestamps `timestamps_ms`,
        `now_s` being the wall-clock time then: that of the latest record at most an interval late, since the start
        only moves earlier as lateness grows up to an interval."""
        interval, latest = self.interval_s, 0.0
        for timestamp_ms in timestamps_ms:
            late_s = now_s - timestamp_ms / 1000
            if latest < late_s <= interval:
                latest = late_s
        return self.interval_start(consumed_at, latest)

    def due(self, txn: Transaction) -> bool:
        """Whether the open transaction has used its commit interval."""
        return txn.is_open and txn.age_s >= self.interval_s

    def due_in(self, txn: Transaction) -> float | None:
        """Seconds until the open transaction is due; None when nothing is open."""
        return max(0.0, self.interval_s - txn.age_s) if txn.is_open else None

    def full(self, records: int) -> bool:
        """Whether a transaction holding `records` source records commits now."""
        return records >= self.max_records

    def checkpoint_due(self, checkpointed: int, offset: int, *, final: bool, checkpointed_at: float) -> bool:
        """Whether a commit at `offset` writes the state to the changelog, the last checkpoint being at offset
        `checkpointed` (-1: the changelog does not hold the state) and taken at `checkpointed_at`: when the state
        changed since and the interval passed, or the changelog does not hold it, or the partition stops being live
        here."""
        if not self.changelog or checkpointed == offset:
            return False
        return final or checkpointed < 0 or time.monotonic() - checkpointed_at >= self.checkpoint_s


class CommitPipeline:
    """The transactions of one live partition: `add` processed records, `tick` after each fetched batch and when
    woken, `close` on stop, `abort` or `discard` on failure. `on_failure` hears the partition's first failure,
    `on_sent` how many added records went into a transaction, and `on_end` the end of each commit; none may wait.

    While a commit runs, added records wait and go into the next transaction; when none runs, nothing waits after
    `tick` and every record below `next_offset` is in the open transaction.
    """

    __slots__ = (
        "_by_type", "_checkpoint", "_committed", "_destinations", "_failed", "_label", "_metrics", "_next_offset",
        "_on_end", "_on_failure", "_on_sent", "_policy", "_replay_from", "_sent", "_task", "_tp", "_txn", "_waiting",
        "_waiting_records",
    )

    def __init__(
        self, txn: Transaction, committed: int, *, policy: CommitPolicy, destinations: Callable[[], Destinations],
        metrics: Metrics, checkpoint: CheckpointCut, on_failure: OnFailure, on_sent: Callable[[int], None],
        on_end: Callable[[], None],
    ) -> None:  # fmt: skip
        self._txn = txn
        self._next_offset = committed
        self._replay_from = committed
        self._committed = committed
        # (outcomes of consecutive records, their source timestamps, their commit interval's earliest start)
        self._waiting: list[tuple[Sequence[Outcome], list[int], float]] = []
        self._waiting_records = 0
        self._failed = False
        self._tp = txn.tp
        self._label = (self._tp.topic, str(self._tp.partition))
        self._policy = policy
        self._destinations = destinations
        self._metrics = metrics
        self._checkpoint = checkpoint
        self._on_failure = on_failure
        self._on_sent = on_sent
        self._on_end = on_end
        self._task: asyncio.Task[None] | None = None
        self._sent = Sent()
        self._by_type: dict[str, Any] = {}  # output_events_total children by event type

    @property
    def committed(self) -> int:
        """The source offset the partition last committed."""
        return self._committed

    @property
    def next_offset(self) -> int:
        """The next source offset to process: every record below it was added."""
        return self._next_offset

    @property
    def producer(self) -> AIOKafkaProducer:
        return self._txn.producer

    def room(self) -> int:
        """How many more source records `add` takes before the open transaction is full (at least 1); unbounded
        while a commit runs, since what is added then waits for the next transaction."""
        if self._task is not None:
            return sys.maxsize
        return max(1, self._policy.max_records - self._waiting_records - self._txn.records)

    async def add(
        self, outcomes: Sequence[Outcome], timestamps_ms: list[int], *, next_offset: int, replay_from: int
    ) -> bool:
        """Take the outcomes of consecutive processed source records, their source timestamps, the offset after the
        last (`next_offset`) and the replay start there (`replay_from`); their commit interval starts as the policy
        says. When they fill the transaction and no commit runs, put what waits into it and start its commit. False
        once the partition failed."""
        if not outcomes:
            return not self._failed
        now, late = time.monotonic(), time.time()  # source timestamps are wall-clock milliseconds
        self._waiting.append((outcomes, timestamps_ms, self._policy.earliest_start(now, late, timestamps_ms)))
        self._waiting_records += len(outcomes)
        self._next_offset = next_offset
        self._replay_from = replay_from
        if self._task is None and self._policy.full(self._waiting_records + self._txn.records):
            await self._start()
        return not self._failed

    async def tick(self) -> float | None:
        """After a fetched batch, and when woken: put what waits into the open transaction, ship the batches of
        partitions new to it and join the group early (steps 2 and 3), and start the commit once it is due (step 4).
        A commit in flight takes what waits itself. Returns the seconds until the next tick is due; None when no
        time is awaited (nothing open, a commit in flight, which calls `on_end` when it ends, or a failure)."""
        if self._task is not None or self._failed or not await self._put_waiting():
            return None
        txn = self._txn
        try:
            await txn.ship_new(later=self._destinations().index_topic)  # index batches go at the commit (step 7)
            if txn.joins_group:  # every record below next_offset is in the transaction now
                txn.join_group(self._next_offset, self._metadata())
        except Exception as exc:
            self._fail(exc)
            return None
        if self._policy.due(txn):
            await self._start()
            return None
        return self._policy.due_in(txn)

    async def close(self) -> bool:
        """Wait for the commit in flight, then commit what is open with the state checkpointed (on revocation, halt
        and shutdown). False when the partition failed."""
        task = self._task
        if task is not None:
            await asyncio.wait([task])
        if self._failed or not await self._put_waiting():
            return False
        txn, offset = self._txn, self._next_offset
        changes = await self._checkpoint(offset, True)
        if not txn.is_open:
            if changes is None:
                return True
            try:
                await txn.begin()
            except Exception as exc:
                self._fail(exc)
                return False
        return await self._commit(offset, self._metadata(), changes)

    async def abort(self, wait_s: float, *, at_broker: bool) -> list[ProducerView]:
        """End the failed partition's transactions: cancel the commit in flight (waiting `wait_s` for its end), then,
        when `at_broker`, abort the open transaction at the broker. Returns the producer as observed before the
        abort and after it: an abort forgets why the transaction became abortable."""
        task = self._cancel()
        if task is not None:
            await asyncio.wait([task], timeout=wait_s)
        producer = self._txn.producer
        views = [observe_producer(producer)]
        if at_broker:
            await self._txn.abort()  # only the broker's answer to our epoch shows whether we are fenced
            views.append(observe_producer(producer))
        return views

    def discard(self) -> AIOKafkaProducer:
        """Forget the transactions without waiting; returns the producer, to be closed in the background (its open
        transaction left to the next producer of the transactional id to abort)."""
        self._cancel()
        self._txn.discard()
        return self._txn.producer

    def _cancel(self) -> asyncio.Task[None] | None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
        return task

    def _fail(self, exc: BaseException) -> None:
        if not self._failed:
            self._failed = True
            self._waiting = []
            self._waiting_records = 0
            self._on_failure(exc)

    def _metadata(self) -> str:
        return encode_replay_metadata(self._replay_from)

    async def _put_waiting(self) -> bool:
        """Put the waiting records into the open transaction (opening one); False if the partition failed."""
        txn, sent, destinations = self._txn, self._sent, self._destinations()
        try:
            while self._waiting and not self._failed:
                batch, self._waiting = self._waiting, []
                records, self._waiting_records = self._waiting_records, 0
                await txn.begin()
                until = time.perf_counter() + _SLICE_S
                for outcomes, timestamps_ms, interval_start in batch:
                    for outcome in outcomes:
                        pending = put_outcome(txn, outcome, destinations, sent, self._tp)
                        if pending is not None:
                            await pending
                    txn.note_sources(timestamps_ms, interval_start)
                    if time.perf_counter() >= until:  # what is added meanwhile waits behind this batch
                        await asyncio.sleep(0)
                        until = time.perf_counter() + _SLICE_S
                self._on_sent(records)
        except Exception as exc:
            self._fail(exc)
            return False
        return not self._failed

    def _count(self) -> None:
        """Move what the committed transaction published into the metrics, once per commit: a labelled counter's
        inc() costs more than a small record."""
        sent, metrics = self._sent, self._metrics
        for kind, n in sent.events.items():
            child = self._by_type.get(kind)
            if child is None:
                child = self._by_type[kind] = metrics.output_events_total.labels(kind)
            child.inc(n)
        for reason, n in sent.dead_letters.items():
            metrics.dead_letter_records_total.labels(reason).inc(n)
        if sent.truncated:
            metrics.dead_letters_truncated_total.inc(sent.truncated)
        if sent.display_records:
            metrics.display_records_total.inc(sent.display_records)
            metrics.display_bytes_total.inc(sent.display_bytes)
        if sent.index_records:
            metrics.index_records_total.inc(sent.index_records)
        sent.clear()

    async def _start(self) -> None:
        """Fix the open transaction's offset at every record added so far (step 5), with the checkpoint the owner
        cuts there (step 6), and commit it in the background; what is added meanwhile waits for the next one."""
        if not await self._put_waiting() or not self._txn.is_open:
            return
        offset = self._next_offset  # the put returned with nothing waiting: the owner's state is at this offset
        commit = self._commit(offset, self._metadata(), await self._checkpoint(offset, False))
        self._task = asyncio.create_task(self._commit_then_put(commit), name=f"commit-{self._tp.partition}")

    async def _commit_then_put(self, commit: Coroutine[Any, Any, bool]) -> None:
        """Commit, then move what waited meanwhile into a new transaction; `on_end` wakes the owner, whose next
        `tick` commits that one when due."""
        try:
            if await commit:
                await self._put_waiting()
        finally:
            if self._task is asyncio.current_task():
                self._task = None
            self._on_end()

    async def _commit(self, offset: int, metadata: str, changes: Changelog | None) -> bool:
        """Commit the open transaction at `offset` with the checkpoint's changelog records, if any (step 7). False
        when the partition failed."""
        txn = self._txn
        started = txn.begun_at
        try:
            if changes is not None:
                changelog = self._destinations().changelog_topic
                until = time.perf_counter() + _SLICE_S
                for key, value in changes:
                    pending = txn.put(changelog, key, value, (), self._tp.partition)
                    if pending is not None:
                        await pending
                    if time.perf_counter() >= until:
                        await asyncio.sleep(0)
                        until = time.perf_counter() + _SLICE_S
            stamps = await txn.commit(offset, metadata)
        except Exception as exc:
            self._fail(exc)
            return False
        self._committed = offset
        self._count()
        metrics = self._metrics
        if changes is not None:
            metrics.checkpoints_total.labels(*self._label).inc()
            metrics.changelog_records_total.labels(*self._label).inc(len(changes))
        metrics.transactions_total.labels("committed").inc()
        metrics.transaction_duration_seconds.observe(time.monotonic() - started)
        now_ms = time.time() * 1000
        metrics.source_to_commit_delay_seconds.observe_many([max(0.0, now_ms - ts) / 1000 for ts in stamps])
        return True
