"""A partition's state read back from its changelog partition: the checkpoint at source offset K, chosen, restored.

The changelog partition is read with `read_committed` up to the last stable offset taken at the start
(`worker.client.read_to_end`), folding the latest value per key. Choosing its checkpoint (`choose_checkpoint`) is
apart from restoring the partition's state from it (`restore_partition`): the checkpoint is chosen unless there is
none, it is unreadable, or it lies beyond the committed offset C (the group's offsets were reset below it); each
such case, and a restore that finds a record unreadable, is logged and counted, and the partition is replayed
instead. A format this release cannot read raises: guessing could publish wrongly.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from aiokafka import AIOKafkaConsumer, TopicPartition

from worker.client import end_offsets, read_to_end
from worker.errors import CheckpointError
from worker.ops import Metrics, working_on
from worker.stream import PARTITION_KEY, CheckpointHeader, PartitionState, read_checkpoint_header

__all__ = ["Changelog", "Restored", "choose_checkpoint", "read_changelog", "restore_or_fall_back", "restore_partition"]

_log = logging.getLogger(__name__)

_FETCH = 1_000  # records per fetch: what one turn of the event loop unpacks and folds


class Changelog(NamedTuple):
    """A changelog partition's latest value per key, how many records (and seconds) reading it took, and the
    timestamp of its latest partition record (when its checkpoint was written; None without one)."""

    values: dict[bytes, bytes]
    records: int
    seconds: float
    checkpoint_ms: int | None = None


async def read_changelog(consumer: AIOKafkaConsumer, ctp: TopicPartition) -> Changelog:
    """The latest value of every key of changelog partition `ctp` (tombstoned keys left out), as committed up to the
    end offset taken now.

    `consumer` must be a read_committed consumer assigned `ctp`. StalledReadError when the read stops moving before
    the end.
    """
    began = time.monotonic()
    start = (await consumer.beginning_offsets([ctp]))[ctp]
    end = (await end_offsets(consumer, [ctp]))[ctp]
    values: dict[bytes, bytes] = {}
    read = 0
    written: int | None = None
    consumer.seek(ctp, start)
    async for batch in read_to_end(consumer, {ctp: end}, max_records=_FETCH):
        for rec in batch[ctp]:
            read += 1
            if rec.key is None:
                continue  # not the worker's (a compacted topic refuses keyless records anyway)
            if rec.value is None:
                values.pop(rec.key, None)
            else:
                values[rec.key] = rec.value
                if rec.key == PARTITION_KEY:
                    written = rec.timestamp
    return Changelog(values, read, time.monotonic() - began, written)


@dataclass(frozen=True, slots=True)
class Restored:
    """A state restored from the changelog's checkpoint at source offset `offset`: `records` changelog records
    read in `read_s` seconds, then restored in `restore_s`."""

    state: PartitionState
    offset: int
    records: int
    read_s: float
    restore_s: float


def choose_checkpoint(tp: TopicPartition, changelog: Changelog, committed: int) -> CheckpointHeader:
    """The changelog's checkpoint, when a rebuild to committed offset `committed` can start from it.

    CheckpointError, its `reason` in a word, when it cannot: `none` (the changelog holds none), `ahead` (it lies
    beyond the committed offset: the group's offsets were reset), `unreadable`; CheckpointVersionError for a
    format this release cannot read.
    """
    header = read_checkpoint_header(changelog.values, tp.topic, tp.partition)
    if header is None:
        raise CheckpointError("holds no checkpoint", topic=tp.topic, partition=tp.partition, reason="none")
    if header.offset > committed:
        raise CheckpointError(f"checkpoint at offset {header.offset} lies beyond the committed offset {committed} "
                              "(the group's offsets were reset)", topic=tp.topic, partition=tp.partition,
                              reason="ahead")  # fmt: skip
    return header


async def restore_partition(tp: TopicPartition, changelog: Changelog, fresh: Callable[[], PartitionState]) -> Restored:
    """The partition's state restored from the changelog's checkpoint into a state built like `fresh()`; other
    partitions run between the parts of the restore. CheckpointError when a record of it is unreadable."""
    template = fresh()
    values = changelog.values
    began = time.monotonic()
    parts = PartitionState.restore_in_parts(tp.topic, tp.partition, values, template.options, core=template.core)
    while True:
        try:
            with working_on("restoring %s[%d] from %d changelog records", tp.topic, tp.partition, len(values)):
                next(parts)
        except StopIteration as done:
            state, offset = done.value
            return Restored(state, offset, changelog.records, changelog.seconds, time.monotonic() - began)
        await asyncio.sleep(0)


async def restore_or_fall_back(
    tp: TopicPartition, changelog: Changelog, committed: int, fresh: Callable[[], PartitionState], metrics: Metrics
) -> Restored | None:
    """The checkpoint `choose_checkpoint` takes, restored by `restore_partition`; None (logged and counted in
    `changelog_fallbacks_total` by reason) when it cannot serve and the partition is replayed instead.
    CheckpointVersionError, a format this release cannot read, is raised."""
    try:
        choose_checkpoint(tp, changelog, committed)
        return await restore_partition(tp, changelog, fresh)
    except CheckpointError as exc:
        where = {"topic": tp.topic, "partition": tp.partition}
        if exc.reason == "ahead":
            _log.warning("%s: discarded, the partition is rebuilt by replay", exc, extra=where)
        elif exc.reason == "display-off":  # expected once after the display topic is turned on
            _log.warning("changelog written with the display topic off: the partition is rebuilt by replay, each "
                         "open run's display from its start: %s", exc, extra=where)
        elif exc.reason != "none":
            _log.error("changelog unusable, the partition is rebuilt by replay: %s", exc, extra=where)
        metrics.changelog_fallbacks_total.labels(exc.reason).inc()
        return None
