"""One assigned source partition: its phase, its Kafka-free state, its producer and open checkpoint."""

from __future__ import annotations

import asyncio
import time
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
    FAILED = "failed"  # a transaction failed, or a rebuild did: its task contains it and rebuilds
    HALTED = "halted"  # a policy stopped it: held, not ready, until the group moves it


@dataclass(slots=True, eq=False)
class PartitionRun:
    """Live bookkeeping of a partition; `next_offset` is the next source offset to process.

    While `commit_task` runs, processed outcomes wait in `pending` (with source timestamp and consume time);
    when no commit is in flight `pending` is empty and everything up to `next_offset` is in the open transaction.
    Fetched records wait in `inbox` for the partition's own task; `backlog` counts both waits.
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
    inbox: list[list[Any]] = field(default_factory=list)
    inbox_records: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    fault: BaseException | None = None
    throttled: bool = False  # fetching paused because `backlog` passed its bound
    checkpointed_at: float = 0.0  # time.monotonic() of the last changelog checkpoint (or of going live)
    label: tuple[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.label = (self.tp.topic, str(self.tp.partition))

    @property
    def backlog(self) -> int:
        """Consumed records not yet in a transaction: fetched and waiting, or processed while a commit runs."""
        return self.inbox_records + len(self.pending)

    def go_live(
        self, producer: AIOKafkaProducer, group_id: str, committed: int, deadline_s: float | None = None
    ) -> None:
        """Adopt a rebuilt state: consume from `committed` with a fresh checkpoint on `producer`."""
        self.producer = producer
        self.checkpoint = Checkpoint(producer, self.tp, group_id, deadline_s)
        self.next_offset = committed
        self.committed = committed
        self.pending = []
        self.inbox = []
        self.inbox_records = 0
        self.commit_task = None
        self.fault = None
        self.checkpointed_at = time.monotonic()
        self.phase = Phase.LIVE

    def offer(self, recs: list[Any]) -> None:
        """Queue fetched records for the partition's task; records of a partition that is not live are dropped
        (its position is sought again when it goes live)."""
        if self.phase is Phase.LIVE:
            self.inbox.append(recs)
            self.inbox_records += len(recs)
            self.wake.set()

    def take_inbox(self) -> list[list[Any]]:
        """Everything fetched so far, in fetch order."""
        batches, self.inbox, self.inbox_records = self.inbox, [], 0
        return batches

    def fail(self, exc: BaseException) -> None:
        """Record the first fault of a live partition and wake its task; nothing here waits for the broker."""
        if self.phase is Phase.LIVE:
            self.phase = Phase.FAILED
            self.fault = exc
            self.pending = []
            self.take_inbox()
            self.wake.set()

    def detach_producer(self) -> AIOKafkaProducer | None:
        """Forget the producer (the caller stops it) and discard the checkpoint that used it."""
        if self.checkpoint is not None:
            self.checkpoint.discard()
        producer, self.producer, self.checkpoint = self.producer, None, None
        return producer
