"""One source partition's Kafka transaction, and the commit protocol it takes part in (host contract §5).

The commit protocol, for one source partition and its transactional producer (`<prefix>:<group>:<topic>:<p>`):

1. **Begin.** The first outcome after a commit opens a transaction.
2. **Send.** Every processed source record's outcome goes in, in offset order: its output events, dead letters and
   display record (`publishing.put_outcome`). Records of one destination partition fill one open batch, shipped
   when full; at the end of each fetched batch the batches of partitions new to the transaction are shipped, so
   those partitions join it off the commit path. The thread index topic's batches are the exception: they wait
   for step 7, because an index partition is written by every source partition's transactions and a reader
   sees none of its records past the first one of a transaction still open on it.
3. **Join the group early.** Once those first batches are delivered, the partition's offset so far is sent into
   the transaction, so the broker adds the group to it while records still flow.
4. **Decide.** The transaction commits once its oldest record has waited `commit_interval_ms` (counted from the
   record's source timestamp, but from at most half an interval before it was consumed), or once it holds
   `max_records_per_transaction` records, or when the partition stops (revocation, halt, shutdown).
5. **Fix the offset.** A commit takes every record processed so far: the offset it commits is the next one to
   process, with the replay metadata `{"v":1,"replay_from":R}`. Records processed while it runs wait, and go
   into the next transaction.
6. **Checkpoint.** When `checkpoint_interval_ms` has passed since the last checkpoint (or the partition stops),
   the state's changed keys go to the changelog partition in this same transaction, with the offset of step 5.
7. **Commit.** Ship the open batches, send the final offset (the last offset sent wins), wait for every
   delivery, then commit: records, changelog and offset become visible together.
8. **Fail.** Anything failing in 1 to 7 fails the partition: its task contains it (ends the transaction at the
   broker if it still can, diagnoses, drops the state) and rebuilds from the committed offset.

`Transaction` carries out steps 1 to 3 and 7 on one producer; `pipeline.py` decides the rest (`CommitPolicy`) and
feeds it the partition's processed records (`CommitPipeline`); the partition task cuts the checkpoint of step 6.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterable
from enum import Enum
from typing import Any, TypeVar

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from worker.client import bounded, observe_producer
from worker.errors import KafkaWorkerError

__all__ = ["Transaction", "TxnPhase"]

_T = TypeVar("_T")


class TxnPhase(Enum):
    """Where a transaction stands; `_NEXT` lists the only legal moves, anything else is a bug."""

    IDLE = "idle"  # none open: the next record begins one
    OPEN = "open"  # begun: records go in
    COMMITTING = "committing"  # its commit runs
    ABORTING = "aborting"  # its abort runs at the broker
    BROKEN = "broken"  # a call failed, or it was discarded: only an abort leaves it

    def to(self, phase: TxnPhase, where: str) -> TxnPhase:
        """`phase`, when `_NEXT` lists the move from this one; any other move is a bug and raises."""
        if phase not in _NEXT[self]:
            raise KafkaWorkerError(f"{where}: illegal transaction move {self.value} -> {phase.value}")
        return phase


_NEXT: dict[TxnPhase, frozenset[TxnPhase]] = {
    TxnPhase.IDLE: frozenset({TxnPhase.OPEN, TxnPhase.BROKEN}),
    TxnPhase.OPEN: frozenset({TxnPhase.COMMITTING, TxnPhase.ABORTING, TxnPhase.BROKEN}),
    TxnPhase.COMMITTING: frozenset({TxnPhase.IDLE, TxnPhase.BROKEN}),
    TxnPhase.ABORTING: frozenset({TxnPhase.IDLE, TxnPhase.BROKEN}),
    TxnPhase.BROKEN: frozenset({TxnPhase.ABORTING, TxnPhase.BROKEN}),
}


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """Mark a delivery failure as seen; commit() re-raises it, an abort discards it."""
    if not fut.cancelled():
        fut.exception()


class Transaction:
    """The open transaction of one partition's producer: records since `begin`, made visible with the source offset
    by `commit` (steps 1 to 3 and 7 of the protocol).

    With `deadline_s`, every call that waits for the broker (begin, send, commit, abort) raises DeadlineError once
    it has waited that long; the transaction is then broken and its producer must be abandoned.
    """

    __slots__ = (
        "_batches", "_begun_at", "_deadline", "_early", "_early_queued", "_futures", "_group_id", "_joined",
        "_opened_at", "_phase", "_producer", "_timestamps", "_tp", "_where", "records",
    )

    def __init__(
        self, producer: AIOKafkaProducer, tp: TopicPartition, group_id: str, deadline_s: float | None = None
    ) -> None:
        self._producer = producer
        self._tp = tp
        self._group_id = group_id
        self._deadline = deadline_s
        self._where = f"{tp.topic}[{tp.partition}]"
        self._phase = TxnPhase.IDLE
        self._futures: list[asyncio.Future[object]] = []
        self._batches: dict[tuple[str, int], Any] = {}  # (topic, partition) -> aiokafka BatchBuilder
        self._joined: set[tuple[str, int]] = set()  # partitions a batch of this transaction went to
        self._timestamps: list[int] = []
        self._early: asyncio.Future[None] | None = None  # the offsets `join_group` sends
        self._early_queued = False  # they are in the producer's hands: the commit must send after them
        self._opened_at = 0.0  # where the commit interval of the open transaction starts
        self._begun_at = 0.0
        self.records = 0

    @property
    def producer(self) -> AIOKafkaProducer:
        return self._producer

    @property
    def tp(self) -> TopicPartition:
        """The source partition whose offset this transaction commits."""
        return self._tp

    @property
    def is_open(self) -> bool:
        return self._phase is TxnPhase.OPEN

    @property
    def age_s(self) -> float:
        """Seconds of the commit interval the open transaction has used: since the earliest interval start its
        records were noted with, or since `begin` (0 when idle)."""
        return time.monotonic() - self._opened_at if self.is_open else 0.0

    @property
    def begun_at(self) -> float:
        """`time.monotonic()` when the current or last transaction began."""
        return self._begun_at

    async def _bounded(self, aw: Awaitable[_T], call: str) -> _T:
        if self._deadline is None:
            return await aw
        return await bounded(aw, self._deadline, call, self._where)

    def _move(self, to: TxnPhase) -> None:
        """The one way to change phase: a move `_NEXT` does not list raises."""
        self._phase = self._phase.to(to, self._where)

    async def begin(self) -> None:
        """Open a transaction if none is open."""
        if self._phase is TxnPhase.OPEN:
            return
        self._move(TxnPhase.OPEN)
        try:
            await self._bounded(self._producer.begin_transaction(), "begin")
        except BaseException:
            self._move(TxnPhase.BROKEN)
            raise
        self._opened_at = self._begun_at = time.monotonic()

    @property
    def joins_group(self) -> bool:
        """Whether `join_group` would send: a transaction is open and has not sent its early offsets."""
        return self._phase is TxnPhase.OPEN and self._early is None

    def join_group(self, next_offset: int, metadata: str) -> None:
        """Send the partition's offset into the open transaction once the batches shipped so far are delivered,
        so adding the group to it (AddOffsetsToTxn) is off the commit path; `commit` sends the final offset,
        which replaces this one (the last sent wins).

        Waiting for those first batches matters: the broker verifies a transaction's first batch on a partition
        with the coordinator, which refuses while it records the group: a produce retry, a backoff later.
        """
        if self.joins_group:
            self._early = asyncio.ensure_future(self._join(next_offset, metadata, list(self._futures)))
            self._early.add_done_callback(_retrieve)

    async def _join(self, next_offset: int, metadata: str, shipped: list[asyncio.Future[Any]]) -> None:
        if shipped:
            await asyncio.wait(shipped)  # a failed one fails the commit, not this
        self._early_queued = True
        await self._send_offsets(next_offset, metadata)

    async def _send_offsets(self, next_offset: int, metadata: str, after: asyncio.Future[None] | None = None) -> None:
        if after is not None:
            await after  # queued after the early offsets are answered: the last offset sent is the one committed
        await self._producer.send_offsets_to_transaction(
            {self._tp: OffsetAndMetadata(next_offset, metadata)}, self._group_id
        )

    async def send(
        self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]],
        partition: int | None = None,
    ) -> None:
        """Append one record to the open transaction; delivery is checked at commit.

        A record with a partition goes into that partition's open batch (one delivery future per batch, not
        per record); `ship` hands the batches to the producer. Records of one partition keep their order.
        """
        if self._phase is not TxnPhase.OPEN:
            raise KafkaWorkerError(f"{self._tp}: send outside a transaction (phase {self._phase.value})")
        if partition is None:
            await self._send_alone(topic, key, value, headers, None)
            return
        if self.append(topic, key, value, headers, partition):
            return
        where = (topic, partition)
        await self._ship_one(where)  # none open, or full: a full one goes now, the record starts the next
        batch = self._batches[where] = self._producer.create_batch()
        if batch.append(timestamp=None, key=key, value=value, headers=headers) is None:
            del self._batches[where]  # larger than a batch: the producer sends it on its own
            await self._send_alone(topic, key, value, headers, partition)

    def put(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes]],
        partition: int | None,
    ) -> Awaitable[None] | None:
        """Append one record to the open transaction without waiting when `partition`'s open batch has room (None);
        else the `send` that appends it, to be awaited before anything else goes into the transaction."""
        listed = list(headers)
        if partition is not None and self.append(topic, key, value, listed, partition):
            return None
        return self.send(topic, key, value, listed, partition)

    def append(
        self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]], partition: int
    ) -> bool:
        """`send` without waiting, when the partition's open batch has room; False: nothing done, use `send`."""
        batch = self._batches.get((topic, partition))
        return (
            batch is not None and self._phase is TxnPhase.OPEN
            and batch.append(timestamp=None, key=key, value=value, headers=headers) is not None
        )  # fmt: skip

    async def _send_alone(
        self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]],
        partition: int | None,
    ) -> None:
        self._futures.append(await self._bounded(
            self._producer.send(topic, value=value, key=key, headers=headers, partition=partition), "send"
        ))

    async def ship(self) -> None:
        """Hand every open batch to the producer, closed, so it goes out without lingering."""
        for where in list(self._batches):
            await self._ship_one(where)

    async def ship_new(self, later: str = "") -> None:
        """Hand over the batches of partitions new to this transaction, so they join it now and not on the
        commit path; other batches, and every batch of topic `later`, wait for the commit or until full (one
        produce request each, not one a poll).
        """
        for where in [w for w in self._batches if w not in self._joined and w[0] != later]:
            await self._ship_one(where)

    async def _ship_one(self, where: tuple[str, int]) -> None:
        batch = self._batches.pop(where, None)
        if batch is not None and batch.record_count():
            batch.close()
            self._futures.append(await self._bounded(self._producer.send_batch(batch, where[0], partition=where[1]),
                                                     "send"))
            self._joined.add(where)

    def note_sources(self, timestamps_ms: list[int], interval_start: float | None = None) -> None:
        """Remember consumed records' timestamps; the transaction's age counts from the earliest `interval_start`
        (a `time.monotonic()` value) of its records."""
        if interval_start is not None and interval_start < self._opened_at:
            self._opened_at = interval_start
        self.records += len(timestamps_ms)
        self._timestamps.extend(timestamps_ms)

    async def commit(self, next_offset: int, metadata: str) -> list[int]:
        """Commit records and the source offset `next_offset` atomically; returns the committed source timestamps."""
        self._move(TxnPhase.COMMITTING)
        # The offsets join the transaction while its records are still being delivered; the commit waits for
        # both, because aiokafka would commit a transaction that lost a record batch.
        early = self._early
        if early is not None and not self._early_queued:
            early.cancel()  # still waiting for its batches: the final offsets alone, at once
            early = None
        offsets = asyncio.ensure_future(self._send_offsets(next_offset, metadata, early))
        offsets.add_done_callback(_retrieve)
        try:
            try:
                await self._bounded(self._finish(offsets), "commit")
            finally:
                if not offsets.done():  # answered before anyone aborts this transaction (a deadline cancelled it)
                    await asyncio.wait([offsets], timeout=self._deadline)
        except BaseException:
            self._move(TxnPhase.BROKEN)
            raise
        stamps = self._timestamps
        self._reset()
        self._move(TxnPhase.IDLE)
        return stamps

    async def _finish(self, offsets: asyncio.Future[None]) -> None:
        await self.ship()
        await asyncio.gather(offsets, self._delivered())
        await self._producer.commit_transaction()

    async def _delivered(self) -> None:
        """Return when every record is delivered, raising the first failure; most futures are done by now."""
        for fut in self._futures:
            await fut  # no suspension for a done future, one per batch still in flight

    async def abort(self) -> None:
        """End the producer's transaction at the broker, whatever this object's phase (a failed commit leaves the
        producer inside its transaction), when an abort can still reach it: the producer's sender runs and it is
        in a transaction (or its state is unknown). Never raises and never waits for the early offsets: what went
        wrong is read from the producer afterwards (`observe_producer`)."""
        if self._phase is TxnPhase.IDLE:
            return  # nothing begun since the last commit
        if self._early is not None and not self._early_queued:
            self._early.cancel()  # waiting for its batches could take a timeout; queued offsets precede the abort
        self._reset()
        if self._phase in (TxnPhase.COMMITTING, TxnPhase.ABORTING):
            self._move(TxnPhase.BROKEN)  # a commit or an abort still under way is given up
        if not observe_producer(self._producer).can_abort:
            self._move(TxnPhase.BROKEN)
            return
        self._move(TxnPhase.ABORTING)
        try:
            await self._bounded(self._producer.abort_transaction(), "abort")
        except Exception:
            self._move(TxnPhase.BROKEN)
            return
        self._move(TxnPhase.IDLE)

    def discard(self) -> None:
        """Forget the open transaction without a broker call (its producer is abandoned, and the next producer of
        the transactional id aborts it); delivery failures that come later are marked seen."""
        if self._early is not None and not self._early_queued:
            self._early.cancel()
        self._move(TxnPhase.BROKEN)
        self._reset()

    def _reset(self) -> None:
        self._batches = {}
        self._joined = set()
        for fut in self._futures:  # mark failures seen: an abort discards them
            if fut.done():
                _retrieve(fut)
            else:
                fut.add_done_callback(_retrieve)
        self._futures = []
        self._early = None  # its failure, if any, is marked seen by its callback
        self._early_queued = False
        self._timestamps = []
        self.records = 0
