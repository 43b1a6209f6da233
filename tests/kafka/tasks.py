"""A group member's partition tasks without a broker: a scripted rebuild side, the fetch controls, and a world that
starts real `PartitionTask`s with real commits, health and metrics around stand-in producers."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from aiokafka import TopicPartition

from tests.stream._fakes import FAKE_CORE
from tests.stream._support import TOPIC
from worker.client import Names
from worker.live.publishing import Destinations, KeyPartitioner
from worker.live.task import Deadlines, PartitionTask, TaskContext
from worker.live.topics import TopicLimits
from worker.ops import Health, Metrics
from worker.recovery.ownership import Ownership
from worker.recovery.rebuild import Parked, Rebuilt
from worker.recovery.replay import ReplayWindow
from worker.settings import Settings
from worker.stream import PartitionState

__all__ = ["Fetch", "Rec", "ScriptedRebuilder", "TaskWorld", "fake_state", "until"]


def fake_state(tp: TopicPartition) -> PartitionState:
    """A fresh state on the fake conversion core (one event per item)."""
    return PartitionState(TOPIC, tp.partition, core=FAKE_CORE)


class ScriptedRebuilder:
    """The broker side of rebuilds, scripted: ownership answers, rebuild failures, a new producer per rebuild
    (`make_producer(tp)`, then `setup(producer, rebuild number)`; each producer lists the offsets it committed in
    `committed`, where the next rebuild starts), and the producers closed."""

    def __init__(
        self, make_producer: Callable[[TopicPartition], Any], *, owners: list[Ownership] | None = None,
        failures: list[BaseException] | None = None, setup: Callable[[Any, int], None] | None = None,
        state: Callable[[TopicPartition], PartitionState] = fake_state,
    ) -> None:  # fmt: skip
        self._make_producer = make_producer
        self.owners = deque(owners or [])
        self.failures = deque(failures or [])
        self.setup = setup
        self.state = state
        self.rebuilds = 0  # producer starts: each one would fence whoever else holds the id
        self.owner_asked = 0
        self.closed: list[Any] = []
        self.producers: list[Any] = []
        self.committed = 0  # where a rebuild starts when no producer committed anything

    def names(self, tp: TopicPartition) -> Names:
        return Names(f"txn:{tp.partition}", "group", TOPIC)

    def fresh_state(self, tp: TopicPartition) -> PartitionState:
        return self.state(tp)

    async def owner(self, tp: TopicPartition) -> Ownership:
        self.owner_asked += 1
        return self.owners.popleft() if self.owners else Ownership.OWNER

    async def rebuild(self, tp: TopicPartition, parked: Parked | None, progress: Any) -> Rebuilt:
        self.rebuilds += 1
        if self.failures:
            raise self.failures.popleft()
        producer = self._make_producer(tp)
        if self.setup is not None:
            self.setup(producer, self.rebuilds)
        self.producers.append(producer)
        start = max([self.committed, *(offset for p in self.producers for offset in p.committed)])
        return Rebuilt(producer, self.fresh_state(tp), start, kept=False,
                       window=ReplayWindow(tp, start, start, "metadata", False))

    def close_later(self, producer: Any) -> None:
        self.closed.append(producer)


class Fetch:
    """The group consumer's controls; `position` is where the next fetch of a partition starts."""

    def __init__(self) -> None:
        self.paused: set[TopicPartition] = set()
        self.position: dict[TopicPartition, int] = {}

    def pause(self, tp: TopicPartition) -> None:
        self.paused.add(tp)

    def resume(self, tp: TopicPartition) -> None:
        self.paused.discard(tp)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.position[tp] = offset


class Rec:
    """A consumed record as aiokafka hands it over (the attributes the worker reads)."""

    def __init__(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        self.topic, self.partition, self.offset = TOPIC, partition, offset
        self.timestamp = 1_700_000_000_000 + offset
        self.key, self.value = key, value
        self.headers: tuple[tuple[str, bytes], ...] = ()


class TaskWorld:
    """One member's partition tasks: real tasks, commits, health and metrics, around `rebuilder`; `limits` are the
    destinations' record limits as the member last read them (None: not read, dead letters go uncut)."""

    def __init__(self, rebuilder: ScriptedRebuilder, limits: TopicLimits | None = None, **settings: Any) -> None:
        base: dict[str, Any] = {"commit_interval_ms": 10, "broker_call_timeout_ms": 200, "rebuild_backoff_max_ms": 100,
                                "heartbeat_interval_ms": 100, "session_timeout_ms": 1000}
        self.settings = s = Settings(**{**base, **settings})
        self.metrics = Metrics()
        self.health = Health()
        self.fetch = Fetch()
        self.rebuilder = rebuilder
        self.destinations = Destinations(s.output_topic, s.dlq_topic, s.display_topic, s.changelog_topic_name,
                                         KeyPartitioner(1), limits)  # fmt: skip
        self.context = TaskContext(s, self.metrics, self.health, Deadlines.from_settings(s), rebuilder, self.fetch,
                             lambda: self.destinations)  # fmt: skip

    def start(self, partition: int, parked: Parked | None = None) -> PartitionTask:
        return PartitionTask(self.context, TopicPartition(TOPIC, partition), parked)

    def offer(self, task: PartitionTask, recs: list[Rec]) -> None:
        """Hand fetched records to the task and move the fetch position past them."""
        task.offer(recs)
        if recs:
            self.fetch.position[task.tp] = recs[-1].offset + 1

    def value(self, name: str, **labels: str) -> float:
        got = self.metrics.registry.get_sample_value(f"harness_agui_{name}", labels)
        return 0.0 if got is None else got

    def live(self, task: PartitionTask) -> bool:
        """Whether the task's partition is ready (`partition_ready` 1), as operators see it."""
        return self.value("partition_ready", topic=TOPIC, partition=str(task.tp.partition)) == 1

    def halted(self, task: PartitionTask) -> bool:
        """Whether the task's partition is held: not ready, and counted in `partition_failures_total`."""
        labels = {"topic": TOPIC, "partition": str(task.tp.partition)}
        return not self.live(task) and self.value("partition_failures_total", **labels) > 0

    def processed(self, task: PartitionTask) -> float:
        """Source records the task has processed, by every verdict."""
        return sum(self.value("source_records_total", topic=TOPIC, partition=str(task.tp.partition), verdict=v)
                   for v in ("processed", "duplicate", "gap", "dead_lettered"))


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            if condition():
                return
            await asyncio.sleep(0.005)
