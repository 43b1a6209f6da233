"""Streams of runs another replica owns, shared: one stream from the owner per run and replica, fanned out here.

A relay is one forwarded `EventSource` stream of a run; it keeps the durable frames it relayed (at most `bound`),
and a later connection here that wants an event number the relay holds, or its next one, follows the same relay
instead of opening another stream to the owner: from its wanted number on, in order, each durable frame once. Every
frame a follower gets is a frame of the owner's stream, so a follower's stream is exact as the owner's is. The
owner's own frames without an id (a late-join prelude) go only to the connection whose request opened the relay.
A follower whose queue is over its bound while its writer waits on its socket is dropped, as the hub drops one.
Once a relay relayed the run's terminal event, a connection whose cursor is at or past it follows nothing: the run
ended (204), though the owner's stream may not have closed yet.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, Callable

from worker.gateway.frames import terminal_in
from worker.gateway.routing.forwarding import UpstreamLost
from worker.gateway.routing.owners import Target

__all__ = ["Follower", "Relay", "Relays"]

_HARD_LIMIT = 64  # times the bound: a queue this long is dropped even if its writer is not waiting on its socket


def _seq_of(frame: bytes, prefix: bytes) -> int | None:
    """The event number of a durable frame of the run (`id: <run>:<n>` first), None for any other frame."""
    if not frame.startswith(prefix):
        return None
    end = frame.find(b"\n", len(prefix))
    number = frame[len(prefix): end if end >= 0 else None]
    return int(number) if number.isdigit() else None


class Follower:
    """One connection following a relay: its queue of chunks and the next event number it wants."""

    __slots__ = ("_waiter", "blocked", "creator", "dropped", "lost", "next_seq", "on_drop", "pending")

    def __init__(self, next_seq: int | None, *, creator: bool, on_drop: Callable[[], None],
                 blocked: Callable[[], bool]) -> None:  # fmt: skip
        self.next_seq = next_seq  # None: whatever the owner sends first (only the creator)
        self.creator = creator
        self.on_drop = on_drop
        self.blocked = blocked
        self.pending: list[bytes] = []
        self.dropped = False
        self.lost = False  # the owner's stream began with frames made for another connection: attach again
        self._waiter: asyncio.Future[None] | None = None

    def offer(self, chunk: bytes, bound: int) -> None:
        if self.dropped:
            return
        waiting = len(self.pending)
        if waiting >= bound and (waiting >= _HARD_LIMIT * bound or self.blocked()):
            self.dropped = True
            self.on_drop()
            return
        self.pending.append(chunk)
        self.wake()

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        if self.pending:
            return
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None


class Relay:
    """One stream of run `run_id` (of thread `thread_id`) from its owner, its durable frames kept (at most `bound`)
    and its followers."""

    def __init__(self, run_id: str, thread_id: str, start: int | None, bound: int, queue_events: int) -> None:
        self.run_id = run_id
        self.start = start  # the number the opening request wanted first (None: a cursor of another run)
        self.thread_id = thread_id  # as the owner told it ("" when it did not)
        self._prefix = f"id: {run_id}:".encode()
        self._bound = bound
        self._queue_events = queue_events
        self._recent: deque[tuple[int, bytes]] = deque()
        self.next_seq: int | None = None  # the number after the last durable frame relayed
        self.last_seq: int | None = None  # the run's terminal event's number, once relayed
        self.followers: list[Follower] = []
        self.ended = False
        self.error: BaseException | None = None
        self.task: asyncio.Task[None] | None = None
        self.opened: asyncio.Future[bool] = asyncio.get_running_loop().create_future()  # the owner answered 200

    def covers(self, want: int) -> bool:
        """Whether a connection that wants events from `want` on can follow this relay exactly."""
        if self.ended:
            return False
        if self.next_seq is None:  # nothing relayed yet: the same start as the opening request's
            return want == self.start
        first = self._recent[0][0] if self._recent else self.next_seq
        return first <= want <= self.next_seq

    def ended_before(self, want: int) -> bool:
        """Whether the run's terminal event, relayed here, comes before event `want`: nothing is left to follow."""
        return self.last_seq is not None and self.last_seq < want

    def join(self, want: int | None, *, creator: bool, on_drop: Callable[[], None],
             blocked: Callable[[], bool]) -> Follower:  # fmt: skip
        follower = Follower(want, creator=creator, on_drop=on_drop, blocked=blocked)
        if want is not None:
            missed = [frame for seq, frame in self._recent if seq >= want]
            if missed:
                follower.pending.append(b"".join(missed))
                follower.next_seq = want + len(missed)
        self.followers.append(follower)
        return follower

    def leave(self, follower: Follower) -> None:
        with contextlib.suppress(ValueError):
            self.followers.remove(follower)
        if not self.followers and self.task is not None and not self.task.done():
            self.task.cancel()  # nobody follows: the stream from the owner is closed

    async def pump(self, upstream: AsyncGenerator[bytes, None]) -> None:
        """Relay the owner's stream to the followers until it ends (or nobody follows)."""
        try:
            async for chunk in upstream:
                self._offer(chunk)
        except asyncio.CancelledError:
            self.error = UpstreamLost(Target("run", self.run_id))
        except Exception as exc:
            self.error = exc
        finally:
            self.ended = True
            await upstream.aclose()
            for follower in self.followers:
                follower.wake()

    def _offer(self, chunk: bytes) -> None:
        for frame in chunk.split(b"\n\n")[:-1]:
            whole = frame + b"\n\n"
            seq = _seq_of(frame, self._prefix)
            if seq is None:
                if not frame.startswith(b":"):  # a made frame (the prelude): the creator's alone
                    for follower in self.followers:
                        if follower.creator and follower.next_seq is None:
                            follower.offer(whole, self._queue_events)
                        elif not follower.creator and self.next_seq is None:
                            follower.lost = True  # it wanted `start`, which the owner could not send
                            follower.wake()
                    continue
                for follower in self.followers:  # a comment (keep-alive, or why the stream ends)
                    follower.offer(whole, self._queue_events)
                continue
            self._recent.append((seq, whole))
            if len(self._recent) > self._bound:
                self._recent.popleft()
            self.next_seq = seq + 1
            if terminal_in(whole):
                self.last_seq = seq
            for follower in self.followers:
                if follower.lost:
                    continue
                if follower.next_seq is None or follower.next_seq <= seq:
                    follower.next_seq = seq + 1
                    follower.offer(whole, self._queue_events)


class Relays:
    """The relays of this replica, by run; `bound` durable frames kept per relay, `queue_events` chunks queued per
    follower at most."""

    def __init__(self, *, bound: int, queue_events: int) -> None:
        self._runs: dict[str, list[Relay]] = {}
        self._bound = bound
        self._queue_events = queue_events
        self.upstreams = 0  # relays open now

    def find(self, run_id: str, want: int) -> Relay | None:
        """A relay of `run_id` whose kept frames reach `want`."""
        return next((relay for relay in self._runs.get(run_id, ()) if relay.covers(want)), None)

    def reserve(self, run_id: str, start: int | None) -> Relay:
        """A relay of `run_id` for a request about to be forwarded (which wants events from `start` on): connections
        that want the same start meanwhile wait for it (`opened`) instead of opening streams of their own."""
        relay = Relay(run_id, "", start, self._bound, self._queue_events)
        self._runs.setdefault(run_id, []).append(relay)
        return relay

    def start(self, relay: Relay, upstream: AsyncGenerator[bytes, None], thread_id: str) -> None:
        """The owner answered: pump `upstream` (the forwarded stream) to the relay's followers."""
        relay.thread_id = thread_id
        self.upstreams += 1
        relay.task = asyncio.create_task(relay.pump(upstream))
        relay.task.add_done_callback(lambda _: self._closed(relay, pumped=True))
        relay.opened.set_result(True)

    def cancel(self, relay: Relay) -> None:
        """The request that reserved `relay` was not forwarded (refused, or served here): its waiters go their way."""
        relay.ended = True
        if not relay.opened.done():
            relay.opened.set_result(False)
        self._closed(relay, pumped=False)

    def _closed(self, relay: Relay, *, pumped: bool) -> None:
        if pumped:
            self.upstreams -= 1
        relays = self._runs.get(relay.run_id, [])
        with contextlib.suppress(ValueError):
            relays.remove(relay)
        if not relays:
            self._runs.pop(relay.run_id, None)

    @staticmethod
    async def follow(relay: Relay, follower: Follower) -> AsyncGenerator[bytes, None]:
        """The follower's chunks until the relay ends: cleanly when the owner ended its stream, else with the
        relay's error (UpstreamLost when the owner's stream broke off)."""
        try:
            while True:
                if follower.lost:
                    raise UpstreamLost(Target("run", relay.run_id))
                if follower.pending:
                    chunks, follower.pending = follower.pending, []
                    yield chunks[0] if len(chunks) == 1 else b"".join(chunks)
                    continue
                if relay.ended:
                    if relay.error is not None:
                        raise relay.error
                    return
                await follower.wait()
        finally:
            relay.leave(follower)
