"""Reading to end offsets without a broker: done by position (markers occupy offsets no record has), records at or
past the end left out, each partition paused once read, and one stall rule for every reader."""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

import pytest
from aiokafka import TopicPartition

from worker.client import EndWatch, read_to_end
from worker.errors import KafkaWorkerError, StalledReadError

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


class Rec(NamedTuple):
    offset: int


class Log:
    """A consumer over fixed partitions: each fetch returns up to `step` records from the position, and the position
    moves past offsets that hold no record (a transaction marker); `stuck` partitions never move."""

    def __init__(self, offsets: dict[TopicPartition, list[int]], ends: dict[TopicPartition, int], step: int = 2,
                 stuck: frozenset[TopicPartition] = frozenset()) -> None:  # fmt: skip
        self.offsets, self.ends, self.step, self.stuck = offsets, ends, step, stuck
        self.at = dict.fromkeys(offsets, 0)
        self.paused: set[TopicPartition] = set(offsets)
        self.fetched: list[tuple[TopicPartition, ...]] = []

    async def position(self, tp: TopicPartition) -> int:
        return self.at[tp]

    def assignment(self) -> set[TopicPartition]:
        return set(self.offsets)

    def pause(self, *tps: TopicPartition) -> None:
        self.paused.update(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.paused.difference_update(tps)

    async def getmany(self, *tps: TopicPartition, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[Any]]:
        self.fetched.append(tps)
        got = {}
        for tp in tps:
            if tp in self.paused or tp in self.stuck:
                continue
            records = [Rec(o) for o in self.offsets[tp] if o >= self.at[tp]][: self.step]
            if records:
                got[tp] = records
                self.at[tp] = records[-1].offset + 1
            else:
                self.at[tp] = self.ends[tp]  # only markers were left
        if not got:
            await asyncio.sleep(timeout_ms / 1000 / 20)
        return got


async def _all(consumer: Any, ends: dict[TopicPartition, int], **options: Any) -> dict[TopicPartition, list[int]]:
    read: dict[TopicPartition, list[int]] = {}
    async for batch in read_to_end(consumer, ends, **options):
        for tp, records in batch.items():
            read.setdefault(tp, []).extend(record.offset for record in records)
    return read


def test_a_partition_is_read_when_its_position_reaches_the_end_not_a_record() -> None:
    # Offsets 4 and 5 hold the commit markers: no record ever arrives at end - 1.
    log = Log({A: [0, 1, 2, 3], B: [0, 1, 2, 3, 4, 5, 6, 7]}, {A: 6, B: 9})
    read = asyncio.run(_all(log, {A: 6, B: 5}))
    assert read == {A: [0, 1, 2, 3], B: [0, 1, 2, 3, 4]}, "records at or past an end are left out"
    assert log.paused == {A, B}, "each partition is paused once read"


def test_a_partition_is_paused_before_its_last_records_are_given_out() -> None:
    # The client's fetcher sends the next fetch at the loop's next turn: one from the end would be held by the
    # broker and hold up the consumer's next read.
    async def main() -> None:
        log = Log({A: [0, 1, 2, 3], B: [0, 1, 2, 3, 4, 5]}, {A: 4, B: 6})
        async for batch in read_to_end(log, {A: 4, B: 6}):
            for tp, records in batch.items():
                ended = records[-1].offset == log.ends[tp] - 1
                assert (tp in log.paused) == ended, f"{tp} paused when given out up to {records[-1].offset}"

    asyncio.run(main())


def test_a_read_stopped_early_leaves_its_partitions_paused() -> None:
    async def main() -> None:
        log = Log({A: [0, 1, 2, 3], B: [0, 1, 2, 3]}, {A: 4, B: 4})
        fetches = read_to_end(log, {A: 4, B: 4})
        first = await anext(fetches)
        assert set(first) == {A, B} and not log.paused, "read on after the first fetch"
        await fetches.aclose()
        assert log.paused == {A, B}, "nothing left fetching once the read stopped"

    asyncio.run(main())


def test_a_partition_already_at_its_end_is_not_fetched() -> None:
    log = Log({A: [0, 1]}, {A: 2})
    log.at[A] = 2
    assert asyncio.run(_all(log, {A: 2})) == {}
    assert log.fetched == []


def test_a_read_whose_positions_stay_fails_by_the_stall_rule() -> None:
    log = Log({A: [0, 1, 2, 3], B: [0, 1]}, {A: 4, B: 2}, step=1, stuck=frozenset({B}))
    with pytest.raises(StalledReadError) as raised:
        asyncio.run(_all(log, {A: 4, B: 2}, stall_s=0.2))
    error = raised.value
    assert isinstance(error, KafkaWorkerError)
    assert (error.topic, error.partition, error.position, error.end) == ("t", 1, 0, 2)
    assert str(error) == "reading t[1] made no progress for 0.2 s at offset 0 of 2"


def test_a_slow_read_that_moves_is_no_stall() -> None:
    log = Log({A: list(range(12))}, {A: 12}, step=1)
    assert asyncio.run(_all(log, {A: 12}, stall_s=0.2)) == {A: list(range(12))}


def test_a_watch_reports_partitions_once_read_and_tells_a_stall_once_per_period() -> None:
    async def main() -> None:
        log = Log({A: [0, 1], B: [0, 1]}, {A: 2, B: 2}, stuck=frozenset({B}))
        watch = EndWatch({A: 2, B: 2}, stall_s=0.05)
        assert await watch.reached(log) == []
        log.at[A] = 2
        assert await watch.reached(log) == [A]
        assert dict(watch.ends) == {B: 2}
        await asyncio.sleep(0.06)
        with pytest.raises(StalledReadError):
            await watch.reached(log)
        assert await watch.reached(log) == [], "the stall clock started again"
        watch.drop([B])
        assert not watch

    asyncio.run(main())
