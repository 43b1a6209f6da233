"""Where an outcome's thread index records go: the index topic, in the partition Kafka's default partitioner gives
the record's thread among the output's partition count, after the run's events; one over the index topic's limit
is left out; with the index off (no thread router) nothing goes there."""

from __future__ import annotations

import asyncio

from aiokafka import TopicPartition

from worker.client import partition_for
from worker.live.publishing import KeyRouter, Routes, Sent, put_outcome
from worker.live.topics import TopicLimits
from worker.stream import Destination, OutboundRecord, Outcome, Verdict, index_record


class _Txn:
    """An open transaction that records what is put into it."""

    def __init__(self) -> None:
        self.put: list[tuple[str, bytes | None, int | None]] = []

    def append(self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]],
               partition: int) -> bool:  # fmt: skip
        self.put.append((topic, key, partition))
        return True

    async def send(self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]],
                   partition: int | None = None) -> None:  # fmt: skip
        self.put.append((topic, key, partition))


def _routes(index: bool, index_bytes: int = 10_000) -> Routes:
    limits = TopicLimits(12, 100_000, 100_000, index_partitions=12 if index else None,
                         index_record_bytes=index_bytes if index else None)  # fmt: skip
    return Routes("out", "dlq", "", "log", KeyRouter(12), limits, "index" if index else "",
                  KeyRouter(12) if index else None)  # fmt: skip


def _outcome(thread: str) -> Outcome:
    event = OutboundRecord(Destination.OUTPUT, b"run-1", b"{}", (), "RUN_STARTED", None)
    return Outcome(Verdict.PROCESSED, (event, index_record("run-1", thread, 0, 5, None)), "run-1", None)


def test_an_index_record_goes_to_its_threads_partition_of_the_index_topic() -> None:
    txn, sent = _Txn(), Sent()
    asyncio.run(put_outcome(txn, _outcome("thread-7"), _routes(True), sent, TopicPartition("src", 0)))
    assert txn.put == [("out", b"run-1", partition_for(b"run-1", 12)),
                       ("index", b"start:run-1", partition_for(b"thread-7", 12))]  # fmt: skip
    assert partition_for(b"thread-7", 12) != partition_for(b"run-1", 12), "the test needs two partitions"
    assert sent.index_records == 1


def test_an_index_record_over_the_limit_is_left_out_and_with_the_index_off_none_goes_anywhere() -> None:
    txn, sent = _Txn(), Sent()
    asyncio.run(put_outcome(txn, _outcome("t" * 20_000), _routes(True), sent, TopicPartition("src", 0)))
    assert [topic for topic, _, _ in txn.put] == ["out"] and sent.index_records == 0
    txn = _Txn()
    asyncio.run(put_outcome(txn, _outcome("thread-7"), _routes(False), sent, TopicPartition("src", 0)))
    assert [topic for topic, _, _ in txn.put] == ["out"]
