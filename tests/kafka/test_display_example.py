"""The README's UI backend example on a real broker: a run's display opened from the display and output topics,
written in transactions as the worker writes them, equals `convert --display` for runs ended and in progress."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2

from devtools.display_example import open_display
from tests.display._flows import lines_of, reference_at_events, without_observer, worker_batches
from tests.kafka.conftest import TopicFactory, UniqueNames
from worker.display import DisplayProjection, DisplayReader

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]
PARTITIONS = 3


async def _publish(
    bootstrap: str, txid: str, output: str, display: str, run: str, stop: int | None = None
) -> tuple[int, int]:
    """Write run's output records and display records (interval 1000 ms) as the worker does, a transaction per
    source item, up to `stop` events; returns how many events were written and the last display record's agui-seq."""
    lines = lines_of(run)
    run_id = json.loads(lines[0])["run_id"]
    key = run_id.encode()
    partition = (murmur2(key) & 0x7FFFFFFF) % PARTITIONS
    projection = DisplayProjection(run_id, json.loads(lines[0])["thread_id"])
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txid, enable_idempotence=True)
    await producer.start()
    written = 0
    try:
        for batch in worker_batches(lines):
            if stop is not None and batch.first_seq >= stop:
                break
            async with producer.transaction():
                for n, value in enumerate(batch.encoded, start=batch.first_seq):
                    await producer.send(output, value, key=key, partition=partition,
                                        headers=[("agui-seq", str(n).encode())])  # fmt: skip
                record = projection.offer(batch.events, batch.first_seq, timestamp_ms=batch.timestamp_ms,
                                          ended=batch.ended, source=batch.item, encoded=batch.encoded,
                                          observer=batch.observer)  # fmt: skip
                if record is not None:
                    await producer.send(display, record.value, key=record.key, partition=partition,
                                        headers=list(record.headers))  # fmt: skip
            written = batch.first_seq + len(batch.events)
    finally:
        await producer.stop()
    return written, projection.published_seq


async def _opened(bootstrap: str, display: str, output: str, run_id: str, events: int) -> DisplayReader:
    """`open_display` once the run's last committed transaction is visible (its markers land after the commit)."""
    deadline = time.monotonic() + 30
    while True:
        reader = await open_display(bootstrap, display, output, run_id)
        if reader.next_seq >= events or time.monotonic() > deadline:
            return reader
        await asyncio.sleep(0.2)


async def test_open_display_equals_convert_display(
    kafka_bootstrap: str, topic_factory: TopicFactory, unique_names: UniqueNames
) -> None:
    output = topic_factory("output", PARTITIONS)
    display = topic_factory("display", PARTITIONS, {"cleanup.policy": "compact"})
    ended, open_run = "r0014", "s02_tool_roundtrip"
    total, _ = await _publish(kafka_bootstrap, unique_names("tx-ended"), output, display, ended)
    half, displayed = await _publish(kafka_bootstrap, unique_names("tx-open"), output, display, open_run, stop=20)
    assert 0 <= displayed < half - 1, "the open run's reader folds output records after its display record"

    reader = await _opened(kafka_bootstrap, display, output, json.loads(lines_of(ended)[0])["run_id"], total)
    assert reader.next_seq == total
    assert without_observer(reader.snapshot()) == reference_at_events(lines_of(ended))[-1]
    in_progress = await _opened(kafka_bootstrap, display, output, "run-0002", half)
    assert 0 < half < len(reference_at_events(lines_of(open_run))) - 1 and in_progress.next_seq == half
    assert without_observer(in_progress.snapshot()) == reference_at_events(lines_of(open_run))[half]
    unknown = await open_display(kafka_bootstrap, display, output, "run-unknown")
    assert unknown.items == [] and unknown.next_seq == 0
