"""Rebuild by replay: run `[R, C)` of each partition through fresh state, publishing nothing, stopping by position."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition

from worker.errors import GapError, RebuildError, WorkerError
from worker.kafka.offsets import ReplayWindow
from worker.kafka.source import to_source_record
from worker.stream import PartitionState

__all__ = ["replay_into"]

_log = logging.getLogger(__name__)

Progress = Callable[[TopicPartition, int, int], None]


async def replay_into(
    consumer: AIOKafkaConsumer,
    windows: dict[TopicPartition, ReplayWindow],
    states: dict[TopicPartition, PartitionState],
    *,
    progress: Progress,
    stall_timeout_s: float = 30.0,
) -> dict[TopicPartition, int]:
    """Feed every record of each window into its state with `publish=False`; returns records replayed per partition.

    A window is done when the consumer's position reaches `committed`, not when a record at `committed - 1`
    arrives: transaction markers and aborted records leave offsets without records.
    """
    todo = {tp: w for tp, w in windows.items() if w.start < w.committed}
    counts = dict.fromkeys(windows, 0)
    if not todo:
        return counts
    consumer.assign(list(todo))
    for tp, w in todo.items():
        consumer.seek(tp, w.start)
    last_move = time.monotonic()
    while todo:
        batches = await consumer.getmany(*todo, timeout_ms=200, max_records=5000)
        for tp, recs in batches.items():
            window = todo.get(tp)
            if window is None:
                continue
            state = states[tp]
            for rec in recs:
                if rec.offset >= window.committed:
                    break
                try:
                    state.process(to_source_record(rec), publish=False)
                except GapError as exc:
                    # Live processing halts before a gap, so C passed it only because an operator moved the offset.
                    _log.warning("replay passes over a gap an operator skipped: %s", exc,
                                 extra={"topic": tp.topic, "partition": tp.partition, "offset": rec.offset})
                except WorkerError as exc:
                    raise RebuildError(f"{tp.topic}[{tp.partition}] offset {rec.offset} halts replay: {exc}") from exc
                counts[tp] += 1
            if recs:
                last_move = time.monotonic()
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
