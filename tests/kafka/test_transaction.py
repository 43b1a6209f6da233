"""A partition's transaction state machine, on a recording stand-in producer (no broker: phases only)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from tests.kafka.support import StandInInternals, phase_after
from worker.errors import DeadlineError, KafkaWorkerError
from worker.live.transaction import Transaction, TxnPhase

TP = TopicPartition("src", 3)


def _settled(error: Exception | None) -> asyncio.Future[Any]:
    """A delivery future already resolved: failed with `error`, else delivered."""
    fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(None)
    return fut


class _Producer(StandInInternals):
    """Records the calls a checkpoint makes; `fail` names a call that raises."""

    def __init__(self, fail: str | None = None) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []
        self.fail = fail
        self.offsets_gate: asyncio.Event | None = None  # when set, sending offsets waits for it

    def _call(self, name: str, arg: Any = None) -> None:
        self.calls.append((name, arg))
        if name == self.fail:
            raise KafkaError(f"{name} failed")

    async def begin_transaction(self) -> None:
        self._call("begin")

    async def send(
        self, topic: str, value: bytes | None, key: bytes | None, headers: Any, partition: int | None = None
    ) -> asyncio.Future[Any]:
        self._call("send", (topic, key, value))
        return _settled(KafkaError("delivery failed") if self.fail == "delivery" else None)

    async def send_offsets_to_transaction(self, offsets: Any, group_id: str) -> None:
        self._call("offsets", ({tp: (o.offset, o.metadata) for tp, o in offsets.items()}, group_id))  # queued
        if self.offsets_gate is not None:
            await self.offsets_gate.wait()  # the broker's answer

    async def commit_transaction(self) -> None:
        self._call("commit")

    async def abort_transaction(self) -> None:
        self._call("abort")


async def test_commit_sends_records_then_offsets_then_ends_the_transaction() -> None:
    producer = _Producer()
    txn = Transaction(producer, TP, "group")  # type: ignore[arg-type]
    await txn.begin()
    await txn.send("out", b"k", b"v", [])
    txn.note_sources([1_000, 2_000])
    stamps = await txn.commit(42, '{"v":1,"replay_from":40}')
    assert stamps == [1_000, 2_000]
    assert [c[0] for c in producer.calls] == ["begin", "send", "offsets", "commit"]
    assert producer.calls[2][1] == ({TP: (42, '{"v":1,"replay_from":40}')}, "group")
    assert txn.records == 0 and await phase_after(txn) == "idle"


async def test_begin_is_idempotent_while_open() -> None:
    producer = _Producer()
    txn = Transaction(producer, TP, "group")  # type: ignore[arg-type]
    await txn.begin()
    await txn.begin()
    assert [c[0] for c in producer.calls] == ["begin"]


async def test_send_outside_a_transaction_is_refused() -> None:
    txn = Transaction(_Producer(), TP, "group")  # type: ignore[arg-type]
    with pytest.raises(KafkaWorkerError, match="send outside a transaction"):
        await txn.send("out", None, b"v", [])


async def test_a_failed_delivery_fails_the_commit_and_breaks_the_transaction() -> None:
    producer = _Producer(fail="delivery")
    txn = Transaction(producer, TP, "group")  # type: ignore[arg-type]
    await txn.begin()
    await txn.send("out", None, b"v", [])
    with pytest.raises(KafkaError, match="delivery failed"):
        await txn.commit(1, "")
    # The offsets may join the transaction while records are in flight; it is never committed without them.
    assert "commit" not in [c[0] for c in producer.calls], "a transaction that lost records must never commit"
    assert await phase_after(txn) == "broken"
    with pytest.raises(KafkaWorkerError, match="illegal transaction move broken -> open"):
        await txn.begin()


def test_a_phase_moves_only_as_the_table_allows() -> None:
    """Any phase may break (a failed call, a discarded transaction); a broken one only aborts; a commit or an abort
    under way ends idle or broken, never aborting."""
    for phase in TxnPhase:
        assert phase.to(TxnPhase.BROKEN, "src[3]") is TxnPhase.BROKEN
    illegal = [(TxnPhase.BROKEN, TxnPhase.OPEN), (TxnPhase.BROKEN, TxnPhase.IDLE), (TxnPhase.IDLE, TxnPhase.IDLE),
               (TxnPhase.COMMITTING, TxnPhase.ABORTING), (TxnPhase.ABORTING, TxnPhase.COMMITTING),
               (TxnPhase.IDLE, TxnPhase.COMMITTING)]  # fmt: skip
    for start, to in illegal:
        with pytest.raises(KafkaWorkerError, match=f"src\\[3\\]: illegal transaction move {start.value} -> {to.value}"):
            start.to(to, "src[3]")


async def test_an_abort_while_the_commit_runs_gives_the_commit_up_and_aborts() -> None:
    producer = _Producer()
    producer.offsets_gate = asyncio.Event()  # the commit waits for the broker's answer to its offsets
    txn = Transaction(producer, TP, "group")  # type: ignore[arg-type]
    await txn.begin()
    await txn.send("out", None, b"v", [])
    commit = asyncio.create_task(txn.commit(1, ""))
    await asyncio.sleep(0.01)
    await txn.abort()  # committing -> broken -> aborting -> idle, the commit still waiting
    assert [c[0] for c in producer.calls] == ["begin", "send", "offsets", "abort"]
    commit.cancel()
    with pytest.raises(asyncio.CancelledError):
        await commit
    assert await phase_after(txn) == "broken", "the commit given up leaves the transaction broken"


async def test_abort_returns_to_idle_and_forgets_the_batch() -> None:
    producer = _Producer()
    txn = Transaction(producer, TP, "group")  # type: ignore[arg-type]
    await txn.begin()
    txn.note_sources([5])
    await txn.abort()
    assert txn.records == 0
    await txn.abort()  # nothing open: no call
    assert [c[0] for c in producer.calls] == ["begin", "abort"]
    assert await phase_after(txn) == "idle"


async def test_a_failed_commit_call_breaks_the_transaction() -> None:
    txn = Transaction(_Producer(fail="commit"), TP, "group")  # type: ignore[arg-type]
    await txn.begin()
    with pytest.raises(KafkaError):
        await txn.commit(1, "")
    assert await phase_after(txn) == "broken"


def _offsets(producer: _Producer) -> list[int]:
    return [arg[0][TP][0] for name, arg in producer.calls if name == "offsets"]


async def test_join_group_sends_offsets_early_once_per_transaction_and_the_commit_sends_the_final_ones() -> None:
    producer = _Producer()
    txn = Transaction(producer, TP, "group")  # type: ignore[arg-type]
    assert not txn.joins_group
    txn.join_group(1, "")  # no transaction open: nothing to join
    await txn.begin()
    assert txn.joins_group
    txn.join_group(10, '{"v":1,"replay_from":7}')
    assert not txn.joins_group
    txn.join_group(11, "")  # joined already
    await asyncio.sleep(0)  # the early offsets go out
    await txn.send("out", b"k", b"v", [])
    await txn.commit(12, '{"v":1,"replay_from":9}')
    assert _offsets(producer) == [10, 12]
    assert producer.calls[-2] == ("offsets", ({TP: (12, '{"v":1,"replay_from":9}')}, "group"))
    assert producer.calls[-1][0] == "commit"
    await txn.begin()
    txn.join_group(12, "")  # a new transaction joins again
    producer.offsets_gate = asyncio.Event()
    committing = asyncio.create_task(txn.commit(13, ""))
    await asyncio.sleep(0.01)
    assert _offsets(producer) == [10, 12, 12], "the final offsets are queued only once the early ones settled"
    producer.offsets_gate.set()
    await committing
    assert _offsets(producer) == [10, 12, 12, 13]
    producer.offsets_gate = None
    await txn.begin()
    txn.join_group(13, "")
    await txn.commit(14, "")  # before the early offsets left: only the final ones, not two in a row
    assert _offsets(producer) == [10, 12, 12, 13, 14]


async def test_an_abort_never_waits_for_the_early_offsets_and_a_failed_one_fails_the_commit() -> None:
    producer = _BatchingProducer(capacity=100)
    producer.offsets_gate = asyncio.Event()  # the broker never answers the early offsets
    txn = Transaction(producer, TP, "group")  # type: ignore[arg-type]
    await txn.begin()
    txn.join_group(3, "")
    await asyncio.sleep(0.01)
    async with asyncio.timeout(1):
        await txn.abort()
    assert [c[0] for c in producer.calls] == ["begin", "offsets", "abort"]
    assert await phase_after(txn) == "idle"

    undelivered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def stuck_send_batch(batch: _Batch, topic: str, *, partition: int) -> asyncio.Future[Any]:
        return undelivered

    producer.send_batch = stuck_send_batch  # type: ignore[method-assign]
    await txn.begin()
    await txn.send("out", b"k", b"v", [], partition=0)
    await txn.ship_new()
    txn.join_group(4, "")  # waits for a batch that is never delivered
    async with asyncio.timeout(1):
        await txn.abort()
    assert [c[0] for c in producer.calls][-2:] == ["begin", "abort"], "the early offsets were never sent"

    failing = _Producer(fail="offsets")
    txn = Transaction(failing, TP, "group")  # type: ignore[arg-type]
    await txn.begin()
    txn.join_group(3, "")
    with pytest.raises(KafkaError, match="offsets failed"):
        await txn.commit(4, "")
    assert "commit" not in [c[0] for c in failing.calls]
    assert await phase_after(txn) == "broken"


class _Batch:
    """Stands in for aiokafka's BatchBuilder: full after `capacity` records; a value over 100 bytes never fits."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.values: list[bytes] = []
        self.closed = False

    def append(self, *, timestamp: int | None, key: bytes | None, value: bytes, headers: Any) -> object | None:
        assert not self.closed, "append to a batch already handed over"
        if len(self.values) >= self.capacity or len(value) > 100:
            return None
        self.values.append(value)
        return object()

    def record_count(self) -> int:
        return len(self.values)

    def close(self) -> None:
        self.closed = True


class _BatchingProducer(_Producer):
    def __init__(self, capacity: int = 3, fail: str | None = None) -> None:
        super().__init__(fail)
        self.capacity = capacity

    def create_batch(self) -> _Batch:
        return _Batch(self.capacity)

    async def send_batch(self, batch: _Batch, topic: str, *, partition: int) -> asyncio.Future[Any]:
        assert batch.closed, "a batch must be closed when handed over, or it lingers"
        self._call("batch", (topic, partition, list(batch.values)))
        return _settled(KafkaError("batch delivery failed") if self.fail == "batch-delivery" else None)


def _shipped(producer: _Producer, partition: int) -> list[bytes]:
    """Values in the order their batches reached one output partition."""
    return [value for name, arg in producer.calls if name == "batch" and arg[1] == partition for value in arg[2]]


async def test_ship_new_hands_over_only_partitions_new_to_the_transaction_and_the_commit_the_rest() -> None:
    producer = _BatchingProducer(capacity=100)
    txn = Transaction(producer, TP, "group")  # type: ignore[arg-type]

    def batches() -> list[tuple[int, list[bytes]]]:
        return [(arg[1], arg[2]) for name, arg in producer.calls if name == "batch"]

    await txn.begin()
    await txn.send("out", b"k", b"a0", [], partition=1)
    await txn.ship_new()
    assert batches() == [(1, [b"a0"])]  # partition 1 joins the transaction at once
    await txn.send("out", b"k", b"a1", [], partition=1)
    await txn.send("out", b"k", b"b0", [], partition=2)
    await txn.ship_new()
    assert batches() == [(1, [b"a0"]), (2, [b"b0"])]  # a1 waits: partition 1 is in already
    await txn.send("out", b"k", b"a2", [], partition=1)
    await txn.commit(5, "")
    assert batches()[2:] == [(1, [b"a1", b"a2"])]
    await txn.begin()
    await txn.send("out", b"k", b"a3", [], partition=1)
    await txn.ship_new()
    assert batches()[3:] == [(1, [b"a3"])]  # a new transaction: partition 1 is new to it again


async def test_ship_new_leaves_the_batches_of_the_later_topic_to_the_commit() -> None:
    producer = _BatchingProducer(capacity=100)
    txn = Transaction(producer, TP, "group")  # type: ignore[arg-type]

    def batches() -> list[tuple[str, int, list[bytes]]]:
        return [(arg[0], arg[1], arg[2]) for name, arg in producer.calls if name == "batch"]

    await txn.begin()
    await txn.send("out", b"k", b"a0", [], partition=1)
    await txn.send("index", b"t", b"i0", [], partition=1)
    await txn.ship_new(later="index")
    assert batches() == [("out", 1, [b"a0"])]  # the index partition is not in the transaction yet
    await txn.send("index", b"t", b"i1", [], partition=1)
    await txn.ship_new(later="index")
    assert batches() == [("out", 1, [b"a0"])]
    await txn.commit(5, "")
    assert batches()[1:] == [("index", 1, [b"i0", b"i1"])]  # in order, in this transaction, at its commit


async def test_append_fills_an_open_batch_without_waiting_and_hands_the_rest_to_send() -> None:
    producer = _BatchingProducer(capacity=2)
    txn = Transaction(producer, TP, "group")  # type: ignore[arg-type]
    assert not txn.append("out", b"k", b"x", [], 1), "no transaction: nothing appended"
    await txn.begin()
    assert not txn.append("out", b"k", b"a0", [], 1), "no open batch yet: send opens one"
    await txn.send("out", b"k", b"a0", [], partition=1)
    assert txn.append("out", b"k", b"a1", [], 1)
    assert not txn.append("out", b"k", b"a2", [], 1), "full: send ships it and starts the next"
    await txn.send("out", b"k", b"a2", [], partition=1)
    await txn.commit(3, "")
    assert _shipped(producer, 1) == [b"a0", b"a1", b"a2"]


async def test_records_of_a_partition_go_out_in_batches_in_send_order() -> None:
    producer = _BatchingProducer(capacity=3)
    txn = Transaction(producer, TP, "group")  # type: ignore[arg-type]
    await txn.begin()
    for i in range(7):
        await txn.send("out", b"k", f"a{i}".encode(), [], partition=1)
        if i % 3 == 0:
            await txn.send("out", b"k", f"b{i}".encode(), [], partition=2)
    await txn.ship()
    await txn.send("out", b"k", b"a7", [], partition=1)  # after a ship: a new batch, still in order
    await txn.commit(9, "")
    names = [c[0] for c in producer.calls]
    assert names[-1] == "commit", "every batch is handed over before the transaction ends"
    assert _shipped(producer, 1) == [f"a{i}".encode() for i in range(8)]
    assert _shipped(producer, 2) == [b"b0", b"b3", b"b6"]
    assert all(len(arg[2]) <= 3 for name, arg in producer.calls if name == "batch")


async def test_a_record_too_large_for_a_batch_goes_alone_after_the_batch_before_it() -> None:
    producer = _BatchingProducer(capacity=10)
    txn = Transaction(producer, TP, "group")  # type: ignore[arg-type]
    await txn.begin()
    big = b"x" * 200
    for value in (b"a", b"b", big, b"c"):
        await txn.send("out", b"k", value, [], partition=0)
    await txn.commit(4, "")
    sent = [(name, arg) for name, arg in producer.calls if name in ("batch", "send")]
    assert sent == [("batch", ("out", 0, [b"a", b"b"])), ("send", ("out", b"k", big)), ("batch", ("out", 0, [b"c"]))]


async def test_a_failed_batch_never_commits() -> None:
    producer = _BatchingProducer(fail="batch-delivery")
    txn = Transaction(producer, TP, "group")  # type: ignore[arg-type]
    await txn.begin()
    await txn.send("out", b"k", b"v", [], partition=0)
    with pytest.raises(KafkaError, match="batch delivery failed"):
        await txn.commit(1, "")
    assert "commit" not in [c[0] for c in producer.calls]
    assert await phase_after(txn) == "broken"


async def test_join_group_waits_for_the_batches_shipped_so_far_before_sending_offsets() -> None:
    """The broker verifies a transaction's first batch on a partition with the coordinator, which refuses while
    it records the group: the early offsets go only once those batches are delivered."""
    producer = _BatchingProducer(capacity=100)
    delivered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    send_batch = producer.send_batch

    async def slow_send_batch(batch: _Batch, topic: str, *, partition: int) -> asyncio.Future[Any]:
        await send_batch(batch, topic, partition=partition)
        return delivered

    producer.send_batch = slow_send_batch  # type: ignore[method-assign]
    txn = Transaction(producer, TP, "group")  # type: ignore[arg-type]
    await txn.begin()
    await txn.send("out", b"k", b"first", [], partition=1)
    await txn.ship_new()
    txn.join_group(1, "")
    await asyncio.sleep(0.01)
    assert _offsets(producer) == [], "offsets sent while the first batch awaits verification"
    delivered.set_result(None)
    await asyncio.sleep(0.01)
    assert _offsets(producer) == [1]
    await txn.commit(1, "")
    assert _offsets(producer) == [1, 1]


async def test_an_abort_drops_the_open_batches() -> None:
    producer = _BatchingProducer()
    txn = Transaction(producer, TP, "group")  # type: ignore[arg-type]
    await txn.begin()
    await txn.send("out", b"k", b"aborted", [], partition=0)
    await txn.abort()
    await txn.begin()
    await txn.send("out", b"k", b"kept", [], partition=0)
    await txn.commit(2, "")
    assert _shipped(producer, 0) == [b"kept"]


class _StuckProducer(_BatchingProducer):
    """A broker that stops answering: the calls named in `stuck` never return."""

    def __init__(self, stuck: set[str]) -> None:
        super().__init__(capacity=100)
        self.stuck = stuck

    async def _hang(self, name: str) -> None:
        if name in self.stuck:
            await asyncio.Event().wait()

    async def begin_transaction(self) -> None:
        await self._hang("begin")
        await super().begin_transaction()

    async def send_batch(self, batch: _Batch, topic: str, *, partition: int) -> asyncio.Future[Any]:
        await self._hang("send")  # aiokafka waits here while the partition's previous batch is not drained
        return await super().send_batch(batch, topic, partition=partition)

    async def commit_transaction(self) -> None:
        await self._hang("commit")
        await super().commit_transaction()

    async def abort_transaction(self) -> None:
        await self._hang("abort")
        await super().abort_transaction()


@pytest.mark.parametrize("call", ["begin", "send", "commit"])
async def test_every_transactional_call_fails_at_its_deadline_and_breaks_the_transaction(call: str) -> None:
    producer = _StuckProducer({call})
    txn = Transaction(producer, TP, "group", deadline_s=0.05)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(DeadlineError) as failure:
        await txn.begin()
        await txn.send("out", b"k", b"a", [], partition=0)
        await txn.ship()
        await txn.commit(1, "")
    assert failure.value.call == call and failure.value.where == "src[3]"
    assert loop.time() - started < 1.0, "one deadline, not a hang"
    assert call == "send" or await phase_after(txn) == "broken"
    assert "commit" not in [c[0] for c in producer.calls]


async def test_an_abort_the_broker_never_answers_ends_at_its_deadline_without_raising() -> None:
    producer = _StuckProducer({"abort"})
    txn = Transaction(producer, TP, "group", deadline_s=0.05)  # type: ignore[arg-type]
    await txn.begin()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await txn.abort()  # what went wrong is read from the producer afterwards, not raised
    assert loop.time() - started < 1.0, "one deadline, not a hang"
    assert await phase_after(txn) == "broken"


async def test_an_abort_after_a_failed_commit_still_ends_the_producers_transaction() -> None:
    """A failed commit leaves the producer inside its transaction: containment's abort goes to the broker."""
    producer = _Producer(fail="commit")
    txn = Transaction(producer, TP, "group")  # type: ignore[arg-type]
    await txn.begin()
    with pytest.raises(KafkaError):
        await txn.commit(1, "")
    await txn.abort()
    assert [c[0] for c in producer.calls][-2:] == ["commit", "abort"]
    assert await phase_after(txn) == "idle"


async def test_a_commit_stuck_on_an_undelivered_batch_fails_at_its_deadline_with_its_offsets_settled() -> None:
    producer = _BatchingProducer(capacity=100)
    undelivered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def stuck_send_batch(batch: _Batch, topic: str, *, partition: int) -> asyncio.Future[Any]:
        return asyncio.shield(undelivered)  # as aiokafka's; the leader is gone and the batch retried for ever

    producer.send_batch = stuck_send_batch  # type: ignore[method-assign]
    txn = Transaction(producer, TP, "group", deadline_s=0.05)  # type: ignore[arg-type]
    await txn.begin()
    await txn.send("out", b"k", b"v", [], partition=0)
    async with asyncio.timeout(1):
        with pytest.raises(DeadlineError, match=r"commit did not finish within 0\.05 s"):
            await txn.commit(1, "")
    assert await phase_after(txn) == "broken"
    txn.discard()  # the producer is abandoned; a late failure of the batch is marked seen, never logged
    undelivered.set_exception(KafkaError("leader gone"))
    await asyncio.sleep(0)
