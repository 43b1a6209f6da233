"""The changelog format (docs/changelog-format.md): a partition's state as keyed JSON records, and back.

Every record of one changelog partition describes the state of one source partition; keys are chosen so that
compaction keeps exactly the live state: one partition record, one record per open stream and one per
remembered ended stream, each removed by a tombstone when its stream ends or is forgotten.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from importlib import metadata
from typing import Any, Final

import orjson

from worker._value import FrozenValue
from worker.display.projection import DisplayProjection
from worker.errors import CheckpointError, CheckpointVersionError, ConfigError
from worker.observe import loads_exact
from worker.stream._core import StreamObserver
from worker.stream._table import EVENT_TOO_LARGE_CODE, SOURCE_GAP_CODE, EndedStreams, OpenStream

__all__ = [
    "CHECKPOINT_FORMAT_VERSION",
    "PARTITION_KEY",
    "ChangeTracker",
    "Changelog",
    "CheckpointHeader",
    "StoredState",
    "decode_ended",
    "decode_stream",
    "encode_ended",
    "encode_partition",
    "encode_stream",
    "ended_key",
    "read_checkpoint_header",
    "read_state",
    "split_key",
    "stream_key",
]

CHECKPOINT_FORMAT_VERSION: Final = 1
PARTITION_KEY: Final = b"partition"  # never changes, so any release finds the format version of a changelog
_STREAM: Final = "stream:"
_ENDED: Final = "ended:"
_CLOSED_CODES: Final = frozenset({SOURCE_GAP_CODE, EVENT_TOO_LARGE_CODE})
Changelog = list[tuple[bytes, bytes | None]]  # changelog records: (key, value; None for a tombstone)


def _package_version() -> str:
    try:
        return metadata.version("harness-agui-worker")
    except metadata.PackageNotFoundError:
        return "0+unknown"


_WORKER_VERSION: Final = _package_version()


class CheckpointHeader(FrozenValue):
    """The partition record: its format version, the source offset the checkpoint covers (every record below
    it is in the state, none from it on), the worker version that wrote it, and how many stream and ended
    records belong to it."""

    __slots__ = ("ended_streams", "format", "offset", "open_streams", "partition", "topic", "worker")
    _FIELDS = ("format", "topic", "partition", "offset", "open_streams", "ended_streams", "worker")

    def __init__(  # noqa: PLR0917  # a record's fields, in the order the format documents them
        self, format: int, topic: str, partition: int, offset: int, open_streams: int, ended_streams: int,
        worker: str,
    ) -> None:  # fmt: skip
        self.format: Final = format
        self.topic: Final = topic
        self.partition: Final = partition
        self.offset: Final = offset
        self.open_streams: Final = open_streams
        self.ended_streams: Final = ended_streams
        self.worker: Final = worker


def _json(value: object) -> bytes:
    """orjson's bytes, copied: a checkpoint keeps its values by the thousand, and orjson's own output buffers kept
    that way cost several times the encoding (they are allocated large, then shrunk)."""
    return bytes(memoryview(orjson.dumps(value)))


def stream_key(key: str) -> bytes:
    """The changelog key of the open stream of root run `key`."""
    return (_STREAM + key).encode()


def ended_key(key: str) -> bytes:
    """The changelog key of the remembered ended stream `key`."""
    return (_ENDED + key).encode()


def split_key(raw: bytes, topic: str, partition: int) -> tuple[bool, str]:
    """(True for an open stream, False for an ended one; its root run id) of changelog key `raw`."""
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        text = ""
    for prefix, is_open in ((_STREAM, True), (_ENDED, False)):
        if text.startswith(prefix) and len(text) > len(prefix):
            return is_open, text[len(prefix) :]
    raise CheckpointError("is not a key of this changelog format", topic=topic, partition=partition, key=raw)


def encode_stream(stream: OpenStream, export: Callable[[StreamObserver], object], *, display: bool = False) -> bytes:
    """The value of an open stream's record; with `display` (the display topic is on) it holds the stream's
    display projection state too, null once the stream was closed."""
    observer = stream.observer
    head = _json({
        "first_offset": stream.first_offset,
        "thread_id": stream.thread_id,
        "n": stream.n,
        "last": stream.last,
        "widest": stream.widest,
        "closed_by": stream.closed_by,
        "observer": None if observer is None else export(observer),
    })  # fmt: skip
    if not display:
        return head
    projection = stream.display
    state = b"null" if projection is None else projection.export_json()
    return b"".join((head[:-1], b',"display":', state, b"}"))


def encode_ended(sequence: int, at: int) -> bytes:
    """The value of an ended stream's record: its last root sequence and the offset that ended it."""
    return _json({"last_sequence": sequence, "ended_at": at})


def encode_partition(topic: str, partition: int, offset: int, open_streams: int, ended_streams: int) -> bytes:
    """The value of the partition record of a checkpoint at source offset `offset`."""
    return _json({
        "format": CHECKPOINT_FORMAT_VERSION, "topic": topic, "partition": partition, "offset": offset,
        "open_streams": open_streams, "ended_streams": ended_streams, "worker": _WORKER_VERSION,
    })  # fmt: skip


class _Reader:
    """Reads one record's JSON object, raising CheckpointError naming the record and the field at fault."""

    __slots__ = ("data", "key", "partition", "topic")

    def __init__(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        self.topic = topic
        self.partition = partition
        self.key = key
        try:
            data = loads_exact(value) if value is not None else None  # a display state may hold any number
        except ValueError as exc:  # orjson's JSONDecodeError and the stdlib's are ValueErrors
            raise self.error(f"is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise self.error(f"is not a JSON object: {value[:80]!r}" if value is not None else "is a tombstone")
        self.data: dict[str, Any] = data

    def error(self, message: str, reason: str = "unreadable") -> CheckpointError:
        return CheckpointError(message, topic=self.topic, partition=self.partition, key=self.key, reason=reason)

    def integer(self, name: str, minimum: int, below: int | None = None) -> int:
        value = self.data.get(name)
        if type(value) is not int or value < minimum or (below is not None and value >= below):
            bounds = f">= {minimum}" + (f" and < {below}" if below is not None else "")
            raise self.error(f"field {name!r} must be an integer {bounds}, got {value!r}")
        return value

    def text(self, name: str) -> str:
        value = self.data.get(name)
        if not isinstance(value, str):
            raise self.error(f"field {name!r} must be a string, got {value!r}")
        return value

    def fields(self, names: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
        if not set(names) <= set(self.data) <= set(names) | set(optional):
            expected = f"{sorted(names)}" + (f" and optionally {sorted(optional)}" if optional else "")
            raise self.error(f"fields must be {expected}, got {sorted(self.data)}")


_PARTITION_FIELDS = ("format", "topic", "partition", "offset", "open_streams", "ended_streams", "worker")
_STREAM_FIELDS = ("first_offset", "thread_id", "n", "last", "widest", "closed_by", "observer")
_OPTIONAL_STREAM_FIELDS = ("display",)
_ENDED_FIELDS = ("last_sequence", "ended_at")


def read_checkpoint_header(values: Mapping[bytes, bytes], topic: str, partition: int) -> CheckpointHeader | None:
    """The partition record of changelog `values` (latest value per key), or None when the changelog is empty.

    Raises CheckpointVersionError for a format this release does not read, and CheckpointError when the record
    is missing beside others, unreadable, or describes another source partition.
    """
    if PARTITION_KEY not in values:
        if not values:
            return None
        raise CheckpointError(f"holds {len(values)} records but no partition record", topic=topic,
                              partition=partition, key=PARTITION_KEY)  # fmt: skip
    reader = _Reader(topic, partition, PARTITION_KEY, values[PARTITION_KEY])
    version = reader.data.get("format")
    if type(version) is not int:
        raise reader.error(f"field 'format' must be an integer, got {version!r}")
    if version != CHECKPOINT_FORMAT_VERSION:
        raise CheckpointVersionError(
            f"checkpoint format {version} is not format {CHECKPOINT_FORMAT_VERSION}, the one this release reads: "
            "run the release that wrote it (or a newer one), or delete the changelog topic to rebuild by replay",
            topic=topic, partition=partition, version=version,
        )  # fmt: skip
    reader.fields(_PARTITION_FIELDS)
    header = CheckpointHeader(
        version, reader.text("topic"), reader.integer("partition", 0), reader.integer("offset", 0),
        reader.integer("open_streams", 0), reader.integer("ended_streams", 0), reader.text("worker"),
    )  # fmt: skip
    if (header.topic, header.partition) != (topic, partition):
        raise reader.error(f"holds the state of {header.topic}[{header.partition}]")
    return header


def decode_stream(
    raw: bytes, value: bytes, header: CheckpointHeader, restore: Callable[[Any], StreamObserver], *,
    display: bool = False,
) -> OpenStream:  # fmt: skip
    """The open stream of record `raw`, its observer restored through `restore`; with `display`, its display
    projection too. A converting stream written without display state cannot serve a worker with the display on
    (CheckpointError); display state is ignored with the display off."""
    reader = _Reader(header.topic, header.partition, raw, value)
    reader.fields(_STREAM_FIELDS, _OPTIONAL_STREAM_FIELDS)
    data = reader.data
    last = data["last"]
    if not isinstance(last, dict) or not all(type(seq) is int and seq >= -1 for seq in last.values()):
        raise reader.error(f"field 'last' must map run ids to integers >= -1, got {last!r}")
    closed_by, exported = data["closed_by"], data["observer"]
    if exported is None:
        if closed_by not in _CLOSED_CODES:
            raise reader.error(f"a stream without observer must name what closed it, got {closed_by!r}")
        observer = None
    else:
        if closed_by is not None:
            raise reader.error(f"a stream with an observer was not closed, yet 'closed_by' is {closed_by!r}")
        try:
            observer = restore(exported)
        except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
            raise reader.error(f"observer continuation does not restore: {exc}") from None
    stream = OpenStream(
        observer, reader.integer("first_offset", 0, header.offset), reader.text("thread_id"), reader.integer("n", 0),
        last, reader.integer("widest", 0), closed_by,
    )  # fmt: skip
    if display:
        stream.display = _projection(reader, stream, _run_id(raw))
    return stream


def _run_id(raw: bytes) -> str:
    return raw.decode()[len(_STREAM) :]


def _projection(reader: _Reader, stream: OpenStream, run_id: str) -> DisplayProjection | None:
    """The display projection of a stream record read with the display on: None for a closed stream, restored
    for a converting one, which must have it."""
    state = reader.data.get("display")
    if stream.observer is None:
        if state is not None:
            raise reader.error("a closed stream holds display state")
        return None
    if "display" not in reader.data:
        raise reader.error("holds no display state: it was written with the display topic off, and a projection "
                           "cannot be made up for a run already under way", "display-off")
    if not isinstance(state, dict):
        raise reader.error(f"field 'display' of a converting stream must be an object, got {state!r:.80}")
    try:
        projection = DisplayProjection.restore(state)
    except ConfigError as exc:
        raise reader.error(str(exc)) from None
    if projection.run_id != run_id or projection.next_seq != stream.n:
        raise reader.error(f"display state of run {projection.run_id!r} at event {projection.next_seq} does not "
                           f"belong to this stream at event {stream.n}")
    return projection


def decode_ended(raw: bytes, value: bytes, header: CheckpointHeader) -> tuple[int, int]:
    """(last root sequence, offset that ended it) of ended-stream record `raw`."""
    reader = _Reader(header.topic, header.partition, raw, value)
    reader.fields(_ENDED_FIELDS)
    return reader.integer("last_sequence", 0), reader.integer("ended_at", 0, header.offset)


class StoredState:
    """What a changelog partition holds: its partition record, its open streams (in first-offset order) and its
    remembered ended streams as (offset that ended it, root run id, last root sequence), oldest first."""

    __slots__ = ("ended", "header", "streams")

    def __init__(
        self, header: CheckpointHeader, streams: list[tuple[str, OpenStream]], ended: list[tuple[int, str, int]]
    ) -> None:
        self.header = header
        self.streams = streams
        self.ended = ended


def read_state(
    values: Mapping[bytes, bytes], topic: str, partition: int, restore: Callable[[Any], StreamObserver], *,
    display: bool, part_s: float,
) -> Generator[None, None, StoredState]:  # fmt: skip
    """The state changelog `values` (latest value per key, tombstoned keys left out) hold, checked whole; yields
    after each part of about `part_s` of the work, so the caller may let other work run.

    Raises CheckpointVersionError for a format this release does not read, CheckpointError when the changelog is
    empty, unreadable or inconsistent, and, with `display`, when a converting stream has no display state.
    """
    header = read_checkpoint_header(values, topic, partition)
    if header is None:
        raise CheckpointError("is empty: there is no checkpoint to restore", topic=topic, partition=partition)
    streams: list[tuple[str, OpenStream]] = []
    ended: list[tuple[int, str, int]] = []
    until = time.perf_counter() + part_s
    for raw, value in values.items():
        if raw == PARTITION_KEY:
            continue
        is_open, key = split_key(raw, topic, partition)
        if is_open:
            streams.append((key, decode_stream(raw, value, header, restore, display=display)))
            if time.perf_counter() >= until:
                yield None
                until = time.perf_counter() + part_s
        else:
            sequence, at = decode_ended(raw, value, header)
            ended.append((at, key, sequence))
    if (len(streams), len(ended)) != (header.open_streams, header.ended_streams):
        raise CheckpointError(
            f"holds {len(streams)} open and {len(ended)} ended streams, where its partition record counts "
            f"{header.open_streams} and {header.ended_streams}", topic=topic, partition=partition,
        )  # fmt: skip
    ended.sort()
    if len({at for at, _, _ in ended}) != len(ended) or {k for _, k, _ in ended} & {k for k, _ in streams}:
        raise CheckpointError("ends two streams at one offset, or holds a stream both open and ended",
                              topic=topic, partition=partition)  # fmt: skip
    streams.sort(key=lambda pair: pair[1].first_offset)
    return StoredState(header, streams, ended)


class ChangeTracker:
    """Which changelog keys of a partition's state changed since its last checkpoint, so that a checkpoint writes
    each changed key once and a tombstone for each key the changelog holds and the state no longer does.

    After each checkpoint the changelog holds exactly the live keys, so a stream (an ended entry) is in it iff its
    first offset (the offset that ended it) is below `checkpointed`.
    """

    __slots__ = ("_dirty", "_dirty_ended", "_gone", "_gone_ended", "_partition", "_stale", "_topic", "checkpointed")

    def __init__(self, topic: str, partition: int) -> None:
        self._topic = topic
        self._partition = partition
        self.checkpointed = -1  # offset of the last checkpoint; -1: none, nothing known to be in the changelog
        self._dirty: set[str] = set()  # open streams changed since the last checkpoint
        self._gone: set[str] = set()  # streams in the changelog that ended since (tombstones due)
        self._dirty_ended: set[str] = set()  # ended keys remembered since the last checkpoint
        self._gone_ended: set[str] = set()  # ended keys in the changelog forgotten since (tombstones due)
        self._stale: set[bytes] = set()  # changelog keys adopted with the changelog, tombstoned unless live

    def changed(self, key: str) -> None:
        """Open stream `key` changed."""
        self._dirty.add(key)

    def closed(self, key: str, first_offset: int) -> None:
        """Open stream `key`, opened at `first_offset`, ended."""
        self._dirty.discard(key)
        if first_offset < self.checkpointed:
            self._gone.add(key)

    def remembered(self, key: str, forgotten: tuple[str, int] | None) -> None:
        """Ended stream `key` is remembered; `forgotten` (its key, the offset that ended it) made room for it."""
        self._dirty_ended.add(key)
        if forgotten is not None:
            old, old_at = forgotten
            self._dirty_ended.discard(old)
            if old_at < self.checkpointed:
                self._gone_ended.add(old)

    def restored(self) -> None:
        """The state was restored from the changelog's checkpoint at `checkpointed`: the ended streams it remembers
        are there already (those it forgot while being restored are tombstoned at the next checkpoint)."""
        self._dirty_ended = set()

    def adopt(self, keys: Iterable[bytes], streams: Iterable[str], ended: EndedStreams) -> None:
        """The changelog holds exactly `keys`, and the state was built without it: the next checkpoint writes every
        live key and a tombstone for every other key among them."""
        self._stale = set(keys)
        self._stale.discard(PARTITION_KEY)
        self._dirty = set(streams)
        self._dirty_ended = {key for key, _, _ in ended.items()}
        self._gone, self._gone_ended = set(), set()
        self.checkpointed = -1

    def checkpoint_parts(
        self, offset: int, streams: Mapping[str, OpenStream], ended: EndedStreams,
        export: Callable[[StreamObserver], object], *, display: bool, part_s: float,
    ) -> Iterator[Changelog]:  # fmt: skip
        """The changelog records that bring the changelog from the previous checkpoint to `streams` and `ended` at
        source offset `offset` (each key changed since, once, and the partition record last), in parts that take
        about `part_s` each to encode; taking the last part marks them written."""
        part: Changelog = []
        written: set[bytes] = set()
        until = time.perf_counter() + part_s
        for key in sorted(self._dirty):
            raw = stream_key(key)
            part.append((raw, encode_stream(streams[key], export, display=display)))
            written.add(raw)
            if time.perf_counter() >= until:
                yield part
                part, until = [], time.perf_counter() + part_s
        for key in sorted(self._gone):
            if key not in streams:
                raw = stream_key(key)
                part.append((raw, None))
                written.add(raw)
        for key in sorted(self._dirty_ended):
            entry = ended.get(key)
            if entry is not None:
                raw = ended_key(key)
                part.append((raw, encode_ended(entry[0], entry[1])))
                written.add(raw)
        for key in sorted(self._gone_ended):
            if ended.get(key) is None:
                raw = ended_key(key)
                part.append((raw, None))
                written.add(raw)
        part.extend((raw, None) for raw in sorted(self._stale - written))  # every live key is written already
        part.append((PARTITION_KEY, encode_partition(self._topic, self._partition, offset, len(streams), len(ended))))
        self._dirty, self._gone, self._dirty_ended, self._gone_ended, self._stale = set(), set(), set(), set(), set()
        self.checkpointed = offset
        yield part
