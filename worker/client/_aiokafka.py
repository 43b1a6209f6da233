"""What the worker reads or does through aiokafka's private attributes, kept in one place (aiokafka 0.12 to 0.14).

aiokafka exposes neither a transactional producer's state, nor why its background sender stopped, nor the member
id of a group consumer, nor a way to close a producer whose batches can never be delivered, nor a way to ask for one
topic's metadata without asking the broker to create it. Each function says which attribute it relies on;
tests/kafka/test_diagnosis.py drives real aiokafka objects through the first four, the gateway's tests the last.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import KafkaConnectionError, ProducerClosed
from aiokafka.protocol.metadata import MetadataRequest

__all__ = ["ProducerView", "force_close", "member_id", "observe_producer", "topic_metadata"]

_ABORTABLE = frozenset({"IN_TRANSACTION", "ABORTABLE_ERROR"})


@dataclass(frozen=True, slots=True)
class ProducerView:
    """A transactional producer as far as it can be observed: its transaction state (`TransactionState` name,
    None when unknown), whether its sender task still runs, what stopped the sender, and the error the current
    transaction ended with."""

    state: str | None
    sender_running: bool
    sender_error: BaseException | None
    transaction_error: BaseException | None

    @property
    def can_abort(self) -> bool:
        """An abort request can still reach the broker: the sender runs and a transaction is open (or the state is
        unknown)."""
        return self.sender_running and (self.state is None or self.state in _ABORTABLE)


def _done_error(fut: Any) -> BaseException | None:
    if isinstance(fut, asyncio.Future) and fut.done() and not fut.cancelled():
        return fut.exception()  # retrieving it also keeps asyncio from logging it as never retrieved
    return None


def observe_producer(producer: Any) -> ProducerView:
    """Read `producer._txn_manager.state`, `._txn_manager._transaction_waiter` and `._sender.sender_task` of a
    transactional producer; a producer not started has no sender running."""
    manager = producer._txn_manager
    state = getattr(manager.state, "name", None)
    task = producer._sender.sender_task  # None before the producer starts it
    return ProducerView(
        state=state if isinstance(state, str) else None,
        sender_running=task is not None and not task.done(),
        sender_error=_done_error(task),
        transaction_error=_done_error(manager._transaction_waiter),
    )


async def force_close(producer: Any, seconds: float) -> None:
    """Stop `producer` within about three times `seconds`, never raising: a normal `stop()` first; when that
    waits for batches that cannot be delivered, close its connections (`producer.client`), cancel its sender task
    and fail the batches still queued or in flight (`producer._message_accumulator._batches`, `._pending_batches`)."""
    stop = asyncio.ensure_future(producer.stop())
    done, _ = await asyncio.wait([stop], timeout=seconds)
    if done:
        _done_error(stop)
        return
    stop.cancel()
    await asyncio.wait([stop], timeout=seconds)
    client = getattr(producer, "client", None)
    if client is not None:
        closing = asyncio.ensure_future(client.close())
        await asyncio.wait([closing], timeout=seconds)
        if not closing.done():
            closing.cancel()
        _done_error(closing)
    task = getattr(getattr(producer, "_sender", None), "sender_task", None)
    if isinstance(task, asyncio.Future) and not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=seconds)
    accumulator = getattr(producer, "_message_accumulator", None)
    if accumulator is not None:
        with contextlib.suppress(Exception):
            batches = [b for queue in accumulator._batches.values() for b in queue]
            batches += list(accumulator._pending_batches)
            accumulator.fail_all(ProducerClosed())
            for batch in batches:  # failed on purpose: keep asyncio from logging them as never retrieved
                _done_error(batch.future)
                _done_error(getattr(batch, "_drain_waiter", None))


def member_id(consumer: Any) -> str:
    """The group member id the consumer holds now (`consumer._coordinator.member_id`); "" when it holds none."""
    coordinator = getattr(consumer, "_coordinator", None)
    value = getattr(coordinator, "member_id", "")
    return value if isinstance(value, str) else ""


async def topic_metadata(consumer: Any, topic: str) -> tuple[int, list[int]]:
    """The error code and the sorted partition ids a broker answers for `topic` (0 and none when the answer leaves it
    out), asked by name without auto-creation: a MetadataRequest through `consumer._client`; KafkaConnectionError
    when no broker is known yet."""
    client = consumer._client
    node = client.get_random_node()
    if node is None:
        raise KafkaConnectionError("no broker is known after the bootstrap")
    answer = await client.send(node, MetadataRequest([topic], allow_auto_topic_creation=False))
    for entry in answer.topics:
        code, name, parts = (entry[0], entry[1], entry[2]) if answer.API_VERSION == 0 else \
            (entry[0], entry[1], entry[3])  # fmt: skip
        if name == topic:
            return code, sorted(part[1] for part in parts)
    return 0, []
