"""Liveness and readiness of one worker, and the one probe server of every process: the small HTTP server that
exposes a process's probes with its metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Final, Literal, Protocol, get_args

from worker.ops.metrics import CONTENT_TYPE

__all__ = ["Health", "HealthServer", "Probes", "Readiness"]

Readiness = Literal["rebuilding", "ready", "failed"]
_STATES: Final = frozenset(get_args(Readiness))
_MAX_REQUEST_HEAD: Final = 8192
_READ_TIMEOUT_S: Final = 5.0
_REASONS: Final = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                   408: "Request Timeout", 431: "Request Header Fields Too Large",
                   500: "Internal Server Error", 503: "Service Unavailable"}
_log = logging.getLogger(__name__)


class Probes(Protocol):
    """What a process answers `/livez` and `/readyz` with: whether it is live (ready), and in a few words why."""

    def live(self) -> tuple[bool, str]: ...

    def ready(self) -> tuple[bool, str]: ...


class Health:
    """Live while the processing loop beats within `liveness_timeout_s`; ready when a group member, not blocked,
    holding the assignment of the group's current generation (no rebalance in progress), every partition of it
    ready."""

    def __init__(self, liveness_timeout_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        if liveness_timeout_s <= 0:
            raise ValueError(f"liveness_timeout_s must be positive, got {liveness_timeout_s!r}")
        self.liveness_timeout_s = liveness_timeout_s
        self._clock = clock
        self._last_beat = clock()
        self._member = False
        self._assigned = False
        self._blocked = ""
        self._partitions: dict[tuple[str, int], Readiness] = {}

    def beat(self) -> None:
        """Record that the processing loop made progress now."""
        self._last_beat = self._clock()

    def set_member(self, member: bool) -> None:
        """Record whether the consumer currently belongs to its group; leaving it forgets the assignment."""
        self._member = member
        if not member:
            self._assigned = False

    def set_assigned(self, assigned: bool) -> None:
        """Record that the member's assignment of the current generation arrived (True, its partitions recorded
        by now), or that a rebalance began and the next one has not (False)."""
        self._assigned = assigned

    def set_blocked(self, reason: str) -> None:
        """Record why the member cannot work at all now (a missing right, say); "" once it can again."""
        self._blocked = reason

    def set_partition(self, topic: str, partition: int, state: Readiness) -> None:
        """Record the state of an assigned partition."""
        if state not in _STATES:
            raise ValueError(f"partition state must be one of {sorted(_STATES)}, got {state!r}")
        self._partitions[(topic, partition)] = state

    def drop_partition(self, topic: str, partition: int) -> None:
        """Forget a partition that is no longer assigned."""
        self._partitions.pop((topic, partition), None)

    def live(self) -> tuple[bool, str]:
        """False once no beat arrived for longer than `liveness_timeout_s`."""
        silent = self._clock() - self._last_beat
        if silent > self.liveness_timeout_s:
            return False, f"no progress for {silent:.1f}s (limit {self.liveness_timeout_s:g}s)"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """True when a group member, not blocked, holding its assignment, and every assigned partition is ready (an
        assignment of zero partitions is ready)."""
        if self._blocked:
            return False, self._blocked
        if not self._member:
            return False, "not a consumer group member"
        if not self._assigned:
            return False, "waiting for the group's assignment (joining or rebalancing)"
        waiting = sorted(f"{t}/{p}:{s}" for (t, p), s in self._partitions.items() if s != "ready")
        if waiting:
            shown = ", ".join(waiting[:5]) + (f" and {len(waiting) - 5} more" if len(waiting) > 5 else "")
            return False, f"partitions not ready: {shown}"
        return True, f"ok, {len(self._partitions)} partitions"


class HealthServer:
    """HTTP/1.1 on asyncio streams: GET /metrics (what `metrics` renders), /livez and /readyz (what `probes` say);
    one request per connection. The worker's and the gateway's probes alike."""

    def __init__(self, metrics: Callable[[], bytes], probes: Probes, host: str, port: int) -> None:
        self.metrics = metrics
        self.probes = probes
        self.host = host
        self._requested_port = port
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The bound port (the ephemeral one when constructed with port 0)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError(f"HealthServer on {self.host}:{self._requested_port} is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Bind and start serving; idempotent."""
        if self._server is None:
            self._server = await asyncio.start_server(
                self._serve, self.host, self._requested_port, limit=_MAX_REQUEST_HEAD
            )

    async def stop(self) -> None:
        """Stop listening and drop connections still open."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._clients):
            task.cancel()
        if self._clients:
            await asyncio.gather(*self._clients, return_exceptions=True)
        await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._clients.add(task)
        try:
            status, ctype, body, head_only = await self._answer(reader)
            reason = _REASONS.get(status, "Error")
            head = (
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\nConnection: close\r\n"
                + ("Allow: GET, HEAD\r\n" if status == 405 else "")
                + "\r\n"
            )
            writer.write(head.encode("ascii") + (b"" if head_only else body))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()
            if task is not None:
                self._clients.discard(task)

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[int, str, bytes, bool]:
        text = "text/plain; charset=utf-8"
        try:
            raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
        except TimeoutError:
            return 408, text, b"request head not received in time\n", False
        except asyncio.LimitOverrunError:
            return 431, text, b"request head too large\n", False
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                raise
            return 400, text, b"incomplete request head\n", False
        parts = raw.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return 400, text, b"malformed request line\n", False
        method, target = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return 405, text, f"method {method} not allowed\n".encode(), False
        head_only = method == "HEAD"
        try:
            if target == "/metrics":
                return 200, CONTENT_TYPE, self.metrics(), head_only
            if target in ("/livez", "/readyz"):
                ok, why = self.probes.live() if target == "/livez" else self.probes.ready()
                return (200 if ok else 503), text, f"{why}\n".encode(), head_only
        except Exception:
            _log.exception("health server failed to answer %s %s", method, target)
            return 500, text, f"internal error answering {target}\n".encode(), head_only
        return 404, text, f"no such path: {target}\n".encode(), head_only
