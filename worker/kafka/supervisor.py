"""One task per assigned partition: rebuild, go live, contain a failure, retry; one partition's trouble stays its own.

A partition's task is the only one that waits for the broker on its behalf: the poll loop hands it fetched records
and never waits, the rebalance callbacks wait for it only within the revocation budget, and nothing it awaits is
under a lock another partition needs. Every broker call has a deadline (`Deadlines`); when one expires or a
transaction fails, the partition alone is paused, its producer is closed in the background, and it rebuilds after
a capped back-off. A producer is started only while the group coordinator lists this member as the partition's
owner, so a resumed zombie never fences the real owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer, TopicPartition

from worker.errors import CheckpointVersionError, DeadlineError
from worker.kafka._aiokafka import observe_producer
from worker.kafka.deadlines import Deadlines, backoff_s
from worker.kafka.diagnosis import Diagnosis, Fault, Names, diagnose, settle
from worker.kafka.offsets import ReplayWindow
from worker.kafka.ownership import Ownership
from worker.kafka.partition import PartitionRun, Phase
from worker.kafka.publisher import Publisher, log_fields
from worker.ops import Health, Metrics
from worker.ops.health import PartitionState as Readiness
from worker.settings import Settings
from worker.stream import PartitionState

__all__ = ["Fetcher", "Member", "PartitionSupervisor", "Rebuilder", "Rebuilt", "Restored"]

_log = logging.getLogger(__name__)
_OWNER_POLL_FIRST_S = 0.25

Progress = Callable[[TopicPartition, int, int], None]


@dataclass(frozen=True, slots=True)
class Restored:
    """A state restored from the changelog's checkpoint at source offset `offset`: `records` changelog records
    read in `read_s` seconds, then restored in `restore_s`."""

    state: PartitionState
    offset: int
    records: int
    read_s: float
    restore_s: float


@dataclass(slots=True)
class Rebuilt:
    """A partition ready to go live at `committed`: its new producer and its state there (kept or replayed)."""

    producer: AIOKafkaProducer
    state: PartitionState
    committed: int
    kept: bool  # the parked state was still exact: nothing replayed
    window: ReplayWindow | None = None
    replayed: int = 0
    replay_s: float = 0.0
    rebuild_s: float = 0.0
    restored: Restored | None = None  # the checkpoint the replay started from, if the changelog had a usable one


class Rebuilder(Protocol):
    """The broker side of a rebuild (worker/kafka/rebuilder.py); a stand-in serves the unit tests."""

    def names(self, tp: TopicPartition) -> Names: ...

    def fresh_state(self, tp: TopicPartition) -> PartitionState: ...

    async def owner(self, tp: TopicPartition) -> Ownership: ...

    async def rebuild(self, tp: TopicPartition, kept: PartitionRun | None, progress: Progress) -> Rebuilt: ...

    def close_later(self, producer: AIOKafkaProducer) -> None: ...


class Fetcher(Protocol):
    """The group consumer's controls of one assigned partition; none of them waits."""

    def pause(self, tp: TopicPartition) -> None: ...

    def resume(self, tp: TopicPartition) -> None: ...

    def seek(self, tp: TopicPartition, offset: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Member:
    """What the partition tasks of one group member share."""

    settings: Settings
    metrics: Metrics
    health: Health
    publisher: Publisher
    deadlines: Deadlines
    rebuilder: Rebuilder
    fetcher: Fetcher


class _End(Enum):
    FAILED = "failed"
    HALTED = "halted"
    STOP = "stop"


class PartitionSupervisor:
    """Runs one assigned partition until `stop`; `offer` hands it fetched records without waiting."""

    def __init__(self, member: Member, run: PartitionRun, kept: PartitionRun | None = None) -> None:
        self.run = run
        self._m = member
        self._kept = kept  # parked through the rebalance: adopted when the committed offset did not move
        self._stopping = False
        self._committing_on_stop = False  # live: a stop lets it commit instead of cancelling it
        self._reported_acl = ""
        self._pending_gauge = member.metrics.pending_records.labels(*run.label)
        self._where = f"{run.tp.topic}[{run.tp.partition}]"
        self._hold("rebuilding")
        self._task = asyncio.create_task(self._main(), name=f"partition-{run.tp.partition}")
        self._task.add_done_callback(self._ended)

    @property
    def tp(self) -> TopicPartition:
        return self.run.tp

    @property
    def done(self) -> bool:
        return self._task.done()

    # ---- the poll loop's side ------------------------------------------------------------------------------

    def offer(self, recs: list[Any]) -> None:
        """Queue records fetched for this partition; fetching pauses once its backlog passes the bound."""
        self.run.offer(recs)
        self._throttle()

    async def stop(self, budget_s: float) -> PartitionRun | None:
        """End the task. A live partition commits what it has open, within `budget_s`, and is returned for parking
        with its producer; any other partition, or one whose commit does not finish in time, is dropped (its
        producer closed in the background, its open transaction left for the next owner's producer to abort)."""
        if not self._task.done():
            if self._committing_on_stop:
                self._stopping = True
                self.run.wake.set()
                done, _ = await asyncio.wait([self._task], timeout=budget_s)
                if not done:
                    self._m.metrics.deadline_expirations_total.labels("revoke").inc()
                    _log.error("revocation commit did not finish within %.1f s: partition dropped, its open "
                               "transaction left to the next owner to abort", budget_s, extra=self._fields())
            if not self._task.done():
                self._task.cancel()
                await asyncio.wait([self._task], timeout=budget_s)
        if self._task.done() and not self._task.cancelled() and self._task.exception() is None:
            return self._task.result()
        return None

    def _ended(self, task: asyncio.Task[PartitionRun | None]) -> None:
        if not task.cancelled() and task.exception() is not None:  # a bug: held, not ready, until the group moves it
            self._hold("failed")
            _log.error("partition task ended unexpectedly, partition held: %r", task.exception(), extra=self._fields())

    # ---- the partition's task ------------------------------------------------------------------------------

    async def _main(self) -> PartitionRun | None:
        p = self.run
        try:
            failures = 0  # since the partition last committed
            while True:
                failures = await self._rebuild_until_live(failures)
                went_live_at = p.committed
                self._committing_on_stop = True
                end = await self._live()
                if end is _End.STOP:
                    return await self._final_commit()
                self._committing_on_stop = False
                if end is _End.HALTED:
                    await asyncio.Event().wait()  # held until the group moves the partition (stop cancels this)
                diagnosis = await self._contain()
                failures = 1 if p.committed > went_live_at else failures + 1
                if diagnosis.fault is Fault.FENCED:
                    await self._until_owner()
                else:
                    delay = backoff_s(failures, self._m.deadlines.backoff_max_s)
                    _log.info("partition rebuilds in %.1f s", delay, extra=self._fields())
                    await asyncio.sleep(delay)
        except BaseException:
            self._drop()
            raise

    async def _rebuild_until_live(self, failures: int) -> int:
        """Rebuild until the partition is live; each failed attempt is counted and waits a capped back-off."""
        rebuilder = self._m.rebuilder
        while True:
            self._hold("rebuilding")
            try:
                ownership = await rebuilder.owner(self.tp)
                if ownership is not Ownership.OWNER:
                    await self._until_owner(ownership)
                rebuilt = await rebuilder.rebuild(self.tp, self._kept, self._progress)
            except CheckpointVersionError as exc:  # guessing could publish wrongly: held until the group moves it
                self._hold("failed")
                self._m.metrics.partition_failures_total.labels(*self.run.label).inc()
                _log.error("partition held: %s", exc, extra=self._fields())
                await asyncio.Event().wait()
            except Exception as exc:
                failures += 1
                delay = backoff_s(failures, self._m.deadlines.backoff_max_s)
                self._rebuild_failed(diagnose(None, exc, rebuilder.names(self.tp)), delay)
                await asyncio.sleep(delay)
                continue
            self._kept = None
            self._adopt(rebuilt)
            return failures

    async def _until_owner(self, first: Ownership | None = None) -> None:
        """Wait until the group coordinator lists this member as the partition's owner (the rebalance that moves
        the partition away cancels the wait). Never starts a producer meanwhile: that would fence the owner."""
        ownership = first
        delay = _OWNER_POLL_FIRST_S
        cap = max(_OWNER_POLL_FIRST_S, self._m.settings.heartbeat_interval_ms / 1000)
        said = False
        while True:
            if ownership is None:
                try:
                    ownership = await self._m.rebuilder.owner(self.tp)
                except Exception as exc:
                    _log.debug("group look-up failed: %r", exc, extra=self._fields())
                    ownership = Ownership.UNKNOWN
            if ownership is Ownership.OWNER:
                return
            if not said:
                said = True
                self._hold("failed")
                _log.warning("partition waits for the group: %s", "another member owns it" if ownership is
                             Ownership.NOT_OWNER else "the group is rebalancing", extra=self._fields())
            await asyncio.sleep(delay)
            delay = min(delay * 2, cap)
            ownership = None

    def _adopt(self, rebuilt: Rebuilt) -> None:
        p, m, s = self.run, self._m.metrics, self._m.settings
        p.state = rebuilt.state
        p.go_live(rebuilt.producer, s.group_id, rebuilt.committed, self._m.deadlines.call_s)
        p.throttled = False
        self._reported_acl = ""
        self._m.fetcher.seek(self.tp, rebuilt.committed)
        self._m.fetcher.resume(self.tp)
        self._m.health.set_partition(self.tp.topic, self.tp.partition, "ready")
        m.partition_ready.labels(*p.label).set(1)
        m.open_streams.labels(*p.label).set(p.state.open_streams)
        m.rebuild_progress_ratio.labels(*p.label).set(1.0)
        self._pending_gauge.set(0)
        w = rebuilt.window
        if rebuilt.kept or w is None:
            _log.info("partition kept through rebalance: no replay", extra=self._fields(offset=rebuilt.committed))
            return
        m.rebuilds_total.labels(*p.label).inc()
        m.rebuild_records_total.labels(*p.label).inc(rebuilt.replayed)
        m.rebuild_duration_seconds.observe(rebuilt.rebuild_s)
        if w.lost_history:
            m.retention_gaps_total.labels(*p.label).inc()
        timing = self._fields(replay_seconds=round(rebuilt.replay_s, 4), rebuild_seconds=round(rebuilt.rebuild_s, 4))
        restored = rebuilt.restored
        if restored is not None:
            timing.update(changelog_records=restored.records, changelog_seconds=round(restored.read_s, 4),
                          restore_seconds=round(restored.restore_s, 4))
            _log.info("partition rebuilt: restored %d open and %d ended streams from the changelog at offset %d, "
                      "replayed %d records of [%d, %d) (%s), live from %d", p.state.open_streams,
                      p.state.remembered_streams, restored.offset, rebuilt.replayed, w.start, w.committed, w.source,
                      w.committed, extra=timing)
            return
        _log.info("partition rebuilt: replayed %d records of [%d, %d) (%s), live from %d",
                  rebuilt.replayed, w.start, w.committed, w.source, w.committed, extra=timing)

    async def _live(self) -> _End:
        """Process fetched records and commit on time until the partition fails, halts or is stopped."""
        p, pub = self.run, self._m.publisher
        while True:
            if p.phase is Phase.FAILED:
                return _End.FAILED
            if p.phase is Phase.HALTED:
                return _End.HALTED
            if self._stopping:
                return _End.STOP
            if p.inbox:
                for recs in p.take_inbox():
                    try:
                        await pub.consume(p, recs)
                    except Exception as exc:  # a bug, not a record's fault: this partition fails, the rest go on
                        _log.exception("processing failed unexpectedly", extra=self._fields())
                        p.fail(exc)
                    if p.phase is not Phase.LIVE or self._stopping:
                        break
                    pub.commit_due([p])
                self._throttle()
                continue
            pub.commit_due([p])
            self._throttle()
            p.wake.clear()
            due = pub.due_in(p)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(due):
                    await p.wake.wait()

    async def _final_commit(self) -> PartitionRun | None:
        """On stop: commit what is open and hand the partition back for parking, or drop it if that fails."""
        p = self.run
        p.take_inbox()  # fetched, not processed: the next owner (or this one, kept) fetches them again
        pub = self._m.publisher
        if await pub.commit_now(p) and p.phase is Phase.LIVE:
            return p
        self._drop()
        return None

    async def _contain(self) -> Diagnosis:
        """Isolate a failed partition: pause it, end its commit, settle and observe its producer, close it in the
        background, drop its state; returns what the failure was."""
        p, m = self.run, self._m.metrics
        fault: BaseException = p.fault if p.fault is not None else RuntimeError("partition failed")
        self._hold("failed")
        call_s = self._m.deadlines.call_s
        task = p.commit_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task], timeout=call_s)
        producer = p.producer
        view = None
        if producer is not None:
            deadline = isinstance(fault, DeadlineError)  # the broker did not answer: an abort would wait as long
            view = observe_producer(producer) if deadline else await settle(producer, call_s, self._where)
        diagnosis = diagnose(view, fault, self._m.rebuilder.names(self.tp))
        self._drop()
        p.state = self._m.rebuilder.fresh_state(self.tp)  # the old one is ahead of the committed offset
        m.transactions_total.labels("aborted").inc()
        m.transaction_failures_total.labels(*p.label, diagnosis.fault.value).inc()
        if diagnosis.fault is Fault.FENCED:
            m.producers_fenced_total.inc()
            _log.warning("%s; state dropped", diagnosis.describe(), extra=self._fields())
        elif diagnosis.fault is Fault.UNAUTHORISED:
            self._unauthorised(diagnosis)
        else:
            if isinstance(diagnosis.cause, DeadlineError):
                m.deadline_expirations_total.labels(diagnosis.cause.call).inc()
            _log.error("transaction failed, partition isolated and rebuilt from the committed offset: %s",
                       diagnosis.describe(), extra=self._fields())
        return diagnosis

    def _rebuild_failed(self, diagnosis: Diagnosis, delay: float) -> None:
        self._hold("failed")
        self._m.metrics.rebuild_retries_total.labels(*self.run.label).inc()
        cause = diagnosis.cause
        if isinstance(cause, DeadlineError):
            self._m.metrics.deadline_expirations_total.labels(cause.call).inc()
        if diagnosis.fault is Fault.UNAUTHORISED:
            self._unauthorised(diagnosis)
            return
        _log.error("rebuild failed, retrying in %.1f s: %s", delay, diagnosis.describe(), extra=self._fields())

    def _unauthorised(self, diagnosis: Diagnosis) -> None:
        """Counted every time, logged once per missing ACL until the partition goes live again."""
        self._m.metrics.authorization_failures_total.labels(*self.run.label, diagnosis.resource).inc()
        if diagnosis.acl != self._reported_acl:
            self._reported_acl = diagnosis.acl
            _log.error("partition %s", diagnosis.describe(), extra=self._fields())

    def _drop(self) -> None:
        """Forget the partition's transaction and producer without waiting: the producer closes in the background."""
        p = self.run
        task = p.commit_task
        if task is not None and not task.done():
            task.cancel()
        p.commit_task = None
        producer = p.detach_producer()
        if producer is not None:
            self._m.rebuilder.close_later(producer)
        if p.phase is Phase.LIVE:
            p.phase = Phase.FAILED

    def _hold(self, readiness: Readiness) -> None:
        """Not ready (`rebuilding`, or `failed` while it waits): fetching paused, health and metrics say so."""
        p = self.run
        if p.phase is not Phase.HALTED:
            p.phase = Phase.REBUILDING if readiness == "rebuilding" else Phase.FAILED
        self._m.fetcher.pause(self.tp)
        p.throttled = False
        p.take_inbox()
        self._m.health.set_partition(self.tp.topic, self.tp.partition, readiness)
        self._m.metrics.partition_ready.labels(*p.label).set(0)

    def _throttle(self) -> None:
        """Back-pressure: pause fetching once the backlog reaches `max_pending_records`, resume at half of it."""
        p = self.run
        backlog = p.backlog
        self._pending_gauge.set(backlog)
        if p.phase is not Phase.LIVE:
            return
        bound = self._m.settings.max_pending_records
        if not p.throttled and backlog >= bound:
            p.throttled = True
            self._m.fetcher.pause(self.tp)
            self._m.metrics.backpressure_pauses_total.labels(*p.label).inc()
        elif p.throttled and backlog <= bound // 2:
            p.throttled = False
            self._m.fetcher.resume(self.tp)

    def _progress(self, tp: TopicPartition, done: int, total: int) -> None:
        if total > 0:
            self._m.metrics.rebuild_progress_ratio.labels(*self.run.label).set(min(1.0, done / total))

    def _fields(self, **more: Any) -> dict[str, Any]:
        return log_fields(self.tp, **more)
