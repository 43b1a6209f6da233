"""A real worker publishes the recorded bytes for the golden runs: the output, display, thread index and dead-letter
topics and the compacted changelog equal `tests/data/golden-bytes.json`, through a graceful stop and a restart from the
changelog half-way.

The source is the adversarial mix of the golden runs (duplicates, mis-keyed items, gaps, poison), with fixed
timestamps and partitions, so every run of this test publishes the same bytes; the source topic's generated name is
replaced by `SOURCE` wherever it appears (dead-letter headers, the changelog's partition records). A refactor of the
partition task, its transactions or the partition state that changes a byte of what reaches Kafka fails here.
"""

from __future__ import annotations

import asyncio
import zlib
from collections import defaultdict
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from tests.golden_bytes import Digest, changelog_value, check
from tests.kafka.adversarial import adversarial_source
from tests.kafka.support import Rec, WorkerProcess, read_topic, wait_caught_up

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(400)]

SEED = 20261201
PARTITIONS = 3
BASE_MS = 1_748_736_000_000
ARGS = ("--max-open-streams", "6", "--closed-stream-memory", "10", "--display-interval-ms", "250",
        "--checkpoint-interval-ms", "200")  # fmt: skip


async def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], first: int) -> None:
    """Send records to the partition a hash of their key picks, timestamped 40 ms apart from `first`."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5)
    await producer.start()
    try:
        sent = [
            await producer.send(topic, value=value, key=key, partition=zlib.crc32(key) % PARTITIONS,
                                timestamp_ms=BASE_MS + 40 * (first + i))
            for i, (key, value) in enumerate(records)
        ]  # fmt: skip
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


def _named(data: bytes | None, source: str) -> bytes | None:
    return None if data is None else data.replace(source.encode(), b"SOURCE")


def _by_key(records: list[Rec], source: str) -> list[tuple[object, ...]]:
    """Each key's records in publication order, keys in order, the source's name replaced."""
    grouped: dict[bytes | None, list[Rec]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        grouped[r.key].append(r)
    return [(key, r.partition, _named(r.value, source), tuple((k, _named(v, source)) for k, v in r.headers))
            for key in sorted(grouped, key=lambda k: k or b"") for r in grouped[key]]  # fmt: skip


def _dead_letters(records: list[Rec], source: str) -> list[tuple[object, ...]]:
    """Dead letters by the source partition and offset they stand for."""
    rows = [(int(r.header("dlq-source-partition")), int(r.header("dlq-source-offset")), r.key, r.value,
             tuple((k, _named(v, source)) for k, v in r.headers)) for r in records]  # fmt: skip
    return sorted(rows, key=lambda row: (row[0], row[1]))


def _changelog(records: list[Rec], source: str) -> list[tuple[object, ...]]:
    """What compaction keeps of each changelog partition: the latest value per key, tombstoned keys left out."""
    folded: dict[int, dict[bytes, bytes]] = defaultdict(dict)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        assert r.key is not None and not r.headers, r
        if r.value is None:
            folded[r.partition].pop(r.key, None)
        else:
            folded[r.partition][r.key] = r.value
    return [(partition, key, changelog_value(_named(value, source)))
            for partition in sorted(folded) for key, value in sorted(folded[partition].items())]  # fmt: skip


def test_a_worker_publishes_the_recorded_bytes(
    kafka_bootstrap: str, topic_factory, unique_names, tmp_path: Path
) -> None:
    records = adversarial_source(SEED).records
    half = len(records) // 2
    source = topic_factory("source", partitions=PARTITIONS)
    output = topic_factory("out", partitions=3, config={"max.message.bytes": "16896"})  # the least the worker takes
    dlq = topic_factory("dlq", partitions=2)
    group, display, index = f"group-{source}", unique_names("display"), unique_names("index")
    workers: list[WorkerProcess] = []

    async def phase(name: str, part: list[tuple[bytes, bytes]], first: int) -> None:
        await _produce(kafka_bootstrap, source, part, first)
        worker = WorkerProcess(tmp_path, name, kafka_bootstrap, source, output, dlq, group, *ARGS,
                               "--display-topic", display, "--thread-index-topic", index).start()  # fmt: skip
        workers.append(worker)
        await wait_caught_up(kafka_bootstrap, group, source, timeout_s=180)
        assert worker.stop() == 0, worker.log()[-3000:]

    try:
        asyncio.run(phase("first", records[:half], 0))
        asyncio.run(phase("second", records[half:], half))
        said = [str(r.get("msg", "")) for r in workers[1].log_records()]
        assert any(m.startswith("partition rebuilt: restored") for m in said), said
    except AssertionError:
        for w in workers:
            print(f"---- {w.log_path.name}\n{w.log()[-2500:]}")
        raise
    finally:
        for w in workers:
            if w.alive:
                w.kill()

    async def read() -> tuple[list[Rec], ...]:
        return tuple(await asyncio.gather(*(read_topic(kafka_bootstrap, topic) for topic in
                                            (output, display, dlq, f"{group}.changelog", index))))  # fmt: skip

    out, shown, dead, changelog, indexed = asyncio.run(read())
    digests: dict[str, Digest] = defaultdict(Digest)
    digests["output"].add_all(_by_key(out, source))
    digests["display"].add_all(_by_key(shown, source))
    digests["index"].add_all(_by_key(indexed, source))
    digests["dead-letters"].add_all(_dead_letters(dead, source))
    digests["changelog"].add_all(_changelog(changelog, source))
    got = {name: digest.summary() for name, digest in sorted(digests.items())}
    assert min(got[name]["records"] for name in got) > 20, got
    reasons = {r.header("dlq-reason") for r in dead}
    assert {"too-large", "gap", "duplicate", "mis-keyed", "decode-error", "open-stream-cap"} <= reasons, reasons
    check("worker", got)
