"""`worker inspect`: what a consumer group holds, read back from the brokers without changing anything.

Per source partition: the committed offset C and the replay start R of its metadata, the end offset (the last
stable offset: `read_committed`) and the lag, and the latest changelog checkpoint at K, read and decoded by the
worker's own restore code (`restore.read_changelog`, `worker.stream`'s checkpoint decoders): its age, open and
remembered runs, bytes, and the oldest open run. For one run: whether the checkpoint holds it open or ended, its
last event on the output topic (its `agui-seq`, and the source offset of the item it came from), and its latest
display record, restored by `DisplayReader`. For one thread: its runs in start order as its thread index partition
holds them. Every read is group-less, commits nothing and ends by a deadline.

What the checkpoint says is the state at K; the worker checkpoints at most `checkpoint_interval_ms` apart and at
every stop, so K equals C for a stopped group and trails it by at most one interval for a running one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import UnknownTopicOrPartitionError
from aiokafka.structs import ConsumerRecord

from worker.cli import quiet_client_logs, readable_settings, settings_parser
from worker.client import make_admin, partition_for, principal, reach_once, read_to_end, topic_partitions
from worker.contract import THREAD_ID, ThreadRuns, read_index_record
from worker.display import DisplayReader
from worker.errors import CheckpointError, CheckpointVersionError, ConfigError, KafkaWorkerError
from worker.recovery import read_changelog, replay_consumer
from worker.settings import Settings
from worker.stream import (
    PARTITION_KEY,
    decode_ended,
    decode_replay_metadata,
    decode_stream,
    default_core,
    ended_key,
    read_checkpoint_header,
    split_key,
    stream_key,
)
from worker.tools.inspect_text import describe_group, describe_run, describe_thread

__all__ = ["inspect_group", "inspect_run", "inspect_thread", "main_inspect"]

_T = TypeVar("_T")
_STEP = 2_000  # offsets read at a time when looking backward for a run's latest record


class _Deadline:
    """The time left for one inspection; every broker call is bounded by it."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self.seconds = seconds

    def share(self, part: float) -> float:
        """A monotonic time `part` of the time left from now."""
        now = time.monotonic()
        return now + max(0.0, self.at - now) * part

    async def bound(self, call: Awaitable[_T], doing: str) -> _T:
        try:
            return await asyncio.wait_for(call, max(0.001, self.at - time.monotonic()))
        except TimeoutError:
            raise TimeoutError(f"{doing} did not finish within {self.seconds:g} s (--timeout-ms)") from None


async def _partitions(consumer: AIOKafkaConsumer, settings: Settings, topic: str, role: str) -> int:
    """The partition count of `topic`; ConfigError when it does not exist, AuthorizationError without Describe."""
    try:
        return len(await topic_partitions(consumer, topic, role, principal(settings)))
    except UnknownTopicOrPartitionError:
        raise ConfigError(f"{role} {topic!r} does not exist") from None


async def _records(
    consumer: AIOKafkaConsumer, tp: TopicPartition, start: int, stop: int, deadline: _Deadline
) -> list[ConsumerRecord[bytes, bytes]]:
    """The committed records of `tp` in `[start, stop)`, `stop` at most the partition's end offset."""
    consumer.assign([tp])
    consumer.seek(tp, start)
    found: list[ConsumerRecord[bytes, bytes]] = []

    async def read() -> None:
        async for batch in read_to_end(consumer, {tp: stop}, max_records=_STEP):
            found.extend(batch[tp])

    await deadline.bound(read(), f"reading {tp.topic}[{tp.partition}]")
    return found


async def _latest(
    consumer: AIOKafkaConsumer, tp: TopicPartition, key: bytes, low: int, high: int, *, deadline: _Deadline,
    until: float,
) -> tuple[ConsumerRecord[bytes, bytes] | None, int]:  # fmt: skip
    """The last record of `key` in `[low, high)` of `tp`, looked for backward from `high` a step at a time until the
    monotonic time `until`; and the lowest offset searched (`low` when the search reached it)."""
    stop = high
    while stop > low and time.monotonic() < until:
        start = max(low, stop - _STEP)
        mine = [rec for rec in await _records(consumer, tp, start, stop, deadline) if rec.key == key]
        if mine:
            return mine[-1], start
        stop = start
    return None, stop


def _header(record: ConsumerRecord[bytes, bytes], name: str) -> str | None:
    return next((bytes(value).decode() for key, value in record.headers if key == name), None)


def _age_s(timestamp_ms: int | None, now_ms: int) -> float | None:
    return None if timestamp_ms is None else round(max(0, now_ms - timestamp_ms) / 1000, 3)


async def _checkpoint(
    consumer: AIOKafkaConsumer, settings: Settings, partition: int, *, now_ms: int, max_runs: int,
    deadline: _Deadline,
) -> dict[str, Any]:
    """The latest checkpoint of changelog partition `partition`, decoded as a restore decodes it."""
    s = settings
    ctp = TopicPartition(s.changelog_topic_name, partition)
    consumer.assign([ctp])
    consumer.pause(ctp)
    changelog = await deadline.bound(read_changelog(consumer, ctp), f"reading {ctp.topic}[{partition}]")
    values = changelog.values
    described: dict[str, Any] = {"records_read": changelog.records,
                                 "bytes": sum(len(key) + len(value) for key, value in values.items())}  # fmt: skip
    try:
        header = read_checkpoint_header(values, s.source_topic, partition)
        if header is None:
            return {**described, "offset": None, "error": "the changelog partition holds no checkpoint"}
        restore = default_core().restore_observer
        runs: list[dict[str, Any]] = []
        remembered = 0
        for raw, value in values.items():
            if raw == PARTITION_KEY:
                continue
            is_open, run_id = split_key(raw, s.source_topic, partition)
            if is_open:
                stream = decode_stream(raw, value, header, restore)
                runs.append({"run_id": run_id, "thread_id": stream.thread_id, "agui_seq": stream.n - 1,
                             "first_offset": stream.first_offset, "closed_by": stream.closed_by})  # fmt: skip
            else:
                decode_ended(raw, value, header)
                remembered += 1
    except (CheckpointError, CheckpointVersionError) as exc:
        return {**described, "offset": None, "error": f"{exc}: the next rebuild replays the source instead"}
    runs.sort(key=lambda run: (run["first_offset"], run["run_id"]))
    return {
        **described, "offset": header.offset, "written_ms": changelog.checkpoint_ms,
        "age_s": _age_s(changelog.checkpoint_ms, now_ms), "worker": header.worker, "open_runs": len(runs),
        "remembered_runs": remembered, "runs": runs[:max_runs], "runs_truncated": len(runs) > max_runs,
        "error": None,
    }  # fmt: skip


async def _oldest_age(
    consumer: AIOKafkaConsumer, tp: TopicPartition, first_offset: int, end: int, *, now_ms: int,
    deadline: _Deadline,
) -> float | None:
    """The age of the source record at `first_offset` (None when retention removed it)."""
    if first_offset >= end:
        return None
    recs = await _records(consumer, tp, first_offset, first_offset + 1, deadline)
    return _age_s(recs[0].timestamp, now_ms) if recs and recs[0].offset == first_offset else None


async def _offsets(
    admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer, settings: Settings, tps: list[TopicPartition],
    deadline: _Deadline,
) -> tuple[dict[TopicPartition, Any], dict[TopicPartition, int], dict[TopicPartition, int]]:  # fmt: skip
    committed = await deadline.bound(admin.list_consumer_group_offsets(settings.group_id, partitions=tps),
                                     "reading the group's committed offsets")  # fmt: skip
    start = await deadline.bound(consumer.beginning_offsets(tps), "reading the log start offsets")
    end = await deadline.bound(consumer.end_offsets(tps), "reading the end offsets")
    return committed, start, end


async def inspect_group(settings: Settings, *, max_runs: int = 20, timeout_s: float = 60.0) -> dict[str, Any]:
    """What the group holds per source partition (the JSON `docs/inspect.schema.json` describes)."""
    s = settings
    deadline = _Deadline(timeout_s)
    now_ms = int(time.time() * 1000)
    admin, consumer = make_admin(s, f"{s.client_id}-inspect"), replay_consumer(s)
    await deadline.bound(admin.start(), "starting the admin client")
    try:
        await deadline.bound(consumer.start(), "starting the consumer")
        count = await deadline.bound(_partitions(consumer, s, s.source_topic, "source_topic"), "describing the source")
        changelog = s.changelog and await _exists(consumer, s, s.changelog_topic_name, "changelog_topic")
        tps = [TopicPartition(s.source_topic, p) for p in range(count)]
        committed, start, end = await _offsets(admin, consumer, s, tps, deadline)
        (group,) = await deadline.bound(admin.describe_consumer_groups([s.group_id]), "describing the group")
        _, _, state, _, _, members, *_ = group.groups[0]
        partitions = []
        for tp in tps:
            entry = committed.get(tp)
            offset = entry.offset if entry is not None and entry.offset >= 0 else None
            row: dict[str, Any] = {
                "partition": tp.partition, "log_start": start[tp], "end_offset": end[tp], "committed": offset,
                "lag": end[tp] - (offset if offset is not None else start[tp]),
                "replay_from": decode_replay_metadata(entry.metadata) if entry is not None else None,
                "checkpoint": None,
            }  # fmt: skip
            if changelog:
                checkpoint = await _checkpoint(consumer, s, tp.partition, now_ms=now_ms, max_runs=max_runs,
                                               deadline=deadline)
                oldest = checkpoint.get("runs") or []
                if checkpoint["error"] is None:
                    checkpoint["oldest_open_run"] = None if not oldest else {
                        "run_id": oldest[0]["run_id"], "first_offset": oldest[0]["first_offset"],
                        "age_s": await _oldest_age(consumer, tp, oldest[0]["first_offset"], end[tp], now_ms=now_ms,
                                                  deadline=deadline),
                    }  # fmt: skip
                row["checkpoint"] = checkpoint
            partitions.append(row)
        display = await _display_partitions(consumer, s, deadline) if s.display_topic else None
    finally:
        await consumer.stop()
        await admin.close()
    return {
        "group": s.group_id, "group_state": state, "members": len(members), "source_topic": s.source_topic,
        "changelog_topic": s.changelog_topic_name if changelog else None, "inspected_ms": now_ms,
        "partitions": partitions, "display": display,
    }  # fmt: skip


async def _exists(consumer: AIOKafkaConsumer, settings: Settings, topic: str, role: str) -> bool:
    try:
        await _partitions(consumer, settings, topic, role)
    except ConfigError:
        return False
    return True


async def _display_partitions(consumer: AIOKafkaConsumer, settings: Settings, deadline: _Deadline) -> dict[str, Any]:
    """The display topic's partitions (co-partitioned with the output, not the source): the offsets it holds."""
    topic = settings.display_topic
    try:
        count = await _partitions(consumer, settings, topic, "display_topic")
    except ConfigError:
        return {"topic": topic, "partitions": []}
    tps = [TopicPartition(topic, p) for p in range(count)]
    start = await deadline.bound(consumer.beginning_offsets(tps), "reading the display topic's offsets")
    end = await deadline.bound(consumer.end_offsets(tps), "reading the display topic's offsets")
    return {"topic": topic, "partitions": [{"partition": tp.partition, "log_start": start[tp], "end_offset": end[tp]}
                                           for tp in tps]}  # fmt: skip


async def inspect_run(settings: Settings, run_id: str, *, timeout_s: float = 60.0) -> dict[str, Any]:
    """Where one run stands (the JSON `docs/inspect.schema.json` describes as `run`)."""
    s = settings
    deadline = _Deadline(timeout_s)
    key = run_id.encode()
    admin, consumer = make_admin(s, f"{s.client_id}-inspect"), replay_consumer(s)
    await deadline.bound(admin.start(), "starting the admin client")
    try:
        await deadline.bound(consumer.start(), "starting the consumer")
        sources = await _partitions(consumer, s, s.source_topic, "source_topic")
        outputs = await _partitions(consumer, s, s.output_topic, "output_topic")
        source = TopicPartition(s.source_topic, partition_for(key, sources))
        output = TopicPartition(s.output_topic, partition_for(key, outputs))
        committed, _, _ = await _offsets(admin, consumer, s, [source], deadline)
        entry = committed.get(source)
        answer: dict[str, Any] = {
            "run_id": run_id, "source_partition": source.partition, "output_partition": output.partition,
            "committed": entry.offset if entry is not None and entry.offset >= 0 else None, "checkpoint_offset": None,
            "state": "unknown", "open": None, "ended": None,
        }  # fmt: skip
        if s.changelog and await _exists(consumer, s, s.changelog_topic_name, "changelog_topic"):
            answer.update(await _in_checkpoint(consumer, s, source.partition, run_id, deadline))
        # The backward searches share the time left: the output's half of it, the display's all that remains.
        answer["last_event"], searched = await _last_event(consumer, output, key, deadline, deadline.share(0.5))
        answer["searched_from"] = {"output": searched, "display": None}
        if s.display_topic and await _exists(consumer, s, s.display_topic, "display_topic"):
            answer["display"], answer["searched_from"]["display"] = await _display(
                consumer, s, run_id, output.partition, deadline=deadline, until=deadline.share(0.9))
        else:
            answer["display"] = None
    finally:
        await consumer.stop()
        await admin.close()
    last, ended = answer["last_event"], answer["ended"]
    answer["agui_seq"] = last["agui_seq"] if last is not None else \
        (answer["open"]["agui_seq"] if answer["open"] is not None else None)  # fmt: skip
    answer["last_source_offset"] = last["source_offset"] if last is not None else \
        (ended["ended_at"] if ended is not None else None)  # fmt: skip
    return answer


async def inspect_thread(settings: Settings, thread_id: str, *, timeout_s: float = 60.0) -> dict[str, Any]:
    """A thread's runs in start order, as its partition of the thread index topic holds them (the JSON
    `docs/inspect.schema.json` describes as `thread`); ConfigError without a thread index topic."""
    s = settings
    if not s.thread_index_topic:
        raise ConfigError("thread_index_topic is not set: the worker writes no thread index to inspect")
    deadline = _Deadline(timeout_s)
    consumer = replay_consumer(s)
    await deadline.bound(consumer.start(), "starting the consumer")
    try:
        partitions = await _partitions(consumer, s, s.thread_index_topic, "thread_index_topic")
        tp = TopicPartition(s.thread_index_topic, partition_for(thread_id.encode(), partitions))
        start = (await deadline.bound(consumer.beginning_offsets([tp]), "reading the index's offsets"))[tp]
        end = (await deadline.bound(consumer.end_offsets([tp]), "reading the index's offsets"))[tp]
        thread = ThreadRuns(thread_id)
        for record in await _records(consumer, tp, start, end, deadline):
            if _header(record, THREAD_ID) == thread_id:
                entry = read_index_record(record.key, record.value, thread_id)
                if entry is not None:
                    thread.apply(entry, record.offset)
    finally:
        await consumer.stop()
    return {"thread_id": thread_id, "index_partition": tp.partition, "read": [start, end],
            "runs": [{**run.as_json(), "startOffset": run.start_offset} for run in thread.runs],
            "unstarted": sorted(run for run, found in thread.by_run.items() if found.start_offset is None)}


async def _in_checkpoint(
    consumer: AIOKafkaConsumer, settings: Settings, partition: int, run_id: str, deadline: _Deadline
) -> dict[str, Any]:
    """The run as the latest checkpoint holds it: open, ended (remembered) or unknown."""
    s = settings
    ctp = TopicPartition(s.changelog_topic_name, partition)
    consumer.assign([ctp])
    consumer.pause(ctp)
    values = (await deadline.bound(read_changelog(consumer, ctp), f"reading {ctp.topic}[{partition}]")).values
    header = read_checkpoint_header(values, s.source_topic, partition)
    if header is None:
        return {}
    found: dict[str, Any] = {"checkpoint_offset": header.offset}
    for raw in (stream_key(run_id), ended_key(run_id)):
        value = values.get(raw)
        if value is None:
            continue
        is_open, _ = split_key(raw, s.source_topic, partition)
        if is_open:
            stream = decode_stream(raw, value, header, default_core().restore_observer)
            found["state"] = "open"
            found["open"] = {"thread_id": stream.thread_id, "agui_seq": stream.n - 1,
                             "first_offset": stream.first_offset, "closed_by": stream.closed_by,
                             "runs": dict(stream.last)}  # fmt: skip
        else:
            last_sequence, ended_at = decode_ended(raw, value, header)
            found["state"] = "ended"
            found["ended"] = {"last_sequence": last_sequence, "ended_at": ended_at}
    return found


async def _last_event(
    consumer: AIOKafkaConsumer, output: TopicPartition, key: bytes, deadline: _Deadline, until: float
) -> tuple[dict[str, Any] | None, int]:
    """The run's latest committed output record (its `agui-seq`, type and the source offset it came from), and
    where the search stopped."""
    start = (await consumer.beginning_offsets([output]))[output]
    end = (await consumer.end_offsets([output]))[output]
    record, searched = await _latest(consumer, output, key, start, end, deadline=deadline, until=until)
    if record is None:
        return None, searched
    seq, source_offset = _header(record, "agui-seq"), _header(record, "source-offset")
    return {"offset": record.offset, "timestamp_ms": record.timestamp, "type": _header(record, "agui-type"),
            "agui_seq": int(seq) if seq is not None else None,
            "source_offset": int(source_offset) if source_offset is not None else None}, searched  # fmt: skip


async def _display(
    consumer: AIOKafkaConsumer, settings: Settings, run_id: str, partition: int, *, deadline: _Deadline,
    until: float,
) -> tuple[dict[str, Any] | None, int]:
    """The run's latest display record, restored as a UI backend restores it, and where the search stopped."""
    tp = TopicPartition(settings.display_topic, partition)
    start = (await consumer.beginning_offsets([tp]))[tp]
    end = (await consumer.end_offsets([tp]))[tp]
    record, searched = await _latest(consumer, tp, run_id.encode(), start, end, deadline=deadline, until=until)
    if record is None or record.value is None:
        return None, searched
    seq = _header(record, "agui-seq")
    agui_seq = int(seq) if seq is not None else None
    reader = DisplayReader(run_id, record.value, agui_seq)
    return {"offset": record.offset, "timestamp_ms": record.timestamp, "agui_seq": agui_seq,
            "bytes": len(record.value), "items": len(reader.items),
            "evicted": reader.evicted.count if reader.evicted is not None else 0}, searched  # fmt: skip


def main_inspect(argv: list[str] | None = None) -> int:
    """Entry point of `python -m worker inspect`: what the group holds, as text or JSON; exit status 0 when it was
    read, 1 when the brokers could not answer it in time, 2 for settings that cannot work."""
    parser = settings_parser(Settings, argparse.ArgumentParser(
        prog="python -m worker inspect",
        description="Show, changing nothing, what a group of workers holds: offsets, lag, checkpoints, open runs; "
        "or where one run stands, or one thread's runs.",
    ))  # fmt: skip
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--run", default=None, metavar="ID", help="show where the run with this root run id stands")
    which.add_argument("--thread", default=None, metavar="ID",
                       help="list this thread's runs in start order, as the thread index topic holds them")
    parser.add_argument("--max-runs", type=int, default=20, metavar="N",
                        help="open runs listed per partition, oldest first (default 20)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (docs/inspect.schema.json)")
    parser.add_argument("--timeout-ms", type=int, default=60_000, metavar="MS",
                        help="longest the whole inspection may take (default 60000)")
    args = parser.parse_args(argv)
    settings = readable_settings(args, Settings, "inspect")
    if settings is None:
        return 2
    quiet_client_logs()
    timeout_s = args.timeout_ms / 1000

    async def inspect() -> dict[str, Any]:
        await reach_once(settings, timeout_s=timeout_s)
        if args.run is not None:
            return await inspect_run(settings, args.run, timeout_s=timeout_s)
        if args.thread is not None:
            return await inspect_thread(settings, args.thread, timeout_s=timeout_s)
        return await inspect_group(settings, max_runs=args.max_runs, timeout_s=timeout_s)

    try:
        found = asyncio.run(inspect())
    except (ConfigError, KafkaWorkerError, TimeoutError) as exc:
        print(f"worker inspect: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(found, ensure_ascii=False, indent=2) if args.json else \
        describe_run(found) if args.run is not None else \
        describe_thread(found) if args.thread is not None else describe_group(found)  # fmt: skip
    sys.stdout.buffer.write(text.encode() + b"\n")
    sys.stdout.flush()
    return 0
