"""The relay of a run another replica owns (no broker): connections that want numbers the relay holds follow it
exactly, the owner's prelude goes to the connection that opened it alone, a follower that falls a whole queue behind
while its writer waits is dropped, the stream to the owner closes when nobody follows, and the forwarder relays
whole frames, ending cleanly when the owner ends its stream and with UpstreamLost when the owner breaks off. A
request reaches the owner with the target its client sent, so the owner reads the same run, query and signature."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from yarl import URL

from tests.gateway.support import free_port, in_process_api
from worker.gateway.metrics import GatewayMetrics
from worker.gateway.routing import Owners, PeerKey, Target, UpstreamLost
from worker.gateway.routing.forwarding import Forwarder
from worker.gateway.routing.relay import Follower, Relay, Relays

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


def _opened(relays: Relays, owner: _Owner, thread_id: str, start: int) -> Relay:
    """A relay of RUN pumping the owner's stream, as the API opens one."""
    relay = relays.reserve(RUN, start)
    relays.start(relay, owner.stream(), thread_id)
    return relay


def _join(relay: Relay, want: int | None, *, creator: bool = False) -> Follower:
    return relay.join(want, creator=creator, on_drop=lambda: None, blocked=lambda: False)


def test_followers_get_from_their_number_on_and_the_prelude_goes_to_the_opener_alone() -> None:
    async def scenario() -> None:
        relays, owner = Relays(bound=4, queue_events=100), _Owner()
        relay = _opened(relays, owner, "thread-1", 3)
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
        relay = _opened(relays, owner, "", 0)
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
        relay = _opened(relays, owner, "", 0)
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


def test_connections_that_come_while_a_relay_is_being_opened_wait_for_it_or_go_their_way() -> None:
    async def scenario() -> None:
        relays, owner = Relays(bound=8, queue_events=100), _Owner()
        relay = relays.reserve(RUN, 0)
        assert relays.find(RUN, 0) is relay and relays.find(RUN, 1) is None and not relay.opened.done()
        relays.start(relay, owner.stream(), "t")
        assert relay.opened.result() is True and relays.upstreams == 1
        refused = relays.reserve("run-b", 0)
        relays.cancel(refused)
        assert refused.opened.result() is False and relays.find("run-b", 0) is None
        await owner.chunks.put(None)
        await asyncio.sleep(0.01)
        assert relays.upstreams == 0

    asyncio.run(scenario())


def test_the_forwarder_relays_whole_frames_ends_cleanly_with_the_owner_and_says_when_the_owner_broke_off() -> None:
    async def scenario() -> None:
        async def stream(request: web.Request) -> web.StreamResponse:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            await response.write(_frame(0) + _frame(1)[:9])  # the second frame arrives in two writes
            await asyncio.sleep(0.05)
            await response.write(_frame(1)[9:] + _frame(2)[:5])
            if request.query.get("break"):
                request.transport.abort()  # type: ignore[union-attr]  # killed mid-frame
                return response
            await response.write(_frame(2)[5:])
            await response.write_eof()
            return response

        app = web.Application()
        app.router.add_get("/runs/{run_id}/events", stream)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        owners = Owners("http://me")
        owners.partitions = 1
        owners.assign({0: f"http://127.0.0.1:{port}"}, [])
        forwarder = Forwarder(owners, PeerKey(None), GatewayMetrics(), wait_s=1, retry_after_s=1)
        await forwarder.start()
        try:
            for broken in (False, True):
                target = f"/runs/{RUN}/events" + ("?break=1" if broken else "")
                request = make_mocked_request("GET", target)
                upstream = await forwarder.forward(request, Target("run", RUN), owners.route(RUN))
                assert upstream is not None
                got, error = b"", None
                try:
                    async for chunk in upstream.chunks:
                        assert chunk.endswith(b"\n\n"), "only whole frames are relayed"
                        got += chunk
                except UpstreamLost as exc:
                    error = exc
                if broken:
                    assert got == _frame(0) + _frame(1) and isinstance(error, UpstreamLost)
                else:
                    assert got == _frame(0) + _frame(1) + _frame(2) and error is None, "a clean end is no loss"
        finally:
            await forwarder.close()
            await runner.cleanup()

    asyncio.run(scenario())


def test_a_forwarded_request_reaches_the_owner_as_its_client_sent_it(tmp_path: Path) -> None:
    key = tmp_path / "peer.key"
    key.write_bytes(b"p" * 32 + b"\n")
    ports = free_port(), free_port()
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    owner, _ = in_process_api(advertised_url=urls[1], peer_key_file=str(key))
    relaying, router = in_process_api(owner=urls[1], advertised_url=urls[0], peer_key_file=str(key))
    # Targets a client's library may encode other than the owner's HTTP client would: an escaped digit in the
    # query, an escaped dot, slash, question mark or percent sign in the run id.
    targets = {"/runs/r-1/events?after=%31": "r-1", "/runs/%2E/display": ".", "/runs/a%2Fb/display": "a/b",
               "/runs/a%3Fb/events": "a?b", "/runs/a%25b/display": "a%b"}  # fmt: skip

    async def scenario() -> None:
        runners = [web.AppRunner(api.application()) for api in (relaying, owner)]
        for runner, port in zip(runners, ports, strict=True):
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
        await router.start()
        try:
            async with aiohttp.ClientSession() as session:
                for target, run_id in targets.items():
                    async with session.get(URL(urls[0] + target, encoded=True)) as answer:
                        body = await answer.json()
                        assert (answer.status, body["error"]) == (404, "unknown-run"), (target, body)
                        assert repr(run_id) in body["message"], (target, body)
        finally:
            await router.close()
            for runner in runners:
                await runner.cleanup()

    asyncio.run(scenario())
