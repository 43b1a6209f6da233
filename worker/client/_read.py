"""Reading partitions up to end offsets taken at one moment: every reader that needs all of a range uses this (a
changelog's restore, a replay, `inspect`, the gateway's history reads and the loading of its display partitions).

A partition is read once the consumer's position reaches its end offset, not when a record at `end - 1` arrives:
transaction markers and the records of aborted transactions occupy offsets a read_committed consumer never
returns. One stall rule for every reader: once no position of the partitions still being read has moved for
`stall_s` seconds, the read fails with StalledReadError.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from worker.client._deadlines import backoff_s
from worker.errors import StalledReadError

__all__ = ["STALL_S", "EndWatch", "end_offsets", "read_to_end"]

STALL_S: Final = 30.0
"""How long a read may go without any of its positions moving before it fails."""
_END_OFFSET_TRIES: Final = 6
_POLL_MS: Final = 200


async def end_offsets(consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """The partitions' end offsets (for a read_committed consumer, the last stable offsets), asked again a few times,
    backing off, while the brokers fail to answer; the client's error after the last try."""
    attempt = 0
    while True:
        attempt += 1
        try:
            ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
        except KafkaError:
            if attempt >= _END_OFFSET_TRIES:
                raise
            await asyncio.sleep(backoff_s(attempt, 5.0))
        else:
            return ends


class EndWatch:
    """Partitions being read up to end offsets: which have reached theirs, and the stall rule."""

    __slots__ = ("_ends", "_moved", "_positions", "stall_s")

    def __init__(self, ends: Mapping[TopicPartition, int] | None = None, *, stall_s: float = STALL_S) -> None:
        self.stall_s = stall_s
        self._ends: dict[TopicPartition, int] = {}
        self._positions: dict[TopicPartition, int] = {}
        self._moved = time.monotonic()
        self.add(ends or {})

    def add(self, ends: Mapping[TopicPartition, int]) -> None:
        """Watch these partitions too, each read up to its end offset; the stall clock starts again."""
        self._ends.update(ends)
        self._moved = time.monotonic()

    def drop(self, tps: Iterable[TopicPartition]) -> None:
        """Stop watching these partitions (they are no longer read)."""
        for tp in tps:
            self._ends.pop(tp, None)
            self._positions.pop(tp, None)

    @property
    def ends(self) -> Mapping[TopicPartition, int]:
        """The partitions still being read, and the end offset each is read up to."""
        return self._ends

    def __bool__(self) -> bool:
        return bool(self._ends)

    async def reached(
        self, consumer: AIOKafkaConsumer, on_position: Callable[[TopicPartition, int], None] | None = None
    ) -> list[TopicPartition]:
        """The partitions whose position has reached their end offset, no longer watched; `on_position` hears each
        position asked. StalledReadError when no position of the others has moved for `stall_s` (told once per
        `stall_s`: the clock starts again)."""
        now = time.monotonic()
        done = []
        for tp, end in list(self._ends.items()):
            position: int = await consumer.position(tp)
            if on_position is not None:
                on_position(tp, position)
            if position > self._positions.get(tp, -1):
                self._positions[tp] = position
                self._moved = now
            if position >= end:
                done.append(tp)
        self.drop(done)
        if self._ends and now - self._moved > self.stall_s:
            self._moved = now
            tp, end = next(iter(self._ends.items()))
            raise StalledReadError(tp.topic, tp.partition, position=self._positions.get(tp, -1), end=end,
                                   seconds=self.stall_s, partitions=len(self._ends))
        return done


async def read_to_end(
    consumer: AIOKafkaConsumer, ends: Mapping[TopicPartition, int], *, stall_s: float = STALL_S,
    max_records: int = 1_000, on_position: Callable[[TopicPartition, int], None] | None = None,
) -> AsyncGenerator[dict[TopicPartition, list[Any]], None]:  # fmt: skip
    """Each fetch's records below the end offsets, by partition, reading each partition of `ends` (assigned to
    `consumer`) from its position to its end offset; a partition is paused once it has reached its end, before its
    last records are given out, and every partition still read is paused when the read stops early. Other tasks
    get a turn of the event loop after every fetch (getmany does not yield while a fetch is buffered);
    `on_position` hears each partition's position after each fetch. StalledReadError by the stall rule."""
    watch = EndWatch(ends, stall_s=stall_s)
    await watch.reached(consumer)
    consumer.resume(*watch.ends)
    try:
        while watch:
            fetched = await consumer.getmany(*watch.ends, timeout_ms=_POLL_MS, max_records=max_records)
            batch = {}
            for tp, records in fetched.items():
                end = watch.ends.get(tp)
                if end is None or not records:
                    continue
                below = records if records[-1].offset < end else [record for record in records if record.offset < end]
                if below:
                    batch[tp] = below
            # Paused before the loop turns: the client's fetcher would otherwise send a fetch from the end, which
            # the broker holds for up to fetch_max_wait_ms and which delays the consumer's next fetch and requests.
            for tp in await watch.reached(consumer, on_position):
                consumer.pause(tp)
            if batch:
                yield batch
            await asyncio.sleep(0)
    finally:
        assigned = consumer.assignment()
        consumer.pause(*(tp for tp in watch.ends if tp in assigned))  # a read stopped early leaves none fetching
