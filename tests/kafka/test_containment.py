"""A partition's task keeps one bad record small, without a broker: an internal error is dead-lettered, counted
and its traceback logged once per stream; a dead letter too large for its topic is cut to fit; a failing partition
state holds its partition instead of ending the worker."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition

from tests.kafka.support import RecordBatch, StandInInternals
from tests.kafka.tasks import Rec, ScriptedRebuilder, TaskWorld, until
from tests.stream._fakes import FAKE_CORE
from tests.stream._support import TOPIC, golden_source, item
from worker.live.membership import partition_state
from worker.live.topics import TopicLimits
from worker.ops import Metrics
from worker.settings import Settings
from worker.stream import Destination, OutboundRecord, PartitionState, default_core, record_size, to_source_record

TP = TopicPartition(TOPIC, 0)
DLQ = Settings().dlq_topic


class _Producer(StandInInternals):
    """Records what each transaction sent, per topic; every call succeeds at once."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, bytes | None, bytes | None, dict[str, bytes]]] = []
        self.committed: list[int] = []
        self._offset = 0

    async def begin_transaction(self) -> None:
        return None

    async def send(self, topic: str, value: bytes | None, key: bytes | None, headers: list[tuple[str, bytes]],
                   partition: int | None = None) -> asyncio.Future[object]:
        self.sent.append((topic, key, value, dict(headers)))
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    def create_batch(self) -> RecordBatch:
        return RecordBatch()

    async def send_batch(self, batch: RecordBatch, topic: str, *, partition: int) -> asyncio.Future[object]:
        for key, value, headers in batch.records:
            await self.send(topic, value, key, headers, partition)
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, Any], group_id: str) -> None:
        self._offset = offsets[TP].offset

    async def commit_transaction(self) -> None:
        self.committed.append(self._offset)


def _rec(offset: int, key: str, value: bytes) -> Rec:
    return Rec(0, offset, key.encode(), value)


async def _run(state: PartitionState, recs: list[Rec], limits: TopicLimits | None = None
               ) -> tuple[TaskWorld, _Producer, bool]:
    """Process `recs` in one live partition task whose state starts as `state`, then stop it (its final commit
    when it is still live); the world, the producer and whether the partition was held."""
    rebuilder = ScriptedRebuilder(lambda tp: _Producer(), state=lambda tp: state)
    world = TaskWorld(rebuilder, limits, commit_interval_ms=30_000)
    task = world.start(0)
    await until(lambda: world.live(task))
    world.offer(task, recs)
    await until(lambda: world.processed(task) == len(recs) or world.halted(task))
    halted = world.halted(task)
    assert halted or world.live(task)
    await task.stop(1.0)
    [producer] = rebuilder.producers
    return world, producer, halted


def _value(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_internal_errors_are_dead_lettered_counted_and_logged_once_per_stream(
    caplog: pytest.LogCaptureFixture
) -> None:
    recs = [_rec(0, "run-a", item("run-a", 0)), _rec(1, "run-a", item("run-a", 1, refuse="crash")),
            _rec(2, "run-b", item("run-b", 0)), _rec(3, "run-a", item("run-a", 2, refuse="crash")),
            _rec(4, "run-b", item("run-b", 1, refuse="crash")), _rec(5, "run-a", item("run-a", 3))]
    with caplog.at_level(logging.ERROR, logger="worker.live.task"):
        world, producer, halted = asyncio.run(_run(PartitionState(TOPIC, 0, core=FAKE_CORE), recs))
    metrics = world.metrics
    assert not halted and producer.committed[-1] == len(recs)
    dead = [h for topic, _, _, h in producer.sent if topic == DLQ]
    assert [h["dlq-reason"] for h in dead] == [b"internal-error"] * 3
    assert {h["dlq-exception-type"] for h in dead} == {b"RuntimeError"}
    assert _value(metrics, "harness_agui_internal_errors_total") == 3
    assert _value(metrics, "harness_agui_dead_letter_records_total", reason="internal-error") == 3
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert [getattr(r, "run_id", None) for r in tracebacks] == ["run-a", "run-b"], "one traceback per stream"
    assert all(isinstance(r.exc_info[1], RuntimeError) for r in tracebacks if r.exc_info)


def test_a_dead_letter_larger_than_its_topic_takes_is_cut_to_fit_with_a_header_saying_so() -> None:
    big = b'{"not": "a wire item", "pad": "' + b"x" * 300_000 + b'"}'
    limits = TopicLimits(output_partitions=1, output_record_bytes=1_000_000, dead_letter_record_bytes=100_000)
    recs = [_rec(0, "run-a", big), _rec(1, "run-a", item("run-a", 0))]
    world, producer, _ = asyncio.run(_run(PartitionState(TOPIC, 0, core=FAKE_CORE), recs, limits))
    metrics = world.metrics
    [(_topic, key, value, headers)] = [s for s in producer.sent if s[0] == DLQ]
    assert key == b"run-a" and value is not None and big.startswith(value)
    assert headers["dlq-truncated"] == str(len(big)).encode()
    assert headers["dlq-reason"] == b"decode-error"
    sent = OutboundRecord(Destination.DEAD_LETTER, key, value, tuple(headers.items()), None, None)
    assert record_size(sent) <= limits.dead_letter_record_bytes
    assert _value(metrics, "harness_agui_dead_letters_truncated_total") == 1
    assert producer.committed[-1] == 2


def test_a_partition_state_that_fails_holds_its_partition_after_committing_what_came_before(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def new_observer() -> Any:
        raise MemoryError("no room for an observer")  # outside decode and observe: the state's own step

    core = dataclasses.replace(FAKE_CORE, new_observer=new_observer)
    state = PartitionState(TOPIC, 0, core=core)
    recs = [_rec(0, "", item("run-a", 0)), _rec(1, "run-a", item("run-a", 0)), _rec(2, "run-b", item("run-b", 0))]
    with caplog.at_level(logging.WARNING, logger="worker.live.task"):
        world, producer, halted = asyncio.run(_run(state, recs))
    held = [r.getMessage() for r in caplog.records if r.getMessage().startswith("partition held")]
    assert halted
    assert len(held) == 1 and "partition state failed: MemoryError: no room for an observer" in held[0], held
    assert producer.committed == [1], "the bad-key record before it committed, nothing from the failed one on"
    assert world.value("partition_failures_total", topic=TOPIC, partition="0") == 1
    assert world.health.ready()[0] is False


def test_partition_states_take_the_output_limit_last_read_and_the_processor() -> None:
    settings = Settings(processor="tests.processors:shout")
    core = default_core(settings.processor)
    before = partition_state(settings, TP, None, core).options["max_record_bytes"]  # the topics are not read yet
    limits = TopicLimits(output_partitions=1, output_record_bytes=500_000, dead_letter_record_bytes=100_000)
    state = partition_state(settings, TP, limits, core)
    lines = golden_source("s01_hello")
    outs = [state.process(to_source_record(_rec(i, "run-0001", ln))) for i, ln in enumerate(lines)]
    deltas = [orjson.loads(r.value or b"")["delta"] for o in outs for r in o.records
              if r.event_type == "TEXT_MESSAGE_CONTENT"]
    assert (before, state.options["max_record_bytes"]) == (None, 500_000)
    assert deltas and all(d == d.upper() for d in deltas) and any(d != d.lower() for d in deltas), deltas
