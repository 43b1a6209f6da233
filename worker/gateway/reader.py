"""The gateway's only Kafka code: the tail of the output and display topics, and reads of older output records.

`TopicTail` is two read_committed consumers with no group, one assigned every partition of the display topic from
its beginning (the run directory, ready once read to the end offsets taken at start), one every partition of the
output topic from its end. It hands each record to the directory or the hub synchronously, and never writes to a
socket.

`HistoryReader` reads one run's output records of one partition from an event number up to an offset, with a small
pool of consumers. Kafka has no index by key: it finds a start at or before the wanted event by the records'
timestamps (CreateTime, appended in order by the partition's producer) and checks it by the event numbers it
finds, going back further until the first event of the run it meets is at or before the wanted one, or the log
no longer holds it (`NotHeld`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import NamedTuple

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import (
    KafkaError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
    for_code,
)
from aiokafka.partitioner import murmur2

from worker.errors import ConfigError, KafkaWorkerError
from worker.gateway.directory import DisplayPointer, RunDirectory
from worker.gateway.hub import Hub
from worker.gateway.settings import GatewaySettings
from worker.kafka._aiokafka import topic_metadata
from worker.kafka.clients import connection_options, principal
from worker.kafka.diagnosis import Denied, authorization_error
from worker.kafka.startup import until_reachable, wait_beating

__all__ = ["TERMINAL_TYPES", "HistoryEvent", "HistoryReader", "NotHeld", "TopicTail"]

_log = logging.getLogger(__name__)
TERMINAL_TYPES = frozenset({b"RUN_FINISHED", b"RUN_ERROR"})
_FIRST_MARGIN_MS = 2_000  # how far before the hint the first look starts; each miss looks four times further back
_READ_DEADLINE_S = 30.0  # a history read that makes no progress this long fails
_BATCH_RECORDS = 500  # records handed to the hub between two turns of the writers (getmany may not yield)
_DENIED_MAX_S = 10.0  # a refused read of the tail is tried again at most this far apart
_UNKNOWN_TOPIC, _TOPIC_DENIED = 3, 29
_FETCH_DENIED = "Not authorized to read from topic"  # aiokafka's own warning, which the tail names itself


class HistoryEvent(NamedTuple):
    """One output record of a run read back: event number, value, record timestamp, terminal."""

    seq: int
    value: bytes
    timestamp_ms: int
    terminal: bool


class NotHeld(Exception):
    """The output topic no longer holds the wanted event (retention removed it)."""


def _header(headers: object, name: str) -> bytes | None:
    for key, value in headers:  # type: ignore[attr-defined]
        if key == name:
            return bytes(value)
    return None


def _seq_and_kind(headers: list[tuple[str, bytes]]) -> tuple[bytes | None, bytes | None]:
    """An output record's `agui-seq` and `agui-type` headers (None where missing): read where the worker writes
    them, second and third (worker/stream/_build.py), and looked up by name in any other layout."""
    if len(headers) > 2 and headers[1][0] == "agui-seq" and headers[2][0] == "agui-type":
        return headers[1][1], headers[2][1]
    return _header(headers, "agui-seq"), _header(headers, "agui-type")


def _consumer(settings: GatewaySettings, role: str, **options: object) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        client_id=f"{settings.client_id}-gateway-{role}",
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        **options,
        **connection_options(settings),
    )


class _NamedByTheTail(logging.Filter):
    """Drops aiokafka's warning of a refused fetch: the tail names the topic, the right and the principal."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_FETCH_DENIED)


_FETCH_LOG = logging.getLogger("aiokafka.consumer.fetcher")
_FETCH_FILTER = _NamedByTheTail()


async def _partitions(consumer: AIOKafkaConsumer, topic: str, role: str, who: str) -> list[TopicPartition]:
    """The topic's partitions, asked of a broker by name without creating the topic (a broker that auto-creates
    topics would make a display topic that is not compacted); AuthorizationError without Describe on it,
    UnknownTopicOrPartitionError (retried) while it does not exist."""
    code, partitions = await topic_metadata(consumer, topic)
    if code == _TOPIC_DENIED:
        raise authorization_error((Denied("Topic", topic, ("DESCRIBE",)),), who, f"describe {role} {topic!r}")
    if code == _UNKNOWN_TOPIC:  # retried: the worker creates the display topic when it starts
        raise UnknownTopicOrPartitionError(f"{role} {topic!r} does not exist yet")
    if code:
        raise for_code(code)(f"describing {role} {topic!r}")
    if not partitions:
        raise UnknownTopicOrPartitionError(f"{role} {topic!r} has no partitions yet")
    return [TopicPartition(topic, partition) for partition in partitions]


class TopicTail:
    """The live read of both topics, each by a consumer of its own (a large fetch of display records never holds
    up an event); `read` is set once the display topic was read to its end offsets taken at start, `ready` while
    that is so and the loops beat."""

    def __init__(self, settings: GatewaySettings, hub: Hub, directory: RunDirectory, *,
                 on_batch: Callable[[int], None] | None = None) -> None:  # fmt: skip
        self._settings = settings
        self._hub = hub
        self._directory = directory
        self._on_batch = on_batch
        self._consumers: list[AIOKafkaConsumer] = []  # the output topic's, then the display topic's
        self._display_end: dict[TopicPartition, int] = {}
        self._who = principal(settings)
        self.partitions = 0
        self.read = asyncio.Event()  # set once the display topic was read to its end offsets taken at start
        self.last_beat = time.monotonic()

    async def start(self, stop: asyncio.Event) -> bool:
        """Assign both topics and take the start positions, retrying (one log line per attempt) until both exist
        and this principal may describe them; False when `stop` came first."""
        if _FETCH_FILTER not in _FETCH_LOG.filters:
            _FETCH_LOG.addFilter(_FETCH_FILTER)
        started = await until_reachable(self._start_once, stop, self.beat)
        return started is not None

    def beat(self) -> None:
        """Mark the tail's loop alive (for `/livez`)."""
        self.last_beat = time.monotonic()

    async def _start_once(self) -> bool:
        settings = self._settings
        options = {"fetch_max_wait_ms": settings.fetch_max_wait_ms, "max_partition_fetch_bytes": 4 * 1024 * 1024}
        events, displays = _consumer(settings, "tail", **options), _consumer(settings, "display", **options)
        started: list[AIOKafkaConsumer] = []
        try:
            for consumer in (events, displays):
                await consumer.start()
                started.append(consumer)
            output = await _partitions(events, settings.output_topic, "output_topic", self._who)
            display = await _partitions(displays, settings.display_topic, "display_topic", self._who)
            if len(output) != len(display):
                raise ConfigError(
                    f"display topic {settings.display_topic!r} has {len(display)} partitions and output topic "
                    f"{settings.output_topic!r} {len(output)}: the worker writes them co-partitioned, they must match"
                )
            events.assign(output)
            displays.assign(display)
            ends = await events.end_offsets(output)
            for tp, end in ends.items():
                events.seek(tp, end)
                self._hub.passed(tp.partition, end)
            await displays.seek_to_beginning(*display)
            self._display_end = {tp: end for tp, end in (await displays.end_offsets(display)).items() if end > 0}
        except BaseException:
            for consumer in started:
                await consumer.stop()
            raise
        self._consumers = [events, displays]
        self.partitions = len(output)
        if not self._display_end:
            self.read.set()
        return True

    @property
    def ready(self) -> bool:
        return self.read.is_set()

    def partition_of(self, run_id: str) -> int:
        """The partition of a run's records: Kafka's default partitioner (murmur2 of the key), as the worker's."""
        return int((murmur2(run_id.encode()) & 0x7FFFFFFF) % self.partitions)

    async def run(self, stop: asyncio.Event) -> None:
        """Read until `stop`; a client error is logged and retried, the consumers keep their positions."""
        if not self._consumers:
            raise KafkaWorkerError("the topic tail was not started")
        events, displays = self._consumers
        await asyncio.gather(self._loop(stop, events, "output_topic", self._output),
                             self._loop(stop, displays, "display_topic", self._display))  # fmt: skip

    async def _loop(
        self, stop: asyncio.Event, consumer: AIOKafkaConsumer, role: str, handle: Callable[[int, list[object]], None]
    ) -> None:
        denied_wait = 1.0
        topic = getattr(self._settings, role)
        while not stop.is_set():
            self.beat()
            try:
                batches = await consumer.getmany(timeout_ms=500, max_records=_BATCH_RECORDS)
            except TopicAuthorizationFailedError:  # named once per attempt; a grant heals it
                refusal = authorization_error((Denied("Topic", topic, ("READ",)),), self._who, f"read {role} {topic!r}")
                _log.error("%s; retrying in %.1f s", refusal, denied_wait)
                await wait_beating(stop, self.beat, denied_wait)
                denied_wait = min(denied_wait * 2, _DENIED_MAX_S)
                continue
            except KafkaError as exc:
                _log.warning("reading %s %r failed, retrying: %s", role, topic, exc)
                await wait_beating(stop, self.beat, 1.0)
                continue
            denied_wait = 1.0
            count = 0
            for tp, records in batches.items():
                count += len(records)
                handle(tp.partition, records)
            if role == "display_topic" and not self.read.is_set():
                await self._check_ready(consumer)
            if self._on_batch is not None and count:
                self._on_batch(count)
            await asyncio.sleep(0)  # the writers of what was just queued go before the next batch

    def _output(self, partition: int, records: list[object]) -> None:
        publish = self._hub.publish
        read_at = time.monotonic()
        for record in records:
            key, value = record.key, record.value  # type: ignore[attr-defined]
            seq, kind = _seq_and_kind(record.headers)  # type: ignore[attr-defined]
            if key is None or value is None or seq is None:
                continue
            publish(partition, record.offset, key.decode(), int(seq), value,  # type: ignore[attr-defined]
                    record.timestamp, kind in TERMINAL_TYPES, read_at)  # type: ignore[attr-defined]  # fmt: skip

    def _display(self, partition: int, records: list[object]) -> None:
        directory, hub = self._directory, self._hub
        for record in records:
            key, value, headers = record.key, record.value, record.headers  # type: ignore[attr-defined]
            if key is None:
                continue
            run_id = key.decode()
            seq = _header(headers, "agui-seq")
            thread = _header(headers, "thread-id") or b""
            pointer = DisplayPointer(partition, record.offset, int(seq) if seq else -1,  # type: ignore[attr-defined]
                                     record.timestamp, thread.decode())  # type: ignore[attr-defined]  # fmt: skip
            directory.update(run_id, pointer, value)
            if seq is not None:
                hub.displayed(run_id, pointer.seq)

    async def _check_ready(self, consumer: AIOKafkaConsumer) -> None:
        for tp, end in list(self._display_end.items()):
            if await consumer.position(tp) >= end:
                del self._display_end[tp]
        if not self._display_end:
            self.read.set()
            _log.info("run directory read: %d runs", len(self._directory))

    async def stop(self) -> None:
        consumers, self._consumers = self._consumers, []
        for consumer in consumers:
            await consumer.stop()


class _Reader:
    """One pooled consumer and the partition it is positioned on (`at`: its next offset there, or -1)."""

    __slots__ = ("at", "consumer", "tp")

    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self.consumer = consumer
        self.tp: TopicPartition | None = None
        self.at = -1

    def place(self, tp: TopicPartition, offset: int) -> None:
        if self.tp != tp:
            self.consumer.assign([tp])
            self.tp = tp
            self.at = -1
        if self.at != offset:
            self.consumer.seek(tp, offset)
            self.at = offset


class HistoryReader:
    """Reads of older records of the output and display topics, `size` at a time; a read the client fails raises
    KafkaWorkerError (no error of the client's own passes this class)."""

    def __init__(self, settings: GatewaySettings, size: int) -> None:
        self._settings = settings
        self._size = size
        self._idle: asyncio.Queue[_Reader] = asyncio.Queue()
        self._all: list[_Reader] = []

    async def start(self) -> None:
        for _ in range(self._size):
            consumer = _consumer(self._settings, "history", fetch_max_wait_ms=100)
            await consumer.start()
            reader = _Reader(consumer)
            self._all.append(reader)
            self._idle.put_nowait(reader)

    async def stop(self) -> None:
        for reader in self._all:
            with contextlib.suppress(Exception):
                await reader.consumer.stop()
        self._all.clear()

    @contextlib.asynccontextmanager
    async def _reader(self) -> AsyncIterator[_Reader]:
        reader = await self._idle.get()
        try:
            yield reader
        except BaseException as exc:
            reader.at = -1  # failed or interrupted mid-read: seek again next time
            if isinstance(exc, KafkaError):  # the client's error becomes the worker's here, at the client boundary
                raise KafkaWorkerError(str(exc)) from exc
            raise
        finally:
            self._idle.put_nowait(reader)

    async def display_value(self, pointer: DisplayPointer) -> bytes | None:
        """The value of the display record `pointer` names, None when compaction removed it since."""
        tp = TopicPartition(self._settings.display_topic, pointer.partition)
        async with self._reader() as reader:
            reader.place(tp, pointer.offset)
            deadline = time.monotonic() + _READ_DEADLINE_S
            while time.monotonic() < deadline:
                records = (await reader.consumer.getmany(tp, timeout_ms=500, max_records=1)).get(tp, [])
                if records:
                    record = records[0]
                    reader.at = record.offset + 1
                    return record.value if record.offset == pointer.offset else None
                if await reader.consumer.position(tp) > pointer.offset:
                    reader.at = -1
                    return None
        raise KafkaWorkerError(f"reading display record {tp.topic}[{tp.partition}]@{pointer.offset} timed out")

    async def events(
        self, partition: int, run_id: str, from_seq: int, until: int, *, hint_ms: int, known_last: int,
        start_at: int | None = None,
    ) -> AsyncIterator[list[HistoryEvent]]:
        """Batches of run `run_id`'s events from `from_seq` on, in order, among the records of `partition` before
        offset `until`, stopping after a terminal event. `start_at` is an offset at or before the wanted event's
        record when the caller knows one (the tail saw an earlier event there), else it is found from `hint_ms`,
        a time at or after the wanted event's record; `known_last` is the highest event number known to exist
        (-1: none). NotHeld when the topic no longer holds `from_seq`."""
        tp = TopicPartition(self._settings.output_topic, partition)
        key = run_id.encode()
        start = start_at
        if start is None:
            start = await self._locate(tp, key, from_seq, until, hint_ms=hint_ms, known_last=known_last)
        if start is None:
            return
        offset, next_seq = start, from_seq
        while offset < until:
            batch: list[HistoryEvent] = []
            async with self._reader() as reader:
                reader.place(tp, offset)
                offset, done = await self._read_batch(reader, tp, key, until, batch)
            kept = [event for event in batch if event.seq >= next_seq]
            if kept:
                if kept[0].seq != next_seq:  # the log no longer starts where it was expected to
                    raise NotHeld(f"{tp.topic}[{tp.partition}] lacks event {next_seq} of {run_id}")
                next_seq = kept[-1].seq + 1
                yield kept
                if kept[-1].terminal:
                    return
            if done:
                return

    async def _read_batch(
        self, reader: _Reader, tp: TopicPartition, key: bytes, until: int, out: list[HistoryEvent]
    ) -> tuple[int, bool]:
        """Read one fetch of `tp` from the reader's position, appending `key`'s events before `until`; returns the
        next offset and whether `until` was reached."""
        consumer = reader.consumer
        deadline = time.monotonic() + _READ_DEADLINE_S
        while True:
            records = (await consumer.getmany(tp, timeout_ms=200, max_records=2_000)).get(tp, [])
            if records:
                for record in records:
                    if record.offset >= until:
                        reader.at = -1
                        return until, True
                    if record.key == key:
                        seq, kind = _seq_and_kind(record.headers)
                        if seq is not None:
                            out.append(HistoryEvent(int(seq), record.value, record.timestamp, kind in TERMINAL_TYPES))
                reader.at = records[-1].offset + 1
                return reader.at, reader.at >= until
            position = await consumer.position(tp)
            if position >= until:
                reader.at = -1
                return until, True
            if time.monotonic() > deadline:
                raise KafkaWorkerError(f"reading {tp.topic}[{tp.partition}] made no progress at offset {position}")

    async def _locate(
        self, tp: TopicPartition, key: bytes, from_seq: int, until: int, *, hint_ms: int, known_last: int
    ) -> int | None:
        """An offset at or before event `from_seq` of `key` (None: no such event before `until`, it comes live)."""
        margin = _FIRST_MARGIN_MS
        async with self._reader() as reader:
            consumer = reader.consumer
            if reader.tp != tp:
                reader.place(tp, 0)
            log_start = (await consumer.beginning_offsets([tp]))[tp]
            while True:
                found = (await consumer.offsets_for_times({tp: max(0, hint_ms - margin)}))[tp]
                start = until if found is None else min(found.offset, until)
                if hint_ms - margin <= 0:
                    start = log_start
                first = await self._first_of(reader, tp, key, start, until)
                if first is not None and first <= from_seq:
                    return start
                if first is None and from_seq > known_last:
                    return None  # nothing of the run before `until` from here: the wanted event is yet to come
                if start <= log_start:
                    raise NotHeld(f"{tp.topic}[{tp.partition}] starts after event {from_seq} of {key.decode()}")
                margin *= 4

    async def _first_of(
        self, reader: _Reader, tp: TopicPartition, key: bytes, start: int, until: int
    ) -> int | None:
        """The event number of `key`'s first record at or after `start` and before `until`."""
        offset = start
        while offset < until:
            found: list[HistoryEvent] = []
            reader.place(tp, offset)
            offset, done = await self._read_batch(reader, tp, key, until, found)
            if found:
                return found[0].seq
            if done:
                break
        return None
