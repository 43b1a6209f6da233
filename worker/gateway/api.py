"""The HTTP API on aiohttp: run streams for `EventSource` (GET) and `HttpAgent` (POST), display snapshots, the
viewer page; access tokens, CORS, the connection limit and the drain on shutdown.

Each stream is written by its own handler task from its bounded queue; the tail loop never writes to a socket. A
client that overflows its queue is cut off without a clean end (`HttpAgent` sees an error, never a silent success;
`EventSource` reconnects with `Last-Event-ID`); a drain ends `EventSource` streams with a comment and `HttpAgent`
streams with RUN_ERROR.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from typing import Any

import orjson
from aiohttp import web

from worker.errors import GatewayError, KafkaWorkerError
from worker.gateway.forwarding import PEER_HEADER, THREAD_HEADER, Forwarder, PeerKey, Unavailable, UpstreamLost
from worker.gateway.frames import comment_frame, parse_cursor, synthetic_frame
from worker.gateway.metrics import GatewayMetrics
from worker.gateway.owners import Owners, Route, Where
from worker.gateway.relay import Relays
from worker.gateway.settings import GatewaySettings
from worker.gateway.streams import PartitionMoved, RunStream, RunStreams, StreamRequest
from worker.gateway.tokens import Grant, TokenCheck
from worker.gateway.viewer import VIEWER_PAGE

__all__ = ["GatewayApi"]

_log = logging.getLogger(__name__)
_STREAM_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache, no-transform",
                   "X-Accel-Buffering": "no"}  # fmt: skip
_ALLOWED_HEADERS = "Authorization, Content-Type, Accept, Last-Event-ID"
_DRAIN_EVENT = {"type": "RUN_ERROR", "code": "GATEWAY_DRAINING",
                "message": "the gateway is shutting down: attach to the run again"}  # fmt: skip
_MOVED_EVENT = {"type": "RUN_ERROR", "code": "GATEWAY_REBALANCED",
                "message": "the run is served by another gateway replica now: attach to the run again"}  # fmt: skip
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(exc: GatewayError, metrics: GatewayMetrics) -> web.Response:
    metrics.requests.labels(code=exc.code).inc()
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, Unavailable) else None
    return web.json_response({"error": exc.code, "message": str(exc)}, status=exc.status, headers=headers)


class _Connection:
    """A stream's handler task and why it was interrupted (`dropped`: too slow; `draining`: shutdown)."""

    __slots__ = ("dropped", "request", "task", "writing")

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.task = asyncio.current_task()
        self.dropped = False
        self.writing = False  # its writer waits on the socket

    def blocked(self) -> bool:
        return self.writing

    def drop(self) -> None:
        self.dropped = True
        if self.task is not None:
            self.task.cancel()


class GatewayApi:
    """The aiohttp application of the gateway's API."""

    def __init__(
        self, settings: GatewaySettings, streams: RunStreams, metrics: GatewayMetrics, tokens: TokenCheck | None,
        *, owners: Owners, forwarder: Forwarder, peers: PeerKey, relays: Relays,
    ) -> None:  # fmt: skip
        self._settings = settings
        self._streams = streams
        self._owners = owners
        self._forwarder = forwarder
        self._peers = peers
        self._relays = relays
        self._metrics = metrics
        self._tokens = tokens
        self._origins = settings.allowed_origins
        self._open: set[_Connection] = set()
        self.draining = False

    def application(self) -> web.Application:
        app = web.Application(client_max_size=self._settings.max_body_bytes, middlewares=[self._middleware])
        app.router.add_get("/runs/{run_id}/events", self.events)
        app.router.add_post("/runs/{run_id}", self.agent)
        app.router.add_get("/runs/{run_id}/display", self.display)
        app.router.add_get("/view/{run_id}", self.view)
        app.router.add_route("OPTIONS", "/{tail:.*}", self.preflight)
        return app

    @property
    def connections(self) -> int:
        return len(self._open)

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except GatewayError as exc:
            response = _error(exc, self._metrics)
        except web.HTTPRequestEntityTooLarge:
            response = _error(GatewayError(413, "body-too-large", (
                f"the request body is over max_body_bytes ({self._settings.max_body_bytes})")), self._metrics)
        except KafkaWorkerError as exc:  # a read of older records failed: the client may retry
            _log.warning("request %s %s failed reading Kafka: %s", request.method, request.path, exc)
            response = _error(Unavailable(f"reading the topics failed, retry: {exc}", self._settings.retry_after_s,
                                    code="kafka-unavailable"), self._metrics)  # fmt: skip
        self._cors(request, response)
        return response

    def _cors(self, request: web.Request, response: web.StreamResponse) -> None:
        origin = request.headers.get("Origin")
        if origin is None or response.prepared or not (origin in self._origins or "*" in self._origins):
            return
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Vary"] = "Origin"

    async def preflight(self, request: web.Request) -> web.StreamResponse:
        response = web.Response(status=204)
        response.headers["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
        response.headers["Access-Control-Allow-Headers"] = _ALLOWED_HEADERS
        response.headers["Access-Control-Max-Age"] = "600"
        return response

    async def _grant(self, request: web.Request) -> Grant | None:
        """The request's verified token (bearer header or `token` query parameter), None without access control;
        checked before the run is looked up, so an unauthenticated caller learns nothing of which runs exist."""
        if self._tokens is None:
            return None
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else request.query.get("token", "")
        if not token:
            raise GatewayError(401, "no-token", "an access token is required (Authorization: Bearer, or ?token=)")
        return await self._tokens.verify(token)

    async def _authorize(self, request: web.Request, run_id: str) -> None:
        """Check the token and its subject against the run."""
        grant = await self._grant(request)
        if grant is None or (grant.scope == "run" and grant.allows(run_id, None)):
            return
        pointer = self._streams.known(run_id)
        if not grant.allows(run_id, pointer.thread_id if pointer is not None else None):
            raise GatewayError(403, "forbidden", f"the access token grants {grant.scope} {grant.subject!r}, "
                                                 f"not run {run_id!r}")  # fmt: skip

    async def _route(self, request: web.Request, run_id: str) -> tuple[Route, Grant | None]:
        """Where the run is served: here, or by the peer a request goes to after its token was verified here (the
        grant, None without access control). A request a peer forwarded is served here or answered 503, never
        forwarded again."""
        route = self._owners.route(run_id)
        mark = request.headers.get(PEER_HEADER)
        if mark is not None:
            self._peers.check(mark, request.method, request.path_qs)
            if route.where is not Where.HERE:
                raise Unavailable(f"run {run_id!r} is not served by this replica now: retry",
                                  self._settings.retry_after_s, code="not-owner")  # fmt: skip
            return route, None
        return route, await self._grant(request) if route.where is not Where.HERE else None

    async def display(self, request: web.Request) -> web.StreamResponse:
        run_id = request.match_info["run_id"]
        route, _ = await self._route(request, run_id)
        if route.where is not Where.HERE:
            answer = await self._forwarder.fetch(request, run_id, route)
            if answer is not None:
                return answer
        await self._authorize(request, run_id)
        pointer, value = await self._streams.display(run_id)
        body = b'{"runId":%s,"threadId":%s,"aguiSeq":%d,"snapshot":%s}' % (
            orjson.dumps(run_id), orjson.dumps(pointer.thread_id), pointer.seq, value)
        return web.Response(body=body, content_type="application/json")

    async def view(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text=VIEWER_PAGE, content_type="text/html", headers={"Cache-Control": "no-cache"})

    async def events(self, request: web.Request) -> web.StreamResponse:
        run_id = request.match_info["run_id"]
        route, grant = await self._route(request, run_id)
        asked = StreamRequest(run_id, None, "sse")
        cursor = request.headers.get("Last-Event-ID")
        if cursor is not None and cursor.strip():
            after = parse_cursor(cursor, run_id)
            asked = StreamRequest(run_id, after, "sse", foreign=after is None)
        elif "after" in request.query:
            text = request.query["after"]
            if not text.isdigit() or len(text) > 18:
                raise GatewayError(400, "bad-cursor", f"after={text[:40]!r} is not an event number")
            asked = StreamRequest(run_id, int(text), "sse")
        if route.where is not Where.HERE:
            followed = await self._follow(request, asked, route, grant)
            if followed is not None:
                return followed
        await self._authorize(request, run_id)
        return await self._stream(request, asked)

    async def agent(self, request: web.Request) -> web.StreamResponse:
        run_id = request.match_info["run_id"]
        route, _ = await self._route(request, run_id)
        body = await request.read()
        if route.where is not Where.HERE:
            relayed = await self._relayed(request, StreamRequest(run_id, None, "agent"), route, body)
            if relayed is not None:
                return relayed
        await self._authorize(request, run_id)
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise GatewayError(400, "bad-body", "the body is not JSON: send a RunAgentInput") from None
        if not isinstance(payload, dict):
            raise GatewayError(400, "bad-body", "the body is not a JSON object: send a RunAgentInput")
        self._check_input(run_id, payload)
        return await self._stream(request, StreamRequest(run_id, None, "agent"))

    def _check_input(self, run_id: str, payload: dict[str, Any]) -> None:
        body_run, thread = payload.get("runId"), payload.get("threadId")
        if not isinstance(body_run, str) or not isinstance(thread, str):
            raise GatewayError(400, "bad-body", "a RunAgentInput needs string threadId and runId")
        if body_run != run_id:
            raise GatewayError(400, "bad-body", f"the body's runId {body_run!r} is not the run of the path {run_id!r}")
        pointer = self._streams.known(run_id)
        if pointer is not None and pointer.thread_id and thread != pointer.thread_id:
            raise GatewayError(400, "bad-body", f"run {run_id!r} belongs to another thread than {thread!r}")

    def _shutting_down(self) -> Unavailable:
        """The answer to a stream refused or ended before its first chunk by the drain."""
        return Unavailable("the gateway is shutting down: retry, another replica answers", self._settings.retry_after_s)

    @contextlib.contextmanager
    def _admitted(self, request: web.Request) -> Iterator[_Connection]:
        """The request's connection, counted among the open ones (the limit, the drain) until its handler ends;
        Unavailable while draining or at max_connections."""
        if self.draining:
            self._metrics.refused.inc()
            raise self._shutting_down()
        if len(self._open) >= self._settings.max_connections:
            self._metrics.refused.inc()
            raise Unavailable(f"the gateway holds max_connections ({self._settings.max_connections}) streams",
                              self._settings.retry_after_s)  # fmt: skip
        connection = _Connection(request)
        self._open.add(connection)
        try:
            yield connection
        finally:
            self._open.discard(connection)

    async def _relayed(self, request: web.Request, asked: StreamRequest, route: Route,
                       body: bytes | None = None) -> web.StreamResponse | None:  # fmt: skip
        """The owner's stream relayed to this client alone, or None when the run turned out to be served here."""
        with self._admitted(request) as connection:
            upstream = await self._forwarder.forward(request, asked.run_id, route, body)
            if upstream is None:
                return None
            return await self._write(request, asked, connection, upstream.chunks, stream=None, label="forwarded")

    async def _follow(self, request: web.Request, asked: StreamRequest, route: Route,
                      grant: Grant | None) -> web.StreamResponse | None:  # fmt: skip
        """An `EventSource` stream of a run another replica owns: a relay of it here that holds the wanted events
        is followed, else a new one is opened with this request; None when the run turned out to be served here."""
        with self._admitted(request) as connection:
            run_id = asked.run_id
            want = None if asked.foreign else (asked.after + 1 if asked.after is not None else 0)
            relay = None if want is None else self._relays.find(run_id, want)
            if relay is not None and not relay.opened.done() and not await asyncio.shield(relay.opened):
                relay = None  # its opener was refused or is served here: this request asks for itself
            if relay is not None and grant is not None and not grant.allows(run_id, relay.thread_id or None):
                relay = None  # the owner decides on this token
            if relay is None:
                relay = self._relays.reserve(run_id, want)
                try:
                    upstream = await self._forwarder.forward(request, run_id, route)
                except BaseException:
                    self._relays.cancel(relay)
                    raise
                if upstream is None:
                    self._relays.cancel(relay)
                    return None
                self._relays.start(relay, upstream.chunks, upstream.thread_id)
                follower = relay.join(None, creator=True, on_drop=lambda: self._drop(connection),
                                      blocked=connection.blocked)  # fmt: skip
            else:
                follower = relay.join(want, creator=False, on_drop=lambda: self._drop(connection),
                                      blocked=connection.blocked)  # fmt: skip
                self._metrics.relayed.inc()
            return await self._write(request, asked, connection, self._relays.follow(relay, follower), stream=None,
                                     label="forwarded")  # fmt: skip

    async def _stream(self, request: web.Request, asked: StreamRequest) -> web.StreamResponse:
        with self._admitted(request) as connection:
            stream = self._streams.start(asked, connection.drop, connection.blocked)
            return await self._write(request, asked, connection, self._streams.chunks(stream), stream=stream,
                                     label=asked.reader)

    async def _write(self, request: web.Request, asked: StreamRequest, connection: _Connection,
                     chunks: AsyncGenerator[bytes, None], *, stream: RunStream | None,
                     label: str) -> web.StreamResponse:  # fmt: skip
        """Write `chunks` to the client as one event stream; errors before the first chunk are plain JSON answers,
        after it the stream never ends cleanly unless it was whole."""
        try:
            first = await chunks.__anext__()
        except StopAsyncIteration:
            first = b""
        except asyncio.CancelledError:
            await chunks.aclose()
            if not self.draining or connection.dropped:
                raise
            raise self._shutting_down() from None
        except BaseException:
            await chunks.aclose()
            raise
        response = web.StreamResponse(headers=_STREAM_HEADERS)
        if stream is not None and stream.pointer is not None and PEER_HEADER in request.headers:
            response.headers[THREAD_HEADER] = stream.pointer.thread_id  # lets the peer share the stream
        self._cors(request, response)
        gauge = self._metrics.connections.labels(reader=label)
        gauge.inc()
        try:
            await response.prepare(request)
            if first:
                await response.write(first)
            async for chunk in chunks:
                connection.writing = True
                await response.write(chunk)
                connection.writing = False
            await response.write_eof()
        except asyncio.CancelledError:
            await self._interrupted(request, response, connection, asked)
            if not self.draining:
                raise
        except (ConnectionResetError, ConnectionError):
            pass  # the client went away
        except (PartitionMoved, UpstreamLost) as exc:  # ended early, not failed: the client attaches again
            _log.info("stream of run %s ended early: %s", asked.run_id, exc)
            await self._end_early(response, asked, _MOVED_EVENT, "run moved: reconnect")
        except (GatewayError, KafkaWorkerError) as exc:  # after the first frame: never a clean end
            _log.warning("stream of run %s failed: %s", asked.run_id, exc)
            self._abort(request)
        finally:
            await chunks.aclose()
            gauge.dec()
        return response

    async def _interrupted(
        self, request: web.Request, response: web.StreamResponse, connection: _Connection, asked: StreamRequest
    ) -> None:
        if connection.dropped:
            self._abort(request)
            return
        if self.draining:
            await self._end_early(response, asked, _DRAIN_EVENT, "gateway draining: reconnect")

    @staticmethod
    async def _end_early(response: web.StreamResponse, asked: StreamRequest, event: dict[str, str],
                         comment: str) -> None:  # fmt: skip
        """End a stream before its run's end: `HttpAgent` gets RUN_ERROR (an error, never a silent success), an
        `EventSource` a comment and a clean end, after which it attaches again with its `Last-Event-ID`."""
        frame = synthetic_frame(event) if asked.reader == "agent" else b""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                await response.write(frame + comment_frame(comment))
                await response.write_eof()

    def _drop(self, connection: _Connection) -> None:
        """A client that fell a whole queue behind: counted and cut off."""
        self._metrics.drops.inc()
        connection.drop()

    @staticmethod
    def _abort(request: web.Request) -> None:
        transport = request.transport
        if transport is not None:
            transport.abort()

    async def drain(self, timeout_s: float) -> None:
        """Refuse new streams and end the open ones, waiting at most `timeout_s` for them to finish."""
        self.draining = True
        self._forwarder.drain()
        for connection in list(self._open):
            if connection.task is not None:
                connection.task.cancel()
        tasks = [c.task for c in self._open if c.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
