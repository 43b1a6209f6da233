"""One task per assigned partition, owning all of it: rebuild, go live, process and commit, contain a failure, retry.

The task is the partition's only writer: its state, its producer and transactions (`CommitPipeline`), the records
fetched for it and its readiness live here and nowhere else; it cuts the state's checkpoints itself, and the
pipeline gets finished records only. It is also the only task that waits for the broker on the partition's behalf:
the poll loop hands it fetched records and never waits, the rebalance callbacks wait for it only within the
revocation budget, and nothing it awaits is under a lock another partition needs. Every broker call has a deadline;
when one expires or a transaction fails, this partition alone is paused, its producer closed in the background, and
it rebuilds after a capped back-off. A producer is started only while the group coordinator lists this member as the
partition's owner, so a resumed zombie never fences the real owner.

Its stages and the moves between them are one table (`_MOVES`), and `PartitionTask._move` the one way to change
stage.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer, TopicPartition

from worker.client import GRANT_HEALS_WITHIN_S, Diagnosis, Fault, Names, backoff_s, diagnose
from worker.errors import CheckpointVersionError, DeadlineError, KafkaWorkerError, WorkerError
from worker.live.pipeline import Changelog, CommitPipeline, CommitPolicy
from worker.live.publishing import Destinations
from worker.live.reporter import TaskReporter
from worker.live.transaction import Transaction
from worker.ops import Health, Metrics, Readiness, working_on
from worker.recovery import Ownership, Parked, Progress, Rebuilt
from worker.settings import Settings
from worker.stream import PartitionState, Verdict, to_source_record

__all__ = ["BackPressure", "Deadlines", "Fetcher", "PartitionTask", "Rebuilding", "Stage", "TaskContext"]

_OWNER_POLL_FIRST_S = 0.25
_YIELD_EVERY_S = 0.002  # longest stretch of record processing before commits in flight get the loop
# Records processed together: their conversion, then their display folds (each stage's code stays warm).
_CHUNK_RECORDS = 32


class Stage(Enum):
    """Where a partition task stands; only a LIVE partition takes fetched records, and a STOPPING one commits them."""

    REBUILDING = "rebuilding"  # rebuilding its state, not ready
    LIVE = "live"  # processing and committing, ready
    STOPPING = "stopping"  # live, asked to stop: commits what it processed, then is parked
    FAILED = "failed"  # a transaction or a rebuild failed, or it waits for the group: not ready, rebuilds after
    HALTED = "halted"  # a policy, an unreadable checkpoint or a bug stopped it: held, not ready, until moved
    PARKED = "parked"  # revoked after its last commit: its state and producer kept until they are taken back
    STOPPED = "stopped"  # the task has ended: its partition taken back by the next task, closed, or dropped

    def to(self, stage: Stage) -> Stage:
        """`stage`, when `_MOVES` lists the move from this one; any other move is a bug and raises."""
        if stage not in _MOVES[self]:
            raise KafkaWorkerError(f"illegal partition stage move {self.value} -> {stage.value}")
        return stage


_MOVES: dict[Stage, frozenset[Stage]] = {
    Stage.REBUILDING: frozenset({Stage.REBUILDING, Stage.LIVE, Stage.FAILED, Stage.HALTED, Stage.STOPPED}),
    Stage.LIVE: frozenset({Stage.STOPPING, Stage.FAILED, Stage.HALTED, Stage.STOPPED}),
    Stage.STOPPING: frozenset({Stage.FAILED, Stage.HALTED, Stage.PARKED, Stage.STOPPED}),
    Stage.FAILED: frozenset({Stage.FAILED, Stage.REBUILDING, Stage.HALTED, Stage.STOPPED}),
    Stage.HALTED: frozenset({Stage.STOPPED}),
    Stage.PARKED: frozenset({Stage.STOPPED}),
    Stage.STOPPED: frozenset(),
}
_READINESS: dict[Stage, Readiness | None] = {  # what /readyz says on entering a stage; None: unchanged
    Stage.REBUILDING: "rebuilding", Stage.LIVE: "ready", Stage.STOPPING: None, Stage.FAILED: "failed",
    Stage.HALTED: "failed", Stage.PARKED: None, Stage.STOPPED: None,
}  # fmt: skip
_PROCESSING = frozenset({Stage.LIVE, Stage.STOPPING})  # the stages whose fetched records are processed and committed


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
class Deadlines:
    """Seconds a partition may spend in one broker call, in its revocation commit, and in a clean shutdown.

    The revocation budget is half the rebalance timeout (aiokafka's equals the session timeout): the member must
    still rejoin in time after it, or the group evicts it.
    """

    call_s: float
    revoke_s: float
    shutdown_s: float
    backoff_max_s: float

    @classmethod
    def from_settings(cls, s: Settings) -> Deadlines:
        """The budgets the settings give."""
        call_s = s.broker_call_timeout_ms / 1000
        return cls(
            call_s=call_s,
            revoke_s=min(call_s, s.session_timeout_ms / 2000),
            shutdown_s=s.shutdown_timeout_ms / 1000,
            backoff_max_s=s.rebuild_backoff_max_ms / 1000,
        )


@dataclass(frozen=True, slots=True)
class TaskContext:
    """What the partition tasks of one group member share: settings, metrics, health, the broker's deadlines, the
    rebuild side, the fetch controls, and the destinations as last checked."""

    settings: Settings
    metrics: Metrics
    health: Health
    deadlines: Deadlines
    rebuilder: Rebuilding
    fetcher: Fetcher
    destinations: Callable[[], Destinations]


class BackPressure:
    """A live partition's backlog: the one count of records fetched and not yet in a transaction (waiting in the
    inbox, taken and being converted, or processed while a commit runs). Fetching pauses once it reaches `bound`
    and resumes at half of it; while the partition is not live the count is 0 and fetching is the task's."""

    __slots__ = ("_bound", "_fetcher", "_live", "_report", "_tp", "records", "throttled")

    def __init__(self, bound: int, fetcher: Fetcher, tp: TopicPartition, report: TaskReporter) -> None:
        self._bound = bound
        self._fetcher = fetcher
        self._tp = tp
        self._report = report
        self._live = False
        self.records = 0
        self.throttled = False  # fetching paused because the backlog reached its bound

    def start(self) -> None:
        """The partition went live: nothing is counted yet, fetching resumes."""
        self._live, self.records, self.throttled = True, 0, False
        self._report.backlog(0)

    def end(self) -> None:
        """The partition stopped being live: everything it held is dropped (fetched again by the next owner)."""
        self._live, self.records, self.throttled = False, 0, False
        self._report.backlog(0)

    def fetched(self, records: int) -> None:
        if self._live:
            self.records += records
            self._check()

    def settled(self, records: int) -> None:
        """`records` left the backlog: put into a transaction, or passed over as already processed."""
        if self._live:
            self.records -= records
            self._check()

    def _check(self) -> None:
        self._report.backlog(self.records)
        if not self.throttled and self.records >= self._bound:
            self.throttled = True
            self._fetcher.pause(self._tp)
            self._report.throttled()
        elif self.throttled and self.records <= self._bound // 2:
            self.throttled = False
            self._fetcher.resume(self._tp)


class PartitionTask:
    """Runs one assigned partition until `stop`; `offer` hands it fetched records without waiting."""

    def __init__(self, context: TaskContext, tp: TopicPartition, parked: Parked | None = None) -> None:
        self.tp = tp
        self._m = context
        self._where = f"{tp.topic}[{tp.partition}]"
        self._report = TaskReporter(context.metrics, context.health, tp.topic, tp.partition)
        self._backlog = BackPressure(context.settings.max_pending_records, context.fetcher, tp, self._report)
        self._policy = CommitPolicy(context.settings)
        self._stage = Stage.REBUILDING
        self._state = context.rebuilder.fresh_state(tp)
        self._pipeline: CommitPipeline | None = None  # while live
        self._checkpointed_at = 0.0  # time.monotonic() of the last checkpoint cut
        self._parked = parked  # kept through the rebalance: taken back when the committed offset did not move
        self._kept: Parked | None = None  # while parked: this partition's state and producer, until taken back
        self._inbox: list[list[Any]] = []
        self._wake = asyncio.Event()
        self._fault: BaseException | None = None
        self._move(Stage.REBUILDING)
        self._task = asyncio.create_task(self._main(), name=f"partition-{tp.partition}")
        self._task.add_done_callback(self._ended)

    @property
    def _committed(self) -> int | None:
        """The offset the partition last committed while live (None while not live)."""
        return self._pipeline.committed if self._pipeline is not None else None

    def _move(self, to: Stage) -> None:
        """The one way to change stage: a move `_MOVES` does not list raises. Entering a stage that is not live
        pauses fetching and drops the fetched records; readiness follows the stage."""
        self._stage = self._stage.to(to)
        if to not in _PROCESSING:
            self._m.fetcher.pause(self.tp)
            self._inbox = []
            self._backlog.end()
        readiness = _READINESS[to]
        if readiness is not None:
            self._report.readiness(readiness)

    # ---- the poll loop's side ------------------------------------------------------------------------------

    def offer(self, recs: list[Any]) -> None:
        """Queue records fetched for this partition; records of a partition that is not live are dropped (its
        position is sought again when it goes live). Fetching pauses once the backlog passes its bound."""
        if self._stage is Stage.LIVE:
            self._inbox.append(recs)
            self._wake.set()
            self._backlog.fetched(len(recs))

    def observe_lag(self, end: int | None) -> None:
        """Report how far the live partition is behind `end`, the partition's last stable offset."""
        pipeline = self._pipeline
        if self._stage is Stage.LIVE and pipeline is not None and end is not None:
            self._report.lag(max(0, end - pipeline.next_offset))

    async def stop(self, budget_s: float) -> bool:
        """End the task; True when the partition is parked. A live partition commits what it has open, within
        `budget_s`, and is parked with its state and producer (`take_back` hands them on); any other partition, or
        one whose commit does not finish in time, is dropped (its producer closed in the background, its open
        transaction left for the next owner's producer to abort)."""
        if not self._task.done():
            if self._stage is Stage.LIVE:
                self._move(Stage.STOPPING)
                self._wake.set()
                done, _ = await asyncio.wait([self._task], timeout=budget_s)
                if not done:
                    self._report.revocation_late(budget_s)
            if not self._task.done():
                self._task.cancel()
                await asyncio.wait([self._task], timeout=budget_s)
        return self._task.done() and not self._task.cancelled() and self._task.exception() is None \
            and self._task.result()  # fmt: skip

    def take_back(self) -> Parked:
        """The parked partition's state at its committed offset and its producer, handed to whoever comes next (the
        partition's next task, or the member closing the producer); the task is stopped from then."""
        kept, self._kept = self._kept, None
        self._move(Stage.STOPPED)
        if kept is None:
            raise KafkaWorkerError(f"{self._where}: taken back, but nothing was parked")
        return kept

    def _ended(self, task: asyncio.Task[bool]) -> None:
        if not task.cancelled() and task.exception() is not None:  # a bug: held, not ready, until the group moves it
            if self._stage is not Stage.HALTED:
                self._move(Stage.HALTED)
            self._report.ended_unexpectedly(task.exception())

    # ---- the partition's task ------------------------------------------------------------------------------

    async def _main(self) -> bool:
        try:
            failures = 0  # since the partition last committed
            while True:
                failures = await self._rebuild_until_live(failures)
                went_live_at = self._committed or 0
                await self._live()
                if self._stage is Stage.STOPPING:
                    self._kept = await self._final_commit()
                    self._move(Stage.STOPPED if self._kept is None else Stage.PARKED)
                    return self._kept is not None
                if self._stage is Stage.HALTED:
                    await asyncio.Event().wait()  # held until the group moves the partition (stop cancels this)
                progressed = (self._committed or 0) > went_live_at
                diagnosis = await self._contain()
                failures = 1 if progressed else failures + 1
                if diagnosis.fault is Fault.FENCED:
                    await self._until_owner()
                else:
                    delay = self._backoff(failures, diagnosis)
                    self._report.rebuilds_in(delay)
                    await asyncio.sleep(delay)
        except asyncio.CancelledError:
            self._drop()
            self._move(Stage.STOPPED)
            raise
        except BaseException:
            self._drop()  # a bug: `_ended` holds the partition
            raise

    async def _rebuild_until_live(self, failures: int) -> int:
        """Rebuild until the partition is live; each failed attempt is counted and waits a capped back-off."""
        rebuilder = self._m.rebuilder
        while True:
            self._move(Stage.REBUILDING)
            try:
                ownership = await rebuilder.owner(self.tp)
                if ownership is not Ownership.OWNER:
                    await self._until_owner(ownership)  # reported failed while it waited: rebuilding again
                    self._move(Stage.REBUILDING)
                rebuilt = await rebuilder.rebuild(self.tp, self._parked, self._progress)
            except CheckpointVersionError as exc:  # guessing could publish wrongly: held until the group moves it
                self._move(Stage.HALTED)
                self._report.unreadable_checkpoint(exc)
                await asyncio.Event().wait()
            except Exception as exc:
                failures += 1
                diagnosis = diagnose(None, exc, rebuilder.names(self.tp), "rebuild")
                delay = self._backoff(failures, diagnosis)
                self._move(Stage.FAILED)
                self._report.rebuild_failed(diagnosis, delay, rebuilder.names(self.tp).principal)
                await asyncio.sleep(delay)
                continue
            self._parked = None
            self._go_live(rebuilt)
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
                    self._report.owner_unknown(exc)
                    ownership = Ownership.UNKNOWN
            if ownership is Ownership.OWNER:
                return
            if not said:
                said = True
                self._move(Stage.FAILED)
                self._report.waits_for_group(ownership)
            await asyncio.sleep(delay)
            delay = min(delay * 2, cap)
            ownership = None

    def _go_live(self, rebuilt: Rebuilt) -> None:
        """Go live at the rebuilt state: a transaction on the new producer, fetching from the committed offset."""
        s, d = self._m.settings, self._m.deadlines
        self._state = rebuilt.state
        txn = Transaction(rebuilt.producer, self.tp, s.group_id, d.call_s)
        self._pipeline = CommitPipeline(txn, rebuilt.committed, policy=self._policy, destinations=self._m.destinations,
                                        metrics=self._m.metrics, checkpoint=self._cut_checkpoint,
                                        on_failure=self._failed, on_sent=self._backlog.settled,
                                        on_end=self._wake.set)  # fmt: skip
        self._checkpointed_at = time.monotonic()
        self._fault = None
        self._move(Stage.LIVE)
        self._backlog.start()
        self._m.fetcher.seek(self.tp, rebuilt.committed)
        self._m.fetcher.resume(self.tp)
        self._report.live(rebuilt)

    async def _live(self) -> None:
        """Process fetched records and commit on time until the partition fails, halts or is asked to stop."""
        pipeline = self._pipeline
        assert pipeline is not None
        while self._stage is Stage.LIVE:
            if self._inbox:
                batches, self._inbox = self._inbox, []
                for recs in batches:
                    await self._process(pipeline, recs)
                    if self._stage is not Stage.LIVE:
                        break
                    await pipeline.tick()
                continue
            self._wake.clear()  # before the tick: a wake during it is not lost
            due = await pipeline.tick()
            if self._stage is not Stage.LIVE:
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(due):
                    await self._wake.wait()

    async def _process(self, pipeline: CommitPipeline, recs: list[Any]) -> None:
        """Process fetched records in offset order and hand their outcomes to the transactions."""
        tally: dict[Verdict, int] = {}
        try:
            await self._consume(pipeline, recs, tally)
        except Exception as exc:  # a bug, not a record's fault: this partition fails, the rest go on
            self._report.processing_failed()
            self._failed(exc)
        finally:
            state = self._state
            shown = state.take_display_tally() if state.shows_display else None
            self._report.processed(tally, state.open_streams, shown)

    async def _consume(self, pipeline: CommitPipeline, recs: list[Any], tally: dict[Verdict, int]) -> None:
        state = self._state
        yield_at = time.monotonic() + _YIELD_EVERY_S
        fresh = [rec for rec in recs if rec.offset >= pipeline.next_offset]
        self._backlog.settled(len(recs) - len(fresh))
        done = 0
        while done < len(fresh):
            now = time.monotonic()
            if now >= yield_at:
                await asyncio.sleep(0)  # in-flight commits read their responses; one that failed ends the batch
                yield_at = time.monotonic() + _YIELD_EVERY_S
                if self._stage not in _PROCESSING:
                    return
            chunk = fresh[done : done + min(_CHUNK_RECORDS, pipeline.room())]
            done += len(chunk)
            with working_on("converting records of %s", self._where):
                outcomes, error = state.process_batch([to_source_record(rec) for rec in chunk])
            for rec, outcome in zip(chunk, outcomes, strict=False):
                if outcome.error is not None:
                    self._report.internal_error(rec.offset, outcome)
                tally[outcome.verdict] = tally.get(outcome.verdict, 0) + 1
            if outcomes:
                after = chunk[len(outcomes) - 1].offset + 1
                stamps = [rec.timestamp for rec in chunk[: len(outcomes)]]
                if not await pipeline.add(outcomes, stamps, next_offset=after, replay_from=state.replay_from(after)):
                    return
            if error is not None:
                offset = chunk[len(outcomes)].offset
                if not isinstance(error, WorkerError):  # a bug of the partition state itself, now undefined
                    self._report.state_failed(error, offset)
                    error = WorkerError(f"partition state failed: {type(error).__name__}: {error}")
                await self._halt(pipeline, offset, error)
                return

    async def _halt(self, pipeline: CommitPipeline, offset: int, exc: WorkerError) -> None:
        """A policy (gap, open-stream cap) or a failed state says stop: commit what came before, then hold the
        partition: paused, not ready, counted."""
        self._report.halting(offset, exc)
        if not await pipeline.close() or self._stage not in _PROCESSING:
            return
        self._move(Stage.HALTED)
        self._wake.set()
        self._report.halted(offset, exc)

    def _failed(self, exc: BaseException) -> None:
        """The live partition's first fault: stop fetching it and wake the task to contain it; never waits."""
        if self._stage in _PROCESSING:
            self._fault = exc
            self._move(Stage.FAILED)
            self._wake.set()

    async def _final_commit(self) -> Parked | None:
        """On stop: commit what is open and keep the partition for parking, or drop it if that fails."""
        pipeline = self._pipeline
        if pipeline is not None and await pipeline.close() and self._stage is Stage.STOPPING:
            self._pipeline = None
            return Parked(self._state, pipeline.committed, pipeline.producer)
        self._drop()
        return None

    async def _contain(self) -> Diagnosis:
        """Isolate a failed partition: pause it, end its commit and its transaction, observe its producer, close it
        in the background, drop its state; returns what the failure was."""
        fault: BaseException = self._fault if self._fault is not None else RuntimeError("partition failed")
        self._move(Stage.FAILED)
        pipeline = self._pipeline
        views = []
        if pipeline is not None:  # after a deadline the broker did not answer: an abort would wait as long
            views = await pipeline.abort(self._m.deadlines.call_s, at_broker=not isinstance(fault, DeadlineError))
        names = self._m.rebuilder.names(self.tp)
        diagnosis = diagnose(views, fault, names, "transaction")
        self._drop()
        self._state = self._m.rebuilder.fresh_state(self.tp)  # the old one is ahead of the committed offset
        self._report.contained(diagnosis, names.principal)
        return diagnosis

    def _backoff(self, failures: int, diagnosis: Diagnosis) -> float:
        """The wait before the next rebuild: capped at `rebuild_backoff_max_ms`, and at `GRANT_HEALS_WITHIN_S` while
        a right is missing, so a grant takes effect that soon without a restart."""
        cap = self._m.deadlines.backoff_max_s
        if diagnosis.fault is Fault.UNAUTHORISED:
            cap = min(cap, GRANT_HEALS_WITHIN_S)
        return backoff_s(failures, cap)

    def _drop(self) -> None:
        """Forget the partition's transactions and producer without waiting: the producer closes in the
        background, its open transaction left to the next producer of the transactional id to abort."""
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is not None:
            self._m.rebuilder.close_later(pipeline.discard())

    def _progress(self, tp: TopicPartition, done: int, total: int) -> None:
        self._report.progress(done, total)

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
