"""Helper processes that replay partitions split by key, so a rebuild runs on more than one core.

A rebuild holds all helpers for its whole replay: it opens a shard state per partition in each helper, feeds
each helper the records of its keys in chunks, then collects the shards and merges them (`_shards`). A helper
hands its shards back in pieces (`_shard_pieces`), each unpickled in a turn of the event loop of its own. A
helper that fails, or a rebuild cancelled midway, discards every helper; the next rebuild starts new ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import pickle
import signal
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from worker._heap import freeze_heap
from worker.errors import ConfigError, ShardedReplayError
from worker.stream._core import StreamCore, default_core
from worker.stream._partition import PartitionState
from worker.stream._shard_pieces import ShardPieces, failure_message, shard_messages
from worker.stream._shards import ShardResult, ShardState, merge_shards, shard_of

__all__ = ["ReplayPool", "ReplaySession"]

_log = logging.getLogger(__name__)
_CHUNK = 512  # records per message to a helper
_UNSENT = 16  # messages queued for one helper before reading the source waits
_FINISH_TIMEOUT_S = 300.0
_PICKLE = pickle.HIGHEST_PROTOCOL
_T = TypeVar("_T")

Where = tuple[str, int]  # (topic, partition)
Row = tuple[int, int, bytes | None, bytes | None]  # offset, timestamp, key, value


def _serve(conn: Connection) -> None:
    """A helper's loop: shard states built from record chunks, their results on "finish"; ends at EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent decides
    freeze_heap(collect=False)  # the fork server's modules: never scanned by a collection, their pages stay shared
    states: dict[Where, ShardState] = {}
    cores: dict[str, StreamCore] = {}  # by processor: its module is imported once
    failure: str | None = None
    while True:
        try:
            kind, body = pickle.loads(conn.recv_bytes())
        except EOFError:
            return
        if kind == "open":
            where, options, processor = body
            if processor is not None and processor not in cores:
                cores[processor] = default_core(processor)
            states[where] = ShardState(where[0], where[1], core=cores.get(processor or ""), **options)
        elif kind == "rows" and failure is None:
            where, rows = body
            try:
                states[where].replay_rows(rows)
            except ShardedReplayError as exc:  # reported at "finish"; the parent replays in-process and meets it
                failure = str(exc)
        elif kind == "finish":
            if failure is not None:
                conn.send_bytes(failure_message(failure))
            else:
                for message in shard_messages({where: state.result() for where, state in states.items()}):
                    conn.send_bytes(message)
            states, failure = {}, None


class _Helper:
    """One helper process and our end of its pipe; blocking pipe calls run in threads, tracked until done."""

    def __init__(self, process: BaseProcess, conn: Connection) -> None:
        self.process = process
        self.conn = conn
        self._inflight: set[asyncio.Future[Any]] = set()
        self._outbox: deque[bytes] = deque()
        self._pump: asyncio.Task[None] | None = None
        self._discarded = False

    async def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        fut = asyncio.get_running_loop().run_in_executor(None, fn, *args)
        self._inflight.add(fut)
        fut.add_done_callback(self._forget)
        try:
            return await fut
        except (OSError, EOFError) as exc:
            raise ShardedReplayError(f"{self.process.name} (pid {self.process.pid}) is gone: {exc!r}") from exc

    def post(self, messages: list[bytes]) -> None:
        """Queue `messages`; one task sends them in order (concurrent writers would interleave their frames)."""
        self._outbox.extend(messages)
        if self._outbox and (self._pump is None or self._pump.done()):
            if self._pump is not None:
                self._pump.result()  # a failed send surfaces here
            self._pump = asyncio.create_task(self._send_queued())

    async def _send_queued(self) -> None:
        while self._outbox:
            await self.call(self.conn.send_bytes, self._outbox.popleft())

    async def wait_sent(self, unsent: int = 0) -> None:
        """Wait until at most `unsent` messages wait to be sent (0: all sent); raises a failed send."""
        while self._pump is not None and not self._pump.done() and (len(self._outbox) > unsent or not unsent):
            if not unsent:
                await asyncio.wait([self._pump])
            else:
                await asyncio.sleep(0.002)
        if self._pump is not None and self._pump.done():
            self._pump.result()

    def _forget(self, fut: asyncio.Future[Any]) -> None:
        self._inflight.discard(fut)
        if not fut.cancelled():
            fut.exception()  # seen: a discarded helper's pipe fails
        if self._discarded and not self._inflight:
            self.conn.close()

    def discard(self) -> None:
        """Kill the process; our pipe end closes once no thread uses it (its number must not be reused meanwhile)."""
        self._discarded = True
        if self._pump is not None:
            self._pump.cancel()
        self.process.kill()
        if not self._inflight:
            self.conn.close()


class ReplaySession:
    """One rebuild's use of the helpers: `add` records in offset order, `flush` after each fetch, then `finish`."""

    def __init__(
        self, helpers: list[_Helper], states: Mapping[Where, PartitionState], processor: str | None = None
    ) -> None:
        self._helpers = helpers
        self._states = states
        self._processor = processor
        self._rows: list[dict[Where, list[Row]]] = [{} for _ in helpers]
        self.finished = False

    def open(self) -> None:
        messages = [pickle.dumps(("open", (where, state.options, self._processor)), _PICKLE)
                    for where, state in self._states.items()]
        for helper in self._helpers:
            helper.post(messages)

    def add(self, topic: str, partition: int, rows: list[Row]) -> None:
        """Queue records (offset, timestamp, key, value) of one partition, in offset order, for the helpers of
        their keys; nothing is sent before `flush`."""
        where, shards, shard = (topic, partition), len(self._helpers), shard_of
        queues = [queued.setdefault(where, []) for queued in self._rows]
        for row in rows:
            queues[shard(row[2], shards)].append(row)

    async def flush(self, *, everything: bool = False) -> None:
        """Hand every full chunk of `_CHUNK` records (all with `everything`) to the helpers' senders; waits only
        while a helper is `_UNSENT` chunks behind, so reading the source overlaps the helpers' replay."""
        for helper, queued in zip(self._helpers, self._rows, strict=True):
            messages = []
            for where, rows in queued.items():
                if rows and (everything or len(rows) >= _CHUNK):
                    messages.append(pickle.dumps(("rows", (where, rows)), _PICKLE))
                    queued[where] = []
            helper.post(messages)
        await asyncio.gather(*(helper.wait_sent(_UNSENT) for helper in self._helpers))

    async def finish(self) -> dict[Where, list[tuple[int, str]]]:
        """Merge the shards into the fresh states and return the gaps replay passed over, per partition.

        Raises ShardedReplayError, leaving the states untouched, when the shards cannot stand in for one replay.
        """
        await self.flush(everything=True)
        finish = pickle.dumps(("finish", None), _PICKLE)
        for helper in self._helpers:
            helper.post([finish])
        await asyncio.gather(*(helper.wait_sent() for helper in self._helpers))
        try:
            replies = await asyncio.wait_for(
                asyncio.gather(*(_received(h, f"replay helper {i}") for i, h in enumerate(self._helpers))),
                _FINISH_TIMEOUT_S,
            )
        except TimeoutError:
            raise ShardedReplayError(f"replay helpers sent no shards within {_FINISH_TIMEOUT_S:.0f} s") from None
        shards: dict[Where, list[ShardResult]] = {where: [] for where in self._states}
        for results in replies:
            for where, result in results.items():
                shards[where].append(result)
        self.finished = True  # the helpers are idle again, whatever the merge decides
        merge_shards(self._states, shards)
        return {where: sorted(gap for shard in found for gap in shard.gaps) for where, found in shards.items()}


async def _received(helper: _Helper, name: str) -> dict[Where, ShardResult]:
    """The shards `helper` hands back, each message taken in a turn of the event loop of its own."""
    pieces = ShardPieces(name)
    while not pieces.take(await helper.call(helper.conn.recv_bytes)):
        pass
    return pieces.results


class ReplayPool:
    """`processes` helper processes a rebuild can split its replay across; one rebuild uses them at a time.

    The helpers build default states whose observers use `processor` (`module:attribute`, imported there).
    """

    def __init__(self, processes: int, processor: str | None = None) -> None:
        if processes < 1:
            raise ConfigError(f"a replay pool needs at least 1 process, got {processes}")
        self.processes = processes
        self.processor = processor
        self._ctx = multiprocessing.get_context("forkserver")
        self._helpers: list[_Helper] = []
        self._lock = asyncio.Lock()  # held while helpers start or stop
        self._busy = False  # a rebuild holds the helpers
        self._closed = False

    def _spawn(self) -> list[_Helper]:
        # The fork server imports the conversion core once; each helper forks from it, cheap and thread-free.
        self._ctx.set_forkserver_preload([__name__])
        helpers = []
        for i in range(self.processes):
            ours, theirs = self._ctx.Pipe()
            process = self._ctx.Process(target=_serve, args=(theirs,), name=f"replay-helper-{i}", daemon=True)
            process.start()
            theirs.close()
            helpers.append(_Helper(process, ours))
        return helpers

    async def start(self) -> None:
        """Start the helpers now, so the first rebuild waits less for them; a failure is logged, not raised."""
        async with self._lock:
            if not self._helpers and not self._closed:
                self._helpers = await self._spawned()

    async def _spawned(self) -> list[_Helper]:
        try:
            return await asyncio.to_thread(self._spawn)
        except Exception as exc:  # rebuilds replay in-process meanwhile
            _log.error("replay helpers could not start, replaying in-process: %r", exc)
            return []

    def _discard(self) -> None:
        helpers, self._helpers = self._helpers, []
        for helper in helpers:
            helper.discard()

    async def close(self) -> None:
        """Stop the helpers; later sessions yield None."""
        self._closed = True
        async with self._lock:
            self._discard()

    @contextlib.asynccontextmanager
    async def session(self, states: Mapping[Where, PartitionState]) -> AsyncIterator[ReplaySession | None]:
        """The helpers for one rebuild of `states` (fresh), or None while another rebuild holds them or once closed.

        Waits for helpers still starting. Leaving the block before `finish` completed (an error, a cancellation)
        discards the helpers.
        """
        if self._closed or self._busy:
            yield None
            return
        self._busy = True
        try:
            async with self._lock:
                if not all(helper.process.is_alive() for helper in self._helpers):
                    self._discard()  # one was killed (out of memory?) since the last rebuild
                if not self._helpers and not self._closed:
                    self._helpers = await self._spawned()
            if not self._helpers:
                yield None
                return
            session = ReplaySession(self._helpers, states, self.processor)
            try:
                session.open()
                yield session
            finally:
                if not session.finished:
                    self._discard()
        finally:
            self._busy = False
