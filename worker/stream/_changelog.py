"""The changelog format (docs/changelog-format.md): a partition's state as keyed JSON records, and back.

Every record of one changelog partition describes the state of one source partition; keys are chosen so that
compaction keeps exactly the live state: one partition record, one record per open stream and one per
remembered ended stream, each removed by a tombstone when its stream ends or is forgotten.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any, Final

import orjson

from worker._value import FrozenValue
from worker.display.projection import DisplayProjection
from worker.errors import CheckpointError, CheckpointVersionError, ConfigError
from worker.observe import loads_exact
from worker.stream._core import StreamObserver
from worker.stream._table import EVENT_TOO_LARGE_CODE, SOURCE_GAP_CODE, OpenStream

__all__ = [
    "CHECKPOINT_FORMAT_VERSION",
    "PARTITION_KEY",
    "CheckpointHeader",
    "decode_ended",
    "decode_stream",
    "encode_ended",
    "encode_partition",
    "encode_stream",
    "ended_key",
    "read_checkpoint_header",
    "split_key",
    "stream_key",
]

CHECKPOINT_FORMAT_VERSION: Final = 1
PARTITION_KEY: Final = b"partition"  # never changes, so any release finds the format version of a changelog
_STREAM: Final = "stream:"
_ENDED: Final = "ended:"
_CLOSED_CODES: Final = frozenset({SOURCE_GAP_CODE, EVENT_TOO_LARGE_CODE})


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
