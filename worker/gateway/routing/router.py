"""The one way a request reaches what it asks for: its key's partition tells where it is answered (here, loading,
a peer, nobody), and a request for a peer's key goes there with the signed peer header, as a whole answer, a
stream of its own, or a relay this replica's connections share.

A request a peer forwarded is answered here or 503 `not-owner`, never forwarded again; everything this replica says
to a peer, or a peer to it, passes through this package.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable

from aiohttp import web

from worker.gateway.frames import RunEnded
from worker.gateway.metrics import GatewayMetrics
from worker.gateway.routing.forwarding import PEER_HEADER, THREAD_HEADER, Asked, Forwarder, PeerKey, Unavailable
from worker.gateway.routing.owners import Owners, Route, Target, Where
from worker.gateway.routing.relay import Relays
from worker.gateway.tokens import Grant

__all__ = ["Router"]


class Router:
    """Routes every keyed request (runs; threads alike): `route` says where it is answered, `fetch`, `forward` and
    `follow` bring a peer's answer here, None meaning the key turned out to be served here after all."""

    def __init__(self, owners: Owners, peers: PeerKey, metrics: GatewayMetrics, *, wait_s: float,
                 retry_after_s: int, relay_bound: int, queue_events: int) -> None:  # fmt: skip
        self.owners = owners
        self._peers = peers
        self._metrics = metrics
        self._retry_after_s = retry_after_s
        self._forwarder = Forwarder(owners, peers, metrics, wait_s=wait_s, retry_after_s=retry_after_s)
        self._relays = Relays(bound=relay_bound, queue_events=queue_events)

    @property
    def relays_open(self) -> int:
        """Streams from peers open now, each shared by this replica's connections that follow it."""
        return self._relays.upstreams

    async def start(self) -> None:
        await self._forwarder.start()

    async def close(self) -> None:
        await self._forwarder.close()

    def drain(self) -> None:
        """Requests waiting for an owner are answered 503 at once (this replica is shutting down)."""
        self._forwarder.drain()

    def route(self, request: Asked, target: Target) -> Route:
        """Where `request` for `target` is answered now. A request a peer forwarded (its header checked: 401
        `bad-peer` unless signed with the peer key) is served here or refused 503 `not-owner`."""
        route = self.owners.route(target.key)
        mark = request.headers.get(PEER_HEADER)
        if mark is not None:
            self._peers.check(mark, request.method, request.raw_path)
            if route.where is not Where.HERE:
                raise Unavailable(f"{target} is not served by this replica now: retry", self._retry_after_s,
                                  code="not-owner")  # fmt: skip
        return route

    @staticmethod
    def tell_peer(request: web.Request, response: web.StreamResponse, thread_id: str) -> None:
        """An owner's answer to a peer names the run's thread, so that the peer may share the stream among the
        connections the token allows."""
        if PEER_HEADER in request.headers:
            response.headers[THREAD_HEADER] = thread_id

    async def fetch(self, request: Asked, target: Target, route: Route) -> web.Response | None:
        """The owner's whole answer to `request`, or None when `target` is served here."""
        return await self._forwarder.fetch(request, target, route)

    async def forward(self, request: Asked, target: Target, route: Route,
                      body: bytes) -> AsyncGenerator[bytes, None] | None:  # fmt: skip
        """The owner's stream for this request alone, whole frames at a time, or None when `target` is served here."""
        upstream = await self._forwarder.forward(request, target, route, body)
        return None if upstream is None else upstream.chunks

    async def follow(self, request: Asked, target: Target, route: Route, want: int | None, grant: Grant | None,
                     *, on_drop: Callable[[], None],
                     blocked: Callable[[], bool]) -> AsyncGenerator[bytes, None] | None:  # fmt: skip
        """A run's `EventSource` stream from its owner, from event `want` on (None: a cursor of another run, the
        owner decides): a relay here that holds `want` is followed, else one is opened with this request; None when
        the run turned out to be served here. `grant` (None without access control) must allow the relay's thread
        for a relay opened by another connection to be shared. RunEnded when the relay followed relayed the run's
        terminal event before `want`."""
        run_id = target.key
        relay = None if want is None else self._relays.find(run_id, want)
        if relay is not None and not relay.opened.done() and not await asyncio.shield(relay.opened):
            relay = None  # its opener was refused or is served here: this request asks for itself
        if relay is not None and grant is not None and not grant.allows(run_id, relay.thread_id or None):
            relay = None  # the owner decides on this token
        if relay is not None and want is not None and relay.ended_before(want):
            self._metrics.resumes.labels(kind="ended").inc()
            raise RunEnded(run_id)  # the owner's stream may not have closed yet: nothing of the run is left
        if relay is None:
            relay = self._relays.reserve(run_id, want)
            try:
                upstream = await self._forwarder.forward(request, target, route)
            except BaseException:
                self._relays.cancel(relay)
                raise
            if upstream is None:
                self._relays.cancel(relay)
                return None
            self._relays.start(relay, upstream.chunks, upstream.thread_id)
            follower = relay.join(None, creator=True, on_drop=on_drop, blocked=blocked)
        else:
            follower = relay.join(want, creator=False, on_drop=on_drop, blocked=blocked)
            self._metrics.relayed.inc()
        return self._relays.follow(relay, follower)
