"""Commit bookkeeping without a broker: a committed source offset covers exactly the outputs in its transaction.

The producer here is a recording stand-in whose commit takes a while, so records keep arriving while a transaction
commits; the partition task, its transactions and state are the real ones. Exactly-once across a real broker is
proven by the tests in test_exactly_once.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import TopicPartition

from tests.kafka.support import RecordBatch, StandInInternals
from tests.kafka.tasks import Rec, ScriptedRebuilder, TaskWorld, until
from tests.stream._fakes import FAKE_CORE
from tests.stream._support import TOPIC, image, item
from worker.live.pipeline import CommitPolicy
from worker.settings import Settings
from worker.stream import PartitionState, decode_replay_metadata, read_checkpoint_header, to_source_record

TP = TopicPartition(TOPIC, 0)


CHANGELOG = Settings().changelog_topic_name


@dataclass
class _Txn:
    sources: list[int] = field(default_factory=list)  # source offsets of the records sent in it
    changelog: list[tuple[bytes, bytes | None]] = field(default_factory=list)  # changelog records sent in it
    offset: int | None = None
    metadata: str | None = None


class _RecordingProducer(StandInInternals):
    """Keeps each transaction's sent records and committed offset; commit yields to the loop like a broker does."""

    def __init__(self, commit_s: float) -> None:
        super().__init__()
        self.commit_s = commit_s
        self.transactions: list[_Txn] = []
        self.committed: list[int] = []
        self._open: _Txn | None = None

    async def begin_transaction(self) -> None:
        assert self._open is None, "begin inside an open transaction"
        self._open = _Txn()

    async def send(self, topic: str, value: bytes | None, key: bytes | None, headers: list[tuple[str, bytes]],
                   partition: int | None = None) -> asyncio.Future[object]:
        assert self._open is not None, "send outside a transaction"
        assert isinstance(headers, list), "aiokafka's record builder takes headers as a list only"
        self._record(topic, key, value, headers)
        return self._done()

    def create_batch(self) -> RecordBatch:
        return RecordBatch()

    async def send_batch(self, batch: RecordBatch, topic: str, *, partition: int) -> asyncio.Future[object]:
        assert self._open is not None, "send outside a transaction"
        for key, value, headers in batch.records:
            self._record(topic, key, value, headers)
        return self._done()

    def _record(self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]) -> None:
        assert self._open is not None
        if topic == CHANGELOG:
            assert key is not None and not headers
            self._open.changelog.append((key, value))
        else:
            self._open.sources.append(int(dict(headers)["source-offset"]))

    @staticmethod
    def _done() -> asyncio.Future[object]:
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, Any], group_id: str) -> None:
        assert self._open is not None
        self._open.offset = offsets[TP].offset
        self._open.metadata = offsets[TP].metadata
        await asyncio.sleep(self.commit_s / 2)

    async def commit_transaction(self) -> None:
        assert self._open is not None
        await asyncio.sleep(self.commit_s / 2)
        assert self._open.offset is not None
        self.transactions.append(self._open)
        self.committed.append(self._open.offset)
        self._open = None


def _source(streams: int, items: int) -> list[Rec]:
    """`streams` runs interleaved round-robin, `items` each, the last one terminal."""
    out: list[Rec] = []
    for seq in range(items):
        for s in range(streams):
            run = f"run-{s}"
            out.append(Rec(0, len(out), run.encode(), item(run, seq, terminal=seq == items - 1)))
    return out


async def _publish(batches: list[list[Rec]], *, max_records: int, interval_ms: int, commit_s: float,
                   pause_s: float, checkpoint_ms: int = 1000) -> _RecordingProducer:
    """Feed the batches to one live partition task, then stop it (its final commit); the producer it used."""
    rebuilder = ScriptedRebuilder(lambda tp: _RecordingProducer(commit_s))
    world = TaskWorld(rebuilder, max_records_per_transaction=max_records, commit_interval_ms=interval_ms,
                      checkpoint_interval_ms=checkpoint_ms, broker_call_timeout_ms=5_000)
    task = world.start(0)
    await until(lambda: world.live(task))
    total = 0
    for batch in batches:
        world.offer(task, batch)
        total += len(batch)
        await asyncio.sleep(pause_s)
    await until(lambda: world.processed(task) == total)
    assert await task.stop(5.0) is not None, "the final commit failed"
    assert world.value("transaction_failures_total", topic=TOPIC, partition="0", cause="error") == 0
    [producer] = rebuilder.producers
    return producer


def _check_commits(producer: _RecordingProducer, total: int) -> None:
    """Every commit's offset is one past the last source record whose output it or an earlier one holds."""
    covered = -1
    for n, txn in enumerate(producer.transactions):
        assert txn.offset is not None
        if txn.sources:
            assert min(txn.sources) > covered, f"transaction {n} repeats records below {covered + 1}"
            covered = max(txn.sources)
        assert txn.offset == covered + 1, (
            f"transaction {n} commits source offset {txn.offset} but holds outputs only up to {covered}"
        )
    assert covered == total - 1


@pytest.mark.parametrize(
    ("max_records", "interval_ms", "pause_s"),
    [(7, 30_000, 0.0), (50, 1, 0.0), (3, 1, 0.002), (1, 1, 0.0)],
    ids=["by-count-no-yield", "by-age-no-yield", "small-transactions", "one-record-transactions"],
)
def test_committed_offset_never_runs_ahead_of_the_transaction(max_records: int, interval_ms: int,
                                                               pause_s: float) -> None:
    source = _source(streams=5, items=12)
    batches = [source[i:i + 9] for i in range(0, len(source), 9)]
    producer = asyncio.run(
        _publish(batches, max_records=max_records, interval_ms=interval_ms, commit_s=0.004, pause_s=pause_s)
    )
    _check_commits(producer, len(source))
    assert len(producer.transactions) >= 2, "the scenario must commit while it consumes"
    assert producer.committed[-1] == len(source)


def test_replay_metadata_names_the_oldest_open_stream_at_the_committed_offset() -> None:
    # Streams end at different times; each commit's replay start must rebuild exactly the state at its offset.
    source = _source(streams=3, items=4)
    batches = [source[i:i + 2] for i in range(0, len(source), 2)]
    producer = asyncio.run(_publish(batches, max_records=2, interval_ms=30_000, commit_s=0.003, pause_s=0.0))
    for txn in producer.transactions:
        assert txn.offset is not None
        state = PartitionState(TOPIC, 0, core=FAKE_CORE)
        for rec in source[: txn.offset]:
            state.process(to_source_record(rec), publish=False)
        assert decode_replay_metadata(txn.metadata) == state.replay_from(txn.offset)



@pytest.mark.parametrize("checkpoint_ms", [0, 5])
def test_each_checkpoint_is_the_state_at_the_offset_its_transaction_commits(checkpoint_ms: int) -> None:
    """The changelog records a transaction carries bring the changelog to the state at exactly the offset it
    commits; folded over all committed transactions, the changelog equals the final state's image."""
    source = _source(streams=4, items=6)
    batches = [source[i:i + 3] for i in range(0, len(source), 3)]
    producer = asyncio.run(_publish(batches, max_records=4, interval_ms=1, commit_s=0.003, pause_s=0.002,
                                    checkpoint_ms=checkpoint_ms))
    folded: dict[bytes, bytes] = {}
    checkpoints = 0
    for txn in producer.transactions:
        for key, value in txn.changelog:
            if value is None:
                folded.pop(key, None)
            else:
                folded[key] = value
        if not txn.changelog:
            continue
        checkpoints += 1
        assert txn.offset is not None
        header = read_checkpoint_header(folded, TOPIC, 0)
        assert header is not None and header.offset == txn.offset
        state = PartitionState(TOPIC, 0, core=FAKE_CORE)
        for rec in source[: txn.offset]:
            state.process(to_source_record(rec), publish=False)
        assert folded == image(state, txn.offset)
    assert checkpoints >= (len(producer.transactions) if checkpoint_ms == 0 else 2)
    assert header.offset == len(source), "the final commit writes the last state"


@pytest.mark.parametrize(
    ("late_ms", "start_ms"),
    [(40, -40), (50, -50), (80, -50), (100, -50), (101, 0), (60_000, 0), (0, 0), (-3_000, 0)],
    ids=["late", "half-interval-late", "capped", "one-interval-late", "catching-up", "long-behind", "on-time",
         "stamped-ahead"],
)
def test_the_commit_interval_starts_at_the_source_timestamp_by_at_most_half_an_interval(
    late_ms: int, start_ms: int
) -> None:
    """A transaction's age counts the wait of its oldest record before consumption, up to half the interval;
    a record more than an interval late (a partition catching up) counts from consumption."""
    policy = CommitPolicy(Settings(commit_interval_ms=100))
    consumed_at = 5_000.0
    assert policy.interval_start(consumed_at, late_ms / 1000) == pytest.approx(consumed_at + start_ms / 1000)
