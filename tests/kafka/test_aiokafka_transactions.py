"""aiokafka 0.14 transactions against a Kafka 4.x broker: the guarantees the worker's exactly-once design needs.

Commit/abort visibility under read_committed, consumer-group offsets (with metadata) committed atomically
with the output, fencing by transactional id, and offset holes left by transaction markers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, OffsetMetadataTooLargeError, ProducerFenced
from aiokafka.structs import OffsetAndMetadata

from devtools.kafka_cluster import KafkaCluster
from tests.kafka.conftest import TopicFactory, UniqueNames

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


async def _txn_producer(bootstrap: str, transactional_id: str) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id, enable_idempotence=True)
    await producer.start()
    return producer


async def _drain(
    bootstrap: str, tp: TopicPartition, isolation: str = "read_committed"
) -> tuple[list[tuple[int, bytes]], int]:
    """(offset, value) of every record visible under `isolation`, and the position reached at the log end."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation)
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        # Under read_committed the end offset is the last stable offset: nothing past it is readable yet.
        end = (await consumer.end_offsets([tp]))[tp]
        seen: list[tuple[int, bytes]] = []
        async with asyncio.timeout(60):
            while await consumer.position(tp) < end:
                batch = await consumer.getmany(tp, timeout_ms=500)
                seen.extend((r.offset, r.value) for r in batch.get(tp, []))
        return seen, await consumer.position(tp)
    finally:
        await consumer.stop()


@pytest.fixture
async def plain_producer(kafka_bootstrap: str) -> AsyncIterator[AIOKafkaProducer]:
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    yield producer
    await producer.stop()


async def test_committed_transaction_is_visible_to_read_committed(
    kafka_bootstrap: str, topic_factory: TopicFactory, unique_names: UniqueNames
) -> None:
    tp = TopicPartition(topic_factory("out"), 0)
    producer = await _txn_producer(kafka_bootstrap, unique_names("txn"))
    try:
        async with producer.transaction():
            for value in (b"a", b"b", b"c"):
                await producer.send(tp.topic, value, partition=0)
    finally:
        await producer.stop()
    seen, _ = await _drain(kafka_bootstrap, tp)
    assert [v for _, v in seen] == [b"a", b"b", b"c"]


async def test_aborted_transaction_is_invisible_to_read_committed_only(
    kafka_bootstrap: str, topic_factory: TopicFactory, unique_names: UniqueNames
) -> None:
    tp = TopicPartition(topic_factory("out"), 0)
    producer = await _txn_producer(kafka_bootstrap, unique_names("txn"))
    try:
        await producer.begin_transaction()
        await producer.send_and_wait(tp.topic, b"aborted-1", partition=0)
        await producer.send_and_wait(tp.topic, b"aborted-2", partition=0)
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(tp.topic, b"kept", partition=0)
    finally:
        await producer.stop()
    committed, _ = await _drain(kafka_bootstrap, tp)
    assert [v for _, v in committed] == [b"kept"]
    # The aborted records were really written: read_uncommitted sees them.
    uncommitted, _ = await _drain(kafka_bootstrap, tp, "read_uncommitted")
    assert [v for _, v in uncommitted] == [b"aborted-1", b"aborted-2", b"kept"]


async def _settle(bootstrap: str, transactional_id: str) -> None:
    """Start and stop a producer with `transactional_id`: InitProducerId waits until the id's last transaction
    is complete, including its offset commit (aiokafka's OffsetFetch v<=3 has no require_stable, so right
    after commit_transaction() a committed() read can still return the previous offset)."""
    producer = await _txn_producer(bootstrap, transactional_id)
    await producer.stop()


async def _group_offsets(bootstrap: str, group: str, tp: TopicPartition) -> OffsetAndMetadata:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return (await admin.list_consumer_group_offsets(group, partitions=[tp]))[tp]
    finally:
        await admin.close()


async def test_send_offsets_commits_group_offset_and_metadata_with_the_output(
    kafka_bootstrap: str,
    topic_factory: TopicFactory,
    unique_names: UniqueNames,
    plain_producer: AIOKafkaProducer,
) -> None:
    source = TopicPartition(topic_factory("in"), 0)
    out = TopicPartition(topic_factory("out"), 0)
    group, transactional_id = unique_names("group"), unique_names("txn")
    for i in range(5):
        await plain_producer.send_and_wait(source.topic, f"in-{i}".encode(), partition=0)

    # An active group member (as in the worker): TxnOffsetCommit v0 carries no generation, so the
    # broker must accept it for a non-empty classic group.
    consumer = AIOKafkaConsumer(
        source.topic,
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    await consumer.start()
    try:
        records = []
        async with asyncio.timeout(60):
            while len(records) < 5:
                batch = await consumer.getmany(timeout_ms=500)
                records.extend(batch.get(source, []))
        assert consumer.assignment() == {source}

        producer = await _txn_producer(kafka_bootstrap, transactional_id)
        try:
            async with producer.transaction():
                for record in records:
                    await producer.send(out.topic, record.value.upper(), partition=0)
                await producer.send_offsets_to_transaction({source: OffsetAndMetadata(5, '{"replay_from":2}')}, group)
        finally:
            await producer.stop()
        await _settle(kafka_bootstrap, transactional_id)
        assert await consumer.committed(source) == 5
        assert await _group_offsets(kafka_bootstrap, group, source) == (5, '{"replay_from":2}')

        # An aborted transaction moves neither the output nor the group's offset or metadata.
        producer = await _txn_producer(kafka_bootstrap, transactional_id)
        try:
            await producer.begin_transaction()
            await producer.send_and_wait(out.topic, b"never", partition=0)
            await producer.send_offsets_to_transaction({source: OffsetAndMetadata(4, "aborted")}, group)
            await producer.abort_transaction()
        finally:
            await producer.stop()
        await _settle(kafka_bootstrap, transactional_id)
        assert await consumer.committed(source) == 5
        assert await _group_offsets(kafka_bootstrap, group, source) == (5, '{"replay_from":2}')
    finally:
        await consumer.stop()
    seen, _ = await _drain(kafka_bootstrap, out)
    assert [v for _, v in seen] == [f"IN-{i}".encode() for i in range(5)]


async def test_the_offsets_sent_last_in_a_transaction_are_the_ones_committed(
    kafka_bootstrap: str, topic_factory: TopicFactory, unique_names: UniqueNames
) -> None:
    """The checkpoint sends an early offset once a transaction's first batches are delivered and the final one
    at its commit; the broker must keep the last one sent, whether higher or lower (not the first, not the highest)."""
    source = TopicPartition(topic_factory("in"), 0)
    group, transactional_id = unique_names("group"), unique_names("txn")
    for early, final in ((3, 5), (9, 4)):
        producer = await _txn_producer(kafka_bootstrap, transactional_id)
        try:
            await producer.begin_transaction()
            await producer.send_offsets_to_transaction({source: OffsetAndMetadata(early, "early")}, group)
            await producer.send_offsets_to_transaction({source: OffsetAndMetadata(final, "final")}, group)
            await producer.commit_transaction()
        finally:
            await producer.stop()
        await _settle(kafka_bootstrap, transactional_id)
        assert await _group_offsets(kafka_bootstrap, group, source) == (final, "final")


async def test_oversized_offset_metadata_fails_the_transaction_and_the_producer(
    kafka_bootstrap: str, topic_factory: TopicFactory, unique_names: UniqueNames
) -> None:
    """Metadata above the broker's offset.metadata.max.bytes (4096) is OFFSET_METADATA_TOO_LARGE; aiokafka
    surfaces it as a bare KafkaError and leaves the producer in FATAL_ERROR, so it must be recreated."""
    source = TopicPartition(topic_factory("in"), 0)
    out = TopicPartition(topic_factory("out"), 0)
    group, transactional_id = unique_names("group"), unique_names("txn")
    producer = await _txn_producer(kafka_bootstrap, transactional_id)
    try:
        with pytest.raises(KafkaError) as failure:
            async with producer.transaction():
                await producer.send(out.topic, b"lost", partition=0)
                await producer.send_offsets_to_transaction({source: OffsetAndMetadata(1, "x" * 4097)}, group)
        assert isinstance(failure.value.__cause__, OffsetMetadataTooLargeError)
        with pytest.raises(AssertionError, match="FATAL_ERROR"):
            await producer.begin_transaction()
    finally:
        await producer.stop()
    await _settle(kafka_bootstrap, transactional_id)
    assert await _group_offsets(kafka_bootstrap, group, source) == (-1, "")
    assert (await _drain(kafka_bootstrap, out))[0] == []


async def test_new_producer_with_same_transactional_id_fences_the_old_one(
    kafka_bootstrap: str, topic_factory: TopicFactory, unique_names: UniqueNames
) -> None:
    tp = TopicPartition(topic_factory("out"), 0)
    transactional_id = unique_names("txn")
    zombie = await _txn_producer(kafka_bootstrap, transactional_id)
    successor: AIOKafkaProducer | None = None
    try:
        await zombie.begin_transaction()
        await zombie.send_and_wait(tp.topic, b"zombie-open", partition=0)
        # InitProducerId for the same id bumps the epoch and aborts the zombie's open transaction.
        successor = await _txn_producer(kafka_bootstrap, transactional_id)
        with pytest.raises(ProducerFenced):
            await zombie.commit_transaction()
        async with successor.transaction():
            await successor.send(tp.topic, b"successor", partition=0)
    finally:
        await zombie.stop()
        if successor is not None:
            await successor.stop()
    seen, _ = await _drain(kafka_bootstrap, tp)
    assert [v for _, v in seen] == [b"successor"]


async def test_fenced_producer_cannot_start_a_new_transaction(
    kafka_bootstrap: str, topic_factory: TopicFactory, unique_names: UniqueNames
) -> None:
    tp = TopicPartition(topic_factory("out"), 0)
    transactional_id = unique_names("txn")
    zombie = await _txn_producer(kafka_bootstrap, transactional_id)
    successor = await _txn_producer(kafka_bootstrap, transactional_id)
    try:
        with pytest.raises(ProducerFenced):
            async with zombie.transaction():
                await zombie.send_and_wait(tp.topic, b"zombie-late", partition=0)
    finally:
        await zombie.stop()
        await successor.stop()
    seen, _ = await _drain(kafka_bootstrap, tp)
    assert seen == []


async def test_transaction_markers_leave_offset_holes(
    kafka_bootstrap: str, topic_factory: TopicFactory, unique_names: UniqueNames
) -> None:
    tp = TopicPartition(topic_factory("out"), 0)
    producer = await _txn_producer(kafka_bootstrap, unique_names("txn"))
    try:
        async with producer.transaction():  # records at 0, 1; commit marker at 2
            await producer.send(tp.topic, b"r0", partition=0)
            await producer.send(tp.topic, b"r1", partition=0)
        await producer.begin_transaction()  # record at 3; abort marker at 4
        await producer.send_and_wait(tp.topic, b"gone", partition=0)
        await producer.abort_transaction()
        async with producer.transaction():  # record at 5; commit marker at 6
            await producer.send(tp.topic, b"r5", partition=0)
    finally:
        await producer.stop()
    seen, position = await _drain(kafka_bootstrap, tp)
    assert seen == [(0, b"r0"), (1, b"r1"), (5, b"r5")]
    # The consumer's position passes the trailing marker although no record sits at offset 6.
    assert position == 7


@pytest.mark.cluster3
async def test_transactions_continue_after_the_transaction_coordinator_crashes(
    cluster3: KafkaCluster, cluster3_topics: TopicFactory, unique_names: UniqueNames
) -> None:
    bootstrap = cluster3.bootstrap_servers
    source = TopicPartition(cluster3_topics("in"), 0)
    out = TopicPartition(cluster3_topics("out"), 0)
    group, transactional_id = unique_names("group"), unique_names("txn")
    producer = await _txn_producer(bootstrap, transactional_id)
    try:
        async with producer.transaction():
            await producer.send(out.topic, b"one", partition=0)
            await producer.send_offsets_to_transaction({source: OffsetAndMetadata(1, "m1")}, group)
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            coordinator = await admin.find_coordinator(transactional_id, coordinator_type=1)
        finally:
            await admin.close()
        await cluster3.stop_node_async(cluster3.index_of(coordinator), kill=True)
        async with producer.transaction():
            await producer.send(out.topic, b"two", partition=0)
            await producer.send_offsets_to_transaction({source: OffsetAndMetadata(2, "m2")}, group)
    finally:
        await producer.stop()
    await _settle(bootstrap, transactional_id)
    assert await _group_offsets(bootstrap, group, source) == (2, "m2")
    seen, _ = await _drain(bootstrap, out)
    assert [v for _, v in seen] == [b"one", b"two"]
