"""The fold helper process: it holds the fold side of detached display projections, per source partition, and folds
the display work a worker sends it, each partition's in the order sent (`python -m worker.display.helper FD [PUSH]`).

Requests and replies are length-prefixed pickles on one socket (`worker.display.offload` is the other end):

    ("work", partition, [DisplayWork, ...])     fold, keeping the records made; once they pass `push_bytes` they
                                                 are pushed: (None, partition, records, evicted, withheld)
    ("collect", partition, token, [run, ...])    reply (token, error, records, evicted, withheld, {run: FoldSide})
                                                 with the records made since the last push
    ("reclaim", partition, token)                reply (token, error, {run: FoldSide}); the partition is forgotten
    ("forget", partition)                        drop the partition's folds and records; no reply

A partition whose fold raised keeps the first error and ignores its work until forgotten; its next collect or reclaim
reports the error, so the worker rebuilds that partition alone. The process ends when the socket closes.
"""

from __future__ import annotations

import pickle
import socket
import struct
import sys
from collections import deque
from typing import Any

from worker._heap import settle_heap
from worker.display.projection import DisplayFeed, DisplayProjection, DisplayRecord, DisplayWork, FoldSide, Shipped

__all__ = ["FRAME_HEADER", "PUSH_BYTES", "READ_BYTES", "serve", "take_frames"]

FRAME_HEADER = struct.Struct(">I")  # the length of the pickle that follows
READ_BYTES = 1 << 20  # what either end asks its socket for at a time
# Display records are sent back as they are made, once this many bytes wait: a commit then collects only the rest,
# instead of megabytes at once.
PUSH_BYTES = 128 * 1024


class _Partition:
    """The folds of one source partition and what they made since the last collect."""

    __slots__ = ("error", "evicted", "projections", "records", "size", "withheld")

    def __init__(self) -> None:
        self.projections: dict[str, DisplayProjection] = {}
        self.records: list[DisplayRecord] = []
        self.size = 0  # bytes of the records' values
        self.evicted = 0
        self.withheld = 0
        self.error: str | None = None

    def work(self, items: list[DisplayWork]) -> None:
        for key, adopt, feed in items:
            if self.error is not None:
                return
            try:
                self._take(key, adopt, feed)
            except Exception as exc:  # the partition's folds are now undefined: it is rebuilt, the others go on
                self.error = f"display fold of run {key} failed: {type(exc).__name__}: {exc}"

    def _take(self, key: str, adopt: Shipped | None, feed: DisplayFeed) -> None:
        if adopt is not None:
            projection = self.projections[key] = DisplayProjection.unship(key, adopt)
        else:
            found = self.projections.get(key)
            if found is None:
                raise LookupError("no fold is held for it (its state was never shipped)")
            projection = found
        withheld = projection.withheld
        record = projection.take(feed)
        self.withheld += projection.withheld - withheld
        if record is not None:
            self.records.append(record)
            self.size += len(record.value)
            self.evicted += record.evicted
        if feed[5]:  # the run ended
            del self.projections[key]

    def sides(self, runs: list[str]) -> dict[str, FoldSide]:
        out: dict[str, FoldSide] = {}
        for run in runs:
            projection = self.projections.get(run)
            if projection is None:
                self.error = self.error or f"the checkpoint asks for the fold of run {run}, which is not held"
                break
            out[run] = projection.fold_side()
        return out

    def take(self) -> tuple[list[DisplayRecord], int, int]:
        """The records made since the last take, with the items they evicted and the records withheld."""
        taken = self.records, self.evicted, self.withheld
        self.records, self.size, self.evicted, self.withheld = [], 0, 0, 0
        return taken


def take_frames(buffer: bytearray) -> list[Any]:
    """The messages of the whole frames at the start of `buffer`, which keeps only the incomplete rest. Only the two
    ends of one socket pair, a worker and the helper it started, write the frames."""
    messages = []
    start, size = 0, FRAME_HEADER.size
    while len(buffer) - start >= size:
        (length,) = FRAME_HEADER.unpack_from(buffer, start)
        if len(buffer) - start - size < length:
            break
        messages.append(pickle.loads(memoryview(buffer)[start + size : start + size + length]))
        start += size + length
    del buffer[:start]
    return messages


def _write(sock: socket.socket, reply: object) -> None:
    body = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(FRAME_HEADER.pack(len(body)) + body)


class _Server:
    """Takes in every frame the socket holds before folding more: work is queued per partition and folded a message
    at a time, partitions in turn, while a request first folds only its own partition's queued work. So a commit
    waits for its partition's work, not for the other partitions' work sent before its request."""

    def __init__(self, sock: socket.socket, push_bytes: int) -> None:
        self._sock = sock
        self._push_bytes = push_bytes
        self._in = bytearray()
        self._partitions: dict[int, _Partition] = {}
        self._queued: dict[int, deque[list[DisplayWork]]] = {}  # work not folded yet, per partition, in order
        self._open = True

    def run(self) -> None:
        while self._open:
            self._receive(block=not any(self._queued.values()))
            if self._open:
                self._fold_next()

    def _receive(self, *, block: bool) -> None:
        try:
            data = self._sock.recv(READ_BYTES, 0 if block else socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        if not data:
            self._open = False  # the worker is gone: what is queued has nobody to go to
            return
        self._in += data
        for request in take_frames(self._in):
            self._handle(request)

    def _handle(self, request: tuple[Any, ...]) -> None:
        kind, partition = request[0], request[1]
        if kind == "work":
            self._queued.setdefault(partition, deque()).append(request[2])
            return
        if kind == "forget":
            self._queued.pop(partition, None)
            self._partitions.pop(partition, None)
            return
        queued = self._queued.pop(partition, None)
        while queued:
            self._fold(partition, queued.popleft())
        if kind == "collect":
            folds = self._partitions.setdefault(partition, _Partition())
            sides = folds.sides(request[3]) if folds.error is None else {}
            _write(self._sock, (request[2], folds.error, *folds.take(), sides))
        elif kind == "reclaim":
            folds = self._partitions.pop(partition, _Partition())
            sides = folds.sides(list(folds.projections)) if folds.error is None else {}
            _write(self._sock, (request[2], folds.error, sides))

    def _fold_next(self) -> None:
        """Fold the oldest queued message of the next partition with work queued."""
        for partition, queued in self._queued.items():
            if queued:
                items = queued.popleft()
                self._queued[partition] = self._queued.pop(partition)  # the others go first next time
                self._fold(partition, items)
                return

    def _fold(self, partition: int, items: list[DisplayWork]) -> None:
        folds = self._partitions.setdefault(partition, _Partition())
        folds.work(items)
        if folds.error is None and folds.size >= self._push_bytes:
            _write(self._sock, (None, partition, *folds.take()))


def serve(sock: socket.socket, push_bytes: int = PUSH_BYTES) -> None:
    """Answer requests on `sock` until it closes, pushing records back once `push_bytes` of them wait."""
    _Server(sock, push_bytes).run()


def main(argv: list[str]) -> int:
    """Serve the socket whose file descriptor is `argv[0]` (inherited from the worker), pushing records back once
    `argv[1]` bytes of them wait (default PUSH_BYTES)."""
    settle_heap()  # the modules loaded by now live as long as the process
    sock = socket.socket(fileno=int(argv[0]))
    try:
        serve(sock, int(argv[1]) if len(argv) > 1 else PUSH_BYTES)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the worker is gone
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
