"""The README's UI backend example against a real worker: a late-joining UI opens a run's display from the display
and output topics the worker wrote, at several points of a few golden runs (ended and in progress), and gets the
display `convert --display` has at the same point, less what the display topic's record limit evicted."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.partitioner import murmur2

from devtools.display_example import open_display
from tests.display._flows import lines_of, reference_at_events, reference_at_items, without_observer, worker_batches
from tests.kafka.conftest import TopicFactory
from tests.kafka.support import Rec, WorkerProcess, produce, read_topic, wait_caught_up
from worker.display import DisplayReader

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]
PARTITIONS = 3
# The snapshots of r0014, c03 and s09 outgrow this limit (the worker evicts their finished items); s02's and
# s04's never reach it.
DISPLAY_MAX_MESSAGE_BYTES = 20_000
RUNS = ["r0014", "s02_tool_roundtrip", "c03_child_nested", "s09_big_fragments", "s04_suspended"]
IN_PROGRESS = "s02_tool_roundtrip"  # never gets its last items
STAGES = [0.3, 0.6, 1.0]  # each run's share of its items produced by the end of each stage


def _run_id(run: str) -> str:
    return str(json.loads(lines_of(run)[0])["run_id"])


def _cut(run: str, share: float) -> int:
    lines = lines_of(run)
    return min(len(lines), round(len(lines) * share)) if run != IN_PROGRESS else round(len(lines) * min(share, 0.6))


def _events(run: str, lines: int) -> int:
    return sum(len(batch.events) for batch in worker_batches(lines_of(run)[:lines]))


def _expected(run: str, events: int, snapshot: dict[str, Any]) -> dict[str, Any]:
    """`convert --display` after `events` events of `run`, less the items the reader's snapshot says were evicted."""
    reference = reference_at_events(lines_of(run))[events]
    eviction = snapshot.get("evicted")
    if not eviction:
        return reference
    gone = [item for item in reference["items"] if any(low <= item["ordinal"] <= high
                                                       for low, high in eviction["ordinals"])]  # fmt: skip
    return {**reference, "items": [item for item in reference["items"] if item not in gone], "evicted": eviction}


async def _opened(bootstrap: str, display: str, output: str, run_id: str, events: int) -> DisplayReader:
    """`open_display` once the run's last committed transaction is visible (its markers land after the commit)."""
    deadline = time.monotonic() + 30
    while True:
        reader = await open_display(bootstrap, display, output, run_id)
        if reader.next_seq >= events or time.monotonic() > deadline:
            return reader
        await asyncio.sleep(0.2)


async def _topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        (resource,) = response.to_object()["resources"]
        return {entry["config_names"]: entry["config_value"] for entry in resource["config_entries"]}
    finally:
        await admin.close()


def test_a_late_joining_ui_gets_convert_displays_items_from_a_workers_topics(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    source, output, dlq = topic_factory("source", PARTITIONS), topic_factory("output", PARTITIONS), topic_factory()
    display = topic_factory("display", PARTITIONS, {"cleanup.policy": "compact",
                                                    "max.message.bytes": str(DISPLAY_MAX_MESSAGE_BYTES)})  # fmt: skip
    worker = WorkerProcess(tmp_path, "worker", kafka_bootstrap, source, output, dlq, f"group-{source}",
                           "--display-topic", display, "--display-interval-ms", "1000").start()  # fmt: skip
    used = {(murmur2(_run_id(run).encode()) & 0x7FFFFFFF) % PARTITIONS for run in RUNS}  # the producer's choice

    async def _check(run: str, events: int, when: str) -> DisplayReader:
        reader = await _opened(kafka_bootstrap, display, output, _run_id(run), events)
        assert reader.next_seq == events, f"{run} at {when}"
        snapshot = without_observer(reader.snapshot())
        assert snapshot == _expected(run, events, snapshot), f"{run} at {when}, after {events} events"
        return reader

    async def scenario() -> None:
        done = dict.fromkeys(RUNS, 0)
        for stage, share in enumerate(STAGES):
            if stage:
                await asyncio.sleep(1.2)  # past the display interval (1 s): the next items bring new display records
            batch = []
            for run in RUNS:
                cut = _cut(run, share)
                batch += [(_run_id(run).encode(), line.encode()) for line in lines_of(run)[done[run] : cut]]
                done[run] = cut
            await produce(kafka_bootstrap, source, batch)
            await wait_caught_up(kafka_bootstrap, f"group-{source}", source, timeout_s=60, partitions=used)
            for run in RUNS:
                events = _events(run, done[run])
                await _check(run, events, f"stage {stage}")
        unknown = await open_display(kafka_bootstrap, display, output, "run-unknown")
        assert unknown.items == [] and unknown.next_seq == 0

    try:
        asyncio.run(scenario())
        assert worker.stop() == 0
        records = asyncio.run(read_topic(kafka_bootstrap, display))
    except AssertionError:
        print(worker.log()[-4000:])
        raise
    finally:
        if worker.alive:
            worker.kill()
    by_key: dict[bytes | None, list[Rec]] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        by_key.setdefault(record.key, []).append(record)
    outputs = {r.key: r.partition for r in asyncio.run(read_topic(kafka_bootstrap, output))}
    evicting = []
    for run in RUNS:
        shown = by_key[_run_id(run).encode()]
        # A reader that restores the run's last record alone has the whole display, less what was evicted (the
        # readers above may have met an older record: a transaction's markers land on each partition in turn).
        last, events = shown[-1], _events(run, _cut(run, STAGES[-1]))
        reader = DisplayReader(_run_id(run), last.value, int(last.header("agui-seq")))
        assert reader.next_seq == events or run == IN_PROGRESS, f"{run}: an ended run's last record covers it all"
        snapshot = without_observer(reader.snapshot())
        assert snapshot == _expected(run, reader.next_seq, snapshot), run
        if reader.evicted is not None:
            evicting.append(run)
        assert {r.partition for r in shown} == {outputs[_run_id(run).encode()]}, "in the partition of its events"
        assert len(shown) >= 2, f"{run}: the display records of several stages"
        assert all(len(r.value or b"") <= DISPLAY_MAX_MESSAGE_BYTES for r in shown)
        if run == "s04_suspended":  # ended, nothing evicted: the last record is the final display
            assert b'"evicted"' not in (shown[-1].value or b"")
            reference = reference_at_items(lines_of(run))
            assert shown[-1].value == reference[max(reference)]
            assert shown[-1].header("agui-seq") == str(max(reference))
    assert evicting == ["r0014", "c03_child_nested", "s09_big_fragments"], "the display topic's limit evicts"
    config = asyncio.run(_topic_config(kafka_bootstrap, display))
    assert config["cleanup.policy"] == "compact"
