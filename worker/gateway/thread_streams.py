"""One connection's frames of a thread: its runs whole, one after another, in start order (the thread index's), each
run's own stream passed through unchanged, then every later run of the thread as it starts.

A run's stream is opened by the caller (`OpenRun`: served here, or relayed from the run's owner) from its first
event or after the cursor's, and is done once its terminal event went out; a stream of it that ends before (a drain,
a moved partition, a lost owner) is opened again after the last event sent, so the thread stream goes on with no
gap and no repeat. Every durable frame keeps its run's id `<run>:<n>`: a cursor names the run and the event, and a
thread stream resumed from it sends the rest of that run, then the later runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, Final, Literal, NamedTuple

from worker.contract import IndexedRun
from worker.errors import GatewayError
from worker.gateway.frames import KEEP_ALIVE, RunEnded, comment_frame, terminal_in
from worker.gateway.metrics import GatewayMetrics
from worker.gateway.routing import UpstreamLost
from worker.gateway.streams import PartitionMoved
from worker.gateway.threads import ThreadIndex, ThreadWatch

__all__ = ["OpenRun", "ThreadMoved", "ThreadRequest", "ThreadStreams"]

OpenRun = Callable[[str, int | None], Awaitable[AsyncGenerator[bytes, None]]]
"""Opens a run's `EventSource` stream after event `after` (None: from its first event); GatewayError before its
first chunk when the run cannot be served now, RunEnded when its terminal event is `after` or an earlier one."""

_RUN_WAIT_S: Final = 10.0  # a run the index lists may not be known to its owner for as long as its tail lags
_RETRY_S: Final = 0.1
# a new run's first events reach its owner's tail about when its start record reached the index (one
# transaction): retries come every _FIRST_RETRY_S for _FAST_RETRIES_S, then twice as late each, up to _RETRY_S
_FIRST_RETRY_S: Final = 0.01
_FAST_RETRIES_S: Final = 0.1
_END_RECORD_WAIT_S: Final = 2.0  # a cursor's run: how long to wait for its end record before opening it after it
MAX_PAGE: Final = 500


class ThreadMoved(GatewayError):
    """The thread's index partition went to another replica: the stream ends without its end, and the client
    attaches again (through any replica) from its cursor."""

    def __init__(self, thread_id: str) -> None:
        super().__init__(503, "partition-moved", f"thread {thread_id!r} is served by another gateway replica now: "
                                                 "attach again from your last event id")  # fmt: skip


class ThreadRequest(NamedTuple):
    """What a client asked of a thread: a cursor (run id and event number) or none, `sse` (`EventSource`) or
    `agent` (an AG-UI agent's `connect()`), and whether to stay for later runs (`follow`) or end after the runs
    known when it attached."""

    thread_id: str
    after: tuple[str, int] | None
    reader: Literal["sse", "agent"]
    follow: bool = True

    @property
    def what(self) -> str:
        """What the stream is of, for log lines."""
        return f"thread {self.thread_id}"


def _last_seq(chunk: bytes, prefix: bytes) -> int | None:
    """The number of the last durable frame of the run in `chunk` (`id: <run>:<n>`), None when it has none."""
    at = chunk.rfind(prefix)
    if at < 0:
        return None
    start = at + len(prefix)
    end = chunk.find(b"\n", start)
    number = chunk[start:end if end >= 0 else None]
    return int(number) if number.isdigit() else None


class ThreadStreams:
    """Opens the streams of threads from the thread index; the runs' own streams come from the caller."""

    def __init__(self, index: ThreadIndex, metrics: GatewayMetrics, *, keepalive_s: float = 15.0) -> None:
        self._index = index
        self._metrics = metrics
        self._quiet_period_s = keepalive_s / 2  # a wait ends after one quiet period: no silence longer than keepalive

    def runs(self, thread_id: str) -> list[IndexedRun]:
        """The thread's runs in start order; GatewayError 404 when the index names no run of it (no replica knows it:
        only the owner of its partition would)."""
        runs = self._index.runs_of(thread_id)
        found = runs is not None and bool(runs)
        self._metrics.thread_lookups.labels(outcome="found" if found else "unknown").inc()
        if runs is None or not runs:
            raise GatewayError(404, "unknown-thread", f"thread {thread_id!r} has no run in the thread index")
        return runs

    def page(self, thread_id: str, *, limit: int, before: int | None) -> dict[str, Any]:
        """`GET /threads/{id}`: the thread's runs newest first, at most `limit`, those started before the start
        record at offset `before` (a page's `next`); `next` is None on the last page."""
        runs = [run for run in self.runs(thread_id)
                if before is None or (run.start_offset is not None and run.start_offset < before)]  # fmt: skip
        newest = runs[::-1][:limit]
        more = len(runs) > limit
        return {"threadId": thread_id, "runs": [run.as_json() for run in newest],
                "next": str(newest[-1].start_offset) if more and newest else None}  # fmt: skip

    async def chunks(self, request: ThreadRequest, open_run: OpenRun) -> AsyncGenerator[bytes, None]:
        """The thread stream's bytes; GatewayError before the first chunk when it cannot be served (404 for an
        unknown thread, 400 for a cursor of a run not of the thread); ThreadMoved once its index partition moved
        while it waits for a run."""
        thread_id = request.thread_id
        runs = self.runs(thread_id)
        position, first = 0, 0
        if request.after is not None:
            run_id, n = request.after
            run = self._index.run(thread_id, run_id)
            if run is None or run.start_offset is None:
                raise GatewayError(400, "bad-cursor", f"cursor {run_id}:{n} names no run of thread {thread_id!r}")
            position, first = runs.index(run), n + 1
        stop = None if request.follow else len(runs)
        watch = self._index.watch(thread_id)
        gauge = self._metrics.thread_streams.labels(reader=request.reader)
        gauge.inc()
        try:
            while stop is None or position < stop:
                if position >= len(runs):  # every run so far was sent: wait for the next one
                    if watch.moved:
                        raise ThreadMoved(thread_id)
                    if not await watch.wait(self._quiet_period_s):
                        yield KEEP_ALIVE
                    continue
                async for chunk in self._run(runs[position], first, open_run, watch):
                    yield chunk
                position, first = position + 1, 0
        finally:
            self._index.unwatch(watch)
            gauge.dec()

    async def _run(self, run: IndexedRun, first: int, open_run: OpenRun, watch: ThreadWatch) -> AsyncIterator[bytes]:
        """Run `run`'s events from `first` to its terminal event, opening its stream again wherever one ends early."""
        if first > 0 and run.last_seq is None:
            await self._end_record(run, watch)
        if run.last_seq is not None and first > run.last_seq:
            return  # the cursor is the run's terminal event
        prefix = f"id: {run.run_id}:".encode()
        began = time.monotonic()
        deadline = began + _RUN_WAIT_S
        wait = _FIRST_RETRY_S
        while True:
            try:
                chunks = await open_run(run.run_id, first - 1 if first else None)
            except RunEnded:
                return  # its terminal event was sent already (its owner answered 204): on to the next run
            except GatewayError as exc:
                if exc.status in (403, 404) and time.monotonic() < deadline:
                    await asyncio.sleep(wait)  # its owner has not read the run's first records yet
                    if time.monotonic() - began >= _FAST_RETRIES_S:
                        wait = min(2 * wait, _RETRY_S)
                    continue
                if exc.status == 410:  # the topics no longer hold it: nothing of it can be sent
                    yield comment_frame(f"run {run.run_id} is no longer retained")
                    return
                raise
            ended = False
            try:
                async for chunk in chunks:
                    seq = _last_seq(chunk, prefix)
                    if seq is not None:
                        first = seq + 1
                    ended = terminal_in(chunk)
                    yield chunk
                    if ended:
                        return
            except RunEnded:
                return  # the same, told by a stream served here before its first chunk
            except (PartitionMoved, UpstreamLost):
                pass  # the run's stream broke off: open it again after the last event sent
            finally:
                await chunks.aclose()
            await asyncio.sleep(_RETRY_S)

    async def _end_record(self, run: IndexedRun, watch: ThreadWatch) -> None:
        """Wait a moment for the run's end record (a cursor may name its terminal event before the index told it)."""
        deadline = time.monotonic() + _END_RECORD_WAIT_S
        while run.last_seq is None and not watch.moved and (left := deadline - time.monotonic()) > 0:
            await watch.wait(left)
