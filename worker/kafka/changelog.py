"""The changelog partition of one source partition, read to its end and folded into the latest value per key.

Read with `read_committed`, so only the state of committed transactions counts, and read until the position
reaches the last stable offset taken at the start (transaction markers occupy offsets: stopping at a record
would wait forever for one that is a marker).
"""

from __future__ import annotations

import time
from typing import NamedTuple

from aiokafka import AIOKafkaConsumer, TopicPartition

from worker.errors import RebuildError

__all__ = ["Changelog", "read_changelog"]

_FETCH = 10_000  # records per fetch


class Changelog(NamedTuple):
    """A changelog partition's latest value per key, and how many records (and seconds) reading it took."""

    values: dict[bytes, bytes]
    records: int
    seconds: float


async def read_changelog(
    consumer: AIOKafkaConsumer, ctp: TopicPartition, *, stall_timeout_s: float = 30.0
) -> Changelog:
    """The latest value of every key of changelog partition `ctp` (tombstoned keys left out), as committed.

    `consumer` must be a read_committed consumer assigned `ctp`. RebuildError when the position stops moving
    before the end.
    """
    began = time.monotonic()
    start = (await consumer.beginning_offsets([ctp]))[ctp]
    end = (await consumer.end_offsets([ctp]))[ctp]
    values: dict[bytes, bytes] = {}
    read = 0
    if end <= start:
        return Changelog(values, read, time.monotonic() - began)
    consumer.seek(ctp, start)
    consumer.resume(ctp)
    moved = time.monotonic()
    position = start
    try:
        while position < end:
            fetched = (await consumer.getmany(ctp, timeout_ms=200, max_records=_FETCH)).get(ctp, [])
            for rec in fetched:
                if rec.offset >= end:
                    break
                read += 1
                if rec.key is None:
                    continue  # not the worker's (a compacted topic refuses keyless records anyway)
                if rec.value is None:
                    values.pop(rec.key, None)
                else:
                    values[rec.key] = rec.value
            now = await consumer.position(ctp)
            if now > position:
                position, moved = now, time.monotonic()
            elif time.monotonic() - moved > stall_timeout_s:
                raise RebuildError(f"reading changelog {ctp.topic}[{ctp.partition}] made no progress for "
                                   f"{stall_timeout_s:.0f}s at offset {position} of {end}")
    finally:
        consumer.pause(ctp)
    return Changelog(values, read, time.monotonic() - began)
