"""CPU of the gateway's per-record path without a broker: recorded output-topic batches (the worker's record
layout: run id key, AG-UI event value, its seven headers; transactional batches) unpacked by aiokafka's own fetcher
code, handed to the tail's record handler in fetches as large as its own, published by the hub to `--subscribers`
connections spread over the followed runs, and taken by each connection's own live loop as the API's writer takes
them (a socket write that completes at once stands for the write).

    .venv/bin/python bench/gateway_path.py [--records 50000] [--runs 400] [--followed 200] [--subscribers 1000]
        [--repeat 3] [--profile]

Prints CPU microseconds per record read and per delivered event for the whole path, and for aiokafka's unpacking
alone (the part the gateway does not control); each figure is the best of `--repeat` passes. `--profile` prints
cProfile's top functions of one pass instead.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import itertools
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # for bench and devtools: `worker` stays the installed package

from aiokafka import TopicPartition  # noqa: E402
from aiokafka.consumer.fetcher import READ_COMMITTED, PartitionRecords  # noqa: E402
from aiokafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402
from aiokafka.record.memory_records import MemoryRecords  # noqa: E402

from worker.gateway.directory import RunDirectory  # noqa: E402
from worker.gateway.hub import Hub  # noqa: E402
from worker.gateway.metrics import GatewayMetrics  # noqa: E402
from worker.gateway.reader import HistoryReader, TopicTail  # noqa: E402
from worker.gateway.reader.tail import _BATCH_RECORDS as FETCH_RECORDS  # noqa: E402
from worker.gateway.routing import Owners  # noqa: E402
from worker.gateway.settings import GatewaySettings  # noqa: E402
from worker.gateway.streams import RunStream, RunStreams, StreamRequest  # noqa: E402

__all__ = ["main"]

PARTITIONS = 3
BATCH_RECORDS = 250  # records per producer batch (one transaction's share of a partition)
TOPIC = "agui.events"
_DELTA = b"Kafka keeps every record of a partition in order; the gateway reads them once. " * 2


def _value(run_id: str, seq: int) -> tuple[bytes, bytes]:
    """An AG-UI event of the kind the bulk of a run is (text deltas), with its type's header bytes."""
    if seq == 0:
        return b'{"type":"RUN_STARTED","threadId":"t-%s","runId":"%s","timestamp":1764800000000}' % (
            run_id.encode(), run_id.encode()), b"RUN_STARTED"
    return (b'{"type":"TEXT_MESSAGE_CONTENT","messageId":"%s-m1","delta":"%s","timestamp":1764800000%03d}'
            % (run_id.encode(), _DELTA[: 40 + seq % 80], seq % 1000)), b"TEXT_MESSAGE_CONTENT"  # fmt: skip


def recorded_batches(records: int, runs: int) -> tuple[dict[int, bytes], dict[int, int]]:
    """Per partition, the bytes of its transactional batches (runs' events interleaved, each run in order), and how
    many records each holds; a run goes to partition `index % PARTITIONS`."""
    per_partition: dict[int, list[tuple[str, int]]] = {p: [] for p in range(PARTITIONS)}
    next_seq = [0] * runs
    for n in range(records):
        run = (n * 7919) % runs
        per_partition[run % PARTITIONS].append((f"run-{run:05d}", next_seq[run]))
        next_seq[run] += 1
    out: dict[int, bytes] = {}
    for partition, events in per_partition.items():
        chunks = bytearray()
        for start in range(0, len(events), BATCH_RECORDS):
            builder = DefaultRecordBatchBuilder(2, 0, 1, 4242, 0, start, 1 << 30)
            for i, (run_id, seq) in enumerate(events[start : start + BATCH_RECORDS]):
                value, kind = _value(run_id, seq)
                headers = [("agui-event-id", f"{run_id}:{seq}".encode()), ("agui-seq", str(seq).encode()),
                           ("agui-type", kind), ("thread-id", f"t-{run_id}".encode()),
                           ("source-partition", b"0"), ("source-offset", str(start + i).encode()),
                           ("source-sequence", str(seq).encode())]  # fmt: skip
                builder.append(i, timestamp=1_764_800_000_000 + start + i, key=run_id.encode(), value=value,
                               headers=headers)  # fmt: skip
            batch = builder.build()
            batch[0:8] = (start).to_bytes(8, "big")  # the batch's base offset
            chunks += batch
        out[partition] = bytes(chunks)
    return out, {p: len(e) for p, e in per_partition.items()}


def _fetches(data: dict[int, bytes]) -> list[tuple[int, list[object]]]:
    """Every record of every partition as aiokafka's fetcher hands them out, `FETCH_RECORDS` at a time."""
    out: list[tuple[int, list[object]]] = []
    for partition, raw in data.items():
        records = PartitionRecords(TopicPartition(TOPIC, partition), MemoryRecords(raw), [], 0, None, None, True,
                                   READ_COMMITTED)  # fmt: skip
        while True:
            chunk = list(itertools.islice(records, FETCH_RECORDS))
            if chunk:
                out.append((partition, chunk))
            if len(chunk) < FETCH_RECORDS:
                break
    return out


async def _pass(data: dict[int, bytes], runs: int, followed: int, subscribers: int) -> tuple[float, int, int]:
    """One pass of the whole path: CPU seconds, records read, events delivered."""
    settings = GatewaySettings(bootstrap_servers="127.0.0.1:9", display_topic="agui.display", insecure_no_auth=True)
    hub = Hub(max_runs=100_000, max_recent=4_096, window_s=10.0, queue_events=1_024)
    directory = RunDirectory(1_000_000, 1 << 26)
    owners = Owners("http://127.0.0.1:8080")
    owners.partitions = PARTITIONS
    owners.assign({}, range(PARTITIONS))
    tail = TopicTail(settings, hub, directory, owners)
    streams = RunStreams(owners, hub, directory, HistoryReader(settings, 1), GatewayMetrics())
    delivered = [0]

    async def connection(run: int) -> None:
        writing = [False]
        stream = RunStream(StreamRequest(f"run-{run:05d}", None, "sse"), None, lambda: None, lambda: writing[0])
        streams._attach(stream, 0)
        stream.sent = 0
        async for chunk in streams._live(stream):
            delivered[0] += chunk.count(b"\nid: ") + 1
            writing[0] = True
            await asyncio.sleep(0)  # a socket write that completes at once
            writing[0] = False

    tasks = [asyncio.create_task(connection((i % followed) * (runs // followed))) for i in range(subscribers)]
    await asyncio.sleep(0)
    gc.collect()
    started = time.process_time()
    count = 0
    for partition, chunk in _fetches(data):
        tail._output(partition, chunk)
        count += len(chunk)
        await asyncio.sleep(0)
    for _ in range(3):
        await asyncio.sleep(0)
    spent = time.process_time() - started
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return spent, count, delivered[0]


def _unpack_only(data: dict[int, bytes]) -> tuple[float, int]:
    gc.collect()
    started = time.process_time()
    count = sum(len(chunk) for _, chunk in _fetches(data))
    return time.process_time() - started, count


def _best(passes: int, run: Callable[[], tuple[float, int, int]]) -> tuple[float, int, int]:
    return min((run() for _ in range(passes)), key=lambda result: result[0])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=400, help="live runs the records belong to")
    parser.add_argument("--followed", type=int, default=200, help="runs with subscribers (spread evenly)")
    parser.add_argument("--subscribers", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    data, _ = recorded_batches(args.records, args.runs)

    def whole() -> tuple[float, int, int]:
        return asyncio.run(_pass(data, args.runs, args.followed, args.subscribers))

    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(whole)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        return
    spent, count, delivered = _best(args.repeat, whole)
    unpack, _ = min(_unpack_only(data) for _ in range(args.repeat))
    print(f"bench.gateway_path: {count} records of {args.runs} runs, {args.subscribers} subscribers over "
          f"{args.followed} runs, {delivered} events delivered")  # fmt: skip
    print(f"  CPU per record read, whole path     {1e6 * spent / count:7.1f} us")
    print(f"  CPU per record read, aiokafka unpack {1e6 * unpack / count:6.1f} us")
    print(f"  CPU per delivered event             {1e6 * spent / max(1, delivered):7.1f} us")


if __name__ == "__main__":
    main()
