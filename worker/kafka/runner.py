"""One group member: the poll loop, the rebalance callbacks and shutdown around one task per assigned partition.

The poll loop never waits for anything but the next fetch: it hands records to each partition's task
(`PartitionSupervisor`) and beats the liveness probe. The rebalance callbacks wait for partition tasks only within
the revocation budget. Partition tasks wait for the broker under no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import IllegalStateError

from worker.errors import ConfigError
from worker.kafka._aiokafka import force_close
from worker.kafka.clients import make_admin, make_group_consumer
from worker.kafka.deadlines import Deadlines
from worker.kafka.partition import PartitionRun, Phase
from worker.kafka.publisher import Publisher, log_fields
from worker.kafka.rebuilder import KafkaRebuilder
from worker.kafka.routing import KeyRouter
from worker.kafka.startup import until_reachable
from worker.kafka.supervisor import Member, PartitionSupervisor
from worker.kafka.topics import (
    DEFAULT_MAX_MESSAGE_BYTES,
    TopicInspector,
    TopicLimits,
    check_output_partitions,
    record_limit,
)
from worker.ops import Health, Metrics
from worker.settings import Settings
from worker.stream import PartitionState, ReplayPool, default_core

__all__ = ["KafkaRunner"]

_log = logging.getLogger(__name__)
_POLL_MS = 100  # an idle poll returns this often: the liveness beat and the lag gauges
StateFactory = Callable[[TopicPartition], PartitionState]


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


class KafkaRunner:
    """A consumer-group member publishing each partition's AG-UI events exactly once."""

    def __init__(
        self, settings: Settings, metrics: Metrics, health: Health, *, state_factory: StateFactory | None = None
    ) -> None:
        self._s = settings
        self._metrics = metrics
        self._health = health
        self._state_factory = state_factory or self._default_state
        self._core = default_core(settings.processor) if settings.processor else None
        # Helpers build default states only, so a custom factory (tests) always replays in-process.
        self._pool = ReplayPool(settings.replay_processes, settings.processor) \
            if settings.replay_processes and not state_factory else None
        self._deadlines = Deadlines.from_settings(settings)
        self._pub = Publisher(settings, metrics, self._failed, self._halted)
        self._inspector: TopicInspector | None = None  # on the admin client, once started
        self._fatal: ConfigError | None = None  # a topic layout that stopped working while running
        self._wire(make_admin(settings), make_group_consumer(settings))
        self._sups: dict[TopicPartition, PartitionSupervisor] = {}
        self._parked: dict[TopicPartition, PartitionRun] = {}
        self._membership = asyncio.Lock()  # rebalance callbacks and shutdown one at a time; no partition takes it
        self._closing = False

    def _wire(self, admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer) -> None:
        """Use these (not yet started) clients, and build what partitions reach them through."""
        self._admin, self._consumer = admin, consumer
        self._fetch = _GroupFetch(consumer)
        self._rebuilder = KafkaRebuilder(self._s, self._metrics, admin=admin, consumer=consumer,
                                         publisher=self._pub, state_factory=self._state_factory, pool=self._pool,
                                         deadlines=self._deadlines)
        self._member = Member(self._s, self._metrics, self._health, self._pub, self._deadlines, self._rebuilder,
                              self._fetch)

    def _default_state(self, tp: TopicPartition) -> PartitionState:
        """Fresh state with the settings' options and processor, and the output and display topics' record limits
        as last read (a state built after a topic check that changed them uses the new ones)."""
        s, limits = self._s, self._pub.limits
        display_bytes = limits.display_record_bytes if limits is not None else None
        return PartitionState(
            tp.topic, tp.partition, gap_policy=s.gap_policy, max_open_streams=s.max_open_streams,
            open_stream_policy=s.open_stream_policy, closed_stream_memory=s.closed_stream_memory, core=self._core,
            max_record_bytes=limits.output_record_bytes if limits is not None else None,
            display_interval_ms=s.display_interval_ms if s.display_topic else None,
            display_max_bytes=display_bytes or record_limit(DEFAULT_MAX_MESSAGE_BYTES),
        )

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
            while not stop.is_set():
                self._health.beat()
                batches = await self._consumer.getmany(timeout_ms=_POLL_MS)
                for tp, recs in batches.items():
                    sup = self._sups.get(tp)
                    if sup is not None:
                        sup.offer(recs)
                self._observe_lag()
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

    async def _start_clients(self) -> TopicLimits:
        """Start the admin client, check the brokers' settings and the topics, then the consumer; clients that
        failed to start are replaced, so the next attempt starts afresh."""
        try:
            await self._admin.start()
            inspector = TopicInspector(self._admin, self._s)
            await inspector.check_broker()
            if self._s.display_topic:
                await inspector.display()
            limits = await inspector.limits()
            if self._s.changelog:
                await inspector.changelog(limits.display_record_bytes)
            await self._consumer.start()
        except BaseException:
            with contextlib.suppress(Exception):
                await self._admin.close()
            with contextlib.suppress(Exception):
                await self._consumer.stop()
            self._wire(make_admin(self._s), make_group_consumer(self._s))
            raise
        self._inspector = inspector
        self._pub.limits = limits
        self._pub.router = KeyRouter(limits.output_partitions)
        _log.info("topics checked: output %d partitions, records up to %d bytes; dead letters up to %d bytes%s",
                  limits.output_partitions, limits.output_record_bytes, limits.dead_letter_record_bytes,
                  "" if limits.display_record_bytes is None else
                  f"; display records up to {limits.display_record_bytes} bytes")  # fmt: skip
        return limits

    async def _watch_topics(self, stop: asyncio.Event) -> None:
        """Read the topics' limits again every topic_check_interval_ms; a layout that can no longer work (a topic
        gone, the output's partition count changed) stops the worker with that error."""
        while True:
            await asyncio.sleep(self._s.topic_check_interval_ms / 1000)
            router, inspector = self._pub.router, self._inspector
            if inspector is None:
                continue
            try:
                limits = await inspector.limits()
                if router is not None:
                    check_output_partitions(self._s, router.partitions, limits)
            except ConfigError as exc:
                self._fatal = exc
                stop.set()
                return
            except Exception as exc:
                _log.warning("topics could not be checked again, keeping the last limits: %r", exc)
                continue
            if limits != self._pub.limits:
                _log.info("topic limits changed: %s", limits)
                self._pub.limits = limits

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
        """aiokafka never calls on_partitions_revoked on stop(): commit and close everything here."""
        async with self._membership:
            self._closing = True
            sups = list(self._sups.values())
            self._sups.clear()
            runs = await asyncio.gather(*(sup.stop(self._deadlines.shutdown_s) for sup in sups))
            kept = [run for run in runs if run is not None] + list(self._parked.values())
            self._parked.clear()
            producers = [producer for run in kept if (producer := run.detach_producer()) is not None]
            await asyncio.gather(*(force_close(producer, self._deadlines.call_s) for producer in producers))
            await self._rebuilder.drain(self._deadlines.call_s)

    # ---- what a partition's publisher reports (never waits) ------------------------------------------------

    def _failed(self, p: PartitionRun, exc: BaseException) -> None:
        """A transaction of a live partition failed: stop fetching it; its task contains the failure."""
        if p.phase is Phase.LIVE:
            self._fetch.pause(p.tp)
        p.fail(exc)

    def _halted(self, p: PartitionRun, reason: str) -> None:
        """Hold a partition a policy stopped: paused, not ready, counted and logged with `reason`."""
        p.phase = Phase.HALTED
        p.wake.set()
        _log.warning("partition held, not ready: %s", reason, extra=log_fields(p.tp))
        self._fetch.pause(p.tp)
        self._health.set_partition(p.tp.topic, p.tp.partition, "failed")
        self._metrics.partition_ready.labels(*p.label).set(0)
        self._metrics.partition_failures_total.labels(*p.label).inc()

    def _observe_lag(self) -> None:
        for sup in self._sups.values():
            p = sup.run
            if p.phase is not Phase.LIVE:
                continue
            end = self._consumer.last_stable_offset(p.tp)
            if end is not None:
                self._metrics.consumer_lag_records.labels(*p.label).set(max(0, end - p.next_offset))

    # ---- rebalance ---------------------------------------------------------------------------------------

    async def on_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        """Commit what each revoked partition has open, within the revocation budget, and park the live ones in
        case they come straight back."""
        async with self._membership:
            sups = [self._sups.pop(tp) for tp in revoked if tp in self._sups]
            if not sups:
                return
            _log.info("partitions revoked: %s", sorted(sup.tp.partition for sup in sups))
            runs = await asyncio.gather(*(sup.stop(self._deadlines.revoke_s) for sup in sups))
            for sup, run in zip(sups, runs, strict=True):
                self._health.drop_partition(sup.tp.topic, sup.tp.partition)
                if run is not None:
                    self._parked[sup.tp] = run
                else:
                    self._metrics.forget_partition(*sup.tp)
            self._metrics.assigned_partitions.set(len(self._sups))

    async def on_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        """Start a task per assigned partition; a parked one keeps its state if its committed offset did not move."""
        async with self._membership:
            if self._closing:
                return
            assigned = set(assigned)
            for tp in [tp for tp in self._parked if tp not in assigned]:
                producer = self._parked.pop(tp).detach_producer()
                if producer is not None:
                    self._rebuilder.close_later(producer)
                self._metrics.forget_partition(*tp)
            for tp in sorted(assigned - set(self._sups)):
                run = PartitionRun(tp, self._state_factory(tp))
                self._sups[tp] = PartitionSupervisor(self._member, run, self._parked.pop(tp, None))
            self._metrics.assigned_partitions.set(len(self._sups))

    def hold(self, tps: Iterable[TopicPartition]) -> None:
        """Pause partitions whose assignment could not be handled, reported not ready."""
        for tp in tps:
            self._fetch.pause(tp)
            self._health.set_partition(tp.topic, tp.partition, "failed")


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka swallows listener exceptions: each callback logs its own failure and holds the partitions."""

    def __init__(self, runner: KafkaRunner) -> None:
        self._runner = runner

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        try:
            await self._runner.on_revoked(revoked)
        except Exception:
            _log.exception("on_partitions_revoked failed")

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        try:
            await self._runner.on_assigned(assigned)
        except Exception:
            _log.exception("on_partitions_assigned failed; the partitions stay paused and not ready")
            self._runner.hold(assigned)
