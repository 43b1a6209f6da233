"""The messages that carry a replay helper's shards back to the rebuild, in pieces: no message holds more than
about `PIECE_BYTES` of pickled open runs (one run when a run alone is larger) or `PIECE_LOG` memory-log entries,
so the rebuild unpickles each in a turn of the event loop of its own, and `ShardPieces` puts back exactly the
shards `shard_messages` was given."""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping
from typing import Any, Final

from worker.errors import ShardedReplayError
from worker.stream._shards import MemoryEntry, ShardResult
from worker.stream._table import OpenStream

__all__ = ["PIECE_BYTES", "PIECE_LOG", "ShardPieces", "failure_message", "shard_messages"]

PIECE_BYTES: Final = 64 * 1024  # pickled open runs per message (one run when it is larger)
PIECE_LOG: Final = 8192  # closed-stream memory entries per message
_PICKLE = pickle.HIGHEST_PROTOCOL

Where = tuple[str, int]  # (topic, partition)


def shard_messages(results: Mapping[Where, ShardResult]) -> Iterator[bytes]:
    """The messages that hand `results` back: per partition its open runs, each pickled on its own, in pieces of
    about `PIECE_BYTES`, its memory log in pieces of `PIECE_LOG` entries, then the rest; "done" last."""
    for where, result in results.items():
        piece: list[bytes] = []
        size = 0
        for pair in result.streams:
            piece.append(pickle.dumps(pair, _PICKLE))
            size += len(piece[-1])
            if size >= PIECE_BYTES:
                yield pickle.dumps(("streams", (where, piece)), _PICKLE)
                piece, size = [], 0
        if piece:
            yield pickle.dumps(("streams", (where, piece)), _PICKLE)
        log = result.memory_log
        for start in range(0, len(log), PIECE_LOG):
            yield pickle.dumps(("log", (where, log[start : start + PIECE_LOG])), _PICKLE)
        yield pickle.dumps(("shard", (where, result.peak_open, result.gaps, result.last_offset)), _PICKLE)
    yield pickle.dumps(("done", None), _PICKLE)


def failure_message(reason: str) -> bytes:
    """The one message of a helper whose replay failed: `ShardPieces.take` raises it as ShardedReplayError."""
    return pickle.dumps(("failed", reason), _PICKLE)


class ShardPieces:
    """A helper's shards put back together from `shard_messages`, one message at a time."""

    __slots__ = ("_helper", "_logs", "_streams", "results")

    def __init__(self, helper: str) -> None:
        self._helper = helper
        self._streams: dict[Where, list[tuple[str, OpenStream]]] = {}
        self._logs: dict[Where, list[MemoryEntry]] = {}
        self.results: dict[Where, ShardResult] = {}

    def take(self, message: bytes) -> bool:
        """Take one message; True once the last came. Raises ShardedReplayError when the helper stopped."""
        kind: str
        body: Any
        kind, body = pickle.loads(message)
        if kind == "streams":
            where, piece = body
            self._streams.setdefault(where, []).extend(pickle.loads(pair) for pair in piece)
        elif kind == "log":
            where, entries = body
            self._logs.setdefault(where, []).extend(entries)
        elif kind == "shard":
            where, peak, gaps, last_offset = body
            streams, log = self._streams.pop(where, []), self._logs.pop(where, [])
            self.results[where] = ShardResult(streams, log, peak, gaps, last_offset)
        elif kind == "failed":
            raise ShardedReplayError(f"{self._helper} stopped: {body}")
        return kind == "done"
