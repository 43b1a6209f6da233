"""A request another replica owns (the partition of its run) is sent to that replica, and its answer relayed back
unchanged.

The hop carries the client's own request (path, query, token, `Last-Event-ID`, body) and a header signed with the
peer key, so the owner checks the client's rights itself and never forwards again. A stream is relayed whole frames
at a time: a frame cut by a lost owner is never half delivered, so a client's cursor is always one the owner sent.
While the key's partition has no reachable owner (a rebalance, a replica killed before the group noticed) the
request waits for one, up to `forward_wait_ms`, and is then answered 503 with Retry-After, never 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import time
from collections.abc import AsyncGenerator, Mapping
from typing import NamedTuple, Protocol

import aiohttp
import orjson
from aiohttp import web
from yarl import URL

from worker.errors import GatewayError
from worker.gateway.frames import RunEnded
from worker.gateway.metrics import GatewayMetrics
from worker.gateway.routing.owners import Owners, Route, Target, Where

__all__ = ["PEER_HEADER", "THREAD_HEADER", "Ask", "Asked", "Forwarder", "PeerKey", "Unavailable", "Upstream",
           "UpstreamLost"]

_log = logging.getLogger(__name__)
PEER_HEADER = "X-Harness-Gateway-Peer"
THREAD_HEADER = "X-Harness-Gateway-Thread"  # the run's thread, in an owner's answer to a peer
_PASSED_HEADERS = ("Authorization", "Last-Event-ID", "Content-Type", "Accept")
_PEER_TTL_S = 60
_FIRST_BACKOFF_S = 0.1
_MAX_BACKOFF_S = 2.0
_CONNECT_S = 2.0


class Asked(Protocol):
    """What of a request goes to a key's owner: its method, its target as sent (path and query, escaped), and headers
    (a client's aiohttp request, or an `Ask` this replica makes on a client's behalf)."""

    @property
    def method(self) -> str: ...

    @property
    def raw_path(self) -> str: ...

    @property
    def headers(self) -> Mapping[str, str]: ...


class Ask(NamedTuple):
    """A request this replica makes of a key's owner on a client's behalf (a thread's run), with the client's token
    among its headers: routed and forwarded as a client's own."""

    method: str
    raw_path: str
    headers: Mapping[str, str]


class Unavailable(GatewayError):
    """503 with Retry-After: the request cannot be served right now, but will be (no owner yet, a peer that answered
    503, a replica draining or at its connection limit)."""

    def __init__(self, message: str, retry_after: int, code: str = "busy") -> None:
        super().__init__(503, code, message)
        self.retry_after = retry_after


class UpstreamLost(GatewayError):
    """The owner's stream broke off before its end (it died, drained, or lost the partition): the client attaches
    again from its cursor."""

    def __init__(self, target: Target) -> None:
        super().__init__(503, "owner-lost", f"the replica serving {target} went away: attach again from your "
                                            "last event id")  # fmt: skip


class Upstream(NamedTuple):
    """The owner's stream, whole frames at a time, and the run's thread as the owner knows it ("" if not)."""

    chunks: AsyncGenerator[bytes, None]
    thread_id: str


class PeerKey:
    """Signs and checks the header that marks a request as forwarded by a replica of the same deployment; without a
    key (no access control) the header is a plain mark."""

    def __init__(self, key: bytes | None) -> None:
        self._key = hmac.new(key, b"harness-agui gateway peer", hashlib.sha256).digest() if key else None

    def _mac(self, method: str, target: str, expiry: int) -> str:
        assert self._key is not None
        return hmac.new(self._key, f"{method} {target} {expiry}".encode(), hashlib.sha256).hexdigest()

    def sign(self, method: str, target: str, *, now: float | None = None) -> str:
        """The header's value for a request of `method` on `target` (path and query)."""
        if self._key is None:
            return "unsigned"
        expiry = int(now if now is not None else time.time()) + _PEER_TTL_S
        return f"{expiry}.{self._mac(method, target, expiry)}"

    def check(self, value: str, method: str, target: str, *, now: float | None = None) -> None:
        """GatewayError 401 `bad-peer` unless `value` was signed for this request within its lifetime."""
        if self._key is None:
            return
        expiry_text, _, mac = value.partition(".")
        expiry = int(expiry_text) if expiry_text.isascii() and expiry_text.isdigit() else 0
        current = now if now is not None else time.time()
        if expiry < current or not hmac.compare_digest(mac, self._mac(method, target, expiry)):
            raise GatewayError(401, "bad-peer", f"{PEER_HEADER} is not signed with this deployment's peer key")


def _last_frame_end(buffer: bytes | bytearray) -> int:
    """The length of the whole frames at the start of `buffer` (a frame ends with a blank line, LF only)."""
    end = buffer.rfind(b"\n\n")
    return end + 2 if end >= 0 else 0


class Forwarder:
    """Sends requests to the owners of their keys over one pooled HTTP client, waiting for an owner when there is
    none; `forward` yields the owner's stream, `fetch` returns a whole answer."""

    def __init__(self, owners: Owners, key: PeerKey, metrics: GatewayMetrics, *, wait_s: float,
                 retry_after_s: int) -> None:  # fmt: skip
        self._owners = owners
        self._key = key
        self._metrics = metrics
        self._wait_s = wait_s
        self._retry_after_s = retry_after_s
        self._session: aiohttp.ClientSession | None = None
        self._closing = asyncio.Event()

    def drain(self) -> None:
        """Requests waiting for an owner are answered 503 at once (this replica is shutting down)."""
        self._closing.set()

    async def start(self) -> None:
        timeout = aiohttp.ClientTimeout(total=None, connect=_CONNECT_S, sock_connect=_CONNECT_S)
        self._session = aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0),
                                              auto_decompress=False)  # fmt: skip

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _answer(self, request: Asked, target: Target, route: Route,
                      body: bytes | None) -> aiohttp.ClientResponse | None:  # fmt: skip
        """The owner's answer (status 200, or an error that waiting would not change), or None when the key turned
        out to be served here. Waits, re-reading the map, while no owner answers; Unavailable once the wait is over."""
        assert self._session is not None, "the forwarder was not started"
        deadline = time.monotonic() + self._wait_s
        backoff = _FIRST_BACKOFF_S
        path = request.raw_path  # the request target as the client sent it, so the owner reads the same one
        headers = {name: request.headers[name] for name in _PASSED_HEADERS if name in request.headers}
        headers[PEER_HEADER] = self._key.sign(request.method, path)
        failure = f"no gateway replica owns the partition of {target} yet"
        while True:
            if route.where is Where.HERE:
                return None
            if route.where is Where.PEER:
                try:
                    answer = await self._session.request(request.method, URL(route.url + path, encoded=True),
                                                         headers=headers,
                                                         data=body)  # fmt: skip
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    failure = f"the replica owning {target} ({route.url}) is not reachable: {exc}"
                    self._metrics.forwarded.labels(outcome="unreachable").inc()
                else:
                    if answer.status != 503:
                        self._metrics.forwarded.labels(outcome="ok").inc()
                        return answer
                    failure = f"the replica owning {target} answered 503: {await _refusal(answer, target)}"
                    answer.release()
                    self._metrics.forwarded.labels(outcome="retried").inc()
            if time.monotonic() + backoff > deadline or self._closing.is_set():
                _log.warning("request for %s %s not served: %s", target.kind, target.key, failure)
                self._metrics.forwarded.labels(outcome="no-owner").inc()
                raise Unavailable(failure + ": retry", self._retry_after_s, code="no-owner")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)
            route = self._owners.route(target.key)

    async def fetch(self, request: Asked, target: Target, route: Route,
                    body: bytes | None = None) -> web.Response | None:  # fmt: skip
        """The owner's whole answer to `request` as this replica's, or None when the key is served here."""
        answer = await self._answer(request, target, route, body)
        if answer is None:
            return None
        async with answer:
            if answer.status >= 400:
                raise await _refusal(answer, target)
            return web.Response(status=answer.status, body=await answer.read(), content_type=answer.content_type)

    async def forward(self, request: Asked, target: Target, route: Route,
                      body: bytes | None = None) -> Upstream | None:  # fmt: skip
        """The owner's stream for `request`, whole frames at a time, or None when the key is served here.
        GatewayError (the owner's own, with its status and code) before the first chunk when the owner refused;
        RunEnded when the owner answered 204 (the cursor is at or past the run's terminal event); UpstreamLost when
        the owner's stream broke off before its end."""
        answer = await self._answer(request, target, route, body)
        if answer is None:
            return None
        if answer.status == 204:
            answer.release()
            raise RunEnded(target.key)
        if answer.status != 200 or answer.content_type != "text/event-stream":
            async with answer:
                raise await _refusal(answer, target)
        return Upstream(_frames(answer, target), answer.headers.get(THREAD_HEADER, ""))


async def _refusal(answer: aiohttp.ClientResponse, target: Target) -> GatewayError:
    """The owner's error answer, as this replica's; an answer that is no gateway error (a proxy's page, a crashed
    replica's 500, a body cut off) is 502 `peer-failed`, its body kept out of the client's answer and logged."""
    try:
        payload = await answer.read()
    except (aiohttp.ClientError, OSError, TimeoutError):
        payload = b""
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError:
        value = None
    code = value.get("error") if isinstance(value, dict) else None
    message = value.get("message") if isinstance(value, dict) else None
    if answer.status < 400 or not isinstance(code, str) or not isinstance(message, str):
        _log.warning("the replica owning %s (%s) answered %d %s, no gateway error: %r", target, answer.url.origin(),
                     answer.status, answer.content_type, payload[:200])  # fmt: skip
        return GatewayError(502, "peer-failed", f"the replica serving {target} failed (it answered "
                                                f"{answer.status}, no gateway error): retry")  # fmt: skip
    retry = answer.headers.get("Retry-After", "")
    if retry.isascii() and retry.isdigit():
        return Unavailable(message, int(retry), code=code)
    return GatewayError(answer.status, code, message)


async def _frames(answer: aiohttp.ClientResponse, target: Target) -> AsyncGenerator[bytes, None]:
    """The owner's stream, up to the last whole frame of each read; UpstreamLost when it broke off (the client
    raises when a stream ends before its last chunk), a plain end when the owner ended it."""
    buffer = bytearray()
    try:
        async for data in answer.content.iter_any():
            buffer += data
            end = _last_frame_end(buffer)
            if end:
                chunk = bytes(buffer[:end])
                del buffer[:end]
                yield chunk
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise UpstreamLost(target) from exc
    finally:
        answer.close()
