"""The changelog on a real broker: it holds exactly the state a worker reached, a rebuild restores it and replays
only the records after it, and every case without a usable checkpoint falls back to replay, says so, and leaves
the changelog equal to the state again."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from devtools.kafka_cluster import free_port
from tests.kafka.adversarial import adversarial_source
from tests.kafka.support import (
    Rec,
    WorkerProcess,
    assert_exactly_once,
    collect,
    corpus,
    expected_total,
    interleave,
    metric,
    produce,
    read_topic,
    reset_offsets,
    wait_caught_up,
)
from tests.stream._support import image
from worker.stream import PartitionState, SourceRecord

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

OPTIONS = {"max_open_streams": 6, "closed_stream_memory": 10}
LIMITS = ("--max-open-streams", "6", "--closed-stream-memory", "10")


def _folded(records: list[Rec]) -> dict[int, dict[bytes, bytes]]:
    """Each changelog partition's latest value per key, tombstoned keys left out: what compaction keeps."""
    out: dict[int, dict[bytes, bytes]] = defaultdict(dict)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        assert r.key is not None, r
        if r.value is None:
            out[r.partition].pop(r.key, None)
        else:
            out[r.partition][r.key] = r.value
    return dict(out)


def _images(source: list[Rec], topic: str, **options: int) -> dict[int, dict[bytes, bytes]]:
    """The state image of each source partition after all its records, computed without Kafka."""
    out = {}
    by_partition: dict[int, list[Rec]] = defaultdict(list)
    for r in source:
        by_partition[r.partition].append(r)
    for partition, recs in by_partition.items():
        state = PartitionState(topic, partition, **options)  # type: ignore[arg-type]
        for r in sorted(recs, key=lambda r: r.offset):
            state.process(SourceRecord(topic, partition, r.offset, 0, r.key, r.value, r.headers), publish=False)
        out[partition] = image(state, max(r.offset for r in recs) + 1)
    return out


async def _config(bootstrap: str, topic: str, name: str) -> str:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {name: None})])
        (resource,) = response.to_object()["resources"]
        return next(e["config_value"] for e in resource["config_entries"] if e["config_names"] == name)
    finally:
        await admin.close()


def _messages(w: WorkerProcess) -> list[str]:
    return [str(r.get("msg", "")) for r in w.log_records()]


def test_the_changelog_holds_exactly_the_state_the_worker_reached(
    kafka_bootstrap: str, topic_factory, tmp_path: Path
) -> None:
    source = topic_factory("source", partitions=2)
    output, dlq = topic_factory("output", partitions=2), topic_factory("dlq")
    group = f"group-{source}"
    asyncio.run(produce(kafka_bootstrap, source, adversarial_source(7).records))
    w = WorkerProcess(tmp_path, "w1", kafka_bootstrap, source, output, dlq, group, *LIMITS,
                      "--checkpoint-interval-ms", "200").start()
    try:
        asyncio.run(wait_caught_up(kafka_bootstrap, group, source, timeout_s=120))
        assert w.stop() == 0, w.log()[-3000:]
    finally:
        if w.alive:
            w.kill()
    changelog = f"{group}.changelog"
    assert asyncio.run(_config(kafka_bootstrap, changelog, "cleanup.policy")) == "compact"
    written = asyncio.run(read_topic(kafka_bootstrap, changelog))
    folded = _folded(written)
    expected = _images(asyncio.run(read_topic(kafka_bootstrap, source)), source, **OPTIONS)
    assert set(folded) == set(expected) == {0, 1}
    for partition, whole in expected.items():
        assert folded[partition] == whole, f"changelog partition {partition} differs from the state image"
    assert any(r.value is None for r in written), "ended streams must leave tombstones"


def test_a_rebuild_restores_the_checkpoint_and_replays_only_the_tail(
    kafka_bootstrap: str, topic_factory, tmp_path: Path
) -> None:
    source = topic_factory("source", partitions=1)
    output, dlq = topic_factory("output", partitions=2), topic_factory("dlq")
    group = f"group-{source}"
    runs = corpus(copies=1)
    records = interleave(runs)
    # The first commit checkpoints (there is no checkpoint yet); the next one is an hour away.
    w1 = WorkerProcess(tmp_path, "w1", kafka_bootstrap, source, output, dlq, group,
                       "--checkpoint-interval-ms", "3600000").start()

    async def first_half() -> None:
        await produce(kafka_bootstrap, source, records[:300])
        await wait_caught_up(kafka_bootstrap, group, source, timeout_s=60)
        await produce(kafka_bootstrap, source, records[300:600])
        await wait_caught_up(kafka_bootstrap, group, source, timeout_s=60)

    try:
        asyncio.run(first_half())
        w1.kill()
        w2 = WorkerProcess(tmp_path, "w2", kafka_bootstrap, source, output, dlq, group).start()
        asyncio.run(produce(kafka_bootstrap, source, records[600:]))
        out = asyncio.run(collect(kafka_bootstrap, output, expect=expected_total(runs), timeout_s=120))
        assert_exactly_once(out, runs)
        assert w2.stop() == 0, w2.log()[-3000:]
    finally:
        for w in (w1, w2):
            if w.alive:
                w.kill()
    rebuilt = [m for m in _messages(w2) if m.startswith("partition rebuilt")]
    assert len(rebuilt) == 1 and rebuilt[0].startswith("partition rebuilt: restored"), rebuilt
    # Restored at the first commit's offset (within the first 300 records), then [K, 600) replayed.
    said = rebuilt[0]
    k = int(said.split("from the changelog at offset ")[1].split(",")[0])
    replayed = int(said.split(", replayed ")[1].split(" ")[0])
    assert 0 < k <= 300 and replayed == 600 - k, said


def test_an_offset_reset_below_the_checkpoint_discards_it_and_the_changelog_is_rewritten(
    kafka_bootstrap: str, topic_factory, tmp_path: Path
) -> None:
    source = topic_factory("source", partitions=1)
    dlq = topic_factory("dlq")
    group = f"group-{source}"
    trouble = adversarial_source(11)
    asyncio.run(produce(kafka_bootstrap, source, trouble.records))
    first = topic_factory("output", partitions=2)
    w1 = WorkerProcess(tmp_path, "w1", kafka_bootstrap, source, first, dlq, group, *LIMITS).start()
    try:
        asyncio.run(wait_caught_up(kafka_bootstrap, group, source, timeout_s=120))
        assert w1.stop() == 0, w1.log()[-3000:]
    finally:
        if w1.alive:
            w1.kill()
    # Replay from the start into a fresh output topic, remembering fewer ended streams: the checkpoint is beyond
    # the committed offset, so it is discarded, and the changelog must then lose the entries this state forgets.
    asyncio.run(reset_offsets(kafka_bootstrap, group, source, 0))
    second = topic_factory("output", partitions=2)
    port = free_port()
    w2 = WorkerProcess(tmp_path, "w2", kafka_bootstrap, source, second, dlq, group, "--max-open-streams", "6",
                       "--closed-stream-memory", "3", metrics_port=port).start()
    try:
        asyncio.run(wait_caught_up(kafka_bootstrap, group, source, timeout_s=120))
        assert metric(port, "harness_agui_changelog_fallbacks_total", reason="ahead") == 1
        assert w2.stop() == 0, w2.log()[-3000:]
    finally:
        if w2.alive:
            w2.kill()
    a, b = asyncio.run(read_topic(kafka_bootstrap, first)), asyncio.run(read_topic(kafka_bootstrap, second))
    assert a and b, "both passes publish"
    folded = _folded(asyncio.run(read_topic(kafka_bootstrap, f"{group}.changelog")))
    expected = _images(asyncio.run(read_topic(kafka_bootstrap, source)), source, max_open_streams=6,
                       closed_stream_memory=3)
    assert folded == expected


def test_an_unknown_format_holds_its_partition_and_an_unreadable_one_falls_back(
    kafka_bootstrap: str, topic_factory, tmp_path: Path
) -> None:
    source = topic_factory("source", partitions=2)
    output, dlq = topic_factory("output", partitions=2), topic_factory("dlq")
    group = f"group-{source}"
    changelog = topic_factory("changelog", partitions=2, config={"cleanup.policy": "compact"})

    async def plant() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(changelog, b'{"format":99,"offset":0}', key=b"partition", partition=0)
            await producer.send_and_wait(changelog, b"not json", key=b"partition", partition=1)
        finally:
            await producer.stop()

    asyncio.run(plant())
    runs = corpus(copies=1, names=["s01_hello", "s02_tool_roundtrip", "r0001", "r0002", "r0003", "r0004"])
    asyncio.run(produce(kafka_bootstrap, source, interleave(runs)))
    port = free_port()
    w = WorkerProcess(tmp_path, "w1", kafka_bootstrap, source, output, dlq, group, "--changelog-topic", changelog,
                      metrics_port=port).start()
    try:
        deadline = time.monotonic() + 60
        while not any(m.startswith("partition held") for m in _messages(w)):
            assert time.monotonic() < deadline and w.alive, w.log()[-3000:]
            time.sleep(0.2)
        held = next(m for m in _messages(w) if m.startswith("partition held"))
        assert "checkpoint format 99" in held, held
        asyncio.run(wait_caught_up(kafka_bootstrap, group, source, timeout_s=60, partitions={1}))
        assert metric(port, "harness_agui_changelog_fallbacks_total", reason="unreadable") == 1
        assert metric(port, "harness_agui_partition_ready", partition="0") == 0
        assert metric(port, "harness_agui_partition_ready", partition="1") == 1
        assert w.stop() == 0, w.log()[-3000:]
    finally:
        if w.alive:
            w.kill()

