"""One assigned source partition: its phase, its Kafka-free state, its producer and open checkpoint."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition

from worker.kafka.checkpoint import Checkpoint
from worker.stream import Outcome, PartitionState

__all__ = ["PartitionRun", "Phase"]


class Phase(Enum):
    """Where a partition stands; only LIVE partitions consume and publish."""

    REBUILDING = "rebuilding"
    LIVE = "live"
    FAILED = "failed"
    FENCED = "fenced"


@dataclass(slots=True, eq=False)
class PartitionRun:
    """Live bookkeeping of a partition; `next_offset` is the next source offset to process.

    While `commit_task` runs, processed outcomes wait in `pending` (with source timestamp and consume time);
    when no commit is in flight `pending` is empty and everything up to `next_offset` is in the open transaction.
    """

    tp: TopicPartition
    state: PartitionState
    phase: Phase = Phase.REBUILDING
    producer: AIOKafkaProducer | None = None
    checkpoint: Checkpoint | None = None
    next_offset: int = 0
    committed: int = -1
    pending: list[tuple[Outcome, int, float]] = field(default_factory=list)
    commit_task: asyncio.Task[None] | None = None
    verdict_counters: dict[Any, Any] = field(default_factory=dict)
    label: tuple[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.label = (self.tp.topic, str(self.tp.partition))

    def go_live(self, producer: AIOKafkaProducer, group_id: str, committed: int) -> None:
        """Adopt a rebuilt state: consume from `committed` with a fresh checkpoint on `producer`."""
        self.producer = producer
        self.checkpoint = Checkpoint(producer, self.tp, group_id)
        self.next_offset = committed
        self.committed = committed
        self.pending = []
        self.commit_task = None
        self.phase = Phase.LIVE

    def detach_producer(self) -> AIOKafkaProducer | None:
        """Forget the producer (the caller stops it) and the checkpoint that used it."""
        producer, self.producer, self.checkpoint = self.producer, None, None
        return producer
