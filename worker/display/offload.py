"""The worker's end of the fold helper process (`worker.display.helper`): one process per worker holds the fold
side of every detached display projection, so folding runs beside conversion instead of after it.

Nothing here waits on the event loop except `collect` and `reclaim`: work is written without blocking (the unsent
rest is buffered), and replies are read as they come. A lane is one partition's view of one helper process; when
that process is gone (it exited, or did not answer in time), every request of its lanes raises FoldHelperError, and
a new lane starts a new process.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import pickle
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

from worker.display.helper import FRAME_HEADER, PUSH_BYTES, READ_BYTES, take_frames
from worker.display.projection import DisplayRecord, FoldSide
from worker.errors import FoldHelperError

__all__ = ["Collected", "FoldLane", "FoldOffload"]

_log = logging.getLogger(__name__)
# Work waits in the worker at most this long, or until this much is queued, before it is written: each write
# wakes the helper, and a wake-up costs the writer about as much as pickling the work.
_FLUSH_S = 0.01
_FLUSH_BYTES = 256 * 1024
_SOCKET_BUFFER_BYTES = 4 * 1024 * 1024
_STOP_S = 5.0  # how long a closing helper may take to exit before it is killed
_EXIT_WAIT_S = 0.2  # how long a helper whose socket broke is given to show its exit code
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # where `worker` is importable from


class Collected:
    """What a helper folded for one partition since its previous collect: the display records made, in order, the
    items they evicted and the records withheld; and the fold sides asked for."""

    __slots__ = ("evicted", "records", "sides", "withheld")

    def __init__(self, records: list[DisplayRecord], evicted: int, withheld: int, sides: dict[str, FoldSide]) -> None:
        self.records: Final = records
        self.evicted: Final = evicted
        self.withheld: Final = withheld
        self.sides: Final = sides

    @classmethod
    def after(
        cls, earlier: Collected | None, records: list[DisplayRecord], evicted: int, withheld: int,
        sides: dict[str, FoldSide],
    ) -> Collected:  # fmt: skip
        """What `earlier` (records made first) and the rest together hold; the sides are the rest's."""
        if earlier is None:
            return cls(records, evicted, withheld, sides)
        return cls(earlier.records + records, earlier.evicted + evicted, earlier.withheld + withheld, sides)


class _Helper:
    """One helper process and its socket; `gone` says why it can no longer be used."""

    def __init__(self, on_lost: Callable[[str], None] | None = None, push_bytes: int = PUSH_BYTES) -> None:
        self._on_lost = on_lost
        self._loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        for end in (ours, theirs):  # a reply of a few megabytes crosses in one piece where the system allows
            with contextlib.suppress(OSError):
                end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SOCKET_BUFFER_BYTES)
                end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _SOCKET_BUFFER_BYTES)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (_PACKAGE_ROOT, env.get("PYTHONPATH"))))
        try:
            self.process = subprocess.Popen(  # our own interpreter and module
                [sys.executable, "-m", "worker.display.helper", str(theirs.fileno()), str(push_bytes)],
                pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        self._fd = ours.fileno()
        self._out = bytearray()  # frames not yet written
        self._writing = False  # whether a writer callback writes the rest of `_out`
        self._timer: asyncio.TimerHandle | None = None  # the pending `_flush` of queued work
        self._in = bytearray()
        self._tokens = itertools.count()
        self._waiting: dict[int, tuple[asyncio.Future[Any], int]] = {}  # by token: the reply's future, its partition
        self._pushed: dict[int, Collected] = {}  # by partition: display records pushed and not yet taken
        self.gone: str | None = None
        self._loop.add_reader(self._fd, self._readable)

    def send(self, message: object) -> None:
        """Queue `message` for the helper without waiting; FoldHelperError when the helper is gone. Queued work is
        written at most `_FLUSH_S` later (sooner once `_FLUSH_BYTES` are queued, or with the next `ask`), so that
        the helper is woken a few times per commit interval rather than once per hand-over."""
        if self.gone is not None:
            raise FoldHelperError(f"the display fold process is gone: {self.gone}")
        body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self._out += FRAME_HEADER.pack(len(body))
        self._out += body
        if len(self._out) >= _FLUSH_BYTES:
            self._flush()
            if self.gone is not None:
                raise FoldHelperError(f"the display fold process is gone: {self.gone}")
        elif self._timer is None and not self._writing:
            self._timer = self._loop.call_later(_FLUSH_S, self._flush)

    def _flush(self) -> None:
        """Write what is queued; the rest is written as the socket takes it. A failed write loses the helper."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writing or not self._out or self.gone is not None:
            return
        try:
            sent = self._sock.send(self._out)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self.lose(f"writing to it failed: {exc}")
            return
        del self._out[:sent]
        if self._out:
            self._writing = True
            self._loop.add_writer(self._fd, self._writable)

    def ask(self, message: tuple[Any, ...]) -> asyncio.Future[Any]:
        """Send `message` (kind, partition, ...) with a token after its first two fields; the future holds the reply
        and what the partition's records pushed before it left untaken (`take_pushed`), or None."""
        token = next(self._tokens)
        future: asyncio.Future[Any] = self._loop.create_future()
        self.send((*message[:2], token, *message[2:]))
        self._waiting[token] = future, message[1]
        self._flush()
        return future

    def _writable(self) -> None:
        try:
            sent = self._sock.send(self._out)
        except BlockingIOError:
            return
        except OSError as exc:
            self.lose(f"writing to it failed: {exc}")
            return
        del self._out[:sent]
        if not self._out:
            self._writing = False
            self._loop.remove_writer(self._fd)

    def _readable(self) -> None:
        buffer = self._in
        while True:  # all that is there: a reply read over several turns of the loop waits that much longer
            try:
                data = self._sock.recv(READ_BYTES)
            except BlockingIOError:
                break
            except OSError as exc:
                self.lose(self._exited() or f"reading from it failed: {exc}")
                return
            if not data:
                self.lose(self._exited() or "it closed its socket")
                return
            buffer += data
            if len(data) < READ_BYTES:
                break
        for reply in take_frames(buffer):
            if reply[0] is None:  # records pushed: (None, partition, records, evicted, withheld)
                _, partition, records, evicted, withheld = reply
                held = self._pushed.get(partition)
                self._pushed[partition] = Collected.after(held, records, evicted, withheld, {})
                continue
            waiting = self._waiting.pop(reply[0], None)
            if waiting is not None:
                future, partition = waiting
                # Everything pushed before the reply comes from work sent before the request: it goes with it.
                pushed = self._pushed.pop(partition, None)
                if not future.done():
                    future.set_result((reply, pushed))

    def take_pushed(self, partition: int) -> Collected | None:
        """The display records the helper pushed for `partition` since the last take or reply, or None."""
        return self._pushed.pop(partition, None)

    def _exited(self) -> str | None:
        """How the process ended, when it has (waiting a moment for a process whose socket just closed)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            return f"it exited with code {self.process.wait(timeout=_EXIT_WAIT_S)}"
        return None

    def lose(self, why: str) -> None:
        """Stop using the helper (killed if still running): every waiting and later request fails with `why`."""
        if self.gone is not None:
            return
        _log.error("display fold process %d is gone (%s): the partitions it folded for are rebuilt",
                   self.process.pid, why)  # fmt: skip
        if self._on_lost is not None:
            self._on_lost(why)
        self._hang_up(why)
        if self.process.poll() is None:
            self.process.kill()

    def _hang_up(self, why: str) -> None:
        """Close the socket; every waiting request fails with `why`, and so does every later one."""
        self.gone = why
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._loop.remove_reader(self._fd)
        self._loop.remove_writer(self._fd)
        self._sock.close()
        waiting, self._waiting = self._waiting, {}
        self._pushed.clear()
        for future, _ in waiting.values():
            if not future.done():
                future.set_exception(FoldHelperError(f"the display fold process is gone: {why}"))

    async def close(self) -> None:
        """End the process: it exits when its socket closes; killed after `_STOP_S` seconds."""
        if self.gone is None:
            self._hang_up("it was closed")
        for _ in range(int(_STOP_S / 0.05)):
            if self.process.poll() is not None:
                return
            await asyncio.sleep(0.05)
        self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=_STOP_S)


class FoldLane:
    """One partition's requests to one helper process, answered in the order they were sent."""

    __slots__ = ("_helper", "partition")

    def __init__(self, helper: _Helper, partition: int) -> None:
        self._helper = helper
        self.partition = partition

    def send(self, work: list[Any]) -> None:
        """Hand over display work (`PartitionState.take_display_work`) to fold; FoldHelperError when it cannot."""
        if work:
            self._send(("work", self.partition, work))

    def take_pushed(self) -> Collected | None:
        """The display records made from work already sent and pushed back by the helper, or None: they belong to
        the transaction of that work, as do those `collect` returns."""
        return self._helper.take_pushed(self.partition)

    async def collect(self, runs: list[str], *, timeout_s: float) -> Collected:
        """The records folded from all work sent before this call that `take_pushed` did not return, and the fold
        sides of `runs`."""
        reply, pushed = await self._ask(("collect", self.partition, runs), timeout_s)
        _, error, records, evicted, withheld, sides = reply
        if error is not None:
            raise FoldHelperError(error, partition=self.partition)
        return Collected.after(pushed, records, evicted, withheld, sides)

    async def reclaim(self, *, timeout_s: float) -> dict[str, FoldSide]:
        """The fold side of every run the helper holds for this partition, after all work sent; the helper then
        forgets the partition."""
        (_, error, sides), _ = await self._ask(("reclaim", self.partition), timeout_s)
        if error is not None:
            raise FoldHelperError(error, partition=self.partition)
        sides_: dict[str, FoldSide] = sides
        return sides_

    def forget(self) -> None:
        """Let the helper drop this partition's folds (nothing to do when the helper is gone)."""
        self._helper.take_pushed(self.partition)
        with contextlib.suppress(FoldHelperError):
            self._send(("forget", self.partition))

    @contextlib.contextmanager
    def _named(self) -> Iterator[None]:
        """A FoldHelperError of the helper as a whole raised inside names this lane's partition."""
        try:
            yield
        except FoldHelperError as exc:
            if exc.partition is not None:
                raise
            raise FoldHelperError(str(exc), partition=self.partition) from exc

    def _send(self, message: tuple[Any, ...]) -> None:
        with self._named():
            self._helper.send(message)

    async def _ask(self, message: tuple[Any, ...], timeout_s: float) -> tuple[tuple[Any, ...], Collected | None]:
        helper = self._helper
        with self._named():
            future = helper.ask(message)
            try:
                async with asyncio.timeout(timeout_s):
                    reply: tuple[tuple[Any, ...], Collected | None] = await future
            except TimeoutError:
                helper.lose(f"it did not answer within {timeout_s:g} s")
                raise FoldHelperError(f"the display fold process did not answer within {timeout_s:g} s") from None
        return reply


class FoldOffload:
    """The worker's fold helper process, started with the first lane and again after it is gone; it pushes display
    records back once `push_bytes` of them wait."""

    def __init__(self, on_lost: Callable[[str], None] | None = None, push_bytes: int = PUSH_BYTES) -> None:
        self._helper: _Helper | None = None
        self._on_lost = on_lost  # told why, each time a running helper is lost (not when closed)
        self._push_bytes = push_bytes

    @property
    def pid(self) -> int | None:
        """The running helper's process id, or None."""
        helper = self._helper
        return None if helper is None or helper.gone is not None else helper.process.pid

    def start(self) -> None:
        """Start the helper now, if none runs, so that it has loaded its modules when the first lane needs it."""
        self._running()

    def lane(self, partition: int) -> FoldLane:
        """A lane for `partition` on the running helper, started first if there is none."""
        return FoldLane(self._running(), partition)

    def _running(self) -> _Helper:
        helper = self._helper
        if helper is None or helper.gone is not None:
            if helper is not None:
                helper.process.poll()  # reap it
            helper = self._helper = _Helper(self._on_lost, self._push_bytes)
        return helper

    async def close(self) -> None:
        """Stop the helper, if one runs."""
        helper, self._helper = self._helper, None
        if helper is not None:
            await helper.close()
