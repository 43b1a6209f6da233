"""The loopback Kafka launcher gives a working broker, and a three-node cluster survives losing a leader."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from devtools.kafka_cluster import KafkaCluster, create_topic_on
from tests.kafka.conftest import KafkaBroker, TopicFactory, UniqueNames
from worker.errors import ConfigError, KafkaWorkerError

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


async def _read_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """All values of partition 0 from the beginning, once `count` have arrived (60 s guard against hangs)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        async with asyncio.timeout(60):
            while len(values) < count:
                batch = await consumer.getmany(tp, timeout_ms=500)
                values.extend(record.value for record in batch.get(tp, []))
        return values
    finally:
        await consumer.stop()


async def _isr(bootstrap: str, topic: str) -> list[int]:
    """The in-sync replicas of partition 0, once the node answering knows the topic (metadata spreads to
    each node on its own, so a node other than the one that confirmed the creation may lag for a moment)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        deadline = time.monotonic() + 10
        while True:
            (info,) = await admin.describe_topics([topic])
            if info["partitions"] or time.monotonic() > deadline:
                return sorted(info["partitions"][0]["isr"])
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def test_session_broker_round_trips_a_record(kafka_broker: KafkaBroker, topic_factory: TopicFactory) -> None:
    topic = topic_factory("rt")
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers, acks="all")
    await producer.start()
    try:
        meta = await producer.send_and_wait(topic, b"hello", key=b"k")
    finally:
        await producer.stop()
    assert (meta.topic, meta.partition, meta.offset) == (topic, 0, 0)
    assert await _read_values(kafka_broker.bootstrap_servers, topic, 1) == [b"hello"]


async def test_topics_are_not_auto_created(kafka_broker: KafkaBroker, unique_names: UniqueNames) -> None:
    missing = unique_names("missing")
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap_servers)
    await admin.start()
    try:
        described = await admin.describe_topics([missing])
        assert [t["topic"] for t in described] == [missing]
        assert described[0]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION, not a fresh topic
        assert missing not in await admin.list_topics()
    finally:
        await admin.close()


def test_invalid_requests_name_the_offending_value() -> None:
    with pytest.raises(ConfigError, match="nodes=0"):
        KafkaCluster.start(nodes=0)


@pytest.mark.cluster3
def test_a_node_index_out_of_range_is_named(cluster3: KafkaCluster) -> None:
    with pytest.raises(ConfigError, match="got 7"):
        cluster3.stop_node(7)
    assert all(cluster3.is_running(i) for i in range(cluster3.size))


def test_creating_an_existing_topic_is_an_error(kafka_broker: KafkaBroker, topic_factory: TopicFactory) -> None:
    topic = topic_factory("dup")
    with pytest.raises(KafkaWorkerError, match=rf"{topic}.*error code 36"):  # TOPIC_ALREADY_EXISTS
        create_topic_on(kafka_broker.bootstrap_servers, topic)


@pytest.mark.cluster3
@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
async def test_acks_all_survives_leader_loss_and_the_node_rejoins(
    cluster3: KafkaCluster, cluster3_topics: TopicFactory, kill: bool
) -> None:
    topic = cluster3_topics("failover")
    bootstrap = cluster3.bootstrap_servers
    assert await _isr(bootstrap, topic) == [1, 2, 3]
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, request_timeout_ms=30000
    )
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"before")
        leader_id = cluster3.leader_of(topic)
        assert leader_id in (1, 2, 3)
        leader = cluster3.index_of(leader_id)
        starts = cluster3.log_path(leader).read_text().count("Kafka Server started")
        await cluster3.stop_node_async(leader, kill=kill)
        assert not cluster3.is_running(leader)
        # acks=all with min ISR 2: the write must reach the two survivors once a new leader is elected.
        meta = await producer.send_and_wait(topic, b"after")
        assert meta.offset == 1
        assert cluster3.leader_of(topic) not in (leader_id, -1)
    finally:
        await producer.stop()
    assert await _read_values(bootstrap, topic, 2) == [b"before", b"after"]

    await cluster3.start_node_async(leader)
    # The restarted node kept its data directory and catches up into the ISR again.
    deadline = time.monotonic() + 60
    while await _isr(bootstrap, topic) != [1, 2, 3]:
        assert time.monotonic() < deadline, f"node {cluster3.node_id(leader)} never rejoined the ISR of {topic}"
        await asyncio.sleep(0.5)
    assert cluster3.log_path(leader).read_text().count("Kafka Server started") == starts + 1
