"""Ready means taken over: three workers rolled one at a time by readiness alone, under load, each step done.

A rolling update as the chart's (maxUnavailable 1, maxSurge 0) does it: stop one worker, start its replacement,
wait until every worker answers /readyz 200, go on. Each time that happens, every source partition must be
owned and live (a worker answering 200 before its assignment arrived, or in the middle of a rebalance, lets the
roll run ahead of the takeovers), and each partition's committed offset must then advance before the next stop.
The output is exactly what the converter gives.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from devtools.kafka_cluster import free_port
from tests.kafka.support import (
    WorkerProcess,
    assert_exactly_once,
    collect,
    corpus,
    expected_total,
    http_get,
    interleave,
    metric,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]

PARTITIONS = 6
FAST_GROUP = ("--session-timeout-ms", "6000", "--heartbeat-interval-ms", "500", "--checkpoint-interval-ms", "500")
PACE_S = 0.002  # between records while the roll runs; the rest goes unpaced once it is done


class Feeder:
    """Produces the records paced while `rolling` is set, the rest as fast as the broker takes them."""

    def __init__(self, bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
        self._bootstrap, self._topic, self._records = bootstrap, topic, records
        self.rolling = True
        self.sent = 0

    async def run(self) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self._bootstrap, enable_idempotence=True, linger_ms=5)
        await producer.start()
        try:
            futures = []
            for key, value in self._records:
                futures.append(await producer.send(self._topic, value=value, key=key))
                self.sent += 1
                if self.rolling:
                    await asyncio.sleep(PACE_S)
            await asyncio.gather(*futures)
        finally:
            await producer.stop()


async def _committed(admin: AIOKafkaAdminClient, group: str, source: str) -> dict[int, int]:
    offsets = await admin.list_consumer_group_offsets(group)
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == source}


def _readyz(port: int) -> int:
    """The status /readyz answers, 0 while the probe server does not listen yet."""
    try:
        return http_get(port, "/readyz")[0]
    except OSError:
        return 0


async def _all_ready(workers: list[WorkerProcess], ports: dict[str, int], within_s: float) -> float:
    """Seconds until every worker answers /readyz 200 at once (checked one after another, every 50 ms)."""
    began = time.monotonic()
    while True:
        for w in workers:
            assert w.alive, f"{w.log_path.name} exited:\n{w.log()[-3000:]}"
        statuses = [await asyncio.to_thread(_readyz, ports[w.log_path.stem]) for w in workers]
        if all(status == 200 for status in statuses):
            return time.monotonic() - began
        assert time.monotonic() - began < within_s, f"not all ready within {within_s} s: {statuses}"
        await asyncio.sleep(0.05)


def test_a_roll_by_readiness_alone_finds_every_takeover_done_before_the_next_stop(
    kafka_bootstrap: str, topic_factory, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    source = topic_factory("source", partitions=PARTITIONS)
    output, dlq = topic_factory("output", partitions=3), topic_factory("dlq", partitions=1)
    group = f"group-{source}"
    runs = corpus(copies=3)
    ports: dict[str, int] = {}

    def worker(name: str) -> WorkerProcess:
        ports[name] = free_port()
        return WorkerProcess(tmp_path, name, kafka_bootstrap, source, output, dlq, group, *FAST_GROUP,
                             metrics_port=ports[name])  # fmt: skip

    workers = [worker(f"old{i}").start() for i in range(3)]
    started: list[WorkerProcess] = list(workers)
    steps: list[str] = []

    async def scenario() -> None:
        feeder = Feeder(kafka_bootstrap, source, interleave(runs))
        feeding = asyncio.create_task(feeder.run())
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            await _all_ready(workers, ports, within_s=90)
            for i in range(3):
                assert workers[i].stop() == 0, "a graceful stop exits 0"
                replacement = worker(f"new{i}").start()
                started.append(replacement)
                workers[i] = replacement
                waited = await _all_ready(workers, ports, within_s=90)
                # Every worker says ready: the partitions must all be owned and live right now.
                live = sum(metric(ports[w.log_path.stem], "harness_agui_partition_ready") for w in workers)
                owned = sum(metric(ports[w.log_path.stem], "harness_agui_assigned_partitions") for w in workers)
                assert (live, owned) == (PARTITIONS, PARTITIONS), f"step {i}: {live} live of {owned} owned"
                # ... and each goes on committing before the next stop.
                assert not feeding.done(), "the load ended before the roll: slow the feeder down"
                base = await _committed(admin, group, source)
                deadline = time.monotonic() + 30
                while (moved := await _committed(admin, group, source)) and any(
                        moved.get(p, -1) <= base.get(p, -1) for p in range(PARTITIONS)):  # fmt: skip
                    assert time.monotonic() < deadline, f"step {i}: partitions not committing: {base} -> {moved}"
                    await asyncio.sleep(0.1)
                steps.append(f"step {i}: ready {waited:.1f} s after the start, {feeder.sent} records sent")
            feeder.rolling = False
            await feeding
        finally:
            feeder.rolling = False
            await admin.close()
            if not feeding.done():
                feeding.cancel()

    try:
        asyncio.run(scenario())
        out = asyncio.run(collect(kafka_bootstrap, output, expect=expected_total(runs), timeout_s=180))
        assert_exactly_once(out, runs)
    except AssertionError:
        print("\n".join(steps))
        for w in started:
            print(f"---- {w.log_path.name}\n{w.log()[-3000:]}")
        raise
    finally:
        for w in started:
            if w.alive:
                w.stop()
    print("\n".join(steps))
