"""One member of the consumer group: its clients, the poll loop, the rebalance callbacks and shutdown, around one
`PartitionTask` per assigned partition.

The poll loop never waits for anything but the next fetch: it hands records to each partition's task and beats
the liveness probe. The rebalance callbacks and shutdown take the membership lock, which no partition takes, and
wait for partition tasks only within the revocation (or shutdown) budget. A revoked live partition commits and is
parked; when it comes straight back with its committed offset unchanged its state is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.errors import IllegalStateError, KafkaError

from worker.client import (
    GRANT_HEALS_WITHIN_S,
    MAX_BATCH_BYTES,
    Fault,
    Names,
    backoff_s,
    diagnose,
    force_close,
    make_admin,
    make_consumer,
    principal,
    until_reachable,
    wait_beating,
)
from worker.errors import AuthorizationError, ConfigError
from worker.live.publishing import Destinations, KeyPartitioner
from worker.live.task import Deadlines, PartitionTask, TaskContext
from worker.live.topics import TopicInspector, TopicLimits, check_output_partitions, record_limit
from worker.ops import Health, Metrics
from worker.recovery import Rebuilder
from worker.settings import Settings
from worker.stream import PartitionState, ReplayPool, StreamCore, default_core

__all__ = ["GroupMember", "partition_state"]

_log = logging.getLogger(__name__)
_POLL_MS = 100  # an idle poll returns this often: the liveness beat and the lag gauges


def partition_state(
    settings: Settings, tp: TopicPartition, limits: TopicLimits | None, core: StreamCore | None = None
) -> PartitionState:
    """A fresh state of `tp` with the settings' options and the processor's `core`, and the output and display
    topics' record limits as last read (`limits`; None before the topics were read)."""
    s = settings
    display_bytes = limits.display_record_bytes if limits is not None else None
    return PartitionState(
        tp.topic, tp.partition, gap_policy=s.gap_policy, max_open_streams=s.max_open_streams,
        open_stream_policy=s.open_stream_policy, closed_stream_memory=s.closed_stream_memory, core=core,
        max_record_bytes=limits.output_record_bytes if limits is not None else None,
        display_interval_ms=s.display_interval_ms if s.display_topic else None,
        display_max_bytes=display_bytes if display_bytes is not None else record_limit(),
        thread_index=bool(s.thread_index_topic),
    )  # fmt: skip


def _group_consumer(settings: Settings) -> AIOKafkaConsumer:
    """The member's read_committed consumer of the source topic; it commits nothing itself: offsets go through the
    partitions' transactions."""
    s = settings
    return make_consumer(
        s, s.client_id,
        group_id=s.group_id,
        group_instance_id=s.group_instance_id,
        session_timeout_ms=s.session_timeout_ms,
        heartbeat_interval_ms=s.heartbeat_interval_ms,
        max_poll_interval_ms=s.max_poll_interval_ms,
        max_poll_records=s.max_poll_records,
        # A record's delay counts from its source timestamp, so by default a fetch returns as soon as anything
        # arrives; waiting for 64 KiB (up to 20 ms) took a sixth off the worker's CPU at half load and put
        # about 20 ms on every record.
        fetch_max_wait_ms=s.fetch_max_wait_ms,
        fetch_min_bytes=s.fetch_min_bytes,
        partition_assignment_strategy=(StickyPartitionAssignor,),
    )  # fmt: skip


def _admin_client(settings: Settings) -> AIOKafkaAdminClient:
    """The member's admin client: topic checks, committed offsets, the group's assignment."""
    return make_admin(settings, f"{settings.client_id}-admin")


class _GroupFetch:
    """The group consumer's per-partition controls; a partition no longer assigned needs none of them."""

    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self._consumer = consumer

    def pause(self, tp: TopicPartition) -> None:
        with contextlib.suppress(IllegalStateError, AssertionError):
            self._consumer.pause(tp)

    def resume(self, tp: TopicPartition) -> None:
        with contextlib.suppress(IllegalStateError, AssertionError):
            self._consumer.resume(tp)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        with contextlib.suppress(IllegalStateError, AssertionError):
            self._consumer.seek(tp, offset)


class GroupMember:
    """A consumer-group member publishing each assigned partition's AG-UI events exactly once."""

    def __init__(self, settings: Settings, metrics: Metrics, health: Health) -> None:
        self._s = settings
        self._metrics = metrics
        self._health = health
        self._core = default_core(settings.processor) if settings.processor else None
        self._pool = ReplayPool(settings.replay_processes, settings.processor) if settings.replay_processes else None
        self._deadlines = Deadlines.from_settings(settings)
        self._destinations: Destinations | None = None  # once the topics were checked
        self._inspector: TopicInspector | None = None  # on the admin client, once started
        self._fatal: ConfigError | None = None  # a topic layout that stopped working while running
        self._wire(_admin_client(settings), _group_consumer(settings))
        self._tasks: dict[TopicPartition, PartitionTask] = {}
        self._parked: dict[TopicPartition, PartitionTask] = {}  # revoked tasks in their parked stage
        self._membership = asyncio.Lock()  # rebalance callbacks and shutdown one at a time; no partition takes it
        self._closing = False

    def _wire(self, admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer) -> None:
        """Use these (not yet started) clients, and build what partitions reach them through."""
        self._admin, self._consumer = admin, consumer
        self._rebuilder = Rebuilder(self._s, self._metrics, admin=admin, consumer=consumer, new_state=self._new_state,
                                    batch_bytes=self._batch_bytes, pool=self._pool,
                                    call_s=self._deadlines.call_s)  # fmt: skip
        self._context = TaskContext(self._s, self._metrics, self._health, self._deadlines, self._rebuilder,
                                    _GroupFetch(consumer), self._current_destinations)  # fmt: skip

    def _limits(self) -> TopicLimits | None:
        return self._destinations.limits if self._destinations is not None else None

    def _batch_bytes(self) -> int:
        limits = self._limits()
        return limits.batch_bytes if limits is not None else MAX_BATCH_BYTES

    def _new_state(self, tp: TopicPartition) -> PartitionState:
        return partition_state(self._s, tp, self._limits(), self._core)

    def _current_destinations(self) -> Destinations:
        assert self._destinations is not None, "partitions are assigned only after the topics were checked"
        return self._destinations

    # ---- lifecycle -------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until `stop` is set, then commit open transactions and leave the group.

        Brokers that cannot be reached are retried (not ready meanwhile). Raises ConfigError when the topics or
        the brokers' settings cannot work: at start, or once a topic check finds the layout changed.
        """
        # The helpers start beside the group join; a rebuild that comes first waits for them.
        pool_start = asyncio.create_task(self._pool.start()) if self._pool is not None else None
        watch: asyncio.Task[None] | None = None
        try:
            if await until_reachable(self._start_clients, stop, self._health.beat) is None:
                return
            self._consumer.subscribe([self._s.source_topic], listener=_Listener(self))
            self._health.set_member(True)
            watch = asyncio.create_task(self._watch_topics(stop), name="watch-topics")
            failures = 0  # polls failed in a row
            while not stop.is_set():
                self._health.beat()
                try:
                    batches = await self._consumer.getmany(timeout_ms=_POLL_MS)
                except KafkaError as exc:  # the member's own trouble (a missing right): named, retried, not ready
                    failures += 1
                    await self._poll_failed(exc, failures, stop)
                    continue
                if failures:
                    failures = 0
                    self._health.set_blocked("")
                    _log.info("polling works again")
                for tp, recs in batches.items():
                    task = self._tasks.get(tp)
                    if task is not None:
                        task.offer(recs)
                for tp, task in self._tasks.items():
                    task.observe_lag(self._consumer.last_stable_offset(tp))
        finally:
            if watch is not None:
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watch
            self._health.set_member(False)
            if pool_start is not None:
                await pool_start
            await self._shutdown()
        if self._fatal is not None:
            raise self._fatal

    async def _poll_failed(self, exc: KafkaError, failures: int, stop: asyncio.Event) -> None:
        """One line naming what the broker refused (or what failed), counted; not ready; a capped back-off with
        liveness beats, then the caller polls again: aiokafka's consumer rejoins by itself once it may."""
        s = self._s
        diagnosis = diagnose(None, exc, Names("", s.group_id, s.source_topic, principal(s)), "poll")
        delay = backoff_s(failures, min(self._deadlines.backoff_max_s, GRANT_HEALS_WITHIN_S))
        if diagnosis.fault is Fault.UNAUTHORISED:
            for denied in diagnosis.denied:
                self._metrics.authorization_failures_total.labels(*denied.label).inc()
            said = f"group member {diagnosis.describe(principal(s))}"
        else:
            said = f"polling failed: {diagnosis.describe()}"
        self._health.set_blocked(said)
        _log.error("%s; polling again in %.1f s", said, delay)
        await wait_beating(stop, self._health.beat, delay)

    async def _start_clients(self) -> TopicLimits:
        """Start the admin client, check the brokers' settings and the topics, then the consumer; clients that
        failed to start are replaced, so the next attempt starts afresh."""
        try:
            await self._admin.start()
            inspector = TopicInspector(self._admin, self._s)
            await inspector.check_broker()
            if self._s.display_topic:
                await inspector.display()
            if self._s.thread_index_topic:
                await inspector.thread_index()
            limits = await inspector.limits()
            if self._s.changelog:
                await inspector.changelog(limits.display_record_bytes)
            await self._consumer.start()
        except AuthorizationError as exc:
            for label in exc.labels:
                self._metrics.authorization_failures_total.labels(*label).inc()
            self._health.set_blocked(str(exc))
            await self._discard_clients()
            raise
        except BaseException:
            await self._discard_clients()
            raise
        self._health.set_blocked("")
        self._inspector = inspector
        s = self._s
        threads = KeyPartitioner(limits.output_partitions, cap=10_000) if s.thread_index_topic else None
        self._destinations = Destinations(s.output_topic, s.dlq_topic, s.display_topic, s.changelog_topic_name,
                                          KeyPartitioner(limits.output_partitions), limits, s.thread_index_topic,
                                          threads)  # fmt: skip
        _log.info("topics checked: output %d partitions, records up to %d bytes; dead letters up to %d bytes%s",
                  limits.output_partitions, limits.output_record_bytes, limits.dead_letter_record_bytes,
                  "" if limits.display_record_bytes is None else
                  f"; display records up to {limits.display_record_bytes} bytes")  # fmt: skip
        return limits

    async def _discard_clients(self) -> None:
        """Close clients that failed to start and wire new ones, so the next attempt starts afresh."""
        with contextlib.suppress(Exception):
            await self._admin.close()
        with contextlib.suppress(Exception):
            await self._consumer.stop()
        self._wire(_admin_client(self._s), _group_consumer(self._s))

    async def _watch_topics(self, stop: asyncio.Event) -> None:
        """Read the topics' limits again every topic_check_interval_ms; a layout that can no longer work (a topic
        gone, the output's partition count changed) stops the worker with that error."""
        while True:
            await asyncio.sleep(self._s.topic_check_interval_ms / 1000)
            destinations, inspector = self._destinations, self._inspector
            if destinations is None or inspector is None:
                continue
            try:
                limits = await inspector.limits()
                check_output_partitions(self._s, destinations.partitioner.partitions, limits)
            except ConfigError as exc:
                self._fatal = exc
                stop.set()
                return
            except Exception as exc:
                _log.warning("topics could not be checked again, keeping the last limits: %r", exc)
                continue
            if limits != destinations.limits:
                _log.info("topic limits changed: %s", limits)
                self._destinations = dataclasses.replace(destinations, limits=limits)

    async def _shutdown(self) -> None:
        try:
            await asyncio.wait_for(self._drain(), self._deadlines.shutdown_s)
        except TimeoutError:
            _log.error("shutdown timed out; open transactions are left to the broker to abort")
        with contextlib.suppress(Exception):
            await self._consumer.stop()
        with contextlib.suppress(Exception):
            await self._admin.close()
        if self._pool is not None:
            await self._pool.close()

    async def _drain(self) -> None:
        """The worker's drain on shutdown: commit and close every partition (aiokafka never calls
        on_partitions_revoked on stop())."""
        async with self._membership:
            self._closing = True
            tasks = list(self._tasks.values())
            self._tasks.clear()
            stopped = await asyncio.gather(*(task.stop(self._deadlines.shutdown_s) for task in tasks))
            parked = [task for task, kept in zip(tasks, stopped, strict=True) if kept] + list(self._parked.values())
            self._parked.clear()
            kept = [task.take_back() for task in parked]
            await asyncio.gather(*(force_close(parked.producer, self._deadlines.call_s) for parked in kept))
            await self._rebuilder.await_closes(self._deadlines.call_s)

    # ---- rebalance ---------------------------------------------------------------------------------------

    async def on_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        """Commit what each revoked partition has open, within the revocation budget, and park the live ones in
        case they come straight back. A rebalance begins here: not ready until its assignment arrives."""
        self._health.set_assigned(False)
        async with self._membership:
            tasks = [self._tasks.pop(tp) for tp in revoked if tp in self._tasks]
            if not tasks:
                return
            _log.info("partitions revoked: %s", sorted(task.tp.partition for task in tasks))
            stopped = await asyncio.gather(*(task.stop(self._deadlines.revoke_s) for task in tasks))
            for task, parked in zip(tasks, stopped, strict=True):
                self._health.drop_partition(task.tp.topic, task.tp.partition)
                if parked:
                    self._parked[task.tp] = task
                else:
                    self._metrics.forget_partition(*task.tp)
            self._metrics.assigned_partitions.set(len(self._tasks))

    async def on_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        """Start a task per assigned partition; a parked one keeps its state if its committed offset did not move."""
        async with self._membership:
            if self._closing:
                return
            assigned = set(assigned)
            for tp in [tp for tp in self._parked if tp not in assigned]:
                self._rebuilder.close_later(self._parked.pop(tp).take_back().producer)
                self._metrics.forget_partition(*tp)
            for tp in sorted(assigned - set(self._tasks)):
                parked = self._parked.pop(tp, None)
                self._tasks[tp] = PartitionTask(self._context, tp, parked.take_back() if parked is not None else None)
            self._metrics.assigned_partitions.set(len(self._tasks))
            self._health.set_assigned(True)  # each partition is recorded rebuilding by now: ready once all are live

    def mark_failed(self, tps: Iterable[TopicPartition]) -> None:
        """Pause partitions whose assignment could not be handled, reported not ready."""
        for tp in tps:
            self._context.fetcher.pause(tp)
            self._health.set_partition(tp.topic, tp.partition, "failed")
        self._health.set_assigned(True)  # the assignment arrived: what holds readiness back is its partitions


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka swallows listener exceptions: each callback logs its own failure and marks the partitions failed."""

    def __init__(self, member: GroupMember) -> None:
        self._member = member

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        try:
            await self._member.on_revoked(revoked)
        except Exception:
            _log.exception("on_partitions_revoked failed")

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        try:
            await self._member.on_assigned(assigned)
        except Exception:
            _log.exception("on_partitions_assigned failed; the partitions stay paused and not ready")
            self._member.mark_failed(assigned)
