"""Rebuild by replay: run `[R, C)` of each partition through fresh state, publishing nothing, stopping by position.

With a `ReplayPool` the records go to helper processes by key and the shards are merged; when the merge
cannot stand in for one replay (or a helper fails) the same windows are read again and replayed in-process.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from worker.errors import GapError, RebuildError, ShardedReplayError, WorkerError
from worker.kafka.offsets import ReplayWindow
from worker.kafka.source import to_source_record
from worker.stream import PartitionState, ReplayPool, ReplaySession

__all__ = ["replay_into"]

_log = logging.getLogger(__name__)
_FEED_CHUNK = 500  # records replayed between two yields to the event loop

Progress = Callable[[TopicPartition, int, int], None]
Feed = Callable[[TopicPartition, list[Any]], None]  # consumed records of one partition, in order
Fallback = Callable[[ShardedReplayError], None]


def _ignore(exc: ShardedReplayError) -> None:
    return None


async def replay_into(
    consumer: AIOKafkaConsumer,
    windows: dict[TopicPartition, ReplayWindow],
    states: dict[TopicPartition, PartitionState],
    *,
    progress: Progress,
    stall_timeout_s: float = 30.0,
    pool: ReplayPool | None = None,
    on_fallback: Fallback = _ignore,
) -> dict[TopicPartition, int]:
    """Feed every record of each window into its fresh state with `publish=False`; returns records per partition.

    Shards that cannot stand in for one replay are dropped, `on_fallback` hears why, and the windows are read
    again in-process.

    A window is done when the consumer's position reaches `committed`, not when a record at `committed - 1`
    arrives: transaction markers and aborted records leave offsets without records.
    """
    todo = {tp: w for tp, w in windows.items() if w.start < w.committed}
    counts = dict.fromkeys(windows, 0)
    if not todo:
        return counts
    if pool is not None:
        async with pool.session({(tp.topic, tp.partition): states[tp] for tp in todo}) as session:
            if session is not None:
                try:
                    counts.update(await _read(consumer, todo, _to_helpers(session), progress=progress,
                                              stall_timeout_s=stall_timeout_s, after_fetch=session.flush))
                    for (topic, partition), gaps in (await session.finish()).items():
                        for offset, message in gaps:
                            _passed_gap(TopicPartition(topic, partition), offset, message)
                    _log.info("replayed by helper processes: %d records in %d processes", sum(counts.values()),
                              pool.processes, extra={"partitions": [tp.partition for tp in todo]})
                    return counts
                except ShardedReplayError as exc:
                    on_fallback(exc)
                    _log.warning("replay split across %d processes replays in-process instead: %s",
                                 pool.processes, exc, extra={"partitions": [tp.partition for tp in todo]})

    def feed(tp: TopicPartition, recs: list[Any]) -> None:
        state = states[tp]
        for rec in recs:
            try:
                state.process(to_source_record(rec), publish=False)
            except GapError as exc:
                _passed_gap(tp, rec.offset, str(exc))
            except WorkerError as exc:
                raise RebuildError(f"{tp.topic}[{tp.partition}] offset {rec.offset} halts replay: {exc}") from exc

    counts.update(await _read(consumer, todo, feed, progress=progress, stall_timeout_s=stall_timeout_s))
    return counts


def _to_helpers(session: ReplaySession) -> Feed:
    def feed(tp: TopicPartition, recs: list[Any]) -> None:
        session.add(tp.topic, tp.partition, [(rec.offset, rec.timestamp, rec.key, rec.value) for rec in recs])

    return feed


def _passed_gap(tp: TopicPartition, offset: int, message: str) -> None:
    # Live processing halts before a gap, so C passed it only because an operator moved the offset.
    _log.warning("replay passes over a gap an operator skipped: %s", message,
                 extra={"topic": tp.topic, "partition": tp.partition, "offset": offset})


async def _nothing() -> None:
    return None


async def _read(
    consumer: AIOKafkaConsumer,
    windows: dict[TopicPartition, ReplayWindow],
    feed: Feed,
    *,
    progress: Progress,
    stall_timeout_s: float,
    after_fetch: Callable[[], Awaitable[None]] = _nothing,
) -> dict[TopicPartition, int]:
    """Read each window from its start to its committed offset, in offset order, into `feed`."""
    todo = dict(windows)
    counts = dict.fromkeys(windows, 0)
    consumer.assign(list(todo))
    for tp, w in todo.items():
        consumer.seek(tp, w.start)
    consumer.resume(*todo)
    last_move = time.monotonic()
    while todo:
        batches = await consumer.getmany(*todo, timeout_ms=200, max_records=5000)
        for tp, fetched in batches.items():
            window = todo.get(tp)
            if window is None or not fetched:
                continue
            last_move = time.monotonic()
            recs = fetched if fetched[-1].offset < window.committed else [
                rec for rec in fetched if rec.offset < window.committed]  # fmt: skip
            for i in range(0, len(recs), _FEED_CHUNK):
                feed(tp, recs if len(recs) <= _FEED_CHUNK else recs[i : i + _FEED_CHUNK])
                await asyncio.sleep(0)  # live partitions of this member get the loop between chunks
            counts[tp] += len(recs)
        await after_fetch()
        for tp in list(todo):
            w = todo[tp]
            pos = await consumer.position(tp)
            progress(tp, pos - w.start, w.committed - w.start)
            if pos >= w.committed:
                consumer.pause(tp)
                del todo[tp]
        if todo and time.monotonic() - last_move > stall_timeout_s:
            stuck = ", ".join([f"{tp.partition}@{await consumer.position(tp)}<{w.committed}" for tp, w in todo.items()])
            raise RebuildError(f"replay made no progress for {stall_timeout_s:.0f}s: {stuck}")
        await asyncio.sleep(0)
    return counts
