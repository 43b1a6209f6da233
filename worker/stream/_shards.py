"""A replay split by key: shard states that log what crosses keys, and the exact merge of their results.

Keys are independent except for two things a partition shares: its memory of closed streams and its cap on
open streams. A shard logs every lookup and update of that memory and the most streams it held open; the
merge replays the logs of all shards in offset order through one memory and accepts the shards only if every
lookup saw what one in-process replay would have seen and the cap was never in reach.
"""

from __future__ import annotations

import heapq
import sys
import zlib
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import NamedTuple

from worker.display.projection import DEFAULT_MAX_MESSAGE_BYTES
from worker.errors import GapError, ShardedReplayError
from worker.stream._core import StreamCore
from worker.stream._partition import PartitionState
from worker.stream._policies import GapPolicy, OpenStreamPolicy
from worker.stream._records import SourceRecord
from worker.stream._table import EndedStreams, OpenStream

__all__ = ["MemoryEntry", "ShardResult", "ShardState", "merge_shards", "shard_of"]

# (offset, key, value, is_lookup): a lookup and the sequence it found, or an update and the sequence stored
MemoryEntry = tuple[int, str, int | None, bool]


def shard_of(key: bytes | None, shards: int) -> int:
    """The shard of a record key: every record of one key goes to one shard; a missing key goes to shard 0."""
    return zlib.crc32(key) % shards if key else 0


class ShardResult(NamedTuple):
    """What one shard built from its keys of one partition's window."""

    streams: list[tuple[str, OpenStream]]
    memory_log: list[MemoryEntry]
    peak_open: int
    gaps: list[tuple[int, str]]  # (offset, message) of gaps an operator skipped over
    last_offset: int | None


class ShardState(PartitionState):
    """A partition state fed only some keys, logging its use of the closed-stream memory; it has no cap on open
    streams (`max_open_streams` is accepted with the other options and left to the merge)."""

    __slots__ = ("_at", "_gaps", "_log", "_peak")

    def __init__(
        self, topic: str, partition: int, *, gap_policy: GapPolicy = GapPolicy.CLOSE_RUN,
        max_open_streams: int = sys.maxsize, open_stream_policy: OpenStreamPolicy = OpenStreamPolicy.DEAD_LETTER,
        closed_stream_memory: int = 10_000, max_record_bytes: int | None = None,
        display_interval_ms: int | None = None, display_max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        thread_index: bool = False, core: StreamCore | None = None,
    ) -> None:  # fmt: skip
        del max_open_streams  # the merge checks the cap against all shards together
        super().__init__(
            topic, partition, gap_policy=gap_policy, max_open_streams=sys.maxsize,
            open_stream_policy=open_stream_policy, closed_stream_memory=closed_stream_memory,
            max_record_bytes=max_record_bytes, display_interval_ms=display_interval_ms,
            display_max_bytes=display_max_bytes, thread_index=thread_index, core=core,
        )  # fmt: skip
        self._at = -1
        self._log: list[MemoryEntry] = []
        self._gaps: list[tuple[int, str]] = []
        self._peak = 0

    def replay(self, record: SourceRecord) -> None:
        """Process `record` without publishing; a gap under the halt policy is noted and passed, as replay does."""
        self._at = record.offset
        try:
            self.process(record, publish=False)
        except GapError as exc:
            self._gaps.append((record.offset, str(exc)))
        self._peak = max(self._peak, self.open_streams)

    def replay_rows(self, rows: list[tuple[int, int, bytes | None, bytes | None]]) -> None:
        """`replay` each (offset, timestamp, key, value) of this partition in order; a failure names its offset."""
        topic, partition = self.topic, self.partition
        for offset, timestamp, key, value in rows:
            try:
                self.replay(SourceRecord(topic, partition, offset, timestamp, key, value))
            except Exception as exc:
                raise ShardedReplayError(
                    f"offset {offset} of {topic}[{partition}]: {type(exc).__name__}: {exc}"
                ) from exc

    def _recall(self, key: str) -> int | None:
        found = super()._recall(key)
        self._log.append((self._at, key, found, True))
        return found

    def _remember(self, key: str, last_root_sequence: int, at: int) -> None:
        self._log.append((at, key, last_root_sequence, False))
        super()._remember(key, last_root_sequence, at)

    def result(self) -> ShardResult:
        """The shard's open streams and logs, ready to be pickled to the process that merges."""
        return ShardResult(list(self._streams.items()), self._log, self._peak, self._gaps, self._last_offset)


class _Merged(NamedTuple):
    streams: list[tuple[str, OpenStream]]
    ended: EndedStreams
    last_offset: int | None


def _merged(state: PartitionState, shards: Sequence[ShardResult]) -> _Merged:
    where = f"{state.topic}[{state.partition}]"
    if state.open_streams or state.remembered_streams or state.last_offset is not None:
        raise ShardedReplayError(f"shards of {where} can only be merged into fresh state")
    options = state.options
    cap, capacity = options["max_open_streams"], options["closed_stream_memory"]
    peak = sum(shard.peak_open for shard in shards)
    if peak > cap:
        raise ShardedReplayError(
            f"the shards of {where} held up to {peak} open streams together, over max_open_streams="
            f"{cap}: the cap may have decided a record"
        )
    # One memory, fed every shard's lookups and updates in offset order, decides what each lookup should see.
    memory = EndedStreams(capacity)
    for offset, key, value, is_lookup in heapq.merge(*(s.memory_log for s in shards), key=itemgetter(0)):
        if not is_lookup:
            memory.remember(key, value, offset)  # type: ignore[arg-type]  # an update always stores a sequence
        elif memory.recall(key) != value:
            raise ShardedReplayError(
                f"at offset {offset} of {where} the shard of key {key!r} found {value} in the closed-stream "
                f"memory, where one replay finds {memory.recall(key)} (memory of {capacity} keys)"
            )
    streams = [pair for shard in shards for pair in shard.streams]
    last = max((s.last_offset for s in shards if s.last_offset is not None), default=None)
    return _Merged(streams, memory, last)


def merge_shards(
    states: Mapping[tuple[str, int], PartitionState], shards: Mapping[tuple[str, int], Sequence[ShardResult]]
) -> None:
    """Adopt each partition's shards into its fresh state, all partitions or none.

    Raises ShardedReplayError, leaving every state untouched, when a lookup of the closed-stream memory or
    the open-stream cap could have gone otherwise in one replay: the caller then replays in-process.
    """
    merged = {where: _merged(state, shards.get(where, ())) for where, state in states.items()}
    for where, state in states.items():
        m = merged[where]
        state.adopt_replay(m.streams, m.ended, m.last_offset)
