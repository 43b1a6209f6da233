"""One task per assigned partition, owning all of it: rebuild, go live, process and commit, contain a failure, retry.

The task is the partition's only writer: its state, its producer and transactions (`CommitPipeline`), the records
fetched for it and its readiness live here and nowhere else; it cuts the state's checkpoints itself, and the
pipeline gets finished records only. It is also the only task that waits for the broker
on the partition's behalf: the poll loop hands it fetched records and never waits, the rebalance callbacks wait
for it only within the revocation budget, and nothing it awaits is under a lock another partition needs. Every
broker call has a deadline; when one expires or a transaction fails, this partition alone is paused, its producer
closed in the background, and it rebuilds after a capped back-off. A producer is started only while the group
coordinator lists this member as the partition's owner, so a resumed zombie never fences the real owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer, TopicPartition

from worker.errors import CheckpointVersionError, DeadlineError, WorkerError
from worker.kafka.deadlines import GRANT_HEALS_WITHIN_S, Deadlines, backoff_s
from worker.kafka.diagnosis import Diagnosis, Fault, Names, diagnose
from worker.kafka.ownership import Ownership
from worker.kafka.pipeline import Changelog, CommitPipeline, CommitPolicy, Processed
from worker.kafka.publishing import Routes
from worker.kafka.rebuild import Parked, Rebuilt
from worker.kafka.replay import Progress
from worker.kafka.source import to_source_record
from worker.kafka.transaction import Transaction
from worker.ops import Health, Metrics, Readiness, working_on
from worker.settings import Settings
from worker.stream import Outcome, PartitionState, Verdict

__all__ = ["Fetcher", "Member", "PartitionTask", "Rebuilding", "Stage"]

_log = logging.getLogger(__name__)
_OWNER_POLL_FIRST_S = 0.25
_YIELD_EVERY_S = 0.002  # longest stretch of record processing before commits in flight get the loop
# Records processed together: their conversion, then their display folds (each stage's code stays warm).
_CHUNK_RECORDS = 32
_LOGGED_STREAMS = 10_000  # streams whose internal error was logged with its traceback, remembered per partition


class Stage(Enum):
    """Where a partition stands; only a LIVE partition processes records and publishes."""

    REBUILDING = "rebuilding"
    LIVE = "live"
    FAILED = "failed"  # a transaction or a rebuild failed: the task contains it and rebuilds
    HALTED = "halted"  # a policy stopped it: held, not ready, until the group moves it


class Rebuilding(Protocol):
    """The broker side of a rebuild (`rebuild.Rebuilder`); a stand-in serves the unit tests."""

    def names(self, tp: TopicPartition) -> Names: ...

    def fresh_state(self, tp: TopicPartition) -> PartitionState: ...

    async def owner(self, tp: TopicPartition) -> Ownership: ...

    async def rebuild(self, tp: TopicPartition, parked: Parked | None, progress: Progress) -> Rebuilt: ...

    def close_later(self, producer: AIOKafkaProducer) -> None: ...


class Fetcher(Protocol):
    """The group consumer's controls of one assigned partition; none of them waits."""

    def pause(self, tp: TopicPartition) -> None: ...

    def resume(self, tp: TopicPartition) -> None: ...

    def seek(self, tp: TopicPartition, offset: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Member:
    """What the partition tasks of one group member share: settings, metrics, health, the broker's deadlines, the
    rebuild side, the fetch controls, and the destinations as last checked."""

    settings: Settings
    metrics: Metrics
    health: Health
    deadlines: Deadlines
    rebuilder: Rebuilding
    fetcher: Fetcher
    routes: Callable[[], Routes]


class _End(Enum):
    FAILED = "failed"
    HALTED = "halted"
    STOP = "stop"


class PartitionTask:
    """Runs one assigned partition until `stop`; `offer` hands it fetched records without waiting."""

    def __init__(self, member: Member, tp: TopicPartition, parked: Parked | None = None) -> None:
        self.tp = tp
        self._m = member
        self._label = (tp.topic, str(tp.partition))
        self._where = f"{tp.topic}[{tp.partition}]"
        self._policy = CommitPolicy(member.settings)
        self._stage = Stage.REBUILDING
        self._state = member.rebuilder.fresh_state(tp)
        self._pipeline: CommitPipeline | None = None  # while live
        self._checkpointed_at = 0.0  # time.monotonic() of the last checkpoint cut
        self._parked = parked  # kept through the rebalance: adopted when the committed offset did not move
        self._inbox: list[list[Any]] = []
        self._inbox_records = 0
        self._taken = 0  # records taken from the inbox whose outcomes are not yet handed to the pipeline
        self._wake = asyncio.Event()
        self._fault: BaseException | None = None
        self._throttled = False  # fetching paused because the backlog passed its bound
        self._stopping = False
        self._committing_on_stop = False  # live: a stop lets it commit instead of cancelling it
        self._verdicts: dict[Verdict, Any] = {}  # source_records_total children
        self._logged: OrderedDict[str | None, None] = OrderedDict()  # streams whose internal error was logged
        self._pending_gauge = member.metrics.pending_records.labels(*self._label)
        self._hold("rebuilding")
        self._task = asyncio.create_task(self._main(), name=f"partition-{tp.partition}")
        self._task.add_done_callback(self._ended)

    @property
    def stage(self) -> Stage:
        return self._stage

    @property
    def committed(self) -> int | None:
        """The offset the partition last committed while live (None while not live)."""
        return self._pipeline.committed if self._pipeline is not None else None

    @property
    def next_offset(self) -> int | None:
        """The next source offset the live partition processes (None while not live)."""
        return self._pipeline.next_offset if self._pipeline is not None else None

    @property
    def done(self) -> bool:
        return self._task.done()

    # ---- the poll loop's side ------------------------------------------------------------------------------

    def offer(self, recs: list[Any]) -> None:
        """Queue records fetched for this partition; records of a partition that is not live are dropped (its
        position is sought again when it goes live). Fetching pauses once the backlog passes its bound."""
        if self._stage is Stage.LIVE:
            self._inbox.append(recs)
            self._inbox_records += len(recs)
            self._wake.set()
        self._throttle()

    def observe_lag(self, end: int | None) -> None:
        """Report how far the live partition is behind `end`, the partition's last stable offset."""
        pipeline = self._pipeline
        if self._stage is Stage.LIVE and pipeline is not None and end is not None:
            self._m.metrics.consumer_lag_records.labels(*self._label).set(max(0, end - pipeline.next_offset))

    async def stop(self, budget_s: float) -> Parked | None:
        """End the task. A live partition commits what it has open, within `budget_s`, and is handed back for
        parking with its producer; any other partition, or one whose commit does not finish in time, is dropped
        (its producer closed in the background, its open transaction left for the next owner's producer to
        abort)."""
        if not self._task.done():
            if self._committing_on_stop:
                self._stopping = True
                self._wake.set()
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

    def _ended(self, task: asyncio.Task[Parked | None]) -> None:
        if not task.cancelled() and task.exception() is not None:  # a bug: held, not ready, until the group moves it
            self._hold("failed")
            _log.error("partition task ended unexpectedly, partition held: %r", task.exception(), extra=self._fields())

    # ---- the partition's task ------------------------------------------------------------------------------

    async def _main(self) -> Parked | None:
        try:
            failures = 0  # since the partition last committed
            while True:
                failures = await self._rebuild_until_live(failures)
                went_live_at = self.committed or 0
                self._committing_on_stop = True
                end = await self._live()
                if end is _End.STOP:
                    return await self._final_commit()
                self._committing_on_stop = False
                if end is _End.HALTED:
                    await asyncio.Event().wait()  # held until the group moves the partition (stop cancels this)
                progressed = (self.committed or 0) > went_live_at
                diagnosis = await self._contain()
                failures = 1 if progressed else failures + 1
                if diagnosis.fault is Fault.FENCED:
                    await self._until_owner()
                else:
                    delay = self._backoff(failures, diagnosis)
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
                rebuilt = await rebuilder.rebuild(self.tp, self._parked, self._progress)
            except CheckpointVersionError as exc:  # guessing could publish wrongly: held until the group moves it
                self._hold("failed")
                self._m.metrics.partition_failures_total.labels(*self._label).inc()
                _log.error("partition held: %s", exc, extra=self._fields())
                await asyncio.Event().wait()
            except Exception as exc:
                failures += 1
                diagnosis = diagnose(None, exc, rebuilder.names(self.tp), "rebuild")
                delay = self._backoff(failures, diagnosis)
                self._rebuild_failed(diagnosis, delay)
                await asyncio.sleep(delay)
                continue
            self._parked = None
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
        """Go live at the rebuilt state: a transaction on the new producer, fetching from the committed offset."""
        m, s, d = self._m.metrics, self._m.settings, self._m.deadlines
        self._state = rebuilt.state
        txn = Transaction(rebuilt.producer, self.tp, s.group_id, d.call_s)
        self._pipeline = CommitPipeline(txn, rebuilt.committed, policy=self._policy, routes=self._m.routes, metrics=m,
                                        checkpoint=self._cut_checkpoint, on_failure=self._failed,
                                        on_end=self._wake.set)  # fmt: skip
        self._checkpointed_at = time.monotonic()
        self._inbox, self._inbox_records, self._taken, self._fault = [], 0, 0, None
        self._throttled = False
        self._stage = Stage.LIVE
        self._m.fetcher.seek(self.tp, rebuilt.committed)
        self._m.fetcher.resume(self.tp)
        self._m.health.set_partition(self.tp.topic, self.tp.partition, "ready")
        m.partition_ready.labels(*self._label).set(1)
        m.open_streams.labels(*self._label).set(rebuilt.state.open_streams)
        m.rebuild_progress_ratio.labels(*self._label).set(1.0)
        self._pending_gauge.set(0)
        self._log_rebuilt(rebuilt)

    def _log_rebuilt(self, rebuilt: Rebuilt) -> None:
        m, w = self._m.metrics, rebuilt.window
        if rebuilt.kept or w is None:
            _log.info("partition kept through rebalance: no replay", extra=self._fields(offset=rebuilt.committed))
            return
        m.rebuilds_total.labels(*self._label).inc()
        m.rebuild_records_total.labels(*self._label).inc(rebuilt.replayed)
        m.rebuild_duration_seconds.observe(rebuilt.rebuild_s)
        if w.lost_history:
            m.retention_gaps_total.labels(*self._label).inc()
        timing = self._fields(replay_seconds=round(rebuilt.replay_s, 4), rebuild_seconds=round(rebuilt.rebuild_s, 4))
        restored, state = rebuilt.restored, rebuilt.state
        if restored is not None:
            timing.update(changelog_records=restored.records, changelog_seconds=round(restored.read_s, 4),
                          restore_seconds=round(restored.restore_s, 4))
            _log.info("partition rebuilt: restored %d open and %d ended streams from the changelog at offset %d, "
                      "replayed %d records of [%d, %d) (%s), live from %d", state.open_streams,
                      state.remembered_streams, restored.offset, rebuilt.replayed, w.start, w.committed, w.source,
                      w.committed, extra=timing)
            return
        _log.info("partition rebuilt: replayed %d records of [%d, %d) (%s), live from %d",
                  rebuilt.replayed, w.start, w.committed, w.source, w.committed, extra=timing)

    async def _live(self) -> _End:
        """Process fetched records and commit on time until the partition fails, halts or is stopped."""
        pipeline = self._pipeline
        assert pipeline is not None
        while True:
            if self._stage is Stage.FAILED:
                return _End.FAILED
            if self._stage is Stage.HALTED:
                return _End.HALTED
            if self._stopping:
                return _End.STOP
            if self._inbox:
                batches = self._take_inbox()
                self._taken = sum(len(recs) for recs in batches)  # still part of the backlog until converted
                for recs in batches:
                    await self._process(pipeline, recs)
                    if self._stage is not Stage.LIVE or self._stopping:
                        break
                    await pipeline.tick()
                self._taken = 0
                self._throttle()
                continue
            self._wake.clear()  # before the tick: a wake during it is not lost
            due = await pipeline.tick()
            self._throttle()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(due):
                    await self._wake.wait()

    async def _process(self, pipeline: CommitPipeline, recs: list[Any]) -> None:
        """Process fetched records in offset order and hand their outcomes to the transactions."""
        tally: dict[Verdict, int] = {}
        try:
            await self._consume(pipeline, recs, tally)
        except Exception as exc:  # a bug, not a record's fault: this partition fails, the rest go on
            _log.exception("processing failed unexpectedly", extra=self._fields())
            self._failed(exc)
        finally:
            # Counted once per batch: a labelled counter's inc() costs more than processing a small record.
            metrics = self._m.metrics
            for verdict, n in tally.items():
                child = self._verdicts.get(verdict)
                if child is None:
                    child = self._verdicts[verdict] = metrics.source_records_total.labels(*self._label, verdict.value)
                child.inc(n)
            metrics.open_streams.labels(*self._label).set(self._state.open_streams)
            if self._state.display:
                evicted, withheld = self._state.take_display_tally()
                if evicted:
                    metrics.display_evicted_items_total.inc(evicted)
                if withheld:
                    metrics.display_withheld_total.inc(withheld)

    async def _consume(self, pipeline: CommitPipeline, recs: list[Any], tally: dict[Verdict, int]) -> None:
        state = self._state
        yield_at = time.monotonic() + _YIELD_EVERY_S
        fresh = [rec for rec in recs if rec.offset >= pipeline.next_offset]
        self._taken -= len(recs) - len(fresh)
        done = 0
        while done < len(fresh):
            now = time.monotonic()
            if now >= yield_at:
                await asyncio.sleep(0)  # in-flight commits read their responses; one that failed ends the batch
                now = time.monotonic()
                yield_at = now + _YIELD_EVERY_S
                if self._stage is not Stage.LIVE:
                    return
            chunk = fresh[done : done + min(_CHUNK_RECORDS, pipeline.room())]
            done += len(chunk)
            with working_on("converting records of %s", self._where):
                outcomes, error = state.process_batch([to_source_record(rec) for rec in chunk])
            processed = []
            for rec, outcome in zip(chunk, outcomes, strict=False):
                if outcome.error is not None:
                    self._internal_error(rec.offset, outcome)
                tally[outcome.verdict] = tally.get(outcome.verdict, 0) + 1
                processed.append(Processed(outcome, rec.offset, rec.timestamp))
            self._taken -= len(chunk)  # from here on the pipeline holds them
            if processed and not await pipeline.add(processed, state.replay_from(processed[-1].offset + 1)):
                return
            if error is not None:
                offset = chunk[len(outcomes)].offset
                if not isinstance(error, WorkerError):  # a bug of the partition state itself, now undefined
                    _log.error("partition state failed", exc_info=error, extra=self._fields(offset=offset))
                    error = WorkerError(f"partition state failed: {type(error).__name__}: {error}")
                await self._halt(pipeline, offset, error)
                return

    def _internal_error(self, offset: int, outcome: Outcome) -> None:
        """Count a conversion that raised unexpectedly; its traceback is logged once per stream."""
        self._m.metrics.internal_errors_total.inc()
        stream = outcome.run_id
        if stream in self._logged:
            self._logged.move_to_end(stream)
            return
        self._logged[stream] = None
        if len(self._logged) > _LOGGED_STREAMS:
            self._logged.popitem(last=False)
        _log.error("conversion failed unexpectedly; the record is dead-lettered as internal-error and the stream "
                   "goes on (later failures of this stream are counted, not logged)", exc_info=outcome.error,
                   extra=self._fields(offset=offset, run_id=outcome.run_id))

    async def _halt(self, pipeline: CommitPipeline, offset: int, exc: WorkerError) -> None:
        """A policy (gap, open-stream cap) or a failed state says stop: commit what came before, then hold the
        partition: paused, not ready, counted."""
        _log.error("partition halted: %s", exc, extra=self._fields(offset=offset))
        if not await pipeline.close() or self._stage is not Stage.LIVE:
            return
        self._stage = Stage.HALTED
        self._wake.set()
        _log.warning("partition held, not ready: halted at offset %d: %s", offset, exc, extra=self._fields())
        self._m.fetcher.pause(self.tp)
        self._m.health.set_partition(self.tp.topic, self.tp.partition, "failed")
        self._m.metrics.partition_ready.labels(*self._label).set(0)
        self._m.metrics.partition_failures_total.labels(*self._label).inc()

    def _failed(self, exc: BaseException) -> None:
        """The live partition's first fault: stop fetching it and wake the task to contain it; never waits."""
        if self._stage is Stage.LIVE:
            self._m.fetcher.pause(self.tp)
            self._stage = Stage.FAILED
            self._fault = exc
            self._take_inbox()
            self._wake.set()

    async def _final_commit(self) -> Parked | None:
        """On stop: commit what is open and hand the partition back for parking, or drop it if that fails."""
        self._take_inbox()  # fetched, not processed: the next owner (or this one, kept) fetches them again
        pipeline = self._pipeline
        if pipeline is not None and await pipeline.close() and self._stage is Stage.LIVE:
            self._pipeline = None
            return Parked(self._state, pipeline.committed, pipeline.producer)
        self._drop()
        return None

    async def _contain(self) -> Diagnosis:
        """Isolate a failed partition: pause it, end its commit and its transaction, observe its producer, close it
        in the background, drop its state; returns what the failure was."""
        m, call_s = self._m.metrics, self._m.deadlines.call_s
        fault: BaseException = self._fault if self._fault is not None else RuntimeError("partition failed")
        self._hold("failed")
        pipeline = self._pipeline
        views = []
        if pipeline is not None:  # after a deadline the broker did not answer: an abort would wait as long
            views = await pipeline.abort(call_s, at_broker=not isinstance(fault, DeadlineError))
        diagnosis = diagnose(views, fault, self._m.rebuilder.names(self.tp), "transaction")
        self._drop()
        self._state = self._m.rebuilder.fresh_state(self.tp)  # the old one is ahead of the committed offset
        m.transactions_total.labels("aborted").inc()
        m.transaction_failures_total.labels(*self._label, diagnosis.fault.value).inc()
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
        self._m.metrics.rebuild_retries_total.labels(*self._label).inc()
        cause = diagnosis.cause
        if isinstance(cause, DeadlineError):
            self._m.metrics.deadline_expirations_total.labels(cause.call).inc()
        if diagnosis.fault is Fault.UNAUTHORISED:
            self._unauthorised(diagnosis)
            return
        _log.error("rebuild failed, retrying in %.1f s: %s", delay, diagnosis.describe(), extra=self._fields())

    def _backoff(self, failures: int, diagnosis: Diagnosis) -> float:
        """The wait before the next rebuild: capped at `rebuild_backoff_max_ms`, and at `GRANT_HEALS_WITHIN_S` while
        a right is missing, so a grant takes effect that soon without a restart."""
        cap = self._m.deadlines.backoff_max_s
        if diagnosis.fault is Fault.UNAUTHORISED:
            cap = min(cap, GRANT_HEALS_WITHIN_S)
        return backoff_s(failures, cap)

    def _unauthorised(self, diagnosis: Diagnosis) -> None:
        """Counted and logged (one line, no traceback) at every back-off step while the right is missing."""
        for denied in diagnosis.denied:
            self._m.metrics.authorization_failures_total.labels(*denied.label).inc()
        principal = self._m.rebuilder.names(self.tp).principal
        _log.error("partition %s", diagnosis.describe(principal), extra=self._fields())

    def _drop(self) -> None:
        """Forget the partition's transactions and producer without waiting: the producer closes in the
        background, its open transaction left to the next producer of the transactional id to abort."""
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is not None:
            self._m.rebuilder.close_later(pipeline.discard())
        if self._stage is Stage.LIVE:
            self._stage = Stage.FAILED

    def _take_inbox(self) -> list[list[Any]]:
        """Everything fetched so far, in fetch order."""
        batches, self._inbox, self._inbox_records = self._inbox, [], 0
        return batches

    def _hold(self, readiness: Readiness) -> None:
        """Not ready (`rebuilding`, or `failed` while it waits): fetching paused, health and metrics say so."""
        if self._stage is not Stage.HALTED:
            self._stage = Stage.REBUILDING if readiness == "rebuilding" else Stage.FAILED
        self._m.fetcher.pause(self.tp)
        self._throttled = False
        self._take_inbox()
        self._m.health.set_partition(self.tp.topic, self.tp.partition, readiness)
        self._m.metrics.partition_ready.labels(*self._label).set(0)

    def _throttle(self) -> None:
        """Back-pressure: pause fetching once the backlog (records fetched and waiting, taken and being converted,
        or processed while a commit runs) reaches `max_pending_records`, resume at half of it."""
        pipeline = self._pipeline
        backlog = self._inbox_records + self._taken + (pipeline.waiting if pipeline is not None else 0)
        self._pending_gauge.set(backlog)
        if self._stage is not Stage.LIVE:
            return
        bound = self._m.settings.max_pending_records
        if not self._throttled and backlog >= bound:
            self._throttled = True
            self._m.fetcher.pause(self.tp)
            self._m.metrics.backpressure_pauses_total.labels(*self._label).inc()
        elif self._throttled and backlog <= bound // 2:
            self._throttled = False
            self._m.fetcher.resume(self.tp)

    async def _cut_checkpoint(self, offset: int, final: bool) -> Changelog | None:
        """The changelog records of the state at `offset`, when the policy says the commit fixed there checkpoints.
        The pipeline asks only within this task's own calls into it, where the state is exactly at `offset`; the
        cut lets other partitions run between its parts, this one processing nothing until it ends."""
        if asyncio.current_task() is not self._task:
            raise WorkerError(f"{self._where}: a checkpoint cut outside the partition's task")
        state = self._state
        if not self._policy.checkpoint_due(state.checkpointed, offset, final=final,
                                           checkpointed_at=self._checkpointed_at):
            return None
        self._checkpointed_at = time.monotonic()
        changes: Changelog = []
        parts = state.checkpoint_parts(offset)
        while True:
            with working_on("cutting a checkpoint of %s (%d open runs)", self._where, state.open_streams):
                part = next(parts, None)
            if part is None:
                return changes
            changes.extend(part)
            await asyncio.sleep(0)

    def _progress(self, tp: TopicPartition, done: int, total: int) -> None:
        if total > 0:
            self._m.metrics.rebuild_progress_ratio.labels(*self._label).set(min(1.0, done / total))

    def _fields(self, **more: Any) -> dict[str, Any]:
        return {"topic": self.tp.topic, "partition": self.tp.partition, **more}
