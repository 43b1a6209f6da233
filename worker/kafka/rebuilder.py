"""The broker steps of one partition's rebuild, each under a deadline: producer, committed offset, state at it.

1. Start the partition's transactional producer. InitProducerId fences any earlier owner and settles its open
   transaction, so the committed offset read next is final. (The supervisor has confirmed ownership first.)
2. Read the committed offset C and the replay start R from the group.
3. The state at C: the parked state when the partition stayed with this member and C did not move; otherwise
   the changelog partition's checkpoint at K restored and `[K, C)` replayed; without a usable checkpoint, a
   fresh state replayed over `[R, C)`, after which the next checkpoint rewrites the changelog.

A producer or consumer this partition no longer needs is closed in the background (`close_later`), so a broker
that does not answer never holds the partition's task, let alone another partition's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from worker.errors import CheckpointError
from worker.kafka._aiokafka import force_close, member_id
from worker.kafka.changelog import Changelog, read_changelog
from worker.kafka.clients import (
    MAX_BATCH_BYTES,
    make_replay_consumer,
    make_transactional_producer,
    transactional_id,
)
from worker.kafka.deadlines import Deadlines, bounded
from worker.kafka.diagnosis import Names
from worker.kafka.offsets import ReplayWindow, plan_replay, read_committed, tail_window
from worker.kafka.ownership import Ownership, confirm_owner
from worker.kafka.partition import PartitionRun
from worker.kafka.publisher import Publisher, log_fields
from worker.kafka.rebuild import replay_into
from worker.kafka.routing import KeyRouter
from worker.kafka.supervisor import Progress, Rebuilt, Restored
from worker.ops import Metrics
from worker.settings import Settings
from worker.stream import PartitionState, ReplayPool, read_checkpoint_header

__all__ = ["KafkaRebuilder"]

_log = logging.getLogger(__name__)
StateFactory = Callable[[TopicPartition], PartitionState]


class KafkaRebuilder:
    """Rebuilds partitions of one group member; its background closes are awaited by `drain`."""

    def __init__(
        self, settings: Settings, metrics: Metrics, *, admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer,
        publisher: Publisher, state_factory: StateFactory, pool: ReplayPool | None, deadlines: Deadlines,
    ) -> None:  # fmt: skip
        self._s = settings
        self._metrics = metrics
        self._admin = admin
        self._consumer = consumer
        self._pub = publisher
        self._state_factory = state_factory
        self._pool = pool
        self._d = deadlines
        self._closing: set[asyncio.Task[None]] = set()

    def names(self, tp: TopicPartition) -> Names:
        return Names(transactional_id(self._s, tp), self._s.group_id, self._s.source_topic)

    def fresh_state(self, tp: TopicPartition) -> PartitionState:
        return self._state_factory(tp)

    async def owner(self, tp: TopicPartition) -> Ownership:
        """Whether the group coordinator lists this member, as the consumer knows it now, with `tp`."""
        return await confirm_owner(self._admin, self._s.group_id, member_id(self._consumer), tp, self._d.call_s)

    async def rebuild(self, tp: TopicPartition, kept: PartitionRun | None, progress: Progress) -> Rebuilt:
        where = f"{tp.topic}[{tp.partition}]"
        started = time.monotonic()
        if kept is not None:
            kept_producer = kept.detach_producer()  # the new producer's epoch fences it anyway
            if kept_producer is not None:
                self.close_later(kept_producer)
        producer = await self._start_producer(tp, where)
        try:
            committed = await bounded(read_committed(self._admin, self._s.group_id, [tp]), self._d.call_s,
                                      "read-offsets", where)
            entry = committed.get(tp)
            if kept is not None and entry is not None and entry.offset == kept.committed:
                return Rebuilt(producer, kept.state, kept.committed, kept=True)
            rebuilt = await self._replay(tp, where, producer, committed, progress)
        except BaseException:
            self.close_later(producer)
            raise
        rebuilt.rebuild_s = time.monotonic() - started
        return rebuilt

    async def _start_producer(self, tp: TopicPartition, where: str) -> AIOKafkaProducer:
        limits = self._pub.limits
        batch_bytes = limits.batch_bytes if limits is not None else MAX_BATCH_BYTES
        producer = make_transactional_producer(self._s, tp, batch_bytes)
        try:
            await bounded(producer.start(), self._d.call_s, "producer-start", where)
            if self._pub.router is None:
                partitions = await bounded(producer.partitions_for(self._s.output_topic), self._d.call_s,
                                           "metadata", where)
                self._pub.router = KeyRouter(len(partitions))
        except BaseException:
            self.close_later(producer)
            raise
        return producer

    async def _replay(
        self, tp: TopicPartition, where: str, producer: AIOKafkaProducer, committed: dict[TopicPartition, Any],
        progress: Progress,
    ) -> Rebuilt:  # fmt: skip
        """The state at C: the changelog's checkpoint at K restored and `[K, C)` replayed, or, without a usable
        checkpoint, a fresh state replayed over `[R, C)`; both publish nothing and stop when the position does."""
        replay = make_replay_consumer(self._s)
        ctp = TopicPartition(self._s.changelog_topic_name, tp.partition) if self._s.changelog else None
        try:
            await bounded(replay.start(), self._d.call_s, "replay-start", where)
            # Assigned (and paused), the topics join the client's metadata now: the offset look-ups find their
            # leaders at once instead of failing, refreshing and retrying after the 100 ms back-off.
            replay.assign([tp] if ctp is None else [tp, ctp])
            replay.pause(*replay.assignment())
            windows = await bounded(plan_replay(replay, committed, [tp], self._s.rebuild_lookback_ms),
                                    self._d.call_s, "replay-plan", where)
            window = windows[tp]
            restored: Restored | None = None
            values: dict[bytes, bytes] = {}
            if ctp is not None:
                changelog = await read_changelog(replay, ctp)
                values = changelog.values
                restored = self._restore(tp, changelog, window)
            state = restored.state if restored is not None else self._state_factory(tp)
            if restored is not None:
                window = tail_window(window, restored.offset, await replay.beginning_offsets([tp]))
            elif self._pool is not None:
                await self._pool.start()  # helpers still starting: the wait counts in the rebuild, not the replay
            started = time.monotonic()
            # The helper pool serves one rebuild at a time; a rebuild that finds it busy replays in-process (the
            # same result: the pool's merge stands in for exactly that replay or is not used). A changelog's tail
            # is short: always in-process.
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

    def _restore(self, tp: TopicPartition, changelog: Changelog, window: ReplayWindow) -> Restored | None:
        """The checkpoint of changelog `values` restored, or None (logged and counted) when it cannot serve:
        there is none, it is unreadable, or it lies beyond C (the group's offsets were reset below it).
        CheckpointVersionError, a format this release cannot read, is raised: guessing could publish wrongly."""
        fresh = self._state_factory(tp)
        values = changelog.values
        reason = ""
        try:
            header = read_checkpoint_header(values, tp.topic, tp.partition)
            if header is None:
                reason = "none"
            elif header.offset > window.committed:
                reason = "ahead"
                _log.warning("changelog checkpoint at offset %d lies beyond the committed offset %d (the group's "
                             "offsets were reset): discarded, the partition is rebuilt by replay", header.offset,
                             window.committed, extra=log_fields(tp))
            else:
                began = time.monotonic()
                state, offset = PartitionState.restore(tp.topic, tp.partition, values, **fresh.options,
                                                       core=fresh.core)
                return Restored(state, offset, changelog.records, changelog.seconds, time.monotonic() - began)
        except CheckpointError as exc:
            reason = exc.reason
            if reason == "display-off":  # expected once after the display topic is turned on
                _log.warning("changelog written with the display topic off: the partition is rebuilt by replay, "
                             "each open run's display from its start: %s", exc, extra=log_fields(tp))
            else:
                _log.error("changelog unusable, the partition is rebuilt by replay: %s", exc, extra=log_fields(tp))
        self._metrics.changelog_fallbacks_total.labels(reason).inc()
        return None

    def close_later(self, producer: AIOKafkaProducer) -> None:
        """Close a producer in the background: a broker that does not answer delays nobody."""
        self._background(force_close(producer, self._d.call_s))

    def _background(self, close: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(self._quietly(close))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _quietly(self, close: Coroutine[Any, Any, Any]) -> None:
        try:
            await asyncio.wait_for(close, 3 * self._d.call_s)
        except Exception as exc:
            _log.debug("background close failed: %r", exc)

    async def drain(self, seconds: float) -> None:
        """Wait (at most `seconds`) for the background closes still running."""
        if self._closing:
            with contextlib.suppress(Exception):
                await asyncio.wait(list(self._closing), timeout=seconds)
