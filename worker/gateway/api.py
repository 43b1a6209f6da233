"""The HTTP API on aiohttp: run and thread streams for `EventSource` (GET) and AG-UI agents (POST), display snapshots,
a thread's runs, the viewer page; access tokens, CORS, the connection limit and the drain on shutdown.

Each stream is written by its own handler task from its bounded queue; the tail loop never writes to a socket. A
client that overflows its queue is cut off without a clean end (`HttpAgent` sees an error, never a silent success;
`EventSource` reconnects with `Last-Event-ID`); a drain ends `EventSource` streams with a comment and `HttpAgent`
streams with RUN_ERROR.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import quote

import orjson
from aiohttp import web

from worker.errors import GatewayError, KafkaWorkerError
from worker.gateway.endpoints import ENDPOINTS, ERRORS
from worker.gateway.frames import (
    RunEnded,
    comment_frame,
    parse_after,
    parse_cursor,
    parse_thread_cursor,
    synthetic_frame,
)
from worker.gateway.metrics import GatewayMetrics
from worker.gateway.openapi import document
from worker.gateway.routing import Ask, Route, Router, Target, Unavailable, UpstreamLost, Where
from worker.gateway.settings import GatewaySettings
from worker.gateway.streams import PartitionMoved, RunStream, RunStreams, StreamRequest
from worker.gateway.thread_streams import MAX_PAGE, ThreadMoved, ThreadRequest, ThreadStreams
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
_NUMBER = re.compile(r"[0-9]{1,18}")  # a query's number: ASCII digits only (str.isdigit takes ones int() refuses)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _route_path(path: str) -> str:
    """An endpoint's path as aiohttp matches it: a parameter is any text but `/` (aiohttp's own default also
    refuses braces, which a run id may hold)."""
    return re.sub(r"\{(\w+)\}", r"{\1:[^/]+}", path)


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

    def __init__(self, settings: GatewaySettings, streams: RunStreams, metrics: GatewayMetrics,
                 tokens: TokenCheck | None, router: Router, *,
                 threads: ThreadStreams | None = None) -> None:  # fmt: skip
        self._settings = settings
        self._streams = streams
        self._threads = threads
        self._router = router
        self._metrics = metrics
        self._tokens = tokens
        self._origins = settings.allowed_origins
        self._open: set[_Connection] = set()
        self._document: bytes | None = None
        self.draining = False

    def application(self) -> web.Application:
        """The endpoints of `ENDPOINTS`, each answered by the handler of its name, and a CORS preflight for any path."""
        app = web.Application(client_max_size=self._settings.max_body_bytes, middlewares=[self._middleware])
        handlers: dict[str, Handler] = {"events": self.events, "agent": self.agent, "display": self.display,
                                        "view": self.view, "openapi": self.openapi, "thread": self.thread,
                                        "thread_events": self.thread_events, "thread_connect": self.thread_connect,
                                        "thread_view": self.view}  # fmt: skip
        for endpoint in ENDPOINTS:
            app.router.add_route(endpoint.method, _route_path(endpoint.path), handlers[endpoint.name])
        app.router.add_route("OPTIONS", r"/{tail:[\s\S]*}", self.preflight)  # any path, line breaks too
        return app

    @property
    def connections(self) -> int:
        return len(self._open)

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except RunEnded:  # a cursor at or past the run's terminal event: EventSource stops reconnecting on a 204
            response = web.Response(status=204)
        except GatewayError as exc:
            response = self._error(exc)
        except web.HTTPRequestEntityTooLarge:
            response = self._error(GatewayError(413, "body-too-large", (
                f"the request body is over max_body_bytes ({self._settings.max_body_bytes})")))
        except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as exc:  # aiohttp's dispatcher: no such endpoint
            response = self._no_route(request, exc)
        except KafkaWorkerError as exc:  # a read of older records failed: the client may retry
            _log.warning("request %s %s failed reading Kafka: %s", request.method, request.path, exc)
            response = self._error(Unavailable(f"reading the topics failed, retry: {exc}",
                                               self._settings.retry_after_s, code="kafka-unavailable"))  # fmt: skip
        self._cors(request, response)
        return response

    def _no_route(self, request: web.Request, exc: web.HTTPException) -> web.Response:
        """404 `no-route` for a path no endpoint has (the CORS preflight's catch-all answers OPTIONS on any path),
        405 `method-not-allowed`, with Allow, for another method of an endpoint's path."""
        allowed = set(exc.allowed_methods) - {"OPTIONS"} if isinstance(exc, web.HTTPMethodNotAllowed) else set()
        if not allowed:
            return self._error(GatewayError(404, "no-route", f"no endpoint has the path {request.path[:200]!r}: "
                                                             "see /openapi.json"))  # fmt: skip
        response = self._error(GatewayError(405, "method-not-allowed", f"{request.method} is not an endpoint of "
                                            f"{request.path[:200]!r}: it takes {', '.join(sorted(allowed))}"))
        response.headers["Allow"] = ", ".join(sorted(allowed | {"OPTIONS"}))
        return response

    def _error(self, exc: GatewayError) -> web.Response:
        """The JSON answer of an error, counted by code; Retry-After where its code carries one (ERRORS): the
        value the error names, else `retry_after_s`."""
        self._metrics.requests.labels(code=exc.code).inc()
        headers = None
        known = ERRORS.get(exc.code)
        if isinstance(exc, Unavailable) or (known is not None and known.retry_after):
            retry = exc.retry_after if isinstance(exc, Unavailable) else self._settings.retry_after_s
            headers = {"Retry-After": str(retry)}
        return web.json_response({"error": exc.code, "message": str(exc)}, status=exc.status, headers=headers)

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

    async def _route(self, request: web.Request, target: Target) -> tuple[Route, Grant | None]:
        """Where the request is served (the router's answer), and the grant of a request that goes to a peer, its
        token verified here first (None without access control, and when served here: checked by `_authorize`)."""
        route = self._router.route(request, target)
        return route, await self._grant(request) if route.where is not Where.HERE else None

    async def display(self, request: web.Request) -> web.StreamResponse:
        run_id = request.match_info["run_id"]
        run = Target("run", run_id)
        route, _ = await self._route(request, run)
        if route.where is not Where.HERE:
            answer = await self._router.fetch(request, run, route)
            if answer is not None:
                return answer
        await self._authorize(request, run_id)
        pointer, value = await self._streams.display(run_id)
        body = b'{"runId":%s,"threadId":%s,"aguiSeq":%d,"snapshot":%s}' % (
            orjson.dumps(run_id), orjson.dumps(pointer.thread_id), pointer.seq, value)
        return web.Response(body=body, content_type="application/json")

    async def view(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text=VIEWER_PAGE, content_type="text/html", headers={"Cache-Control": "no-cache"})

    async def openapi(self, request: web.Request) -> web.StreamResponse:
        """The OpenAPI document of this API (built once)."""
        if self._document is None:
            self._document = orjson.dumps(document())
        return web.Response(body=self._document, content_type="application/json")

    async def events(self, request: web.Request) -> web.StreamResponse:
        run_id = request.match_info["run_id"]
        run = Target("run", run_id)
        route, grant = await self._route(request, run)
        asked = StreamRequest(run_id, None, "sse")
        cursor = request.headers.get("Last-Event-ID")
        if cursor is not None and cursor.strip():
            after = parse_cursor(cursor, run_id)
            asked = StreamRequest(run_id, after, "sse", foreign=after is None)
        elif "after" in request.query:
            asked = StreamRequest(run_id, parse_after(request.query["after"]), "sse")
        if route.where is not Where.HERE:
            want = None if asked.foreign else (asked.after + 1 if asked.after is not None else 0)
            followed = await self._from_owner(request, asked, lambda connection: self._router.follow(
                request, run, route, want, grant, on_drop=lambda: self._drop(connection), blocked=connection.blocked))
            if followed is not None:
                return followed
        await self._authorize(request, run_id)
        return await self._stream(request, asked)

    async def agent(self, request: web.Request) -> web.StreamResponse:
        run_id = request.match_info["run_id"]
        run = Target("run", run_id)
        route, _ = await self._route(request, run)
        body = await request.read()
        if route.where is not Where.HERE:
            relayed = await self._from_owner(request, StreamRequest(run_id, None, "agent"),
                                             lambda _: self._router.forward(request, run, route, body))  # fmt: skip
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

    async def _thread_route(self, request: web.Request) -> tuple[str, Route, Grant | None]:
        """A thread request's thread, where it is served, and its grant: the token is checked before anything is
        looked up, and only a token of this thread opens it (a run's is 403); 404 without a thread index."""
        thread_id = request.match_info["thread_id"]
        grant = await self._grant(request)
        if grant is not None and not (grant.scope == "thread" and grant.subject == thread_id):
            raise GatewayError(403, "forbidden", f"the access token grants {grant.scope} {grant.subject!r}, not "
                                                 f"thread {thread_id!r}")  # fmt: skip
        if self._threads is None:
            raise GatewayError(404, "no-thread-index", "this gateway serves no threads: start it with "
                                                       "--thread-index-topic, the worker's thread index")  # fmt: skip
        return thread_id, self._router.route(request, Target("thread", thread_id)), grant

    async def thread(self, request: web.Request) -> web.StreamResponse:
        """`GET /threads/{id}`: the thread's runs newest first, `?limit=` (50) at a time, `?before=` a page's `next`."""
        thread_id, route, _ = await self._thread_route(request)
        limit, before = request.query.get("limit", "50"), request.query.get("before")
        if not _NUMBER.fullmatch(limit) or not 1 <= int(limit) <= MAX_PAGE:
            raise GatewayError(400, "bad-query", f"limit={limit[:40]!r} is not a number from 1 to {MAX_PAGE}")
        if before is not None and not _NUMBER.fullmatch(before):
            raise GatewayError(400, "bad-query", f"before={before[:40]!r} is not a page's `next`")
        if route.where is not Where.HERE:
            answer = await self._router.fetch(request, Target("thread", thread_id), route)
            if answer is not None:
                return answer
        assert self._threads is not None
        page = self._threads.page(thread_id, limit=int(limit), before=int(before) if before is not None else None)
        return web.Response(body=orjson.dumps(page), content_type="application/json")

    async def thread_events(self, request: web.Request) -> web.StreamResponse:
        """`GET /threads/{id}/events`: the thread's runs for `EventSource`, resumed by `Last-Event-ID` (or `?after=`,
        `<run>:<n>` alike); `?follow=false` ends after the runs known when it attached."""
        thread_id, route, grant = await self._thread_route(request)
        cursor = request.headers.get("Last-Event-ID") or request.query.get("after")
        after = parse_thread_cursor(cursor) if cursor is not None and cursor.strip() else None
        asked = ThreadRequest(thread_id, after, "sse", follow=self._follow(request))
        if route.where is not Where.HERE:
            target = Target("thread", thread_id)
            relayed = await self._from_owner(request, asked, lambda _: self._router.forward(request, target, route,
                                                                                            b""))  # fmt: skip
            if relayed is not None:
                return relayed
        return await self._thread_stream(request, asked, grant)

    async def thread_connect(self, request: web.Request) -> web.StreamResponse:
        """`POST /threads/{id}/connect`: what an AG-UI agent's `connect()` sends (a `RunAgentInput` of the thread):
        the thread's runs as one verifiable stream, then its later runs (`?follow=false`: the runs known now)."""
        thread_id, route, grant = await self._thread_route(request)
        body = await request.read()
        asked = ThreadRequest(thread_id, None, "agent", follow=self._follow(request))
        if route.where is not Where.HERE:
            target = Target("thread", thread_id)
            relayed = await self._from_owner(request, asked, lambda _: self._router.forward(request, target, route,
                                                                                            body))  # fmt: skip
            if relayed is not None:
                return relayed
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise GatewayError(400, "bad-body", "the body is not JSON: send a RunAgentInput") from None
        if not isinstance(payload, dict) or payload.get("threadId") != thread_id:
            raise GatewayError(400, "bad-body", f"a RunAgentInput of thread {thread_id!r} is needed (its threadId)")
        return await self._thread_stream(request, asked, grant)

    @staticmethod
    def _follow(request: web.Request) -> bool:
        follow = request.query.get("follow", "true")
        if follow not in ("true", "false"):
            raise GatewayError(400, "bad-query", f"follow={follow[:40]!r} is not true or false")
        return follow == "true"

    async def _thread_stream(self, request: web.Request, asked: ThreadRequest,
                             grant: Grant | None) -> web.StreamResponse:  # fmt: skip
        """A thread stream served here: its runs' streams opened here or relayed from their owners, on the client's
        token (the thread's, which every run of the thread allows)."""
        assert self._threads is not None
        header = request.headers.get("Authorization")
        token = request.query.get("token")
        on_behalf = {"Authorization": header} if header else {"Authorization": f"Bearer {token}"} if token else {}
        with self._admitted(request) as connection:

            async def open_run(run_id: str, after: int | None) -> AsyncGenerator[bytes, None]:
                run = Target("run", run_id)
                ask = Ask("GET", f"/runs/{quote(run_id, safe='')}/events" +
                          (f"?after={after}" if after is not None else ""), on_behalf)  # fmt: skip
                route = self._router.route(ask, run)
                if route.where is not Where.HERE:
                    chunks = await self._router.follow(ask, run, route, after + 1 if after is not None else 0, grant,
                                                       on_drop=lambda: self._drop(connection),
                                                       blocked=connection.blocked)  # fmt: skip
                    if chunks is not None:
                        return chunks
                stream = self._streams.start(StreamRequest(run_id, after, "sse"), connection.drop,
                                             connection.blocked)  # fmt: skip
                return self._streams.chunks(stream)

            return await self._write(request, asked, connection, self._threads.chunks(asked, open_run), stream=None,
                                     label=asked.reader)  # fmt: skip

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

    async def _from_owner(self, request: web.Request, asked: StreamRequest | ThreadRequest,
                          opened: Callable[[_Connection], Awaitable[AsyncGenerator[bytes, None] | None]],
                          ) -> web.StreamResponse | None:  # fmt: skip
        """The stream the router brings from the key's owner (`opened` with this request's connection, admitted
        as any stream here), or None when the key turned out to be served here."""
        with self._admitted(request) as connection:
            chunks = await opened(connection)
            if chunks is None:
                return None
            return await self._write(request, asked, connection, chunks, stream=None, label="forwarded")

    async def _stream(self, request: web.Request, asked: StreamRequest) -> web.StreamResponse:
        with self._admitted(request) as connection:
            stream = self._streams.start(asked, connection.drop, connection.blocked)
            return await self._write(request, asked, connection, self._streams.chunks(stream), stream=stream,
                                     label=asked.reader)

    async def _write(self, request: web.Request, asked: StreamRequest | ThreadRequest, connection: _Connection,
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
        if stream is not None and stream.pointer is not None:
            self._router.tell_peer(request, response, stream.pointer.thread_id)
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
        except (PartitionMoved, UpstreamLost, ThreadMoved) as exc:  # ended early, not failed: the client attaches again
            _log.info("stream of %s ended early: %s", asked.what, exc)
            await self._end_early(response, asked, _MOVED_EVENT, "run moved: reconnect")
        except (GatewayError, KafkaWorkerError) as exc:  # after the first frame: never a clean end
            _log.warning("stream of %s failed: %s", asked.what, exc)
            self._abort(request)
        finally:
            await chunks.aclose()
            gauge.dec()
        return response

    async def _interrupted(self, request: web.Request, response: web.StreamResponse, connection: _Connection,
                           asked: StreamRequest | ThreadRequest) -> None:  # fmt: skip
        if connection.dropped:
            self._abort(request)
            return
        if self.draining:
            await self._end_early(response, asked, _DRAIN_EVENT, "gateway draining: reconnect")

    @staticmethod
    async def _end_early(response: web.StreamResponse, asked: StreamRequest | ThreadRequest, event: dict[str, str],
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
        self._router.drain()
        for connection in list(self._open):
            if connection.task is not None:
                connection.task.cancel()
        tasks = [c.task for c in self._open if c.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
