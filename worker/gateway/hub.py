"""Fan-out of the output topic's tail: per run, its recent events and its subscribers' bounded queues.

The tail loop calls `Hub.publish` synchronously and never awaits a connection: a frame goes into each subscriber's
queue without waiting, and a subscriber whose queue is full is dropped (its connection closed by its own task).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Sequence
from typing import NamedTuple

from worker.gateway.frames import event_frame

__all__ = ["Delivery", "FirstSeen", "Hub", "RecentEvent", "RunLog", "Subscription"]


class Delivery(NamedTuple):
    """One event as queued for connections: its number, its frame, whether it ends the run, and when the tail read
    it (`time.monotonic()`; 0.0 for one read back from the topic)."""

    seq: int
    frame: bytes
    terminal: bool
    read_at: float


class RecentEvent(NamedTuple):
    """An event of a tracked run kept in memory: number, value, record timestamp, when the tail read it, terminal."""

    seq: int
    value: bytes
    timestamp_ms: int
    read_at: float
    terminal: bool


_HARD_LIMIT = 64  # times the bound: a queue this long is dropped even if its writer is not waiting on its socket


def _wake(waiter: asyncio.Future[bool], value: bool) -> None:
    if not waiter.done():
        waiter.set_result(value)


class Subscription:
    """One connection's place in the fan-out: the deliveries its own task has yet to take, bounded by `bound` while
    its writer waits on the socket (a slow client; a burst read in one fetch is not that), and by 64 times that in
    any case. `dropped` once it overflowed. A list, at most one waiting future and one timer: an idle connection
    holds no more."""

    __slots__ = ("_blocked", "_bound", "_on_drop", "_pending", "_quiet", "_timer", "_waiter", "dropped", "first_seq",
                 "moved", "run_id")  # fmt: skip

    def __init__(self, run_id: str, bound: int, on_drop: Callable[[Subscription], None],
                 blocked: Callable[[], bool]) -> None:  # fmt: skip
        self.run_id = run_id
        self._pending: list[Delivery] = []
        self._waiter: asyncio.Future[bool] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._quiet = True  # nothing was queued since the current keep-alive period began
        self.dropped = False
        self.moved = False  # the run's partition went to another replica: nothing more comes here
        self.first_seq: int | None = None  # the number of the first event offered
        self._bound = bound
        self._on_drop = on_drop
        self._blocked = blocked

    def __len__(self) -> int:
        return len(self._pending)

    def offer(self, delivery: Delivery) -> None:
        """Queue `delivery`, or drop this subscription when its queue is over its bound."""
        if self.dropped:
            return
        if self.first_seq is None:
            self.first_seq = delivery.seq
        pending = self._pending
        waiting = len(pending)
        if waiting >= self._bound and (waiting >= _HARD_LIMIT * self._bound or self._blocked()):
            self.dropped = True
            self._on_drop(self)
            return
        pending.append(delivery)
        self._quiet = False
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def move(self) -> None:
        """No event of this run comes here any more (its partition went to another replica): wake the writer."""
        self.moved = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def take(self) -> list[Delivery]:
        """Every delivery queued so far, oldest first; the queue is empty afterwards."""
        pending = self._pending
        if pending:
            self._pending = []
        return pending

    async def wait(self, timeout_s: float) -> bool:
        """Until a delivery is queued (True), or False once a period of `timeout_s` passed without one: a wait
        returns False after at least `timeout_s` and at most twice that without a delivery. One timer per period,
        not per wait, so a busy connection's waits cost no timer."""
        if self._pending:
            return True
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        if self._timer is None:
            self._quiet = True
            self._timer = loop.call_later(timeout_s, self._period_ended, timeout_s)
        try:
            woken: bool = await waiter
            return woken
        finally:
            self._waiter = None

    def _period_ended(self, timeout_s: float) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # its writer is busy: its next wait begins a period
        if self._quiet:
            waiter.set_result(False)
        else:
            self._quiet = True
            self._timer = asyncio.get_running_loop().call_later(timeout_s, self._period_ended, timeout_s)

    def close(self) -> None:
        """Stop the keep-alive timer (the subscription left the fan-out)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class FirstSeen(NamedTuple):
    """The first event of a run the tail read: its number, record timestamp and offset."""

    seq: int
    timestamp_ms: int
    offset: int


class RunLog:
    """What the hub holds of one run: its events from `recent_from` to `next_seq - 1` (every one, in order, unless
    `recent_from` is None: then none is known to be complete), its subscribers, its latest display number, and
    when a connection last joined or left it (`served_at`): while it has subscribers, and for the window after,
    no event is trimmed, so the run's later readers find what its first one read back."""

    __slots__ = ("display_seq", "finished", "first_seen", "next_seq", "partition", "recent", "recent_from", "run_id",
                 "served_at", "subscribers")

    def __init__(self, run_id: str, partition: int) -> None:
        self.run_id = run_id
        self.partition = partition
        self.recent: deque[RecentEvent] = deque()
        self.recent_from: int | None = None
        self.next_seq = 0
        self.display_seq = -1
        self.finished = False
        self.first_seen: FirstSeen | None = None
        self.subscribers: list[Subscription] = []
        self.served_at = float("-inf")

    def covers(self, seq: int) -> bool:
        """Whether every event of the run from `seq` on that the tail has read is kept here."""
        return self.recent_from is not None and self.recent_from <= seq


class Attachment(NamedTuple):
    """A new subscription and where its events start: `from_memory` (events from the asked number on), or
    None, and then events before offset `live_from` of the run's partition must be read from the topic."""

    subscription: Subscription
    from_memory: list[Delivery] | None
    live_from: int


class Hub:
    """Tracked runs (at most `max_runs`, least recently active dropped first when no one subscribes), their recent
    events (at most `max_recent` each) and subscribers; `positions` is the tail's next offset per partition."""

    def __init__(
        self, *, max_runs: int, max_recent: int, window_s: float, queue_events: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self._logs: OrderedDict[str, RunLog] = OrderedDict()
        self._max_runs = max_runs
        self._max_recent = max_recent
        self._window_s = window_s
        self._queue_events = queue_events
        self._clock = clock
        self.positions: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._logs)

    def log(self, run_id: str) -> RunLog | None:
        """The run's log, None when the hub does not track it."""
        return self._logs.get(run_id)

    def _tracked(self, run_id: str, partition: int) -> RunLog:
        log = self._logs.get(run_id)
        if log is None:
            log = self._logs[run_id] = RunLog(run_id, partition)
            self._shed()
        else:
            self._logs.move_to_end(run_id)
        return log

    def _shed(self) -> None:
        """Drop the least recently active runs without subscribers beyond `max_runs`."""
        excess = len(self._logs) - self._max_runs
        if excess <= 0:
            return
        for run_id in [rid for rid, log in self._logs.items() if not log.subscribers][:excess]:
            del self._logs[run_id]

    def publish(  # noqa: PLR0917 - the tail's hot path: one call per record, no record object
        self, partition: int, offset: int, run_id: str, seq: int, value: bytes, timestamp_ms: int, terminal: bool,
        read_at: float,
    ) -> None:
        """One committed output record, in partition order; `read_at` is when the tail's fetch returned it, on
        the hub's clock."""
        self.positions[partition] = offset + 1
        logs = self._logs
        log = logs.get(run_id)
        if log is None:
            log = self._tracked(run_id, partition)
        else:
            logs.move_to_end(run_id)
        if seq < log.next_seq and log.recent_from is not None:
            return  # already held: a record read twice cannot add anything
        if log.recent_from is None or seq != log.next_seq:
            log.recent.clear()
            log.recent_from = seq  # complete from here: the tail reads every later record of the partition
        if log.first_seen is None:
            log.first_seen = FirstSeen(seq, timestamp_ms, offset)
        recent = log.recent
        recent.append(RecentEvent(seq, value, timestamp_ms, read_at, terminal))
        if len(recent) > self._max_recent:
            recent.popleft()
            log.recent_from = recent[0].seq
        log.next_seq = seq + 1
        if terminal:
            log.finished = True
        subscribers = log.subscribers
        if subscribers:
            delivery = Delivery(seq, event_frame(run_id, seq, value), terminal, read_at)
            for subscription in list(subscribers):
                subscription.offer(delivery)

    def passed(self, partition: int, offset: int) -> None:
        """The tail's position moved to `offset` without a record for anyone (control records, an empty fetch)."""
        if offset > self.positions.get(partition, -1):
            self.positions[partition] = offset

    def release(self, partitions: Collection[int]) -> None:
        """These partitions went to another replica: their runs' subscriptions end (`Subscription.moved`) and their
        runs and positions are forgotten."""
        for run_id, log in list(self._logs.items()):
            if log.partition in partitions:
                for subscription in log.subscribers:
                    subscription.move()
                    subscription.close()
                del self._logs[run_id]
        for partition in partitions:
            self.positions.pop(partition, None)

    def displayed(self, run_id: str, seq: int) -> None:
        """A display record of `run_id` covers its events up to `seq`: older recent events may go."""
        log = self._logs.get(run_id)
        if log is None:
            return
        log.display_seq = max(log.display_seq, seq)
        self._trim(log)

    def _trim(self, log: RunLog) -> None:
        if log.subscribers:
            return
        recent = log.recent
        horizon = self._clock() - self._window_s
        if log.served_at >= horizon:
            return
        while recent and recent[0].seq <= log.display_seq and recent[0].read_at < horizon:
            recent.popleft()
        if log.recent_from is not None:
            log.recent_from = recent[0].seq if recent else log.next_seq

    def sweep(self) -> None:
        """Periodic upkeep: trim every run to its window, forget finished runs no one follows once trimmed."""
        for run_id, log in list(self._logs.items()):
            self._trim(log)
            if log.finished and not log.subscribers and not log.recent:
                del self._logs[run_id]

    def attach(
        self, run_id: str, partition: int, from_seq: int, on_drop: Callable[[Subscription], None],
        blocked: Callable[[], bool],
    ) -> Attachment:
        """Subscribe to `run_id` from event `from_seq` on; `on_drop` is called if its queue overflows while
        `blocked()` (its writer waits on the socket). Synchronous,
        so no record is published between taking the events from memory (or the partition's position) and joining the
        subscribers: nothing is missed or doubled."""
        log = self._tracked(run_id, partition)
        subscription = Subscription(run_id, self._queue_events, on_drop, blocked)
        log.subscribers.append(subscription)
        log.served_at = self._clock()
        from_memory = None
        if log.covers(from_seq):
            from_memory = [Delivery(e.seq, event_frame(run_id, e.seq, e.value), e.terminal, e.read_at)
                       for e in log.recent if e.seq >= from_seq]  # fmt: skip
        return Attachment(subscription, from_memory, self.positions.get(partition, 0))

    def detach(self, subscription: Subscription) -> None:
        """Leave the fan-out (idempotent)."""
        log = self._logs.get(subscription.run_id)
        subscription.close()
        if log is not None and subscription in log.subscribers:
            log.subscribers.remove(subscription)
            log.served_at = self._clock()

    def backfill(self, run_id: str, events: Sequence[tuple[int, bytes, int, bool]]) -> bool:
        """Hold `events` (number, value, record timestamp, terminal; consecutive, read back from the topic) where
        they reach the run's held events and fit within `max_recent`: the run's later readers then find them in
        memory. Whether they were taken."""
        log = self._logs.get(run_id)
        if log is None or log.recent_from is None:
            return False
        before = [event for event in events if event[0] < log.recent_from]
        if not before or before[-1][0] + 1 != log.recent_from or len(log.recent) + len(before) > self._max_recent:
            return False
        now = self._clock()
        log.recent.extendleft(RecentEvent(seq, value, stamp, now, terminal)
                              for seq, value, stamp, terminal in reversed(before))  # fmt: skip
        log.recent_from = before[0][0]
        return True
