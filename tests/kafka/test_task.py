"""One partition's task decides alone what its failure means and what it waits for; its siblings never notice.

No broker: the rebuild's broker side is scripted (`ScriptedRebuilder`), the producers are stand-ins over aiokafka's
own TransactionManager (so fencing shows in the state exactly as aiokafka leaves it), the task, its transactions and
the partition state are the real ones. Recovery on a real broker is proven by test_isolation.py.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import IllegalOperation, ProducerFenced, TransactionalIdAuthorizationFailed
from aiokafka.producer.transaction_manager import TransactionManager

from tests.kafka.support import RecordBatch
from tests.kafka.tasks import Rec, ScriptedRebuilder, TaskWorld, until
from tests.stream._support import TOPIC, item
from worker.errors import KafkaWorkerError
from worker.live.task import PartitionTask, Stage
from worker.recovery.ownership import Ownership

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
        self.on_send: Callable[[], None] | None = None  # called at the first send, then forgotten
        self.committed: list[int] = []
        self.commits_started = 0
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
        hook, self.on_send = self.on_send, None
        if hook is not None:
            hook()
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
        self.commits_started += 1
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


def _rebuilder(**script: Any) -> ScriptedRebuilder:
    return ScriptedRebuilder(_Producer, **script)


def _feed(world: TaskWorld, task: PartitionTask, count: int) -> None:
    """`count` records fetched from the partition's position (each one a whole run: one processed record)."""
    start = world.fetch.position.get(task.tp, 0)
    recs = []
    for offset in range(start, start + count):
        key = f"run-{task.tp.partition}-{offset}".encode()
        recs.append(Rec(task.tp.partition, offset, key, item(key.decode(), 0, terminal=True)))
    world.offer(task, recs)


async def test_a_partition_fenced_while_another_member_owns_it_never_starts_a_producer_again() -> None:
    """Re-initialising the transactional id would fence the real owner: the partition waits for the group."""
    rebuilder = _rebuilder(setup=lambda producer, n: setattr(producer, "fence_on", "commit" if n == 1 else None))
    world = TaskWorld(rebuilder)
    task = world.start(0)
    await until(lambda: world.live(task))
    rebuilder.owners.extend([Ownership.NOT_OWNER] * 1000)
    _feed(world, task, 3)
    await until(lambda: world.value("producers_fenced_total") == 1)
    await asyncio.sleep(0.5)  # many owner look-ups' worth
    assert rebuilder.rebuilds == 1, "a producer was started while another member owns the partition"
    assert rebuilder.owner_asked > 2, "the partition must keep asking the group"
    assert world.value("transaction_failures_total", topic=TOPIC, partition="0", cause="fenced") == 1
    assert world.health.ready()[0] is False and world.value("partition_ready", topic=TOPIC, partition="0") == 0
    assert rebuilder.closed == rebuilder.producers, "the fenced producer is closed"
    assert not await task.stop(1.0), "a fenced partition is never parked"


async def test_a_partition_that_waited_for_the_group_before_its_rebuild_goes_live_once_it_owns_it() -> None:
    """A rebuild that finds the group rebalancing waits (not ready), then rebuilds and goes live."""
    rebuilder = _rebuilder(owners=[Ownership.NOT_OWNER, Ownership.NOT_OWNER])
    world = TaskWorld(rebuilder)
    task = world.start(0)
    await until(lambda: world.live(task))
    assert (rebuilder.owner_asked, rebuilder.rebuilds) == (3, 1)
    _feed(world, task, 2)
    await until(lambda: rebuilder.producers[-1].committed[-1:] == [2], timeout_s=2)
    await task.stop(1.0)


async def test_a_partition_fenced_while_the_group_still_gives_it_to_us_rebuilds_at_once() -> None:
    """The broker aborted our transaction (a timeout bumps the epoch) but we own the partition: no session wait."""
    rebuilder = _rebuilder(setup=lambda producer, n: setattr(producer, "fence_on", "commit" if n == 1 else None))
    world = TaskWorld(rebuilder)
    task = world.start(0)
    await until(lambda: world.live(task))
    _feed(world, task, 3)
    loop = asyncio.get_running_loop()
    await until(lambda: world.value("producers_fenced_total") == 1)
    fenced_at = loop.time()
    await until(lambda: rebuilder.rebuilds == 2 and world.live(task))
    assert loop.time() - fenced_at < 0.5, "an owner re-initialises at once, not after a session timeout"
    _feed(world, task, 2)
    await until(lambda: rebuilder.producers[-1].committed[-1:] == [2], timeout_s=2)
    await task.stop(1.0)


async def test_a_fence_reported_by_a_delivery_is_confirmed_by_the_aborts_answer() -> None:
    """The produce response says fenced while the sender lives; only the abort's reply moves the state."""
    def setup(producer: _Producer, n: int) -> None:
        if n == 1:
            producer.delivery_error = ProducerFenced()
            producer.fence_on = "abort"
        elif n == 2:
            producer.delivery_error = ProducerFenced()  # the same exception, but the broker accepts the abort

    rebuilder = _rebuilder(setup=setup)
    world = TaskWorld(rebuilder)
    task = world.start(0)
    await until(lambda: world.live(task))
    _feed(world, task, 1)
    await until(lambda: rebuilder.rebuilds >= 2 and world.live(task))
    assert rebuilder.producers[0].aborts == 1
    assert world.value("transaction_failures_total", topic=TOPIC, partition="0", cause="fenced") == 1
    _feed(world, task, 1)
    await until(lambda: rebuilder.rebuilds >= 3)
    assert rebuilder.producers[1].aborts == 1
    assert world.value("transaction_failures_total", topic=TOPIC, partition="0", cause="error") == 1
    assert world.value("producers_fenced_total") == 1, "an abort that went through proves we are not fenced"
    await task.stop(1.0)


async def test_a_missing_acl_is_named_at_every_step_counted_and_never_taken_for_a_fence(
    caplog: pytest.LogCaptureFixture,
) -> None:
    denied = [TransactionalIdAuthorizationFailed("txn:0") for _ in range(4)]
    rebuilder = _rebuilder(failures=denied)  # type: ignore[arg-type]
    world = TaskWorld(rebuilder)
    with caplog.at_level(logging.ERROR, logger="worker.live.task"):
        task = world.start(0)
        await until(lambda: rebuilder.rebuilds >= 4)
        assert not world.live(task) and world.health.ready()[0] is False
        await until(lambda: world.live(task), timeout_s=5)  # the ACL was granted
    named = [r for r in caplog.records if "TransactionalId" in r.getMessage()]
    assert [r.getMessage() for r in named] == [
        "partition not authorised: WRITE and DESCRIBE on TransactionalId 'txn:0' (TransactionalIdAuthorizationFailed)"
        "; grant it as README.md#access-control shows"] * 4, "one line per back-off step"
    assert all(r.exc_info is None for r in named), "no traceback"
    assert world.value("authorization_failures_total", resource_type="transactional-id",
                       operation="write-describe") == 4
    assert world.value("rebuild_retries_total", topic=TOPIC, partition="0") == 4
    assert world.value("producers_fenced_total") == 0
    await task.stop(1.0)


async def test_a_stuck_partition_is_isolated_at_its_deadline_while_its_sibling_keeps_committing() -> None:
    """Partition 0's commit never returns (its output leader is gone); partition 1 commits all along."""
    rebuilder = _rebuilder(setup=lambda producer, n: producer.hang.add("commit") if producer.tp.partition == 0
                           else None)
    world = TaskWorld(rebuilder)
    stuck, healthy = world.start(0), world.start(1)
    await until(lambda: world.live(stuck) and world.live(healthy))
    loop = asyncio.get_running_loop()
    _feed(world, stuck, 5)
    started = loop.time()
    commits_seen = []
    while loop.time() - started < 1.0:
        _feed(world, healthy, 2)
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
    for task in (stuck, healthy):
        await task.stop(1.0)


async def test_fetching_pauses_while_a_commit_holds_the_backlog_and_resumes_once_it_shrinks() -> None:
    gate = asyncio.Event()
    rebuilder = _rebuilder(setup=lambda producer, n: setattr(producer, "commit_gate", gate))
    world = TaskWorld(rebuilder, max_pending_records=20, broker_call_timeout_ms=5_000)
    task = world.start(0)
    tp = task.tp
    await until(lambda: world.live(task))
    _feed(world, task, 5)
    await until(lambda: rebuilder.producers[0].commits_started > 0)  # the commit now waits for the broker
    for _ in range(4):
        _feed(world, task, 5)
        await asyncio.sleep(0.01)
    assert tp in world.fetch.paused
    assert world.value("backpressure_pauses_total", topic=TOPIC, partition="0") == 1
    assert world.value("pending_records", topic=TOPIC, partition="0") >= 20
    gate.set()
    await until(lambda: tp not in world.fetch.paused)
    assert world.value("pending_records", topic=TOPIC, partition="0") <= 10
    await until(lambda: rebuilder.producers[0].committed[-1:] == [25])
    await task.stop(1.0)


async def test_records_taken_for_conversion_count_toward_the_backlog_until_the_commits_hold_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fetching stays paused while a taken batch is still being converted: the records not yet converted are part
    of the backlog, though they left the inbox (else a partition could hold twice `max_pending_records`)."""
    monkeypatch.setattr("worker.live.task._YIELD_EVERY_S", 0.0)  # the loop runs between any two chunks
    rebuilder = _rebuilder()
    world = TaskWorld(rebuilder, max_pending_records=60, max_records_per_transaction=10)
    task = world.start(0)
    tp = task.tp
    await until(lambda: world.live(task))
    seen: list[bool] = []

    def fetched_mid_batch() -> None:  # the poll loop offers more while the first transaction is being sent
        _feed(world, task, 1)
        seen.append(tp in world.fetch.paused)

    producer = rebuilder.producers[0]
    producer.on_send = fetched_mid_batch
    _feed(world, task, 100)
    assert tp in world.fetch.paused
    await until(lambda: bool(seen))
    assert seen == [True], "90 records taken and not yet converted, 1 in the inbox: over the bound of 60"
    await until(lambda: producer.committed[-1:] == [101])
    assert tp not in world.fetch.paused
    await task.stop(1.0)


async def test_a_revocation_commit_that_cannot_finish_in_budget_drops_the_partition_in_time() -> None:
    rebuilder = _rebuilder(setup=lambda producer, n: producer.hang.add("commit"))
    world = TaskWorld(rebuilder, broker_call_timeout_ms=5_000)
    task = world.start(0)
    await until(lambda: world.live(task))
    _feed(world, task, 3)
    await until(lambda: world.processed(task) == 3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert not await task.stop(0.2), "a partition whose commit did not finish must not be parked"
    assert loop.time() - started < 0.6
    assert rebuilder.producers[0] in rebuilder.closed
    assert world.value("deadline_expirations_total", call="revoke") == 1


async def test_a_revoked_live_partition_commits_and_is_parked_until_taken_back() -> None:
    rebuilder = _rebuilder()
    world = TaskWorld(rebuilder, commit_interval_ms=30_000)
    task = world.start(0)
    await until(lambda: world.live(task))
    _feed(world, task, 4)
    await until(lambda: world.processed(task) == 4)
    assert await task.stop(1.0)
    parked = task.take_back()  # parked -> stopped: a move only a parked task makes
    assert parked.committed == 4 and parked.producer is rebuilder.producers[0]
    assert rebuilder.producers[0].committed == [4] and rebuilder.closed == []
    with pytest.raises(KafkaWorkerError, match="illegal partition stage move stopped -> stopped"):
        task.take_back()  # a parked partition is taken back once


async def test_a_partition_whose_revoke_commit_fails_is_not_parked() -> None:
    """Its open output was aborted, so keeping its state past that output would lose events: it must rebuild."""
    rebuilder = _rebuilder(setup=lambda producer, n: setattr(producer, "fence_on", "commit"))
    world = TaskWorld(rebuilder, commit_interval_ms=30_000)
    task = world.start(0)
    await until(lambda: world.live(task))
    _feed(world, task, 3)
    await until(lambda: world.processed(task) == 3)
    assert not await task.stop(1.0)
    assert rebuilder.producers[0] in rebuilder.closed


async def test_failed_rebuilds_back_off_with_a_cap_and_count_each_retry() -> None:
    rebuilder = _rebuilder(failures=[OSError("leader not available")] * 6)
    world = TaskWorld(rebuilder, rebuild_backoff_max_ms=100)
    loop = asyncio.get_running_loop()
    started = loop.time()
    task = world.start(0)
    await until(lambda: world.live(task))
    elapsed = loop.time() - started
    # 0.25 s doubling would take 0.25+0.5+1+2+4+8 = 15.75 s; capped at 0.1 s the waits add up to 0.6 s at most
    # (more on a busy host, never near the uncapped sum).
    assert 0.3 < elapsed < 8.0, elapsed
    assert world.value("rebuild_retries_total", topic=TOPIC, partition="0") == 6
    await task.stop(1.0)


def test_a_stage_moves_only_as_the_lifecycle_allows() -> None:
    """A stopped task never moves again, a live one rebuilds only after a failure, a stopping one never goes back to
    live, a halted one only stops, and a failed one goes live only through a rebuild."""
    assert Stage.REBUILDING.to(Stage.LIVE) is Stage.LIVE
    assert Stage.LIVE.to(Stage.STOPPING) is Stage.STOPPING
    assert Stage.FAILED.to(Stage.REBUILDING) is Stage.REBUILDING
    assert Stage.STOPPING.to(Stage.PARKED).to(Stage.STOPPED) is Stage.STOPPED
    illegal = [(Stage.STOPPED, stage) for stage in Stage] + [
        (Stage.LIVE, Stage.REBUILDING), (Stage.LIVE, Stage.LIVE), (Stage.STOPPING, Stage.LIVE),
        (Stage.HALTED, Stage.REBUILDING), (Stage.HALTED, Stage.LIVE), (Stage.FAILED, Stage.LIVE),
        (Stage.LIVE, Stage.PARKED), (Stage.FAILED, Stage.PARKED), (Stage.PARKED, Stage.LIVE),
        (Stage.PARKED, Stage.REBUILDING), (Stage.PARKED, Stage.PARKED),
    ]  # fmt: skip
    for start, to in illegal:
        with pytest.raises(KafkaWorkerError, match=f"illegal partition stage move {start.value} -> {to.value}"):
            start.to(to)


async def test_a_checkpoint_of_many_open_runs_lets_the_loop_run_between_its_parts() -> None:
    """The final commit of a partition holding 20,000 open runs cuts and writes a checkpoint of the 19,000 opened
    since its first: other work gets the loop every few ms of the loop's CPU all along (the CPU, not the wall time,
    which a busy host stretches)."""
    world = TaskWorld(_rebuilder(), commit_interval_ms=30_000, checkpoint_interval_ms=3_600_000)
    task = world.start(0)
    await until(lambda: world.live(task))
    runs = 20_000
    recs = [Rec(0, offset, f"run-{offset}".encode(), item(f"run-{offset}", 0)) for offset in range(runs)]
    world.offer(task, recs)
    await until(lambda: world.processed(task) == runs, timeout_s=60)
    ticks: list[float] = []
    stopping = True

    async def ticker() -> None:
        while stopping:
            ticks.append(time.thread_time())
            await asyncio.sleep(0)

    beside = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    gc.disable()  # a collection of the test process's whole heap is not the cut's to bound
    try:
        assert await task.stop(30.0)
    finally:
        gc.enable()
    stopping = False
    await beside
    parked = task.take_back()
    assert parked.state.checkpointed == runs
    # the first transaction's checkpoint wrote the runs it held, the final one every run opened since
    assert world.value("checkpoints_total", topic=TOPIC, partition="0") == 2
    assert world.value("changelog_records_total", topic=TOPIC, partition="0") == runs + 2
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert ticks[-1] - ticks[0] > 0.05, "the final commit was too quick to tell"
    assert max(gaps) < 0.025, f"the loop was held {max(gaps) * 1000:.0f} ms of CPU at once"
