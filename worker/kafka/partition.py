"""One assigned source partition: its phase, its Kafka-free state, its producer and open checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from aiokafka import AIOKafkaProducer, TopicPartition

from worker.kafka.checkpoint import Checkpoint
from worker.stream import PartitionState

__all__ = ["PartitionRun", "Phase"]


class Phase(Enum):
    """Where a partition stands; only LIVE partitions consume and publish."""

    REBUILDING = "rebuilding"
    LIVE = "live"
    FAILED = "failed"
    FENCED = "fenced"


@dataclass(slots=True, eq=False)
class PartitionRun:
    """Live bookkeeping of a partition; `next_offset` is the next source offset to process and to commit."""

    tp: TopicPartition
    state: PartitionState
    phase: Phase = Phase.REBUILDING
    producer: AIOKafkaProducer | None = None
    checkpoint: Checkpoint | None = None
    next_offset: int = 0
    committed: int = -1
    failure: str | None = None
    label: tuple[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.label = (self.tp.topic, str(self.tp.partition))

    def go_live(self, producer: AIOKafkaProducer, group_id: str, committed: int) -> None:
        """Adopt a rebuilt state: consume from `committed` with a fresh checkpoint on `producer`."""
        self.producer = producer
        self.checkpoint = Checkpoint(producer, self.tp, group_id)
        self.next_offset = committed
        self.committed = committed
        self.failure = None
        self.phase = Phase.LIVE

    def detach_producer(self) -> AIOKafkaProducer | None:
        """Forget the producer (the caller stops it) and the checkpoint that used it."""
        producer, self.producer, self.checkpoint = self.producer, None, None
        return producer
