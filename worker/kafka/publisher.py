"""Live publishing of one member: outcomes into each partition's open transaction, commits beside consumption.

A partition sends each outcome into its open transaction at once; while that transaction commits, new outcomes
wait in `pending` and go into the next one, so a commit never stops consumption.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from aiokafka import TopicPartition

from worker.errors import WorkerError
from worker.kafka.checkpoint import Checkpoint
from worker.kafka.partition import PartitionRun, Phase
from worker.kafka.routing import KeyRouter
from worker.kafka.sizes import fit_dead_letter
from worker.kafka.source import to_source_record
from worker.kafka.topics import TopicLimits
from worker.ops import Metrics
from worker.settings import Settings
from worker.stream import (
    Destination,
    OutboundRecord,
    Outcome,
    Verdict,
    encode_replay_metadata,
    record_size,
)

__all__ = ["Publisher", "log_fields"]

_log = logging.getLogger(__name__)
_YIELD_EVERY_S = 0.002  # longest stretch of record processing before commits in flight get the loop
_LOGGED_STREAMS = 10_000  # streams whose internal error was logged with its traceback, remembered

OnFailure = Callable[[PartitionRun, BaseException], None]  # must not wait: the partition's own task contains it
OnHalt = Callable[[PartitionRun, str], None]


def log_fields(tp: TopicPartition, **more: Any) -> dict[str, Any]:
    """The structured log fields naming a partition."""
    return {"topic": tp.topic, "partition": tp.partition, **more}


def _child(children: dict[Any, Any], key: Any, family: Any, *labels: str) -> Any:
    """`family.labels(*labels)`, cached in `children` under `key`: labels() costs more than inc()."""
    child = children.get(key)
    if child is None:
        child = children[key] = family.labels(*labels)
    return child


def _position(p: PartitionRun) -> tuple[int, str]:
    """The offset a transaction holding every record consumed so far commits, and its `replay_from` metadata."""
    return p.next_offset, encode_replay_metadata(p.state.replay_from(p.next_offset))


def _interval_start(consumed_at: float, late_s: float, interval_s: float) -> float:
    """When a record's commit interval starts: at its source timestamp, so the delay before consumption counts,
    but at most half an interval before it was consumed; a record over an interval late (a partition catching
    up) starts it on consumption, so catching up keeps full transactions."""
    if 0.0 < late_s <= interval_s:
        return consumed_at - min(late_s, interval_s / 2)
    return consumed_at


def _header(headers: Iterable[tuple[str, bytes]], name: str) -> str:
    return next((v.decode(errors="replace") for k, v in headers if k == name), "")


class Publisher:
    """Turns consumed records of live partitions into transactional output; failures go to `on_failure`."""

    def __init__(self, settings: Settings, metrics: Metrics, on_failure: OnFailure, on_halt: OnHalt) -> None:
        self._s = settings
        self._metrics = metrics
        self._on_failure = on_failure
        self._on_halt = on_halt
        self.router: KeyRouter | None = None
        self.limits: TopicLimits | None = None  # set and refreshed by the runner; None: dead letters go uncut
        self._by_type: dict[str, Any] = {}  # output_events_total children by event type
        self._logged: OrderedDict[tuple[str, int, str | None], None] = OrderedDict()  # streams, oldest first

    def due_in(self, p: PartitionRun) -> float | None:
        """Seconds until the partition's open transaction is due to commit; None when no time is awaited (nothing
        open, or a commit in flight, which wakes the partition when it ends)."""
        ckpt = p.checkpoint
        if p.phase is not Phase.LIVE or ckpt is None or not ckpt.is_open or p.commit_task is not None:
            return None
        return max(0.0, self._s.commit_interval_ms / 1000 - ckpt.age_s)

    async def consume(self, p: PartitionRun, recs: list[Any]) -> None:
        """Process consumed records of a live partition in offset order and send their outcomes."""
        if p.phase is not Phase.LIVE or p.checkpoint is None:
            return  # paused: the position is re-sought when the partition goes live again
        tally: dict[Verdict, int] = {}
        try:
            await self._consume(p, recs, tally)
        finally:
            # Counted once per batch: a labelled counter's inc() costs more than processing a small record.
            for verdict, n in tally.items():
                _child(p.verdict_counters, verdict, self._metrics.source_records_total, *p.label, verdict.value).inc(n)
            self._metrics.open_streams.labels(*p.label).set(p.state.open_streams)
            if p.state.display:
                self._count_display(*p.state.take_display_tally())

    async def _consume(self, p: PartitionRun, recs: list[Any], tally: dict[Verdict, int]) -> None:
        assert p.checkpoint is not None
        yield_at = time.monotonic() + _YIELD_EVERY_S
        interval = self._s.commit_interval_ms / 1000
        wall_ahead = time.time() - time.monotonic()  # source timestamps are wall-clock milliseconds
        for rec in recs:
            if rec.offset < p.next_offset:
                continue
            now = time.monotonic()
            if now >= yield_at:
                # Let in-flight commits read their responses; a commit that failed meanwhile ends the batch.
                await asyncio.sleep(0)
                now = time.monotonic()
                yield_at = now + _YIELD_EVERY_S
                if p.phase is not Phase.LIVE or p.checkpoint is None:
                    return
            try:
                outcome = p.state.process(to_source_record(rec))
            except WorkerError as exc:
                await self._halt(p, rec.offset, exc)
                return
            except Exception as exc:  # a bug of the partition state itself, now undefined: hold the partition
                _log.exception("partition state failed", extra=log_fields(p.tp, offset=rec.offset))
                await self._halt(p, rec.offset, WorkerError(f"partition state failed: {type(exc).__name__}: {exc}"))
                return
            if outcome.error is not None:
                self._internal_error(p, rec.offset, outcome)
            p.next_offset = rec.offset + 1
            tally[outcome.verdict] = tally.get(outcome.verdict, 0) + 1
            late = now + wall_ahead - rec.timestamp / 1000
            p.pending.append((outcome, rec.timestamp, _interval_start(now, late, interval)))
            if p.commit_task is None and len(p.pending) + p.checkpoint.records >= self._s.max_records_per_transaction:
                if not await self._flush(p):
                    return
                self._start_commit(p)
        # Outcomes go into the transaction once a poll, not once a record; a running commit takes them itself.
        if p.commit_task is None and p.phase is Phase.LIVE and p.checkpoint is not None and await self._flush(p):
            try:
                await p.checkpoint.ship_new()  # the commit ships the rest
                if p.checkpoint.joins_group:  # every record below next_offset is in the transaction now
                    p.checkpoint.join_group(*_position(p))
            except Exception as exc:
                self._on_failure(p, exc)

    async def _flush(self, p: PartitionRun) -> bool:
        """Send the pending outcomes into the open transaction (opening one); False if the partition failed."""
        ckpt = p.checkpoint
        assert ckpt is not None
        sent: dict[str, int] = {}
        shown = shown_bytes = 0
        output, display = self._s.output_topic, self._s.display_topic
        try:
            while p.pending and p.phase is Phase.LIVE:
                batch, p.pending = p.pending, []
                await ckpt.begin()
                for outcome, timestamp, interval_start in batch:
                    for out in outcome.records:
                        destination = out.destination
                        if destination is Destination.DEAD_LETTER:
                            await self._dead_letter(p, ckpt, out, outcome)
                            continue
                        topic = output if destination is Destination.OUTPUT else display
                        await self._put(ckpt, topic, out.key, out.value, out.headers)
                        if destination is Destination.OUTPUT:
                            kind = out.event_type or ""
                            sent[kind] = sent.get(kind, 0) + 1
                        else:
                            shown += 1
                            shown_bytes += len(out.value or b"")
                    ckpt.note_source(timestamp, interval_start)
        except Exception as exc:
            self._on_failure(p, exc)
            return False
        finally:
            for kind, n in sent.items():
                _child(self._by_type, kind, self._metrics.output_events_total, kind).inc(n)
            if shown:
                self._metrics.display_records_total.inc(shown)
                self._metrics.display_bytes_total.inc(shown_bytes)
        return p.phase is Phase.LIVE

    async def _put(
        self, ckpt: Checkpoint, topic: str, key: bytes | None, value: bytes | None,
        headers: tuple[tuple[str, bytes], ...],
    ) -> None:  # fmt: skip
        """Send a record of run `key` into the open transaction, in the partition of its run's output events (a
        run's display record too: the topics have the same partition count)."""
        route, listed = self.router, list(headers)
        partition = route(key) if route is not None and key is not None else None
        if partition is None or not ckpt.append(topic, key, value, listed, partition):
            await ckpt.send(topic, key, value, listed, partition)

    async def _dead_letter(self, p: PartitionRun, ckpt: Checkpoint, out: OutboundRecord, outcome: Outcome) -> None:
        limit = self.limits.dead_letter_record_bytes if self.limits is not None else None
        sent = out if limit is None or record_size(out) <= limit else fit_dead_letter(out, limit)
        cut = sent is not out
        if cut:
            self._metrics.dead_letters_truncated_total.inc()
        await ckpt.send(self._s.dlq_topic, sent.key, sent.value, list(sent.headers))
        self._metrics.dead_letter_records_total.labels(out.reason or "").inc()
        _log.warning("record dead-lettered (%s)%s: %s", out.reason,
                     f", cut to the dead-letter topic's limit of {limit} bytes" if cut else "",
                     _header(out.headers, "dlq-message"),
                     extra=log_fields(p.tp, offset=_header(out.headers, "dlq-source-offset"), run_id=outcome.run_id))

    def _internal_error(self, p: PartitionRun, offset: int, outcome: Outcome) -> None:
        """Count a conversion that raised unexpectedly; its traceback is logged once per stream."""
        self._metrics.internal_errors_total.inc()
        stream = (p.tp.topic, p.tp.partition, outcome.run_id)
        if stream in self._logged:
            self._logged.move_to_end(stream)
            return
        self._logged[stream] = None
        if len(self._logged) > _LOGGED_STREAMS:
            self._logged.popitem(last=False)
        _log.error("conversion failed unexpectedly; the record is dead-lettered as internal-error and the stream "
                   "goes on (later failures of this stream are counted, not logged)", exc_info=outcome.error,
                   extra=log_fields(p.tp, offset=offset, run_id=outcome.run_id))

    def commit_due(self, parts: Iterable[PartitionRun]) -> None:
        """Start the commit of every open transaction older than the commit interval."""
        interval = self._s.commit_interval_ms / 1000
        for p in parts:
            if p.phase is Phase.LIVE and p.checkpoint and p.checkpoint.is_open and p.checkpoint.age_s >= interval:
                self._start_commit(p)

    def _start_commit(self, p: PartitionRun) -> None:
        if p.commit_task is None and p.checkpoint is not None and p.checkpoint.is_open:
            p.commit_task = asyncio.create_task(self._commit_then_flush(p), name=f"commit-{p.tp.partition}")

    async def _commit_then_flush(self, p: PartitionRun) -> None:
        """Commit, move what queued meanwhile into a new transaction, and commit again at once if that is due."""
        interval = self._s.commit_interval_ms / 1000
        try:
            while await self._commit(p) and p.phase is Phase.LIVE and await self._flush(p):
                ckpt = p.checkpoint
                if ckpt is None or not ckpt.is_open or ckpt.age_s < interval:
                    break
        finally:
            if p.commit_task is asyncio.current_task():
                p.commit_task = None
            p.wake.set()  # the partition's task: its backlog drained, or its next commit may be due

    async def _settle(self, p: PartitionRun) -> None:
        """Wait for the partition's in-flight commit (and the flush that follows it)."""
        task = p.commit_task
        if task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    async def commit_now(self, p: PartitionRun) -> bool:
        """Settle any in-flight commit, then commit what is open with the partition's state checkpointed; used on
        revoke, halt and shutdown."""
        await self._settle(p)
        return p.phase is Phase.LIVE and await self._commit(p, final=True)

    def _checkpoint_due(self, p: PartitionRun, offset: int, final: bool) -> bool:
        """Whether this commit writes the state to the changelog: when it changed since the last checkpoint and the
        interval passed, or the changelog does not hold it, or the partition stops being live here."""
        if not self._s.changelog or p.state.checkpointed == offset:
            return False
        interval = self._s.checkpoint_interval_ms / 1000
        return final or p.state.checkpointed < 0 or time.monotonic() - p.checkpointed_at >= interval

    async def _commit(self, p: PartitionRun, *, final: bool = False) -> bool:
        """Commit the open checkpoint of a live partition; a failure aborts and rebuilds or drops it.

        Outcomes consumed since the commit was started are sent into this transaction first: the offset it
        commits is `next_offset`, so every record below it must have its output inside. A final commit opens a
        transaction for the changelog alone when the state moved past its last checkpoint.
        """
        ckpt = p.checkpoint
        try:
            if final and ckpt is not None and not ckpt.is_open and self._checkpoint_due(p, p.next_offset, final):
                await ckpt.begin()
        except Exception as exc:
            self._on_failure(p, exc)
            return False
        if p.pending and not await self._flush(p):
            return False
        if ckpt is None or not ckpt.is_open:
            return True
        # _flush returned with nothing pending and no await since, so the state is exactly at next_offset.
        offset, metadata = _position(p)
        changes = p.state.checkpoint(offset) if self._checkpoint_due(p, offset, final) else None
        started = ckpt.begun_at
        try:
            if changes is not None:
                changelog, partition = self._s.changelog_topic_name, p.tp.partition
                for key, value in changes:
                    if not ckpt.append(changelog, key, value, [], partition):
                        await ckpt.send(changelog, key, value, [], partition)
            stamps = await ckpt.commit(offset, metadata)
        except Exception as exc:
            self._on_failure(p, exc)
            return False
        p.committed = offset
        if changes is not None:
            p.checkpointed_at = time.monotonic()
            self._metrics.checkpoints_total.labels(*p.label).inc()
            self._metrics.changelog_records_total.labels(*p.label).inc(len(changes))
        self._metrics.transactions_total.labels("committed").inc()
        self._metrics.transaction_duration_seconds.observe(time.monotonic() - started)
        now_ms = time.time() * 1000
        self._metrics.source_to_commit_delay_seconds.observe_many([max(0.0, now_ms - ts) / 1000 for ts in stamps])
        return True

    def _count_display(self, evicted: int, withheld: int) -> None:
        if evicted:
            self._metrics.display_evicted_items_total.inc(evicted)
        if withheld:
            self._metrics.display_withheld_total.inc(withheld)

    async def _halt(self, p: PartitionRun, offset: int, exc: WorkerError) -> None:
        """A policy (gap, open-stream cap) or a failed state says stop: commit what came before, then hold the
        partition."""
        _log.error("partition halted: %s", exc, extra=log_fields(p.tp, offset=offset))
        if await self.commit_now(p):
            self._on_halt(p, f"halted at offset {offset}: {exc}")
