"""`worker index`: the thread index written from the output topic, for runs whose events were published before the
index was on (an upgrade from 0.3.0).

Every run whose event 0 the output topic still holds gets the start record the worker would have written with it,
and every run whose terminal event it holds the end record, both built by the worker's own builder from those
events (their `timestamp`, number and thread), so a record the worker wrote and one written here are the same
bytes. Records the index already holds are not written again: the index is read after the output topic, and a
start or end record committed with an event read from the output is visible by then (one transaction). What is
missing is written in start order (the output records' append times), in transactions of the worker's own
transactional id prefix, so a run of the command is written whole or not at all and a second run writes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import UnknownTopicOrPartitionError

from worker.cli import quiet_client_logs, readable_settings, settings_parser
from worker.client import (
    make_transactional_producer,
    partition_for,
    principal,
    reach_once,
    read_to_end,
    topic_partitions,
)
from worker.contract import EVENT_ID, INDEX_END, INDEX_START, SEQ, TERMINAL_TYPES, THREAD_ID, TYPE, index_key
from worker.errors import ConfigError, KafkaWorkerError
from worker.recovery import replay_consumer
from worker.settings import Settings
from worker.stream import OutboundRecord, index_record

__all__ = ["IndexBackfill", "backfill_index", "main_index"]

_log = logging.getLogger(__name__)
_TRANSACTION_RECORDS = 10_000


@dataclass
class _Seen:
    """What the output topic holds of one run: its thread, and its event 0 and terminal event (record timestamp,
    event time, number, type)."""

    thread_id: str = ""
    start: tuple[int, int] | None = None  # (record timestamp, event time) of event 0
    end: tuple[int, int, int, str] | None = None  # (record timestamp, event time, number, type) of the terminal


@dataclass
class IndexBackfill:
    """What `worker index` found and wrote."""

    runs: int = 0  # runs with an event on the output topic
    without_start: list[str] = field(default_factory=list)  # runs whose event 0 the output topic no longer holds
    starts_written: int = 0
    ends_written: int = 0
    already: int = 0  # records the index had already

    def as_json(self) -> dict[str, Any]:
        return {"runs": self.runs, "starts_written": self.starts_written, "ends_written": self.ends_written,
                "already_indexed": self.already, "without_event_0": len(self.without_start),
                "without_event_0_runs": self.without_start[:100]}  # fmt: skip


def _header(headers: Any, name: str) -> bytes | None:
    return next((bytes(value) for key, value in headers if key == name), None)


async def _read_all(consumer: AIOKafkaConsumer, topic: str, role: str, settings: Settings,
                    each: Callable[[Any], None]) -> int:  # fmt: skip
    """Feed every committed record of `topic` to `each`, partition by partition; its partition count."""
    partitions = await topic_partitions(consumer, topic, role, principal(settings))
    tps = [TopicPartition(topic, p) for p in partitions]
    consumer.assign(tps)
    start = await consumer.beginning_offsets(tps)
    end = await consumer.end_offsets(tps)
    for tp in tps:
        consumer.seek(tp, start[tp])
    async for batch in read_to_end(consumer, {tp: end[tp] for tp in tps if end[tp] > start[tp]}):
        for records in batch.values():
            for record in records:
                each(record)
    return len(tps)


def _note_output(seen: dict[str, _Seen], record: Any) -> None:
    """Keep what one output record tells of its run's start and end."""
    headers = record.headers
    number, kind, event_id = _header(headers, SEQ), _header(headers, TYPE), _header(headers, EVENT_ID)
    if record.key is None or number is None or event_id is None:
        return
    n = int(number)
    terminal = kind is not None and kind.decode() in TERMINAL_TYPES
    if n != 0 and not terminal:
        return
    run = seen.setdefault(record.key.decode("utf-8", "replace"), _Seen())
    try:
        at = orjson.loads(record.value or b"{}").get("timestamp")
    except (orjson.JSONDecodeError, AttributeError):
        at = None
    at = at if type(at) is int else record.timestamp
    if n == 0:
        run.start = (record.timestamp, at)
        run.thread_id = (_header(headers, THREAD_ID) or b"").decode("utf-8", "replace")
    if terminal and kind is not None and run.end is None:
        run.end = (record.timestamp, at, n, kind.decode())


async def backfill_index(settings: Settings, *, dry_run: bool = False) -> IndexBackfill:
    """Write the thread index records missing for the runs the output topic holds (see the module); with `dry_run`,
    count them and write nothing. ConfigError without a thread index topic, or with one not co-partitioned with
    the output topic."""
    s = settings
    if not s.thread_index_topic:
        raise ConfigError("thread_index_topic is not set: name the thread index topic to write")
    seen: dict[str, _Seen] = {}
    indexed: set[bytes] = set()
    consumer = replay_consumer(s)
    await consumer.start()
    try:
        outputs = await _read_all(consumer, s.output_topic, "output_topic", s, lambda r: _note_output(seen, r))
        partitions = await _read_all(consumer, s.thread_index_topic, "thread_index_topic", s,
                                     lambda r: indexed.add(r.key) if r.key is not None and r.value is not None
                                     else None)  # fmt: skip
    except UnknownTopicOrPartitionError as exc:
        raise ConfigError(f"{exc}: create it, or start the workers with --thread-index-topic (they create it), "
                          "then run this again") from None  # fmt: skip
    finally:
        await consumer.stop()
    if partitions != outputs:
        raise ConfigError(f"thread_index_topic {s.thread_index_topic!r} has {partitions} partitions and output_topic "
                          f"{s.output_topic!r} {outputs}: they must match")  # fmt: skip
    done = IndexBackfill(runs=len(seen))
    due: list[tuple[int, int, OutboundRecord]] = []  # (record timestamp, 0 start / 1 end, record)
    for run_id, run in seen.items():
        if run.start is None:
            done.without_start.append(run_id)
            continue  # no event 0 (retention took it): no thread, no place in the order
        if index_key(INDEX_START, run_id) in indexed:
            done.already += 1
        else:
            due.append((run.start[0], 0, index_record(run_id, run.thread_id, 0, run.start[1], None)))
        if run.end is not None:
            if index_key(INDEX_END, run_id) in indexed:
                done.already += 1
            else:
                stamp, at, n, kind = run.end
                due.append((stamp, 1, index_record(run_id, run.thread_id, n, at, kind)))
    due.sort(key=lambda entry: (entry[0], entry[1]))
    done.starts_written = sum(1 for _, kind, _ in due if kind == 0)
    done.ends_written = len(due) - done.starts_written
    if not dry_run and due:
        await _write(s, [record for _, _, record in due], partitions)
    return done


async def _write(settings: Settings, records: list[OutboundRecord], partitions: int) -> None:
    """`records` into their threads' partitions, in order, in transactions of `_TRANSACTION_RECORDS`."""
    s = settings
    producer = make_transactional_producer(s, f"{s.client_id}-index", s.transactional_id("index-backfill", 0),
                                           transaction_timeout_ms=s.transaction_timeout_ms)  # fmt: skip
    await producer.start()
    try:
        for first in range(0, len(records), _TRANSACTION_RECORDS):
            async with producer.transaction():
                for record in records[first:first + _TRANSACTION_RECORDS]:
                    thread = _header(record.headers, THREAD_ID) or b""
                    await producer.send(s.thread_index_topic, record.value, key=record.key,
                                        headers=list(record.headers), partition=partition_for(thread, partitions))
            _log.info("thread index: %d records written", min(first + _TRANSACTION_RECORDS, len(records)))
    finally:
        await producer.stop()


def main_index(argv: list[str] | None = None) -> int:
    """Entry point of `python -m worker index`: the thread index records missing for the runs the output topic holds,
    written; exit status 0 when done, 1 when the brokers failed it, 2 for settings that cannot work."""
    parser = settings_parser(Settings, argparse.ArgumentParser(
        prog="python -m worker index",
        description="Write the thread index from the output topic: a start record for every run whose first event "
        "it holds and an end record for every run whose terminal event it holds, where the index lacks them "
        "(runs published before --thread-index-topic was on). A second run writes nothing.",
    ))  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="count what would be written, write nothing")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    settings = readable_settings(args, Settings, "index")
    if settings is None:
        return 2
    quiet_client_logs()

    async def index() -> dict[str, Any]:
        await reach_once(settings, timeout_s=30.0)
        return (await backfill_index(settings, dry_run=args.dry_run)).as_json()

    try:
        done = asyncio.run(index())
    except ConfigError as exc:
        print(f"worker index: {exc}", file=sys.stderr)
        return 2
    except (KafkaWorkerError, TimeoutError) as exc:
        print(f"worker index: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(done))
    else:
        verb = "would write" if args.dry_run else "wrote"
        print(f"{done['runs']} runs on the output topic: {verb} {done['starts_written']} start and "
              f"{done['ends_written']} end records; {done['already_indexed']} were in the index already; "
              f"{done['without_event_0']} runs have no event 0 left (not indexed)")
    return 0
