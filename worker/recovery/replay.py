"""Replay: run a window of source records through a state, publishing nothing, and stop by position.

A window is `[start, committed)`: from the replay start R of the offset metadata (or a look-back by time when an
operator reset the offsets), or from a changelog checkpoint's offset K, to the committed offset C. With a
`ReplayPool` the records go to helper processes by key and the shards are merged; when the merge cannot stand in
for one replay (or a helper fails) the same windows are read again and replayed in-process.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from worker.client import make_consumer, read_to_end
from worker.errors import GapError, RebuildError, ShardedReplayError, WorkerError
from worker.ops import working_on
from worker.settings import Settings
from worker.stream import PartitionState, ReplayPool, ReplaySession, decode_replay_metadata, to_source_record

__all__ = ["Progress", "ReplayWindow", "plan_replay", "replay_consumer", "replay_into", "window_after_checkpoint"]

_log = logging.getLogger(__name__)
_FEED_CHUNK = 128  # records replayed between two yields to the event loop

Progress = Callable[[TopicPartition, int, int], None]  # (partition, records done, records in its window)
Feed = Callable[[TopicPartition, list[Any]], None]  # consumed records of one partition, in order
Fallback = Callable[[ShardedReplayError], None]


def replay_consumer(settings: Settings) -> AIOKafkaConsumer:
    """A group-less read_committed consumer that reads history (source, changelog) for a rebuild, in large fetches."""
    return make_consumer(settings, f"{settings.client_id}-replay",
                         max_poll_records=max(settings.max_poll_records, 5000), fetch_max_wait_ms=100,
                         max_partition_fetch_bytes=8 * 1024 * 1024, fetch_max_bytes=64 * 1024 * 1024)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReplayWindow:
    """Replay `[start, committed)` publishing nothing, then consume live from `committed`."""

    tp: TopicPartition
    start: int
    committed: int
    # "metadata", "lookback", "none" (no commit yet), "changelog" (the records after a checkpoint) or "clamped"
    # (history lost to retention)
    source: str
    lost_history: bool


async def plan_replay(
    consumer: AIOKafkaConsumer,
    committed: Mapping[TopicPartition, Any],
    tps: list[TopicPartition],
    lookback_ms: int,
) -> dict[TopicPartition, ReplayWindow]:
    """C and R of each partition from its `committed` entry (`read_committed`); R falls back to a bounded
    look-back when metadata is missing."""
    log_start: dict[TopicPartition, int] = await consumer.beginning_offsets(tps)
    need_lookback: list[TopicPartition] = []
    plan: dict[TopicPartition, tuple[int, int, str]] = {}
    for tp in tps:
        entry = committed.get(tp)
        low = log_start[tp]
        if entry is None or entry.offset < 0:
            plan[tp] = (low, low, "none")
            continue
        c = entry.offset
        r = decode_replay_metadata(entry.metadata)
        if r is None or r > c:
            need_lookback.append(tp)
            plan[tp] = (c, c, "lookback")
        else:
            plan[tp] = (r, c, "metadata")
    if need_lookback:
        # Wall clock chooses only where an operator-reset partition starts its look-back, never what is published.
        since = int(time.time() * 1000) - lookback_ms
        found = await consumer.offsets_for_times(dict.fromkeys(need_lookback, since))
        for tp in need_lookback:
            _, c, _ = plan[tp]
            hit = found.get(tp)
            plan[tp] = (min(hit.offset, c) if hit is not None else c, c, "lookback")
    windows: dict[TopicPartition, ReplayWindow] = {}
    for tp, (r, c, source) in plan.items():
        low = log_start[tp]
        lost = r < low
        if lost:
            _log.warning(
                "replay start below log start: history lost to retention",
                extra={"topic": tp.topic, "partition": tp.partition, "offset": r, "log_start": low},
            )
        windows[tp] = ReplayWindow(tp, max(r, low), max(c, low), "clamped" if lost else source, lost)
    return windows


def window_after_checkpoint(
    window: ReplayWindow, checkpoint: int, log_start: dict[TopicPartition, int]
) -> ReplayWindow:
    """The replay after a changelog checkpoint at `checkpoint` (at most `window.committed`): `[K, C)`, clamped to
    the log start when retention deleted part of it."""
    low = log_start[window.tp]
    lost = checkpoint < low
    if lost:
        _log.warning("changelog checkpoint below log start: history since it lost to retention",
                     extra={"topic": window.tp.topic, "partition": window.tp.partition, "offset": checkpoint,
                            "log_start": low})
    return ReplayWindow(window.tp, max(checkpoint, low), window.committed, "clamped" if lost else "changelog", lost)


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
        waiting = [to_source_record(rec) for rec in recs]
        while waiting:
            with working_on("replaying records of %s[%d]", tp.topic, tp.partition):
                done, error = state.process_batch(waiting, publish=False)
            if error is None:
                return
            offset = waiting[len(done)].offset  # the record that raised, which changed nothing
            if isinstance(error, GapError):
                _passed_gap(tp, offset, str(error))
            elif isinstance(error, WorkerError):
                raise RebuildError(f"{tp.topic}[{tp.partition}] offset {offset} halts replay: {error}") from error
            else:
                raise error
            waiting = waiting[len(done) + 1 :]

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
    counts = dict.fromkeys(windows, 0)
    consumer.assign(list(windows))
    for tp, w in windows.items():
        consumer.seek(tp, w.start)

    def moved(tp: TopicPartition, position: int) -> None:
        w = windows[tp]
        progress(tp, position - w.start, w.committed - w.start)

    ends = {tp: w.committed for tp, w in windows.items()}
    async for batch in read_to_end(consumer, ends, stall_s=stall_timeout_s, max_records=5000, on_position=moved):
        for tp, recs in batch.items():
            for i in range(0, len(recs), _FEED_CHUNK):
                feed(tp, recs if len(recs) <= _FEED_CHUNK else recs[i : i + _FEED_CHUNK])
                await asyncio.sleep(0)  # live partitions of this member get the loop between chunks
            counts[tp] += len(recs)
        await after_fetch()
    return counts
