"""One group member: the poll loop, rebalances, rebuilds and failures around the live `Publisher`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from aiokafka import AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import IllegalStateError

from worker.errors import ConfigError
from worker.kafka._clients import (
    MAX_BATCH_BYTES,
    make_admin,
    make_group_consumer,
    make_replay_consumer,
    make_transactional_producer,
)
from worker.kafka.checkpoint import is_fenced
from worker.kafka.offsets import plan_replay
from worker.kafka.partition import PartitionRun, Phase
from worker.kafka.publisher import Publisher, log_fields
from worker.kafka.rebuild import replay_into
from worker.kafka.routing import KeyRouter
from worker.kafka.startup import until_reachable
from worker.kafka.topics import TopicInspector, TopicLimits, check_output_partitions
from worker.ops import Health, Metrics
from worker.settings import Settings
from worker.stream import PartitionState, ReplayPool, default_core

__all__ = ["KafkaRunner"]

_log = logging.getLogger(__name__)
StateFactory = Callable[[TopicPartition], PartitionState]


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
        self._consumer = make_group_consumer(settings)
        self._admin = make_admin(settings)
        self._inspector: TopicInspector | None = None  # on the admin client, once started
        self._fatal: ConfigError | None = None  # a topic layout that stopped working while running
        self._parts: dict[TopicPartition, PartitionRun] = {}
        self._parked: dict[TopicPartition, PartitionRun] = {}
        self._tasks: dict[TopicPartition, asyncio.Task[None]] = {}
        self._lock = asyncio.Lock()
        self._closing = False
        self._pub = Publisher(settings, metrics, self._fail, self._mark_failed)

    def _default_state(self, tp: TopicPartition) -> PartitionState:
        """Fresh state with the settings' options and processor, and the output topic's record limit as last
        read (a state built after a topic check that changed it uses the new one)."""
        s = self._s
        return PartitionState(
            tp.topic, tp.partition, gap_policy=s.gap_policy, max_open_streams=s.max_open_streams,
            open_stream_policy=s.open_stream_policy, closed_stream_memory=s.closed_stream_memory, core=self._core,
            max_record_bytes=self._pub.limits.output_record_bytes if self._pub.limits is not None else None,
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
                batches = await self._consumer.getmany(timeout_ms=self._pub.poll_timeout_ms(self._parts.values()))
                async with self._lock:
                    for tp, recs in batches.items():
                        if (p := self._parts.get(tp)) is not None:
                            await self._pub.consume(p, recs)
                    self._pub.commit_due(self._parts.values())
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
            limits = await inspector.limits()
            await self._consumer.start()
        except BaseException:
            with contextlib.suppress(Exception):
                await self._admin.close()
            with contextlib.suppress(Exception):
                await self._consumer.stop()
            self._admin, self._consumer = make_admin(self._s), make_group_consumer(self._s)
            raise
        self._inspector = inspector
        self._pub.limits = limits
        self._pub.router = KeyRouter(limits.output_partitions)
        _log.info("topics checked: output %d partitions, records up to %d bytes; dead letters up to %d bytes",
                  limits.output_partitions, limits.output_record_bytes, limits.dead_letter_record_bytes)
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

    def _batch_bytes(self) -> int:
        return self._pub.limits.batch_bytes if self._pub.limits is not None else MAX_BATCH_BYTES

    async def _shutdown(self) -> None:
        try:
            await asyncio.wait_for(self._drain(), self._s.shutdown_timeout_ms / 1000)
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
        async with self._lock:
            self._closing = True
            await self._cancel_rebuilds(list(self._tasks))
            runs = [*self._parts.values(), *self._parked.values()]
            await asyncio.gather(*(self._pub.commit_now(p) for p in runs))
            await asyncio.gather(*(self._close(p) for p in runs))
            self._parts.clear()
            self._parked.clear()

    async def _fail(self, p: PartitionRun, exc: BaseException) -> None:
        """Abort the open transaction; rebuild from the committed offset, or wait for a rebalance when fenced."""
        self._metrics.transactions_total.labels("aborted").inc()
        p.phase = Phase.FAILED  # never parked or kept as live: its open output is gone
        p.pending = []
        if p.checkpoint is not None:
            with contextlib.suppress(Exception):
                await p.checkpoint.abort()
        self._pause(p.tp)
        fenced = is_fenced(exc)
        await self._close(p)
        if fenced:
            self._metrics.producers_fenced_total.inc()
            _log.warning("producer fenced: another member owns the partition; state dropped", extra=log_fields(p.tp))
            p.phase = Phase.FENCED
            self._health.set_partition(p.tp.topic, p.tp.partition, "failed")
            self._start_rebuild([p.tp], delay_s=self._s.session_timeout_ms / 1000)
        else:
            _log.error("transaction failed, rebuilding from the committed offset: %r", exc, extra=log_fields(p.tp))
            self._start_rebuild([p.tp])

    def _mark_failed(self, p: PartitionRun, reason: str) -> None:
        """Hold a partition that cannot go on: paused, not ready, counted and logged with `reason`."""
        p.phase = Phase.FAILED
        _log.warning("partition held, not ready: %s", reason, extra=log_fields(p.tp))
        self._pause(p.tp)
        self._health.set_partition(p.tp.topic, p.tp.partition, "failed")
        self._metrics.partition_ready.labels(*p.label).set(0)
        self._metrics.partition_failures_total.labels(*p.label).inc()

    def _pause(self, tp: TopicPartition) -> None:
        """Pause fetching a partition; a partition the consumer no longer holds needs no pause."""
        with contextlib.suppress(IllegalStateError, AssertionError):
            self._consumer.pause(tp)

    def _observe_lag(self) -> None:
        for p in self._parts.values():
            if p.phase is not Phase.LIVE:
                continue
            end = self._consumer.last_stable_offset(p.tp)
            if end is not None:
                self._metrics.consumer_lag_records.labels(*p.label).set(max(0, end - p.next_offset))

    async def _close(self, p: PartitionRun) -> None:
        producer = p.detach_producer()
        if producer is not None:
            with contextlib.suppress(Exception):
                await producer.stop()

    # ---- rebalance ---------------------------------------------------------------------------------------

    async def on_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        """Commit what each revoked partition has open and park its state in case it comes straight back."""
        async with self._lock:
            revoked = [tp for tp in revoked if tp in self._parts]
            if revoked:
                _log.info("partitions revoked: %s", sorted(tp.partition for tp in revoked))
            await self._cancel_rebuilds([tp for tp in revoked if tp in self._tasks])
            runs = [self._parts.pop(tp) for tp in revoked]
            await asyncio.gather(*(self._pub.commit_now(p) for p in runs))
            for p in runs:
                self._health.drop_partition(p.tp.topic, p.tp.partition)
                if p.phase is Phase.LIVE:
                    self._parked[p.tp] = p
                else:
                    await self._close(p)
                    self._metrics.forget_partition(*p.tp)
            self._metrics.assigned_partitions.set(len(self._parts))

    async def on_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        """Keep parked partitions whose committed offset is unchanged; pause and rebuild all others."""
        async with self._lock:
            assigned = set(assigned)
            for tp in [tp for tp in self._parked if tp not in assigned]:
                await self._close(self._parked.pop(tp))
                self._metrics.forget_partition(*tp)
            kept = [tp for tp in assigned if tp in self._parked]
            committed = await self._committed(kept)
            rebuild: list[TopicPartition] = []
            for tp in assigned:
                parked = self._parked.pop(tp, None)
                c = committed.get(tp)
                if parked is not None and c is not None and c.offset == parked.committed:
                    self._parts[tp] = parked
                    self._consumer.seek(tp, parked.next_offset)
                    self._health.set_partition(tp.topic, tp.partition, "ready")
                    _log.info("partition kept through rebalance: no replay",
                              extra=log_fields(tp, offset=parked.next_offset))
                    continue
                if parked is not None:
                    await self._close(parked)
                self._parts[tp] = PartitionRun(tp, self._state_factory(tp))
                rebuild.append(tp)
            self._metrics.assigned_partitions.set(len(self._parts))
            if rebuild:
                self._start_rebuild(rebuild)

    async def _committed(self, tps: list[TopicPartition]) -> dict[TopicPartition, Any]:
        """Committed offsets of parked partitions; when they cannot be read, every one is rebuilt (always safe)."""
        if not tps:
            return {}
        try:
            return dict(await self._admin.list_consumer_group_offsets(self._s.group_id, partitions=tps))
        except Exception as exc:
            _log.warning("committed offsets unreadable, rebuilding kept partitions: %r", exc)
            return {}

    def _start_rebuild(self, tps: list[TopicPartition], delay_s: float = 0.0) -> None:
        tps = [tp for tp in tps if tp in self._parts]
        if self._closing or not tps:
            return  # revoked or shutting down: the next owner rebuilds from the committed offset
        for tp in tps:
            p = self._parts[tp]
            p.phase = Phase.REBUILDING if p.phase is not Phase.FENCED else p.phase
            self._pause(tp)
            if p.phase is Phase.REBUILDING:
                self._health.set_partition(tp.topic, tp.partition, "rebuilding")
            self._metrics.partition_ready.labels(*p.label).set(0)
        task = asyncio.create_task(self._rebuild(tps, delay_s), name=f"rebuild-{[tp.partition for tp in tps]}")
        for tp in tps:
            self._tasks[tp] = task
        task.add_done_callback(lambda done: self._forget_task(done, tps))

    def _forget_task(self, task: asyncio.Task[None], tps: list[TopicPartition]) -> None:
        for tp in tps:
            if self._tasks.get(tp) is task:
                del self._tasks[tp]

    async def _cancel_rebuilds(self, tps: list[TopicPartition]) -> None:
        tasks = {self._tasks[tp] for tp in tps if tp in self._tasks}
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        # A cancelled task may have covered partitions that stay assigned: they rebuild again.
        survivors = [tp for tp, p in self._parts.items()
                     if tp not in tps and p.phase is Phase.REBUILDING and tp not in self._tasks]
        if survivors:
            self._start_rebuild(survivors)

    async def _rebuild(self, tps: list[TopicPartition], delay_s: float) -> None:
        """Fence old owners, replay `[R, C)` into fresh state, then resume consuming at C; retried until it works."""
        if delay_s:
            await asyncio.sleep(delay_s)
        backoff = 0.5
        while True:
            try:
                await self._rebuild_once(tps)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                _log.error("rebuild failed, retrying in %.1fs: %r", backoff, exc,
                           extra={"partitions": [tp.partition for tp in tps]})
                async with self._lock:
                    for tp in tps:
                        if tp in self._parts:
                            self._mark_failed(self._parts[tp], f"rebuild failed: {exc!r}")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)

    async def _rebuild_once(self, tps: list[TopicPartition]) -> None:
        started = time.monotonic()
        producers: dict[TopicPartition, AIOKafkaProducer] = {}
        replay = make_replay_consumer(self._s)
        try:
            producers = {tp: make_transactional_producer(self._s, tp, self._batch_bytes()) for tp in tps}
            # Initialising a transactional id fences any zombie and aborts its open transaction: do it before
            # reading the committed offset, so that offset is final.
            await asyncio.gather(*(producer.start() for producer in producers.values()))
            if self._pub.router is None and producers:
                out_partitions = await next(iter(producers.values())).partitions_for(self._s.output_topic)
                self._pub.router = KeyRouter(len(out_partitions))
            await replay.start()
            # Assigned (and paused), the topic joins the client's metadata now: the offset look-ups of the plan
            # find their leaders at once instead of failing, refreshing and retrying after the 100 ms back-off.
            replay.assign(tps)
            replay.pause(*tps)
            windows = await plan_replay(self._admin, replay, self._s.group_id, tps, self._s.rebuild_lookback_ms)
            states = {tp: self._state_factory(tp) for tp in tps}
            if self._pool is not None:
                await self._pool.start()  # helpers still starting: the wait counts in the rebuild, not the replay
            replay_started = time.monotonic()
            counts = await replay_into(replay, windows, states, progress=self._progress, pool=self._pool,
                                       on_fallback=lambda _: self._metrics.replay_fallbacks_total.inc())
            replay_s = time.monotonic() - replay_started
        except BaseException:
            await asyncio.gather(*(p.stop() for p in producers.values()), return_exceptions=True)
            raise
        finally:
            with contextlib.suppress(Exception):
                await replay.stop()
        async with self._lock:
            for tp in tps:
                p = self._parts.get(tp)
                w = windows[tp]
                if p is None:  # revoked meanwhile
                    await producers[tp].stop()
                    continue
                p.state = states[tp]
                p.go_live(producers[tp], self._s.group_id, w.committed)
                self._consumer.seek(tp, w.committed)
                self._consumer.resume(tp)
                self._health.set_partition(tp.topic, tp.partition, "ready")
                m = self._metrics
                m.partition_ready.labels(*p.label).set(1)
                m.rebuilds_total.labels(*p.label).inc()
                m.rebuild_records_total.labels(*p.label).inc(counts[tp])
                m.rebuild_progress_ratio.labels(*p.label).set(1.0)
                m.open_streams.labels(*p.label).set(p.state.open_streams)
                if w.lost_history:
                    m.retention_gaps_total.labels(*p.label).inc()
                _log.info("partition rebuilt: replayed %d records of [%d, %d) (%s), live from %d",
                          counts[tp], w.start, w.committed, w.source, w.committed,
                          extra=log_fields(tp, replay_seconds=round(replay_s, 4),
                                           rebuild_seconds=round(time.monotonic() - started, 4)))
        self._metrics.rebuild_duration_seconds.observe(time.monotonic() - started)

    def _progress(self, tp: TopicPartition, done: int, total: int) -> None:
        p = self._parts.get(tp)
        if p is not None and total > 0:
            self._metrics.rebuild_progress_ratio.labels(*p.label).set(min(1.0, done / total))


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka swallows listener exceptions: each callback logs its own failure and fails the partitions."""

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
            for tp in assigned:
                self._runner._pause(tp)
                self._runner._health.set_partition(tp.topic, tp.partition, "failed")
