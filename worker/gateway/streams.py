"""One connection's frames: where a run's stream starts (its first event, after a cursor, or the late-join
prelude), the catch-up from memory or the output topic, then the live tail, ending after the terminal event; a
cursor at or past the terminal event, where the gateway knows it, is answered that the run ended.

Every durable frame comes from the output topic under its own id, each number once and in order: the catch-up
stops at the offset where the subscription joined the tail, and the live part skips numbers already sent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Literal

from worker.errors import GatewayError
from worker.gateway.directory import DisplayPointer, RunDirectory
from worker.gateway.frames import KEEP_ALIVE, RunEnded, event_frame, synthetic_frame
from worker.gateway.hub import Attachment, Hub, Subscription
from worker.gateway.metrics import GatewayMetrics
from worker.gateway.prelude import Prelude, build_prelude
from worker.gateway.reader import HistoryEvent, HistoryReader, NotRetained
from worker.gateway.routing import Owners

__all__ = ["PartitionMoved", "RunStream", "RunStreams", "StreamRequest"]

_LIVE_WAIT_S = 1.0  # how long events the display announced may take to follow it through the tail
_LIVE_WAIT_STEPS = 20
_HOUR_MS = 3_600_000


class PartitionMoved(GatewayError):
    """The run's partition went to another replica mid-stream: the stream ends without its terminal event, and the
    client attaches again (through any replica) from its cursor."""

    def __init__(self, run_id: str) -> None:
        super().__init__(503, "partition-moved", f"run {run_id!r} is served by another gateway replica now: attach "
                                                 "again from your last event id")


@dataclass(frozen=True)
class StreamRequest:
    """What a client asked for: a run, an optional cursor (the last event number it has), and whether it reads as
    a browser `EventSource` (`sse`: a resume needs only later events) or as `HttpAgent` (`agent`: every answer is
    a whole verifiable run, and a run in progress starts with the late-join prelude)."""

    run_id: str
    after: int | None
    reader: Literal["sse", "agent"]
    foreign: bool = False  # the client's cursor named another run: it cannot be served exactly

    @property
    def what(self) -> str:
        """What the stream is of, for log lines."""
        return f"run {self.run_id}"


@dataclass
class RunStream:
    """One open stream: `chunks()` yields what to write; `close()` leaves the fan-out. `on_drop` is called (from
    the tail loop, so it must not block) when the client fell a whole queue behind while `blocked()` (its writer
    waits on the socket)."""

    request: StreamRequest
    pointer: DisplayPointer | None
    on_drop: Callable[[], None]
    blocked: Callable[[], bool]
    subscription: Subscription | None = None
    sent: int = 0
    prelude: Prelude | None = field(default=None, repr=False)


class RunStreams:
    """Opens the streams of runs from the directory, the hub and the history reader."""

    def __init__(
        self, owners: Owners, hub: Hub, directory: RunDirectory, history: HistoryReader, metrics: GatewayMetrics,
        *, keepalive_s: float = 15.0, backfill_events: int = 4_096,
    ) -> None:  # fmt: skip
        # A subscription's wait ends after one to two quiet periods without a delivery: half the keep-alive time
        # keeps every silence of a stream within `keepalive_s`.
        self._quiet_period_s = keepalive_s / 2
        self._backfill_events = backfill_events
        self._reading: dict[str, asyncio.Future[None]] = {}  # runs being read back from the topic
        self._owners = owners
        self._hub = hub
        self._directory = directory
        self._history = history
        self._metrics = metrics

    def known(self, run_id: str) -> DisplayPointer | None:
        """The run's display pointer (None when only its events were seen); GatewayError 404 when neither topic
        has shown the gateway the run."""
        pointer = self._directory.pointer(run_id)
        if pointer is None and self._hub.log(run_id) is None:
            raise GatewayError(404, "unknown-run", f"run {run_id!r} is not in the display topic this gateway reads")
        return pointer

    async def display(self, run_id: str) -> tuple[DisplayPointer, bytes]:
        """The run's latest display record (pointer and value); 404 when it has none."""
        pointer = self.known(run_id)
        value = None if pointer is None else await self._display_value(run_id, pointer)
        if pointer is None or value is None:
            raise GatewayError(404, "no-display", f"run {run_id!r} has no display record yet")
        return pointer, value

    async def _display_value(self, run_id: str, pointer: DisplayPointer) -> bytes | None:
        value = self._directory.cached(run_id, pointer)
        return value if value is not None else await self._history.display_value(pointer)

    async def _prelude(self, run_id: str, pointer: DisplayPointer | None) -> Prelude | None:
        if pointer is None:
            return None
        value = await self._display_value(run_id, pointer)
        return None if value is None else build_prelude(run_id, pointer, value)

    def start(self, request: StreamRequest, on_drop: Callable[[], None], blocked: Callable[[], bool]) -> RunStream:
        """A stream of `request`'s run; GatewayError 404 for a run the gateway cannot find."""
        return RunStream(request, self.known(request.run_id), on_drop, blocked)

    def _read_end(self, run_id: str, after: int) -> bool | None:
        """Whether the run's terminal event, read by the tail, is event `after` or an earlier one; None while the
        tail has not read it."""
        log = self._hub.log(run_id)
        return log.next_seq - 1 <= after if log is not None and log.finished else None

    async def ended(self, run_id: str, after: int) -> bool:
        """Whether the run's terminal event is known to be event `after` or an earlier one: the tail read it, or the
        latest display record ends with it. Never a guess: a run whose end neither tells is read as any cursor."""
        read = self._read_end(run_id, after)
        if read is not None:
            return read
        log = self._hub.log(run_id)
        pointer = self._directory.pointer(run_id)
        if pointer is None or pointer.seq > after:
            return False
        if log is not None and log.first_seen is not None and log.first_seen.seq <= pointer.seq < log.next_seq:
            return False  # the tail read the record's last event, not a terminal one (a live run: nothing to parse)
        prelude = await self._prelude(run_id, pointer)
        return prelude is not None and prelude.finished

    async def chunks(self, stream: RunStream) -> AsyncGenerator[bytes, None]:
        """The stream's bytes, frame after frame (several at once where they were ready together). Raises
        GatewayError before the first chunk when the run cannot be served at all, RunEnded when its cursor is at or
        past the run's terminal event: told before the stream attaches, or by the tail reading that event after,
        while the stream has sent nothing."""
        request, pointer = stream.request, stream.pointer
        if request.after is not None and await self.ended(request.run_id, request.after):
            raise self._ended(request.run_id)
        if request.foreign:
            try:
                async for chunk in self._instead(stream):
                    yield chunk
            finally:
                self.close(stream)
            return
        first = 0
        if request.after is not None:
            first = request.after + 1
        elif request.reader == "agent":
            prelude = await self._prelude(request.run_id, pointer)
            if prelude is not None and not prelude.finished and prelude.exact:
                stream.prelude = prelude
                self._metrics.late_joins.labels(exact="true").inc()
        head = b""  # the prelude goes out in one write with the first events after it (a late join's whole answer)
        if stream.prelude is not None:
            head = b"".join(synthetic_frame(event) for event in stream.prelude.events)
            first = stream.prelude.seq + 1
        pending = self._reading.get(request.run_id)
        if pending is not None:  # another connection reads this run back from the topic: from memory after it
            await asyncio.shield(pending)
        attachment = self._attach(stream, first)
        try:
            if request.after is not None and self._read_end(request.run_id, request.after):
                raise self._ended(request.run_id)  # the tail read the end since `ended` was asked
            caught = self._catch_up(stream, attachment, first)
            begun = False
            try:
                async for chunk in caught:
                    yield head + chunk if head else chunk
                    head, begun = b"", True
            except NotRetained:
                if not await self._arrives_live(stream):
                    async for chunk in self._instead(stream):  # a prelude of its own, `head` never sent
                        yield chunk
                    return
            if head:
                yield head
                begun = True
            if stream.sent < 0:
                return  # the terminal event was sent in the catch-up
            async for chunk in self._live(stream, begun=begun):
                yield chunk
        finally:
            self.close(stream)

    def _attach(self, stream: RunStream, first: int) -> Attachment:
        run_id = stream.request.run_id
        partition = stream.pointer.partition if stream.pointer is not None else self._owners.partition_of(run_id)

        def dropped(subscription: Subscription) -> None:
            self._metrics.drops.inc()
            stream.on_drop()

        attachment = self._hub.attach(run_id, partition, first, dropped, stream.blocked)
        stream.subscription = attachment.subscription
        return attachment

    async def _catch_up(self, stream: RunStream, attachment: Attachment, first: int) -> AsyncIterator[bytes]:
        """Events from `first` to where the subscription joined the tail, from memory or the output topic;
        `stream.sent` ends as the next number, or -1 after a terminal event."""
        request = stream.request
        if request.after is not None:
            self._metrics.resumes.labels(kind="memory" if attachment.from_memory is not None else "topic").inc()
        stream.sent = first
        if attachment.from_memory is not None:
            if attachment.from_memory:
                missed = attachment.from_memory
                yield b"".join(d.frame for d in missed)
                self._count(stream, missed[-1].seq, missed[-1].terminal, len(missed))
            return
        run_id, pointer = request.run_id, stream.pointer
        partition = pointer.partition if pointer is not None else self._owners.partition_of(run_id)
        log = self._hub.log(run_id)
        seen = log.first_seen if log is not None else None
        reading = None if run_id in self._reading else asyncio.get_running_loop().create_future()
        if reading is not None:
            self._reading[run_id] = reading
        read: list[HistoryEvent] | None = []  # kept for the hub, so the run's next readers find it in memory
        try:
            start = (seen.offset if seen is not None and seen.seq <= first
                     else await self._start(stream, partition, first, attachment.live_from))  # fmt: skip
            if start is None:
                return  # event `first` comes live
            async for batch in self._history.events(partition, run_id, first, attachment.live_from, start_at=start):
                if read is not None:
                    read.extend(batch)
                    if len(read) > self._backfill_events:
                        read = None
                yield b"".join(event_frame(run_id, e.seq, e.value) for e in batch)
                self._count(stream, batch[-1].seq, batch[-1].terminal, len(batch))
                if stream.sent < 0:
                    break
            if read:
                self._hub.backfill(run_id, read)
        finally:
            if reading is not None:
                del self._reading[run_id]
                reading.set_result(None)

    async def _start(self, stream: RunStream, partition: int, first: int, until: int) -> int | None:
        """An offset at or before the record of event `first`, found in the output topic before offset `until`, or
        None when the event comes live: told by the topic, or by the tail bringing the subscription an event at or
        before `first` while the topic is searched (a run's events lie in `partition` in order, so none from there
        on is before `until`, where the subscription joined). A new run's display record often reaches this
        replica before its first events do: the search then ends as soon as the tail brings them."""
        subscription, run_id, pointer = stream.subscription, stream.request.run_id, stream.pointer
        assert subscription is not None

        async def search() -> int | None:
            return await self._history.locate(partition, run_id, first, until,
                                              hint_ms=await self._hint(run_id, pointer, first),
                                              known_last=self._known_last(run_id, pointer))  # fmt: skip

        found = asyncio.ensure_future(search())
        try:
            while subscription.first_seq is None and not found.done():  # nothing came live yet: wait for either
                arrival = asyncio.ensure_future(subscription.wait(self._quiet_period_s))
                try:
                    await asyncio.wait((found, arrival), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    arrival.cancel()
                    await asyncio.wait((arrival,))  # its wait is over before the stream waits on the subscription
            if subscription.first_seq is not None and subscription.first_seq <= first:
                return None
            return await found
        finally:
            if not found.done():
                found.cancel()
            elif not found.cancelled():
                found.exception()  # told by the tail instead: the search's own outcome goes unused

    async def _arrives_live(self, stream: RunStream) -> bool:
        """Whether the events the output topic did not hold before the subscription's offset are in its queue: the
        display record that named them was read before them (they commit together). Waits a moment for them."""
        subscription = stream.subscription
        if subscription is None:
            return False
        for _ in range(_LIVE_WAIT_STEPS):
            if subscription.first_seq is not None:
                return subscription.first_seq <= stream.sent
            await asyncio.sleep(_LIVE_WAIT_S / _LIVE_WAIT_STEPS)
        return False

    def _count(self, stream: RunStream, last_seq: int, terminal: bool, events: int) -> None:
        self._metrics.events.inc(events)
        stream.sent = -1 if terminal else last_seq + 1

    async def _instead(self, stream: RunStream) -> AsyncIterator[bytes]:
        """The wanted events are gone from the output topic: the late-join prelude of the latest display record
        and the events after it, never a silent jump."""
        request = stream.request
        self.close(stream)
        prelude = await self._prelude(request.run_id, stream.pointer)
        if prelude is None:
            raise GatewayError(410, "not-held", f"the topics no longer hold run {request.run_id!r}")
        if request.after is not None or request.foreign:
            self._metrics.resumes.labels(kind="prelude").inc()
        else:
            self._metrics.late_joins.labels(exact=str(prelude.exact).lower()).inc()
        stream.prelude = prelude
        yield b"".join(synthetic_frame(event) for event in prelude.events)
        if prelude.finished:
            return
        attachment = self._attach(stream, prelude.seq + 1)
        async for chunk in self._catch_up(stream, attachment, prelude.seq + 1):
            yield chunk
        if stream.sent >= 0:
            async for chunk in self._live(stream, begun=True):
                yield chunk

    async def _live(self, stream: RunStream, *, begun: bool) -> AsyncIterator[bytes]:
        """Events from the subscription's queue, numbers below `stream.sent` skipped, until the terminal one; all
        that is queued when the writer comes back goes out in one write. A terminal event the client had already
        ends the stream, or raises RunEnded while it has not `begun` (nothing sent: the client is told 204)."""
        subscription = stream.subscription
        assert subscription is not None
        latency, sent_total = self._metrics.latency, self._metrics.events
        while True:
            if subscription.moved and not len(subscription):
                raise PartitionMoved(stream.request.run_id)
            if not await subscription.wait(self._quiet_period_s):
                yield KEEP_ALIVE
                begun = True
                continue
            frames: list[bytes] = []
            reads: list[float] = []  # read times, each with how many events of its fetch follow in `frames`
            counts: list[int] = []
            sent, end = stream.sent, False
            for delivery in subscription.take():
                if delivery.seq < sent and delivery.terminal:  # the client had the end already: nothing follows
                    end = True
                    break
                if delivery.seq >= sent:
                    frames.append(delivery.frame)
                    sent = delivery.seq + 1
                    if reads and reads[-1] == delivery.read_at:
                        counts[-1] += 1
                    else:
                        reads.append(delivery.read_at)
                        counts.append(1)
                    if delivery.terminal:
                        end = True
                        break
            stream.sent = sent
            if frames:
                yield frames[0] if len(frames) == 1 else b"".join(frames)  # resumed once handed to the socket
                begun = True
                now = time.monotonic()
                for read_at, count in zip(reads, counts, strict=True):
                    latency.observe(now - read_at, count)
                sent_total.inc(len(frames))
            if end:
                stream.sent = -1
                if not begun:
                    raise self._ended(stream.request.run_id)
                return

    def _ended(self, run_id: str) -> RunEnded:
        """The answer to a cursor at or past the run's terminal event, counted."""
        self._metrics.resumes.labels(kind="ended").inc()
        return RunEnded(run_id)

    def close(self, stream: RunStream) -> None:
        """Leave the fan-out (idempotent)."""
        if stream.subscription is not None:
            self._hub.detach(stream.subscription)
            stream.subscription = None

    def _known_last(self, run_id: str, pointer: DisplayPointer | None) -> int:
        log = self._hub.log(run_id)
        return max(pointer.seq if pointer is not None else -1, log.next_seq - 1 if log is not None else -1)

    async def _hint(self, run_id: str, pointer: DisplayPointer | None, first: int) -> int:
        """A time at or after the record of event `first`: the record's own when the tail read it; for the first
        event, the RUN_STARTED time in the display when it lies within the hour before the display record (a
        record is appended after its event happened; older source times are a replay's); else the latest display
        record's or event's, from where the reader looks back further as needed."""
        log = self._hub.log(run_id)
        if log is not None and log.first_seen is not None and log.first_seen.seq <= first:
            return log.first_seen.timestamp_ms
        if first == 0 and pointer is not None:
            prelude = await self._prelude(run_id, pointer)
            started = prelude.events[0].get("timestamp") if prelude is not None else None
            if isinstance(started, int) and pointer.timestamp_ms - _HOUR_MS <= started <= pointer.timestamp_ms:
                return started
        stamps = [pointer.timestamp_ms] if pointer is not None else []
        if log is not None and log.recent:
            stamps.append(log.recent[-1].timestamp_ms)
        return max(stamps, default=int(time.time() * 1000))
