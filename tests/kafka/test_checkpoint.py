"""The checkpoint's transaction state machine, on a recording stand-in producer (no broker: phases only)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import InvalidProducerEpoch, KafkaError, ProducerFenced

from worker.errors import FencedError, KafkaWorkerError
from worker.kafka.checkpoint import Checkpoint, TxnPhase, is_fenced

TP = TopicPartition("src", 3)


class _Producer:
    """Records the calls a checkpoint makes; `fail` names a call that raises."""

    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.fail = fail

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
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.fail == "delivery":
            fut.set_exception(KafkaError("delivery failed"))
        else:
            fut.set_result(None)
        return fut

    async def send_offsets_to_transaction(self, offsets: Any, group_id: str) -> None:
        self._call("offsets", ({tp: (o.offset, o.metadata) for tp, o in offsets.items()}, group_id))

    async def commit_transaction(self) -> None:
        self._call("commit")

    async def abort_transaction(self) -> None:
        self._call("abort")


async def test_commit_sends_records_then_offsets_then_ends_the_transaction() -> None:
    producer = _Producer()
    ckpt = Checkpoint(producer, TP, "group")  # type: ignore[arg-type]
    await ckpt.begin()
    await ckpt.send("out", b"k", b"v", [])
    ckpt.note_source(1_000)
    ckpt.note_source(2_000)
    stamps = await ckpt.commit(42, '{"v":1,"replay_from":40}')
    assert stamps == [1_000, 2_000]
    assert [c[0] for c in producer.calls] == ["begin", "send", "offsets", "commit"]
    assert producer.calls[2][1] == ({TP: (42, '{"v":1,"replay_from":40}')}, "group")
    assert ckpt.phase is TxnPhase.IDLE and ckpt.records == 0


async def test_begin_is_idempotent_while_open() -> None:
    producer = _Producer()
    ckpt = Checkpoint(producer, TP, "group")  # type: ignore[arg-type]
    await ckpt.begin()
    await ckpt.begin()
    assert [c[0] for c in producer.calls] == ["begin"]


async def test_send_outside_a_transaction_is_refused() -> None:
    ckpt = Checkpoint(_Producer(), TP, "group")  # type: ignore[arg-type]
    with pytest.raises(KafkaWorkerError, match="send outside a transaction"):
        await ckpt.send("out", None, b"v", [])


async def test_a_failed_delivery_fails_the_commit_and_breaks_the_checkpoint() -> None:
    producer = _Producer(fail="delivery")
    ckpt = Checkpoint(producer, TP, "group")  # type: ignore[arg-type]
    await ckpt.begin()
    await ckpt.send("out", None, b"v", [])
    with pytest.raises(KafkaError, match="delivery failed"):
        await ckpt.commit(1, "")
    # The offsets may join the transaction while records are in flight; it is never committed without them.
    assert "commit" not in [c[0] for c in producer.calls], "a transaction that lost records must never commit"
    assert ckpt.phase is TxnPhase.BROKEN
    with pytest.raises(KafkaWorkerError, match="illegal transaction move broken -> open"):
        await ckpt.begin()


async def test_abort_returns_to_idle_and_forgets_the_batch() -> None:
    producer = _Producer()
    ckpt = Checkpoint(producer, TP, "group")  # type: ignore[arg-type]
    await ckpt.begin()
    ckpt.note_source(5)
    await ckpt.abort()
    assert ckpt.phase is TxnPhase.IDLE and ckpt.records == 0
    await ckpt.abort()  # nothing open: no call
    assert [c[0] for c in producer.calls] == ["begin", "abort"]


async def test_a_failed_commit_call_breaks_the_checkpoint() -> None:
    ckpt = Checkpoint(_Producer(fail="commit"), TP, "group")  # type: ignore[arg-type]
    await ckpt.begin()
    with pytest.raises(KafkaError):
        await ckpt.commit(1, "")
    assert ckpt.phase is TxnPhase.BROKEN


def test_fencing_errors_are_recognised() -> None:
    assert is_fenced(ProducerFenced())
    assert is_fenced(InvalidProducerEpoch())
    assert is_fenced(FencedError("x"))
    assert not is_fenced(KafkaError("transient"))
