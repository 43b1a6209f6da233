"""Where an outcome's thread index records go: the index topic, in the partition Kafka's default partitioner gives
the record's thread among the output's partition count, after the run's events; one over the index topic's limit
is left out; with the index off (no thread partitioner) nothing goes there."""

from __future__ import annotations

import asyncio

from aiokafka import TopicPartition

from tests.kafka.puts import PutLog, put_all
from worker.client import partition_for
from worker.live.publishing import Destinations, KeyPartitioner, Sent
from worker.live.topics import TopicLimits
from worker.stream import Destination, OutboundRecord, Outcome, Verdict, index_record


def _destinations(index: bool, index_bytes: int = 10_000) -> Destinations:
    limits = TopicLimits(12, 100_000, 100_000, index_partitions=12 if index else None,
                         index_record_bytes=index_bytes if index else None)  # fmt: skip
    return Destinations("out", "dlq", "", "log", KeyPartitioner(12), limits, "index" if index else "",
                  KeyPartitioner(12) if index else None)  # fmt: skip


def _outcome(thread: str) -> Outcome:
    event = OutboundRecord(Destination.OUTPUT, b"run-1", b"{}", (), "RUN_STARTED", None)
    return Outcome(Verdict.PROCESSED, (event, index_record("run-1", thread, 0, 5, None)), "run-1", None)


def test_an_index_record_goes_to_its_threads_partition_of_the_index_topic() -> None:
    txn, sent = PutLog(), Sent()
    asyncio.run(put_all(txn, _outcome("thread-7"), _destinations(True), sent, TopicPartition("src", 0)))
    assert txn.puts == [("out", b"run-1", partition_for(b"run-1", 12)),
                       ("index", b"start:run-1", partition_for(b"thread-7", 12))]  # fmt: skip
    assert partition_for(b"thread-7", 12) != partition_for(b"run-1", 12), "the test needs two partitions"
    assert sent.index_records == 1


def test_an_index_record_over_the_limit_is_left_out_and_with_the_index_off_none_goes_anywhere() -> None:
    txn, sent = PutLog(), Sent()
    asyncio.run(put_all(txn, _outcome("t" * 20_000), _destinations(True), sent, TopicPartition("src", 0)))
    assert [topic for topic, _, _ in txn.puts] == ["out"] and sent.index_records == 0
    txn = PutLog()
    asyncio.run(put_all(txn, _outcome("thread-7"), _destinations(False), sent, TopicPartition("src", 0)))
    assert [topic for topic, _, _ in txn.puts] == ["out"]
