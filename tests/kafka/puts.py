"""Publishing without a broker: an open transaction that takes every record at once and remembers where each went."""

from __future__ import annotations

from collections.abc import Awaitable, Iterable

from aiokafka import TopicPartition

from worker.live.publishing import Destinations, Sent, put_outcome
from worker.stream import Outcome

__all__ = ["PutLog", "put_all"]


class PutLog:
    """An open transaction (`publishing._Open`) that takes every record at once, remembering (topic, key,
    partition) in the order they were put or sent."""

    def __init__(self) -> None:
        self.puts: list[tuple[str, bytes | None, int | None]] = []

    def put(self, topic: str, key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes]],
            partition: int | None) -> Awaitable[None] | None:  # fmt: skip
        self.puts.append((topic, key, partition))
        return None

    async def send(self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]],
                   partition: int | None = None) -> None:  # fmt: skip
        self.puts.append((topic, key, partition))


async def put_all(
    txn: PutLog, outcome: Outcome, destinations: Destinations, sent: Sent, source: TopicPartition
) -> None:
    """`put_outcome`, awaiting what it hands back, as the pipeline does."""
    pending = put_outcome(txn, outcome, destinations, sent, source)
    if pending is not None:
        await pending
