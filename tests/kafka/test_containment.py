"""The publisher keeps one bad record small, without a broker: an internal error is dead-lettered, counted and
its traceback logged once per stream; a dead letter too large for its topic is cut to fit; a failing partition
state holds its partition instead of ending the worker."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition

from tests.kafka.support import RecordBatch
from tests.stream._fakes import FAKE_CORE
from tests.stream._support import TOPIC, golden_source, item
from worker.kafka.partition import PartitionRun, Phase
from worker.kafka.publisher import Publisher
from worker.kafka.runner import KafkaRunner
from worker.kafka.source import to_source_record
from worker.kafka.topics import TopicLimits
from worker.ops import Health, Metrics
from worker.settings import Settings
from worker.stream import Destination, OutboundRecord, PartitionState, record_size

TP = TopicPartition(TOPIC, 0)
DLQ = Settings().dlq_topic


class _Producer:
    """Records what each transaction sent, per topic; every call succeeds at once."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes | None, dict[str, bytes]]] = []
        self.commits = 0

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
        return None

    async def commit_transaction(self) -> None:
        self.commits += 1


class _Rec:
    def __init__(self, offset: int, key: str, value: bytes) -> None:
        self.topic, self.partition, self.offset = TOPIC, 0, offset
        self.timestamp = 1_700_000_000_000 + offset
        self.key, self.value, self.headers = key.encode(), value, ()


async def _run(state: PartitionState, recs: list[_Rec], limits: TopicLimits | None = None
               ) -> tuple[Publisher, PartitionRun, _Producer, Metrics, list[str]]:
    metrics, halted = Metrics(), []

    async def on_failure(p: PartitionRun, exc: BaseException) -> None:
        raise AssertionError(f"unexpected partition failure: {exc!r}")

    def on_halt(p: PartitionRun, reason: str) -> None:
        halted.append(reason)
        p.phase = Phase.FAILED

    pub = Publisher(Settings(), metrics, on_failure, on_halt)
    pub.limits = limits
    p = PartitionRun(TP, state)
    producer = _Producer()
    p.go_live(producer, "group", 0)  # type: ignore[arg-type]
    await pub.consume(p, recs)  # type: ignore[arg-type]
    if p.phase is Phase.LIVE:
        assert await pub.commit_now(p)
    return pub, p, producer, metrics, halted


def _value(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_internal_errors_are_dead_lettered_counted_and_logged_once_per_stream(
    caplog: pytest.LogCaptureFixture
) -> None:
    recs = [_Rec(0, "run-a", item("run-a", 0)), _Rec(1, "run-a", item("run-a", 1, refuse="crash")),
            _Rec(2, "run-b", item("run-b", 0)), _Rec(3, "run-a", item("run-a", 2, refuse="crash")),
            _Rec(4, "run-b", item("run-b", 1, refuse="crash")), _Rec(5, "run-a", item("run-a", 3))]
    with caplog.at_level(logging.ERROR, logger="worker.kafka.publisher"):
        _, p, producer, metrics, halted = asyncio.run(_run(PartitionState(TOPIC, 0, core=FAKE_CORE), recs))
    assert not halted and p.phase is Phase.LIVE and p.committed == len(recs)
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
    recs = [_Rec(0, "run-a", big), _Rec(1, "run-a", item("run-a", 0))]
    _, p, producer, metrics, _ = asyncio.run(_run(PartitionState(TOPIC, 0, core=FAKE_CORE), recs, limits))
    [(_topic, key, value, headers)] = [s for s in producer.sent if s[0] == DLQ]
    assert key == b"run-a" and value is not None and big.startswith(value)
    assert headers["dlq-truncated"] == str(len(big)).encode()
    assert headers["dlq-reason"] == b"decode-error"
    sent = OutboundRecord(Destination.DEAD_LETTER, key, value, tuple(headers.items()), None, None)
    assert record_size(sent) <= limits.dead_letter_record_bytes
    assert _value(metrics, "harness_agui_dead_letters_truncated_total") == 1
    assert p.committed == 2


def test_a_partition_state_that_fails_holds_its_partition_after_committing_what_came_before() -> None:
    def new_observer() -> Any:
        raise MemoryError("no room for an observer")  # outside decode and observe: the state's own step

    core = dataclasses.replace(FAKE_CORE, new_observer=new_observer)
    state = PartitionState(TOPIC, 0, core=core)
    recs = [_Rec(0, "", item("run-a", 0)), _Rec(1, "run-a", item("run-a", 0)), _Rec(2, "run-b", item("run-b", 0))]
    _, p, producer, _, halted = asyncio.run(_run(state, recs))
    assert len(halted) == 1 and "partition state failed: MemoryError: no room for an observer" in halted[0]
    assert p.committed == 1, "the bad-key record before it committed, nothing from the failed one on"
    assert producer.commits == 1


def test_the_runners_states_take_the_output_limit_last_read_and_the_processor() -> None:
    async def scenario() -> tuple[Any, Any, list[str]]:
        runner = KafkaRunner(Settings(processor="tests.processors:shout"), Metrics(), Health())
        before = runner._default_state(TP).options["max_record_bytes"]  # the topics are not read yet
        runner._pub.limits = TopicLimits(output_partitions=1, output_record_bytes=500_000,
                                         dead_letter_record_bytes=100_000)
        state = runner._default_state(TP)
        lines = golden_source("s01_hello")
        outs = [state.process(to_source_record(_Rec(i, "run-0001", ln))) for i, ln in enumerate(lines)]
        deltas = [orjson.loads(r.value or b"")["delta"] for o in outs for r in o.records
                  if r.event_type == "TEXT_MESSAGE_CONTENT"]
        return before, state.options["max_record_bytes"], deltas

    before, after, deltas = asyncio.run(scenario())
    assert (before, after) == (None, 500_000)
    assert deltas and all(d == d.upper() for d in deltas) and any(d != d.lower() for d in deltas), deltas
