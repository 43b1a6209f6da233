"""The relay of a run another replica owns (no broker, no HTTP): connections that want numbers the relay holds
follow it exactly, the owner's prelude goes to the connection that opened it alone, a follower that falls a whole
queue behind while its writer waits is dropped, and the stream to the owner closes when nobody follows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from worker.gateway.forwarding import UpstreamLost
from worker.gateway.relay import Follower, Relay, Relays

RUN = "run-a"


def _frame(n: int) -> bytes:
    return f'id: {RUN}:{n}\ndata: {{"n":{n}}}\n\n'.encode()


def _prelude() -> bytes:
    return b'data: {"type":"RUN_STARTED"}\n\n'


class _Owner:
    """The owner's stream as the forwarder yields it: chunks put by the test, then an end or a break."""

    def __init__(self) -> None:
        self.chunks: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
        self.closed = False

    async def stream(self) -> AsyncGenerator[bytes, None]:
        try:
            while True:
                item = await self.chunks.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.closed = True


async def _read(relays: Relays, relay: Relay, follower: Follower) -> tuple[bytes, BaseException | None]:
    got = b""
    try:
        async for chunk in relays.follow(relay, follower):
            got += chunk
    except Exception as exc:
        return got, exc
    return got, None


def _join(relay: Relay, want: int | None, *, creator: bool = False) -> Follower:
    return relay.join(want, creator=creator, on_drop=lambda: None, blocked=lambda: False)


def test_followers_get_from_their_number_on_and_the_prelude_goes_to_the_opener_alone() -> None:
    async def scenario() -> None:
        relays, owner = Relays(bound=4, queue_events=100), _Owner()
        relay = relays.open(RUN, owner.stream(), "thread-1", 3)
        opener = _join(relay, None, creator=True)
        assert relays.find(RUN, 3) is relay and relays.find(RUN, 4) is None, "before a frame: the opener's start"
        early = _join(relay, 3)
        early_reading = asyncio.create_task(_read(relays, relay, early))
        reading = asyncio.create_task(_read(relays, relay, opener))
        await owner.chunks.put(_prelude() + _frame(3) + _frame(4))
        await owner.chunks.put(_frame(5) + b": keep-alive\n\n")
        await asyncio.sleep(0.01)
        assert relays.find(RUN, 2) is None, "number 2 was never relayed: no follower can start there"
        assert relays.find(RUN, 3) is relay and relays.find(RUN, 6) is relay
        late = _join(relay, 4)
        late_reading = asyncio.create_task(_read(relays, relay, late))
        await owner.chunks.put(_frame(6) + _frame(7) + _frame(8))
        await owner.chunks.put(None)
        opened, opened_error = await reading
        lost, lost_error = await early_reading
        assert lost == b"" and isinstance(lost_error, UpstreamLost), "the prelude was another connection's"
        joined, joined_error = await late_reading
        assert opened_error is None and joined_error is None
        assert opened == _prelude() + b"".join(map(_frame, range(3, 9))).replace(
            _frame(5), _frame(5) + b": keep-alive\n\n")
        assert joined == b"".join(map(_frame, range(4, 9)))
        assert relays.find(RUN, 8) is None and relays.upstreams == 0, "an ended relay is not followed"

    asyncio.run(scenario())


def test_a_relay_keeps_at_most_its_bound_and_a_broken_owner_ends_every_follower_with_upstream_lost() -> None:
    async def scenario() -> None:
        relays, owner = Relays(bound=2, queue_events=100), _Owner()
        relay = relays.open(RUN, owner.stream(), "", 0)
        opener = _join(relay, None, creator=True)
        reading = asyncio.create_task(_read(relays, relay, opener))
        await owner.chunks.put(b"".join(map(_frame, range(5))))
        await asyncio.sleep(0.01)
        assert relays.find(RUN, 2) is None and relays.find(RUN, 3) is relay
        await owner.chunks.put(UpstreamLost(RUN))
        got, error = await reading
        assert got == b"".join(map(_frame, range(5)))
        assert isinstance(error, UpstreamLost)

    asyncio.run(scenario())


def test_a_slow_follower_is_dropped_and_the_owner_stream_closes_when_nobody_follows() -> None:
    async def scenario() -> None:
        relays, owner = Relays(bound=100, queue_events=3), _Owner()
        relay = relays.open(RUN, owner.stream(), "", 0)
        dropped: list[bool] = []
        slow = relay.join(None, creator=True, on_drop=lambda: dropped.append(True), blocked=lambda: True)
        for n in range(5):
            await owner.chunks.put(_frame(n))
        await asyncio.sleep(0.01)
        assert dropped == [True] and slow.dropped
        assert len(slow.pending) == 3, "nothing is queued past the bound"
        relay.leave(slow)
        await asyncio.sleep(0.01)
        assert owner.closed and relays.upstreams == 0

    asyncio.run(scenario())
