"""What a partition task tells operators: its readiness, metrics and log lines, in one place per partition.

The lines keep the logger name `worker.live.task`, the task's, which operators filter on.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from worker.client import Diagnosis, Fault
from worker.errors import DeadlineError
from worker.ops import Health, Metrics, Readiness
from worker.recovery import Ownership, Rebuilt
from worker.stream import Outcome, Verdict

__all__ = ["TaskReporter"]

_log = logging.getLogger("worker.live.task")
_LOGGED_STREAMS = 10_000  # streams whose internal error was logged with its traceback, remembered per partition


class TaskReporter:
    """One partition's readiness (health and `partition_ready`), metrics and log lines; every line carries the
    partition's topic and number."""

    __slots__ = ("_health", "_label", "_logged", "_metrics", "_pending", "_tp", "_verdicts")

    def __init__(self, metrics: Metrics, health: Health, topic: str, partition: int) -> None:
        self._metrics = metrics
        self._health = health
        self._tp = (topic, partition)
        self._label = (topic, str(partition))
        self._verdicts: dict[Verdict, Any] = {}  # source_records_total children
        self._logged: OrderedDict[str | None, None] = OrderedDict()  # streams whose internal error was logged
        self._pending = metrics.pending_records.labels(*self._label)

    def fields(self, **more: Any) -> dict[str, Any]:
        """The structured fields of a line about this partition."""
        return {"topic": self._tp[0], "partition": self._tp[1], **more}

    def readiness(self, readiness: Readiness) -> None:
        self._health.set_partition(*self._tp, readiness)
        self._metrics.partition_ready.labels(*self._label).set(1 if readiness == "ready" else 0)

    def backlog(self, records: int) -> None:
        self._pending.set(records)

    def throttled(self) -> None:
        self._metrics.backpressure_pauses_total.labels(*self._label).inc()

    def lag(self, records: int) -> None:
        self._metrics.consumer_lag_records.labels(*self._label).set(records)

    def progress(self, done: int, total: int) -> None:
        if total > 0:
            self._metrics.rebuild_progress_ratio.labels(*self._label).set(min(1.0, done / total))

    # ---- going live -------------------------------------------------------------------------------------------

    def live(self, rebuilt: Rebuilt) -> None:
        """The partition went live at the rebuilt state: its gauges reset, the rebuild counted and logged."""
        m, w = self._metrics, rebuilt.window
        m.open_streams.labels(*self._label).set(rebuilt.state.open_streams)
        m.rebuild_progress_ratio.labels(*self._label).set(1.0)
        self._pending.set(0)
        if rebuilt.kept or w is None:
            _log.info("partition kept through rebalance: no replay", extra=self.fields(offset=rebuilt.committed))
            return
        m.rebuilds_total.labels(*self._label).inc()
        m.rebuild_records_total.labels(*self._label).inc(rebuilt.replayed)
        m.rebuild_duration_seconds.observe(rebuilt.rebuild_s)
        if w.lost_history:
            m.retention_gaps_total.labels(*self._label).inc()
        timing = self.fields(replay_seconds=round(rebuilt.replay_s, 4), rebuild_seconds=round(rebuilt.rebuild_s, 4))
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

    def rebuilds_in(self, delay: float) -> None:
        _log.info("partition rebuilds in %.1f s", delay, extra=self.fields())

    def rebuild_failed(self, diagnosis: Diagnosis, delay: float, principal: str) -> None:
        self._metrics.rebuild_retries_total.labels(*self._label).inc()
        self._deadline(diagnosis)
        if diagnosis.fault is Fault.UNAUTHORISED:
            self.unauthorised(diagnosis, principal)
            return
        _log.error("rebuild failed, retrying in %.1f s: %s", delay, diagnosis.describe(), extra=self.fields())

    def waits_for_group(self, ownership: Ownership) -> None:
        _log.warning("partition waits for the group: %s", "another member owns it" if ownership is
                     Ownership.NOT_OWNER else "the group is rebalancing", extra=self.fields())

    def owner_unknown(self, exc: BaseException) -> None:
        _log.debug("group look-up failed: %r", exc, extra=self.fields())

    # ---- live -------------------------------------------------------------------------------------------------

    def processed(self, tally: dict[Verdict, int], open_streams: int, display: tuple[int, int] | None) -> None:
        """Count a batch's verdicts, once per batch (a labelled counter's inc() costs more than processing a small
        record), the open streams and the display's (evicted, withheld) tally."""
        metrics = self._metrics
        for verdict, n in tally.items():
            child = self._verdicts.get(verdict)
            if child is None:
                child = self._verdicts[verdict] = metrics.source_records_total.labels(*self._label, verdict.value)
            child.inc(n)
        metrics.open_streams.labels(*self._label).set(open_streams)
        if display is not None:
            evicted, withheld = display
            if evicted:
                metrics.display_evicted_items_total.inc(evicted)
            if withheld:
                metrics.display_withheld_total.inc(withheld)

    def internal_error(self, offset: int, outcome: Outcome) -> None:
        """Count a conversion that raised unexpectedly; its traceback is logged once per stream."""
        self._metrics.internal_errors_total.inc()
        stream = outcome.run_id
        if stream in self._logged:
            self._logged.move_to_end(stream)
            return
        self._logged[stream] = None
        if len(self._logged) > _LOGGED_STREAMS:
            self._logged.popitem(last=False)
        _log.error("conversion failed unexpectedly; the record is dead-lettered as internal-error and the stream "
                   "goes on (later failures of this stream are counted, not logged)", exc_info=outcome.error,
                   extra=self.fields(offset=offset, run_id=outcome.run_id))

    def processing_failed(self) -> None:
        _log.exception("processing failed unexpectedly", extra=self.fields())

    def state_failed(self, error: BaseException, offset: int) -> None:
        _log.error("partition state failed", exc_info=error, extra=self.fields(offset=offset))

    # ---- held, failed, stopped --------------------------------------------------------------------------------

    def halting(self, offset: int, exc: BaseException) -> None:
        _log.error("partition halted: %s", exc, extra=self.fields(offset=offset))

    def halted(self, offset: int, exc: BaseException) -> None:
        _log.warning("partition held, not ready: halted at offset %d: %s", offset, exc, extra=self.fields())
        self._metrics.partition_failures_total.labels(*self._label).inc()

    def unreadable_checkpoint(self, exc: BaseException) -> None:
        self._metrics.partition_failures_total.labels(*self._label).inc()
        _log.error("partition held: %s", exc, extra=self.fields())

    def ended_unexpectedly(self, exc: BaseException | None) -> None:
        _log.error("partition task ended unexpectedly, partition held: %r", exc, extra=self.fields())

    def revocation_late(self, budget_s: float) -> None:
        self._metrics.deadline_expirations_total.labels("revoke").inc()
        _log.error("revocation commit did not finish within %.1f s: partition dropped, its open transaction left to "
                   "the next owner to abort", budget_s, extra=self.fields())

    def contained(self, diagnosis: Diagnosis, principal: str) -> None:
        """A failed transaction, isolated: counted by cause, logged in one line."""
        m = self._metrics
        m.transactions_total.labels("aborted").inc()
        m.transaction_failures_total.labels(*self._label, diagnosis.fault.value).inc()
        if diagnosis.fault is Fault.FENCED:
            m.producers_fenced_total.inc()
            _log.warning("%s; state dropped", diagnosis.describe(), extra=self.fields())
        elif diagnosis.fault is Fault.UNAUTHORISED:
            self.unauthorised(diagnosis, principal)
        else:
            self._deadline(diagnosis)
            _log.error("transaction failed, partition isolated and rebuilt from the committed offset: %s",
                       diagnosis.describe(), extra=self.fields())

    def unauthorised(self, diagnosis: Diagnosis, principal: str) -> None:
        """Counted and logged (one line, no traceback) at every back-off step while the right is missing."""
        for denied in diagnosis.denied:
            self._metrics.authorization_failures_total.labels(*denied.label).inc()
        _log.error("partition %s", diagnosis.describe(principal), extra=self.fields())

    def _deadline(self, diagnosis: Diagnosis) -> None:
        cause = diagnosis.cause
        if isinstance(cause, DeadlineError):
            self._metrics.deadline_expirations_total.labels(cause.call).inc()
