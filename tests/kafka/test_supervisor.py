"""One partition's task decides alone what its failure means and what it waits for; its siblings never notice.

No broker: the rebuild's broker side is a stand-in (`_Rebuilder`), the producers are stand-ins over aiokafka's own
TransactionManager (so fencing shows in the state exactly as aiokafka leaves it), the publisher and the partition
state are the real ones. Recovery on a real broker is proven by test_isolation.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import IllegalOperation, ProducerFenced, TransactionalIdAuthorizationFailed
from aiokafka.producer.transaction_manager import TransactionManager

from tests.kafka.support import RecordBatch
from tests.stream._fakes import FAKE_CORE
from tests.stream._support import TOPIC, item
from worker.kafka.deadlines import Deadlines
from worker.kafka.diagnosis import Names
from worker.kafka.offsets import ReplayWindow
from worker.kafka.ownership import Ownership
from worker.kafka.partition import PartitionRun, Phase
from worker.kafka.publisher import Publisher
from worker.kafka.supervisor import Member, PartitionSupervisor, Rebuilt
from worker.ops import Health, Metrics
from worker.settings import Settings
from worker.stream import PartitionState

pytestmark = pytest.mark.timeout(60)


class _Producer:
    """A transactional producer stand-in over aiokafka's TransactionManager; knobs make the broker misbehave.

    `commit_gate`: commits wait for it. `hang`: calls that never return. `fence_on`: the call whose broker reply is
    "fenced" (the sender task then dies and the manager turns FATAL_ERROR, as aiokafka's Sender does).
    `delivery_error`: records fail delivery with it while the sender lives (a produce response's error).
    """

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self._txn_manager = TransactionManager("txn", 60_000)
        self._txn_manager.set_pid_and_epoch(1, 0)
        self._sender: Any = type("Sender", (), {})()
        self._sender.sender_task = asyncio.get_running_loop().create_future()
        self.commit_gate: asyncio.Event | None = None
        self.hang: set[str] = set()
        self.fence_on: str | None = None
        self.delivery_error: BaseException | None = None
        self.committed: list[int] = []
        self.aborts = 0
        self._offset: int | None = None

    def _die(self, exc: BaseException) -> None:
        self._sender.sender_task.set_exception(exc)
        self._txn_manager.fatal_error(exc)

    async def _call(self, name: str) -> None:
        if name in self.hang:
            await asyncio.Event().wait()
        if self.fence_on == name:
            self._die(ProducerFenced())
            raise ProducerFenced()

    async def begin_transaction(self) -> None:
        await self._call("begin")
        self._txn_manager.begin_transaction()

    async def send(self, topic: str, value: bytes | None, key: bytes | None, headers: Any,
                   partition: int | None = None) -> asyncio.Future[Any]:
        if not self._txn_manager.is_in_transaction():
            raise IllegalOperation("Can't send messages while not in transaction")
        await self._call("send")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.delivery_error is not None:
            fut.set_exception(self.delivery_error)
        else:
            fut.set_result(None)
        return fut

    def create_batch(self) -> RecordBatch:
        return RecordBatch()

    async def send_batch(self, batch: RecordBatch, topic: str, *, partition: int) -> asyncio.Future[Any]:
        return await self.send(topic, None, None, [], partition)

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, Any], group_id: str) -> None:
        if not self._txn_manager.is_in_transaction():
            raise IllegalOperation("Not in the middle of a transaction")
        self._offset = offsets[self.tp].offset

    async def commit_transaction(self) -> None:
        self._txn_manager.committing_transaction()
        if self.commit_gate is not None:
            await self.commit_gate.wait()
        await self._call("commit")
        self._txn_manager.complete_transaction()
        assert self._offset is not None
        self.committed.append(self._offset)

    async def abort_transaction(self) -> None:
        self._txn_manager.aborting_transaction()
        self.aborts += 1
        await self._call("abort")
        self._txn_manager.complete_transaction()


class _Rebuilder:
    """Scripted broker side of rebuilds: ownership answers, rebuild failures, a producer per rebuild."""

    def __init__(self, owners: list[Ownership] | None = None, failures: list[BaseException] | None = None,
                 setup: Callable[[_Producer, int], None] | None = None) -> None:
        self.owners = deque(owners or [])
        self.failures = deque(failures or [])
        self.setup = setup
        self.rebuilds = 0  # producer starts: each one would fence whoever else holds the id
        self.owner_asked = 0
        self.closed: list[_Producer] = []
        self.producers: list[_Producer] = []
        self.committed = 0

    def names(self, tp: TopicPartition) -> Names:
        return Names(f"txn:{tp.partition}", "group", TOPIC)

    def fresh_state(self, tp: TopicPartition) -> PartitionState:
        return PartitionState(TOPIC, tp.partition, core=FAKE_CORE)

    async def owner(self, tp: TopicPartition) -> Ownership:
        self.owner_asked += 1
        return self.owners.popleft() if self.owners else Ownership.OWNER

    async def rebuild(self, tp: TopicPartition, kept: PartitionRun | None, progress: Any) -> Rebuilt:
        self.rebuilds += 1
        if self.failures:
            raise self.failures.popleft()
        producer = _Producer(tp)
        if self.setup is not None:
            self.setup(producer, self.rebuilds)
        self.producers.append(producer)
        start = max([self.committed, *(c for p in self.producers for c in p.committed)])
        return Rebuilt(producer, self.fresh_state(tp), start, kept=False,  # type: ignore[arg-type]
                       window=ReplayWindow(tp, start, start, "metadata", False))

    def close_later(self, producer: Any) -> None:
        self.closed.append(producer)


class _Fetch:
    """The group consumer's controls; `position` is where the next fetch of a partition starts."""

    def __init__(self) -> None:
        self.paused: set[TopicPartition] = set()
        self.position: dict[TopicPartition, int] = {}
        self.pauses = 0
        self.resumes = 0

    def pause(self, tp: TopicPartition) -> None:
        self.paused.add(tp)
        self.pauses += 1

    def resume(self, tp: TopicPartition) -> None:
        self.paused.discard(tp)
        self.resumes += 1

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.position[tp] = offset


class _Rec:
    def __init__(self, partition: int, offset: int) -> None:
        self.topic, self.partition, self.offset = TOPIC, partition, offset
        self.timestamp = 1_700_000_000_000 + offset
        self.key = f"run-{partition}-{offset}".encode()
        self.value = item(self.key.decode(), 0, terminal=True)
        self.headers = ()


class _World:
    """A member with real publisher, health and metrics around stand-in rebuilders and fetch controls."""

    def __init__(self, rebuilder: _Rebuilder, **settings: Any) -> None:
        base: dict[str, Any] = {"commit_interval_ms": 10, "broker_call_timeout_ms": 200, "rebuild_backoff_max_ms": 100,
                                "heartbeat_interval_ms": 100, "session_timeout_ms": 1000}
        self.settings = Settings(**{**base, **settings})
        self.metrics = Metrics()
        self.health = Health()
        self.fetch = _Fetch()
        self.rebuilder = rebuilder
        self.publisher = Publisher(self.settings, self.metrics, self._failed, self._halted)
        self.member = Member(self.settings, self.metrics, self.health, self.publisher,
                             Deadlines.from_settings(self.settings), rebuilder, self.fetch)  # type: ignore[arg-type]

    def _failed(self, p: PartitionRun, exc: BaseException) -> None:
        p.fail(exc)

    def _halted(self, p: PartitionRun, reason: str) -> None:
        p.phase = Phase.HALTED

    def start(self, partition: int) -> PartitionSupervisor:
        tp = TopicPartition(TOPIC, partition)
        return PartitionSupervisor(self.member, PartitionRun(tp, self.rebuilder.fresh_state(tp)))

    def feed(self, sup: PartitionSupervisor, count: int) -> None:
        """`count` records fetched from the partition's position (each one a whole run: one processed record)."""
        start = self.fetch.position.get(sup.tp, 0)
        sup.offer([_Rec(sup.tp.partition, start + i) for i in range(count)])
        self.fetch.position[sup.tp] = start + count

    def value(self, name: str, **labels: str) -> float:
        got = self.metrics.registry.get_sample_value(f"harness_agui_{name}", labels)
        return 0.0 if got is None else got


async def _until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            if condition():
                return
            await asyncio.sleep(0.005)


def _live(sup: PartitionSupervisor) -> bool:
    return sup.run.phase is Phase.LIVE


async def test_a_partition_fenced_while_another_member_owns_it_never_starts_a_producer_again() -> None:
    """Re-initialising the transactional id would fence the real owner: the partition waits for the group."""
    rebuilder = _Rebuilder(setup=lambda producer, n: setattr(producer, "fence_on", "commit" if n == 1 else None))
    world = _World(rebuilder)
    sup = world.start(0)
    await _until(lambda: _live(sup))
    rebuilder.owners.extend([Ownership.NOT_OWNER] * 1000)
    world.feed(sup, 3)
    await _until(lambda: world.value("producers_fenced_total") == 1)
    await asyncio.sleep(0.5)  # many owner look-ups' worth
    assert rebuilder.rebuilds == 1, "a producer was started while another member owns the partition"
    assert rebuilder.owner_asked > 2, "the partition must keep asking the group"
    assert world.value("transaction_failures_total", topic=TOPIC, partition="0", cause="fenced") == 1
    assert world.health.ready()[0] is False and world.value("partition_ready", topic=TOPIC, partition="0") == 0
    assert rebuilder.closed == rebuilder.producers, "the fenced producer is closed"
    assert await sup.stop(1.0) is None, "a fenced partition is never parked"


async def test_a_partition_fenced_while_the_group_still_gives_it_to_us_rebuilds_at_once() -> None:
    """The broker aborted our transaction (a timeout bumps the epoch) but we own the partition: no session wait."""
    rebuilder = _Rebuilder(setup=lambda producer, n: setattr(producer, "fence_on", "commit" if n == 1 else None))
    world = _World(rebuilder)
    sup = world.start(0)
    await _until(lambda: _live(sup))
    world.feed(sup, 3)
    loop = asyncio.get_running_loop()
    await _until(lambda: world.value("producers_fenced_total") == 1)
    fenced_at = loop.time()
    await _until(lambda: rebuilder.rebuilds == 2 and _live(sup))
    assert loop.time() - fenced_at < 0.5, "an owner re-initialises at once, not after a session timeout"
    world.feed(sup, 2)
    await _until(lambda: rebuilder.producers[-1].committed[-1:] == [2], timeout_s=2)
    await sup.stop(1.0)


async def test_a_fence_reported_by_a_delivery_is_confirmed_by_the_aborts_answer() -> None:
    """The produce response says fenced while the sender lives; only the abort's reply moves the state."""
    def setup(producer: _Producer, n: int) -> None:
        if n == 1:
            producer.delivery_error = ProducerFenced()
            producer.fence_on = "abort"
        elif n == 2:
            producer.delivery_error = ProducerFenced()  # the same exception, but the broker accepts the abort

    rebuilder = _Rebuilder(setup=setup)
    world = _World(rebuilder)
    sup = world.start(0)
    await _until(lambda: _live(sup))
    world.feed(sup, 1)
    await _until(lambda: rebuilder.rebuilds >= 2 and _live(sup))
    assert rebuilder.producers[0].aborts == 1
    assert world.value("transaction_failures_total", topic=TOPIC, partition="0", cause="fenced") == 1
    world.feed(sup, 1)
    await _until(lambda: rebuilder.rebuilds >= 3)
    assert rebuilder.producers[1].aborts == 1
    assert world.value("transaction_failures_total", topic=TOPIC, partition="0", cause="error") == 1
    assert world.value("producers_fenced_total") == 1, "an abort that went through proves we are not fenced"
    await sup.stop(1.0)


async def test_a_missing_acl_is_reported_once_counted_each_time_and_never_taken_for_a_fence(
    caplog: pytest.LogCaptureFixture,
) -> None:
    denied = [TransactionalIdAuthorizationFailed("txn:0") for _ in range(4)]
    rebuilder = _Rebuilder(failures=denied)  # type: ignore[arg-type]
    world = _World(rebuilder)
    with caplog.at_level(logging.ERROR, logger="worker.kafka.supervisor"):
        sup = world.start(0)
        await _until(lambda: rebuilder.rebuilds >= 4)
        assert not _live(sup) and world.health.ready()[0] is False
        await _until(lambda: _live(sup), timeout_s=5)  # the ACL was granted
    named = [r.getMessage() for r in caplog.records if "TransactionalId" in r.getMessage()]
    assert named == ["partition not authorised: grant WRITE and DESCRIBE on TransactionalId 'txn:0' "
                     "(TransactionalIdAuthorizationFailed)"], named
    labels = {"topic": TOPIC, "partition": "0"}
    assert world.value("authorization_failures_total", **labels, resource="transactional-id") == 4
    assert world.value("rebuild_retries_total", **labels) == 4
    assert world.value("producers_fenced_total") == 0
    await sup.stop(1.0)


async def test_a_stuck_partition_is_isolated_at_its_deadline_while_its_sibling_keeps_committing() -> None:
    """Partition 0's commit never returns (its output leader is gone); partition 1 commits all along."""
    rebuilder = _Rebuilder(setup=lambda producer, n: producer.hang.add("commit") if producer.tp.partition == 0
                           else None)
    world = _World(rebuilder)
    stuck, healthy = world.start(0), world.start(1)
    await _until(lambda: _live(stuck) and _live(healthy))
    loop = asyncio.get_running_loop()
    world.feed(stuck, 5)
    started = loop.time()
    commits_seen = []
    while loop.time() - started < 1.0:
        world.feed(healthy, 2)
        await asyncio.sleep(0.05)
        commits_seen.append(sum(len(p.committed) for p in rebuilder.producers if p.tp.partition == 1))
    assert commits_seen[-1] >= 10 and commits_seen == sorted(commits_seen), commits_seen
    assert world.value("deadline_expirations_total", call="commit") >= 1
    assert world.value("transaction_failures_total", topic=TOPIC, partition="0", cause="deadline") >= 1
    assert world.value("transaction_failures_total", topic=TOPIC, partition="1", cause="deadline") == 0
    stuck_producers = [p for p in rebuilder.producers if p.tp.partition == 0]
    assert len(stuck_producers) >= 2, "the stuck partition is rebuilt with a new producer"
    assert stuck_producers[0] in rebuilder.closed, "its producer closes in the background"
    assert stuck_producers[0].aborts == 0, "an abort would wait on the same dead broker"
    assert TopicPartition(TOPIC, 1) not in world.fetch.paused
    for sup in (stuck, healthy):
        await sup.stop(1.0)


async def test_fetching_pauses_while_a_commit_holds_the_backlog_and_resumes_once_it_drains() -> None:
    gate = asyncio.Event()
    rebuilder = _Rebuilder(setup=lambda producer, n: setattr(producer, "commit_gate", gate))
    world = _World(rebuilder, max_pending_records=20, broker_call_timeout_ms=5_000)
    sup = world.start(0)
    tp = sup.tp
    await _until(lambda: _live(sup))
    world.feed(sup, 5)
    await _until(lambda: sup.run.commit_task is not None)  # the commit now waits for the broker
    for _ in range(4):
        world.feed(sup, 5)
        await asyncio.sleep(0.01)
    assert tp in world.fetch.paused and sup.run.throttled
    assert world.value("backpressure_pauses_total", topic=TOPIC, partition="0") == 1
    assert world.value("pending_records", topic=TOPIC, partition="0") >= 20
    gate.set()
    await _until(lambda: tp not in world.fetch.paused)
    assert world.value("pending_records", topic=TOPIC, partition="0") <= 10
    await _until(lambda: rebuilder.producers[0].committed[-1:] == [25])
    await sup.stop(1.0)


async def test_a_revocation_commit_that_cannot_finish_in_budget_drops_the_partition_in_time() -> None:
    rebuilder = _Rebuilder(setup=lambda producer, n: producer.hang.add("commit"))
    world = _World(rebuilder, broker_call_timeout_ms=5_000)
    sup = world.start(0)
    await _until(lambda: _live(sup))
    world.feed(sup, 3)
    await _until(lambda: sup.run.next_offset == 3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await sup.stop(0.2) is None, "a partition whose commit did not finish must not be parked"
    assert loop.time() - started < 0.6
    assert rebuilder.producers[0] in rebuilder.closed
    assert world.value("deadline_expirations_total", call="revoke") == 1


async def test_a_revoked_live_partition_commits_and_is_handed_back_for_parking() -> None:
    rebuilder = _Rebuilder()
    world = _World(rebuilder, commit_interval_ms=30_000)
    sup = world.start(0)
    await _until(lambda: _live(sup))
    world.feed(sup, 4)
    await _until(lambda: sup.run.next_offset == 4)
    parked = await sup.stop(1.0)
    assert parked is sup.run and parked.committed == 4 and parked.producer is rebuilder.producers[0]
    assert rebuilder.producers[0].committed == [4] and rebuilder.closed == []


async def test_a_partition_whose_revoke_commit_fails_is_not_parked() -> None:
    """Its open output was aborted, so keeping its state past that output would lose events: it must rebuild."""
    rebuilder = _Rebuilder(setup=lambda producer, n: setattr(producer, "fence_on", "commit"))
    world = _World(rebuilder, commit_interval_ms=30_000)
    sup = world.start(0)
    await _until(lambda: _live(sup))
    world.feed(sup, 3)
    await _until(lambda: sup.run.next_offset == 3)
    assert await sup.stop(1.0) is None
    assert rebuilder.producers[0] in rebuilder.closed


async def test_failed_rebuilds_back_off_with_a_cap_and_count_each_retry() -> None:
    rebuilder = _Rebuilder(failures=[OSError("leader not available")] * 6)
    world = _World(rebuilder, rebuild_backoff_max_ms=100)
    loop = asyncio.get_running_loop()
    started = loop.time()
    sup = world.start(0)
    await _until(lambda: _live(sup))
    elapsed = loop.time() - started
    # 0.25 s doubling would take 0.25+0.5+1+2+4+8 s; capped at 0.1 s it is at most 0.6 s.
    assert 0.3 < elapsed < 2.0, elapsed
    assert world.value("rebuild_retries_total", topic=TOPIC, partition="0") == 6
    await sup.stop(1.0)
