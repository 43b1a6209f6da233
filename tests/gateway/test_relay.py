"""The relay of a run another replica owns (no broker): connections that want numbers the relay holds follow it
exactly, the owner's prelude goes to the connection that opened it alone, a follower that falls a whole queue behind
while its writer waits is dropped, the stream to the owner closes when nobody follows, and the forwarder relays
whole frames, ending cleanly when the owner ends its stream and with UpstreamLost when the owner breaks off. A
request reaches the owner with the target its client sent, so the owner reads the same run, query and signature. The
owner's 204 (a cursor at its run's end) comes back as one, shared by no relay, and a cursor at the terminal event a
relay relayed is answered 204 while the owner's stream is still open; an answer that is no gateway error is 502
`peer-failed`, the peer's body kept from the client."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from yarl import URL

from tests.gateway.support import free_port, in_process_api
from worker.gateway.frames import RunEnded
from worker.gateway.metrics import GatewayMetrics
from worker.gateway.routing import Ask, Owners, PeerKey, Router, Target, UpstreamLost
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


@contextlib.asynccontextmanager
async def _serving(router: Router, *apps: tuple[web.Application, int]) -> AsyncIterator[None]:
    """Each application served on 127.0.0.1 at its port and the router started, until the block ends."""
    runners = [web.AppRunner(app) for app, _ in apps]
    try:
        for runner, (_, port) in zip(runners, apps, strict=True):
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
        await router.start()
        yield
    finally:
        await router.close()
        for runner in runners:
            await runner.cleanup()


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
        async with _serving(router, (relaying.application(), ports[0]), (owner.application(), ports[1])), \
                aiohttp.ClientSession() as session:  # fmt: skip
            for target, run_id in targets.items():
                async with session.get(URL(urls[0] + target, encoded=True)) as answer:
                    body = await answer.json()
                    assert (answer.status, body["error"]) == (404, "unknown-run"), (target, body)
                    assert repr(run_id) in body["message"], (target, body)

    asyncio.run(scenario())


def test_an_owner_s_204_comes_back_as_204_and_an_answer_that_is_no_gateway_error_as_502_peer_failed() -> None:
    ports = free_port(), free_port()
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    relaying, router = in_process_api(owner=urls[1], advertised_url=urls[0], retry_after_s=7)
    secret = "Traceback (most recent call last): a crashed replica's insides"
    asked: list[str] = []

    async def owner(request: web.Request) -> web.StreamResponse:
        """A stand-in owner: 204 for a cursor at its run's end, a 500 of plain text (a crashed replica), a proxy's
        HTML page with 200, or the gateway's own JSON 404."""
        asked.append(request.path_qs)
        run_id = request.match_info["run_id"]
        if run_id == "ended" and request.query.get("after") == "9":
            return web.Response(status=204)
        if run_id == "crashed":
            return web.Response(status=500, text=secret)
        if run_id == "proxied":
            return web.Response(status=200, text=f"<html>{secret}</html>", content_type="text/html")
        return web.json_response({"error": "unknown-run", "message": f"run {run_id!r} is unknown"}, status=404)

    async def scenario() -> None:
        stand_in = web.Application()
        for path in ("/runs/{run_id}/events", "/runs/{run_id}/display"):
            stand_in.router.add_get(path, owner)
        stand_in.router.add_post("/runs/{run_id}", owner)
        async with _serving(router, (relaying.application(), ports[0]), (stand_in, ports[1])):
            async with aiohttp.ClientSession() as session:
                for _ in range(2):  # and again: no relay kept the answer
                    async with session.get(f"{urls[0]}/runs/ended/events?after=9") as answer:
                        assert (answer.status, await answer.read()) == (204, b"")
                    assert router.relays_open == 0
                ended, ask = Target("run", "ended"), Ask("GET", "/runs/ended/events?after=9", {})
                with pytest.raises(RunEnded):  # as a thread stream follows a run: told it ended, no error
                    await router.follow(ask, ended, router.route(ask, ended), 10, None, on_drop=lambda: None,
                                        blocked=lambda: False)  # fmt: skip
                assert router.relays_open == 0
                async with session.get(f"{urls[0]}/runs/ended/events?after=3") as answer:
                    assert (answer.status, (await answer.json())["error"]) == (404, "unknown-run")
                for method, path in [("GET", "/runs/crashed/events"), ("GET", "/runs/crashed/display"),
                                     ("POST", "/runs/crashed"), ("GET", "/runs/proxied/events")]:  # fmt: skip
                    async with session.request(method, urls[0] + path, json={}) as answer:
                        body = await answer.json()
                        assert (answer.status, body["error"], answer.headers.get("Retry-After")) == (
                            502, "peer-failed", "7"), (path, body)
                        assert "Traceback" not in body["message"] and "insides" not in body["message"], body
                        status = "200" if "proxied" in path else "500"
                        assert f"answered {status}" in body["message"], body
            assert asked.count("/runs/ended/events?after=9") == 3

    asyncio.run(scenario())


def test_a_cursor_at_the_terminal_event_a_relay_relayed_is_answered_204_while_the_owner_s_stream_is_open() -> None:
    ports = free_port(), free_port()
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    relaying, router = in_process_api(owner=urls[1], advertised_url=urls[0])
    terminal = b'id: %s:2\ndata: {"type":"RUN_FINISHED","threadId":"t","runId":"%s"}\n\n' % (RUN.encode(), RUN.encode())
    release = asyncio.Event()
    asked: list[str] = []

    async def owner(request: web.Request) -> web.StreamResponse:
        """A stand-in owner whose stream of RUN ends with its terminal event, then stays open until released."""
        asked.append(request.path_qs)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(_frame(0) + _frame(1) + terminal)
        await release.wait()
        await response.write_eof()
        return response

    async def scenario() -> None:
        stand_in = web.Application()
        stand_in.router.add_get("/runs/{run_id}/events", owner)
        # The owner's stream ends after 3 s at the latest (an empty stream that waited for it would end then).
        asyncio.get_running_loop().call_later(3.0, release.set)
        async with _serving(router, (relaying.application(), ports[0]), (stand_in, ports[1])), \
                aiohttp.ClientSession() as session, session.get(f"{urls[0]}/runs/{RUN}/events") as opener:  # fmt: skip
            got = b""
            async for chunk in opener.content.iter_any():
                got += chunk
                if got.endswith(terminal):
                    break
            assert router.relays_open == 1, "the opener's relay still follows the owner"
            for headers, target in [({"Last-Event-ID": f"{RUN}:2"}, ""), ({}, "?after=2")]:
                async with session.get(f"{urls[0]}/runs/{RUN}/events{target}", headers=headers) as answer:
                    assert (answer.status, await answer.read()) == (204, b""), (headers, target)
            assert not release.is_set(), "answered while the owner's stream was open"
            assert asked == [f"/runs/{RUN}/events"], "the relay told the end: nothing asked of the owner"
            release.set()
            assert await opener.content.read() == b"", "the opener's stream ends cleanly with the owner's"

    asyncio.run(scenario())
