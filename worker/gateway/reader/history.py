"""Reads of older records: one run's output records of one partition from an event number up to an offset, and one
display record, with a small pool of group-less consumers (any replica may read any partition).

Kafka has no index by key: the reader finds a start at or before the wanted event by the records' timestamps
(CreateTime, appended in order by the partition's producer) and checks it by the event numbers it finds, going
back further until the first event of the run it meets is at or before the wanted one, or the log no longer holds
it (`NotRetained`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import NamedTuple

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from worker.client import read_to_end
from worker.errors import KafkaWorkerError
from worker.gateway.directory import DisplayPointer
from worker.gateway.reader._records import TERMINAL_TYPE_BYTES, gateway_consumer, seq_and_kind
from worker.gateway.settings import GatewaySettings

__all__ = ["HistoryEvent", "HistoryReader", "NotRetained"]

_FIRST_MARGIN_MS = 2_000  # how far before the hint the first look starts; each miss looks four times further back
_READ_DEADLINE_S = 30.0  # a history read that makes no progress this long fails


class HistoryEvent(NamedTuple):
    """One output record of a run read back: event number, value, record timestamp, terminal."""

    seq: int
    value: bytes
    timestamp_ms: int
    terminal: bool


class NotRetained(Exception):
    """The output topic no longer holds the wanted event (retention removed it)."""


class _Reader:
    """One pooled consumer and the partition it is positioned on (`at`: its next offset there, or -1), paused
    whenever no read of it is under way: the client sends one fetch to a broker at a time, and the broker holds a
    fetch from a partition's end for up to fetch_max_wait_ms, with every later request on the connection behind it."""

    __slots__ = ("at", "consumer", "tp")

    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self.consumer = consumer
        self.tp: TopicPartition | None = None
        self.at = -1

    def place(self, tp: TopicPartition, offset: int) -> None:
        if self.tp != tp:
            self.consumer.assign([tp])
            self.consumer.pause(tp)  # a read resumes it
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
            consumer = gateway_consumer(self._settings, "history", fetch_max_wait_ms=100)
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
            reader.consumer.pause(*reader.consumer.assignment())  # before the loop turns: no fetch sent once done
            self._idle.put_nowait(reader)

    async def display_value(self, pointer: DisplayPointer) -> bytes | None:
        """The value of the display record `pointer` names, None when compaction removed it since."""
        tp = TopicPartition(self._settings.display_topic, pointer.partition)
        async with self._reader() as reader:
            reader.place(tp, pointer.offset)
            reader.consumer.resume(tp)
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
        self, partition: int, run_id: str, from_seq: int, until: int, *, start_at: int
    ) -> AsyncIterator[list[HistoryEvent]]:
        """Batches of run `run_id`'s events from `from_seq` on, in order, among the records of `partition` from
        offset `start_at` (at or before the wanted event's record: the tail saw an earlier event there, or `locate`
        found it) to before offset `until`, stopping after a terminal event. NotRetained when the topic no longer
        holds `from_seq`."""
        tp = TopicPartition(self._settings.output_topic, partition)
        key = run_id.encode()
        offset, next_seq = start_at, from_seq
        while offset < until:
            batch: list[HistoryEvent] = []
            async with self._reader() as reader:
                reader.place(tp, offset)
                offset, done = await self._read_batch(reader, tp, key, until, batch)
            kept = [event for event in batch if event.seq >= next_seq]
            if kept:
                if kept[0].seq != next_seq:  # the log no longer starts where it was expected to
                    raise NotRetained(f"{tp.topic}[{tp.partition}] lacks event {next_seq} of {run_id}")
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
        fetches = read_to_end(consumer, {tp: until}, stall_s=_READ_DEADLINE_S, max_records=2_000)
        async with contextlib.aclosing(fetches):
            async for batch in fetches:
                for record in batch[tp]:
                    if record.key == key:
                        seq, kind = seq_and_kind(record.headers)
                        if seq is not None:
                            terminal = kind in TERMINAL_TYPE_BYTES
                            out.append(HistoryEvent(int(seq), record.value, record.timestamp, terminal))
                reader.at = await consumer.position(tp)
                return reader.at, reader.at >= until
        reader.at = -1  # read to `until`: paused there, sought again next time
        return until, True

    async def locate(
        self, partition: int, run_id: str, from_seq: int, until: int, *, hint_ms: int, known_last: int
    ) -> int | None:
        """An offset of `partition` at or before run `run_id`'s event `from_seq` (None: no such event before `until`,
        it comes live), found from `hint_ms`, a time at or after the event's record; `known_last` is the highest event
        number known to exist (-1: none). NotRetained when the topic no longer holds `from_seq`."""
        tp = TopicPartition(self._settings.output_topic, partition)
        key = run_id.encode()
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
                    raise NotRetained(f"{tp.topic}[{tp.partition}] starts after event {from_seq} of {key.decode()}")
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
