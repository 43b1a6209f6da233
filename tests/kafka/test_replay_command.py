"""The README's replay procedure, run verbatim: stop the group, reset its offsets to the earliest with the
standard Kafka tool (the README's `kafka-consumer-groups.sh` lines, run through the same tool class from the
Maven jars), run the worker again into a fresh output topic; the output repeats with the same ids."""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from devtools.kafka_tools import GroupLag, committed_lag, wait_caught_up
from devtools.sample_runs import produce
from tests.kafka.conftest import TopicFactory, UniqueNames
from tests.kafka.support import ROOT, WorkerProcess
from tests.test_readme import _section

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]

RUNS = 24


@dataclass(frozen=True)
class Event:
    """One committed output record: its durable id, value, and the source record that produced it."""

    id: str
    value: bytes
    source_partition: int
    source_offset: int


async def _read_committed(bootstrap: str, topic: str) -> dict[str, list[Event]]:
    """Every committed record of `topic` per key, in partition order."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False, group_id=None
    )
    await consumer.start()
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not parts:
            await consumer._client.force_metadata_update()
            parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        out: dict[str, list[Event]] = defaultdict(list)
        # The read_committed end (the last stable offset) of each partition moves when the coordinator writes
        # that partition's commit marker, which can land after the group's offsets already show the commit:
        # read until the ends stay put.
        ends: dict[TopicPartition, int] = {}
        while ends != (latest := await consumer.end_offsets(parts)):
            ends = latest
            while [tp for tp in parts if await consumer.position(tp) < ends[tp]]:
                for recs in (await consumer.getmany(timeout_ms=500)).values():
                    for r in recs:
                        headers = {k: v.decode() for k, v in r.headers}
                        out[r.key.decode()].append(Event(
                            headers["agui-event-id"], r.value,
                            int(headers["source-partition"]), int(headers["source-offset"]),
                        ))  # fmt: skip
            await asyncio.sleep(0.5)
        return dict(out)
    finally:
        await consumer.stop()


async def _run_worker_until_caught_up(
    tmp_path: Path, name: str, bootstrap: str, source: str, output: str, dlq: str, group: str
) -> WorkerProcess:
    worker = WorkerProcess(tmp_path, name, bootstrap, source, output, dlq, group).start()
    try:
        await wait_caught_up(bootstrap, group, source, within_s=120)
    except TimeoutError:
        worker.stop()
        raise AssertionError(f"worker {name} did not commit everything:\n{worker.log()[-3000:]}") from None
    status = worker.stop()
    assert status == 0, f"worker {name} exited {status} on SIGTERM:\n{worker.log()[-3000:]}"
    return worker


def readme_consumer_group_commands(bs: str, group: str, source: str) -> list[list[str]]:
    """The arguments of each `kafka-consumer-groups.sh` line of the README's replay procedure, variables set."""
    [block] = [b for b in re.findall(r"```bash\n(.*?)```", _section("Operations"), flags=re.S)
               if "--reset-offsets" in b]
    values = {"$BS": bs, "$GROUP": group, "$SOURCE": source}
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        if line.startswith("kafka-consumer-groups.sh "):
            words = shlex.split(line.split("#")[0])[1:]
            out.append([values.get(w, w) for w in words])
    return out


def _tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devtools.kafka_tools", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


async def test_reset_to_earliest_replays_the_same_durable_ids_into_a_fresh_topic(
    kafka_bootstrap: str, topic_factory: TopicFactory, unique_names: UniqueNames, tmp_path: Path
) -> None:
    bs = kafka_bootstrap
    source = topic_factory("source", partitions=3)
    first_out, second_out = topic_factory("agui1", partitions=3), topic_factory("agui2", partitions=3)
    dlq = topic_factory("dlq", partitions=3)
    group = unique_names("group")
    stats = await produce(bs, source, runs=RUNS, rate=0, concurrency=6, salt="replay-test", seed=7)
    assert stats.keys == RUNS

    await _run_worker_until_caught_up(tmp_path, "first", bs, source, first_out, dlq, group)
    first = await _read_committed(bs, first_out)
    assert len(first) == RUNS, f"expected output for {RUNS} runs, got {len(first)}"

    # The documented commands: describe the stopped group, preview the reset, execute it.
    describe, preview, execute = readme_consumer_group_commands(bs, group, source)
    assert "--describe" in describe and "--dry-run" in preview and "--execute" in execute
    for args in (describe, preview):
        shown = _tool("consumer-groups", *args)
        assert shown.returncode == 0, f"{args}: {shown.stdout}\n{shown.stderr}"
    assert await committed_lag(bs, group, source) == dict.fromkeys(range(3), 0), "a dry run changed the offsets"
    reset = _tool("consumer-groups", *execute)
    assert reset.returncode == 0, f"reset failed: {reset.stdout}\n{reset.stderr}"
    assert source in reset.stdout, reset.stdout
    lag = await committed_lag(bs, group, source)
    assert sum(lag.values()) == stats.items, f"after the reset the group should lag by every record: {lag}"

    await _run_worker_until_caught_up(tmp_path, "second", bs, source, second_out, dlq, group)
    second = await _read_committed(bs, second_out)

    assert second.keys() == first.keys()
    for key, events in first.items():
        assert [e.id for e in events] == [f"{key}:{n}" for n in range(len(events))], f"{key}: ids not 0..n-1"
        assert second[key] == events, f"{key}: replay differs (ids or values)"


def test_consumer_groups_tool_runs_the_upstream_command_class() -> None:
    usage = _tool("consumer-groups", "--help")
    assert "--reset-offsets" in usage.stdout + usage.stderr
    wrong = _tool("no-such-tool")
    assert wrong.returncode == 2
    assert "unknown Kafka tool 'no-such-tool'" in wrong.stderr


async def test_reset_into_the_middle_continues_every_stream_with_the_ids_of_the_first_pass(
    kafka_bootstrap: str, topic_factory: TopicFactory, unique_names: UniqueNames, tmp_path: Path
) -> None:
    """`--shift-by -N` leaves streams open at the new offset: the look-back rebuild restores their counters."""
    bs = kafka_bootstrap
    source = topic_factory("source", partitions=2)
    first_out, second_out = topic_factory("agui1", partitions=2), topic_factory("agui2", partitions=2)
    dlq = topic_factory("dlq", partitions=2)
    group = unique_names("group")
    await produce(bs, source, runs=12, rate=0, concurrency=12, salt="replay-mid", seed=3)

    await _run_worker_until_caught_up(tmp_path, "first", bs, source, first_out, dlq, group)
    first = await _read_committed(bs, first_out)
    async with GroupLag(bs, group, source) as probe:
        ends = await probe.committed()  # the first pass committed everything: these are the log ends
    shift = min(ends.values()) // 2
    reset = _tool(
        "consumer-groups", "--bootstrap-server", bs, "--group", group, "--topic", source,
        "--reset-offsets", "--shift-by", str(-shift), "--execute",
    )  # fmt: skip
    assert reset.returncode == 0, f"reset failed: {reset.stdout}\n{reset.stderr}"
    restart_at = {p: end - shift for p, end in ends.items()}

    await _run_worker_until_caught_up(tmp_path, "second", bs, source, second_out, dlq, group)
    second = await _read_committed(bs, second_out)

    expected = {
        key: tail
        for key, events in first.items()
        if (tail := [e for e in events if e.source_offset >= restart_at[e.source_partition]])
    }
    open_at_restart = [k for k, tail in expected.items() if tail[0].id != f"{k}:0"]
    assert open_at_restart, "the shift should cut through some streams"
    assert second == expected
