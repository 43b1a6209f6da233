"""When a root run's display record is due: a function of the events' numbers, the source timestamps and whether
the run ended, never of what the fold made of them, so whoever feeds a projection can tell before it is folded."""

from __future__ import annotations

from worker.errors import ConfigError, WorkerError

__all__ = ["DisplayCadence"]


class DisplayCadence:
    """The event numbers of one run and the display records due after them.

    A record is due with the run's first events, then when a source timestamp lies `interval_ms` or more from the
    previous due record's (either way: a producer's clock may step back), and always with the run's last events;
    never twice for the same last event. A due record counts as attempted whether or not it is then published.
    """

    __slots__ = ("anchor_ms", "attempted_seq", "interval_ms", "next_seq", "run_id")

    def __init__(
        self, run_id: str, interval_ms: int, *, next_seq: int = 0, attempted_seq: int = -1, anchor_ms: int = 0
    ) -> None:
        if interval_ms < 0:
            raise ConfigError(f"display interval must be >= 0 ms, got {interval_ms}")
        self.run_id = run_id
        self.interval_ms = interval_ms
        self.next_seq = next_seq  # n of the next event
        self.attempted_seq = attempted_seq  # agui-seq of the last due record (-1 before the first)
        self.anchor_ms = anchor_ms  # source timestamp of the last due record

    def expect(self, first_seq: int, *, valid: bool = True) -> None:
        """WorkerError unless `first_seq` is the n of the next event (and the call is otherwise `valid`)."""
        if first_seq != self.next_seq or not valid:
            raise WorkerError(
                f"display projection of run {self.run_id} expected event n={self.next_seq}, got n={first_seq}"
            )

    def advance(self, first_seq: int, count: int) -> None:
        """Account for `count` events from n = `first_seq` (folded or passed over)."""
        self.expect(first_seq, valid=count >= 0)
        self.next_seq += count

    def due(self, timestamp_ms: int, *, ended: bool) -> int | None:
        """The agui-seq of the record due now, after the events accounted for so far, or None; a due record is
        taken as attempted (the next one counts its interval from `timestamp_ms`)."""
        last = self.next_seq - 1
        if last <= self.attempted_seq:
            return None
        if not ended and self.attempted_seq >= 0 and abs(timestamp_ms - self.anchor_ms) < self.interval_ms:
            return None
        self.attempted_seq = last
        self.anchor_ms = timestamp_ms
        return last
