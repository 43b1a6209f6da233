"""A partition's rebuild: the broker steps that bring its state to the committed offset, each under a deadline.

1. Start the partition's transactional producer. InitProducerId fences any earlier owner and aborts its open
   transaction, so the committed offset read next is final. (The partition's task has confirmed with the group
   coordinator that this member owns the partition: a producer started by a zombie would fence the real owner.)
2. Read the committed offset C and the replay start R from the group.
3. The state at C: the parked state when the partition stayed with this member and C did not move; otherwise
   the changelog partition's checkpoint at K restored (`restore.py`) and `[K, C)` replayed (`replay.py`); without
   a usable checkpoint, a fresh state replayed over `[R, C)`, after which the next checkpoint rewrites the
   changelog.

A producer or consumer the partition no longer needs is closed in the background (`close_later`), so a broker
that does not answer never holds the partition's task, let alone another partition's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from worker.client import Names, bounded, force_close, make_transactional_producer, member_id, principal
from worker.ops import Metrics
from worker.recovery.ownership import Ownership, confirm_owner
from worker.recovery.replay import (
    Progress,
    ReplayWindow,
    plan_replay,
    replay_consumer,
    replay_into,
    window_after_checkpoint,
)
from worker.recovery.restore import Restored, read_changelog, restore_or_fall_back
from worker.settings import Settings
from worker.stream import PartitionState, ReplayPool

__all__ = ["Parked", "Rebuilder", "Rebuilt"]

_log = logging.getLogger(__name__)


@dataclass(slots=True)
class Parked:
    """A live partition stopped by a revocation after committing: its state at `committed` and its producer, kept
    in case the partition comes straight back."""

    state: PartitionState
    committed: int
    producer: AIOKafkaProducer


@dataclass(slots=True)
class Rebuilt:
    """A partition ready to go live at `committed`: its new producer and its state there (kept or replayed)."""

    producer: AIOKafkaProducer
    state: PartitionState
    committed: int
    kept: bool  # the parked state was still exact: nothing replayed
    window: ReplayWindow | None = None
    replayed: int = 0
    replay_s: float = 0.0
    rebuild_s: float = 0.0
    restored: Restored | None = None  # the checkpoint the replay started from, if the changelog had a usable one


class Rebuilder:
    """Rebuilds the partitions of one group member; its background closes are awaited by `await_closes`."""

    def __init__(
        self, settings: Settings, metrics: Metrics, *, admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer,
        new_state: Callable[[TopicPartition], PartitionState], batch_bytes: Callable[[], int],
        pool: ReplayPool | None, call_s: float,
    ) -> None:  # fmt: skip
        """`batch_bytes` tells a new producer's batch size as the topics allow it now; every broker call of a
        rebuild has `call_s` seconds."""
        self._s = settings
        self._metrics = metrics
        self._admin = admin
        self._consumer = consumer
        self._new_state = new_state
        self._batch_bytes = batch_bytes
        self._pool = pool
        self._call_s = call_s
        self._closing: set[asyncio.Task[None]] = set()

    def names(self, tp: TopicPartition) -> Names:
        """The names a missing ACL of this partition is granted on."""
        s = self._s
        return Names(s.transactional_id(tp.topic, tp.partition), s.group_id, s.source_topic, principal(s))

    def fresh_state(self, tp: TopicPartition) -> PartitionState:
        """An empty state with the current settings and topic limits."""
        return self._new_state(tp)

    async def owner(self, tp: TopicPartition) -> Ownership:
        """Whether the group coordinator lists this member, as the consumer knows it now, with `tp`."""
        return await confirm_owner(self._admin, self._s.group_id, member_id(self._consumer), tp, self._call_s)

    async def rebuild(self, tp: TopicPartition, parked: Parked | None, progress: Progress) -> Rebuilt:
        """Steps 1 to 3 for `tp`; `parked` is its state kept through a rebalance, if any."""
        where = f"{tp.topic}[{tp.partition}]"
        started = time.monotonic()
        if parked is not None:
            self.close_later(parked.producer)  # the new producer's epoch fences it anyway
        producer = await self._start_producer(tp, where)
        try:
            offsets = await bounded(self._admin.list_consumer_group_offsets(self._s.group_id, partitions=[tp]),
                                    self._call_s, "read-offsets", where)  # fmt: skip
            entry = dict(offsets).get(tp)
            if parked is not None and entry is not None and entry.offset == parked.committed:
                return Rebuilt(producer, parked.state, parked.committed, kept=True)
            rebuilt = await self._replay(tp, where, producer, entry, progress)
        except BaseException:
            self.close_later(producer)
            raise
        rebuilt.rebuild_s = time.monotonic() - started
        return rebuilt

    async def _start_producer(self, tp: TopicPartition, where: str) -> AIOKafkaProducer:
        s = self._s
        producer = make_transactional_producer(
            s, f"{s.client_id}-p{tp.partition}", s.transactional_id(tp.topic, tp.partition),
            batch_bytes=self._batch_bytes(), transaction_timeout_ms=s.transaction_timeout_ms,
        )
        try:
            await bounded(producer.start(), self._call_s, "producer-start", where)
        except BaseException:
            self.close_later(producer)
            raise
        return producer

    async def _replay(
        self, tp: TopicPartition, where: str, producer: AIOKafkaProducer, committed: Any, progress: Progress
    ) -> Rebuilt:
        """The state at C: the changelog's checkpoint at K restored and `[K, C)` replayed, or, without a usable
        checkpoint, a fresh state replayed over `[R, C)`; both publish nothing and stop when the position does."""
        replay = replay_consumer(self._s)
        ctp = TopicPartition(self._s.changelog_topic_name, tp.partition) if self._s.changelog else None
        try:
            await bounded(replay.start(), self._call_s, "replay-start", where)
            # Assigned (and paused), the topics join the client's metadata now: the offset look-ups find their
            # leaders at once instead of failing, refreshing and retrying after the 100 ms back-off.
            replay.assign([tp] if ctp is None else [tp, ctp])
            replay.pause(*replay.assignment())
            windows = await bounded(plan_replay(replay, {tp: committed} if committed is not None else {}, [tp],
                                                self._s.rebuild_lookback_ms),
                                    self._call_s, "replay-plan", where)  # fmt: skip
            window = windows[tp]
            restored: Restored | None = None
            values: dict[bytes, bytes] = {}
            if ctp is not None:
                changelog = await read_changelog(replay, ctp)
                values = changelog.values
                restored = await restore_or_fall_back(tp, changelog, window.committed, lambda: self._new_state(tp),
                                                      self._metrics)
            state = restored.state if restored is not None else self._new_state(tp)
            if restored is not None:
                window = window_after_checkpoint(window, restored.offset, await replay.beginning_offsets([tp]))
            elif self._pool is not None:
                await self._pool.start()  # helpers still starting: the wait counts in the rebuild, not the replay
            started = time.monotonic()
            # The helper pool serves one rebuild at a time; a rebuild that finds it busy replays in-process (the
            # same result: the pool's merge stands in for exactly that replay or is not used). The replay after a
            # checkpoint is short: always in-process.
            counts = await replay_into(replay, {tp: window}, {tp: state}, progress=progress,
                                       pool=self._pool if restored is None else None,
                                       on_fallback=lambda _: self._metrics.replay_fallbacks_total.inc())
            replay_s = time.monotonic() - started
        finally:
            self._background(replay.stop())
        if ctp is not None and restored is None:
            state.adopt_changelog_keys(values)  # the next checkpoint rewrites the changelog to this state
        return Rebuilt(producer, state, window.committed, kept=False, window=window, replayed=counts[tp],
                       replay_s=replay_s, restored=restored)

    def close_later(self, producer: AIOKafkaProducer) -> None:
        """Close a producer in the background: a broker that does not answer delays nobody."""
        self._background(force_close(producer, self._call_s))

    def _background(self, close: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(self._quietly(close))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _quietly(self, close: Coroutine[Any, Any, Any]) -> None:
        try:
            await asyncio.wait_for(close, 3 * self._call_s)
        except Exception as exc:
            _log.debug("background close failed: %r", exc)

    async def await_closes(self, seconds: float) -> None:
        """Wait (at most `seconds`) for the background closes still running."""
        if self._closing:
            with contextlib.suppress(Exception):
                await asyncio.wait(list(self._closing), timeout=seconds)
