"""Figures of threads on one `worker gateway` process, on a real broker with the real worker writing the thread index:
the time to open a thread of finished runs, how late a new run reaches the streams that follow its thread, the
memory an open thread stream holds, how long a run that overlaps an earlier one of its thread waits, and the
records a replica reads with the index beside the same replica's without it.

    .venv/bin/python -m bench.threads [--threads 10] [--runs-per-thread 20] [--streams 100] [--idle 1000]
        [--load 0.25] [--duration 30] [--capacity-items 30000] [--overlaps 20] [--nice -10]

Starts a single-node Kafka from the Maven jars unless KAFKA_BOOTSTRAP_SERVERS is set. The worker (`python -P -m
worker run`, display and thread index topics on) and two gateways run as their own processes: A with the thread
index, B without it (a gateway group of its own, the same topics), side by side, so their records read compare in
one run. The followers of threads are a process of their own (`python -m bench.threads` in a role); this process
produces and watches the output topic.

1. The worker's capacity, as bench/gateway.py measures it (catching up on `--capacity-items` items).
2. Opening: `--threads` threads of `--runs-per-thread` finished runs each, opened once A holds none of their
   events in memory any more (`GET /threads/{id}/events?follow=false` through A, timed until its last event
   arrived: every run read back from the output topic), then at once again (now from memory).
3. Memory: `--idle` open thread streams (on `--streams` threads of one finished run each, sent their run and then
   waiting); A's resident memory grows by them. They are closed before the next step.
4. Notice: those threads followed by one stream each, then one new run in each, started at random over
   `--duration` seconds, while runs nobody follows make up `--load` times the worker's capacity; a new run's delay
   runs from the commit of its first event (a read_committed consumer here, polling the output topic with a 10 ms
   fetch wait, sees it first) to its arrival at its thread's stream. Beside it: the worker's part, from the
   record's append (its timestamp) to its commit seen, and A's notice histogram over this step (from the start
   record's append to the thread's streams woken). Records read by A and B meanwhile.
5. Overlap: `--overlaps` threads, each followed, get two runs: the second starts one second after the first, which
   lasts about four; the second's first event reaches the stream once the first ended.

`--nice -10` gives the broker (when this bench started it), the gateways, the followers and this process precedence
over the worker, the producer and the rest of the host, from the capacity's measurement on.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import json
import os
import random
import re
import sys
import time
from pathlib import Path

import aiohttp
from aiokafka import AIOKafkaProducer
from aiokafka.structs import ConsumerRecord

from bench._broker import heading, on_a_broker
from bench._latency import p50_p99_ms
from bench.gateway import (
    _capacity,
    _committed_all,
    _fill,
    _first_seen,
    _get,
    _go,
    _line,
    _metric,
    _paced,
    _Processes,
    _renice,
    _rss_kb,
    _templates,
)
from devtools.kafka_cluster import create_topic_on, free_port
from devtools.sample_runs import SampleRun, interleave, make_copy

__all__ = ["main"]

PARTITIONS = 6
_NOTICE = "harness_agui_gateway_thread_notice_delay_seconds"
_RECORDS = "harness_agui_gateway_records_read_total"
_TRACKED = "harness_agui_gateway_tracked_runs"


def _threaded(run: SampleRun, thread: str) -> SampleRun:
    """`run` with every thread id of its lines replaced by `thread`."""
    old = [ident for ident in run.ids if ident.startswith("thread_")]
    pattern = re.compile(rb'"thread_id":"(' + b"|".join(re.escape(o.encode()) for o in old) + rb')"')
    lines = tuple(pattern.sub(b'"thread_id":"' + thread.encode() + b'"', line) for line in run.lines)
    return SampleRun(run.name, run.root_run_id, lines, run.ids)


def _runs(tag: str, count: int, thread: str) -> list[SampleRun]:
    templates = _templates()
    return [_threaded(make_copy(templates[i % len(templates)], tag, i), thread) for i in range(count)]


# ---- the followers (a process of its own) ---------------------------------------------------------------------


async def _follow(session: aiohttp.ClientSession, url: str, arrivals: dict[str, float], ready: list[int]) -> None:
    """A thread's stream: the arrival time of each run's first event (`id: <run>:0`)."""
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=None)) as resp:
        buffer = b""
        first = True
        async for chunk in resp.content.iter_any():
            now = time.time()
            if first:
                ready[0] += 1
                first = False
            buffer += chunk
            *frames, buffer = buffer.split(b"\n\n")
            for frame in frames:
                if frame.startswith(b"id: ") and frame[: frame.index(b"\n")].endswith(b":0"):
                    arrivals[frame[4 : frame.rindex(b":", 0, frame.index(b"\n"))].decode()] = now


async def _followers(base: str, threads: list[str], per_thread: int, out: str) -> None:
    """`per_thread` streams of each thread; prints `ready` once every one got its first bytes, writes the arrivals
    to `out` on a line on stdin."""
    arrivals: dict[str, float] = {}
    ready = [0]
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = [asyncio.create_task(_follow(session, f"{base}/threads/{thread}/events", arrivals, ready))
                 for thread in threads for _ in range(per_thread)]  # fmt: skip
        while ready[0] < len(tasks):  # noqa: ASYNC110 - the streams' own tasks count themselves in
            await asyncio.sleep(0.1)
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        await asyncio.to_thread(Path(out).write_text, json.dumps(arrivals))
        for task in tasks:
            task.cancel()
    print("done", flush=True)


# ---- the bench ------------------------------------------------------------------------------------------------


async def _produce(bootstrap: str, topic: str, runs: list[SampleRun]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=20)
    await producer.start()
    try:
        for key, value in interleave(runs, runs=len(runs), concurrency=8, salt=""):
            await producer.send(topic, value=value, key=key)
        await producer.flush()
    finally:
        await producer.stop()


def _buckets(body: bytes, name: str) -> dict[float, float]:
    """The cumulative bucket counts of histogram `name` on a metrics page, by upper bound."""
    prefix = name + "_bucket{"
    return {float(line.split('le="', 1)[1].split('"', 1)[0]): float(line.split()[-1])
            for line in body.decode().splitlines() if line.startswith(prefix)}  # fmt: skip


def _quantile_between(before: bytes, after: bytes, name: str, share: float) -> float:
    """The upper bound, in ms, of the bucket holding the `share` quantile of what histogram `name` took between two
    pages of one process."""
    earlier = _buckets(before, name)
    counts = sorted((bound, count - earlier.get(bound, 0.0)) for bound, count in _buckets(after, name).items())
    total = counts[-1][1] if counts else 0.0
    return next((round(1000 * bound, 1) for bound, count in counts if total and count >= share * total), float("nan"))


async def _probe(bootstrap: str, topic: str, seen: dict[str, tuple[float, float]], stop: asyncio.Event) -> None:
    """When each run's event 0 was first seen committed, and its record's timestamp (the worker's append)."""

    def mark(record: ConsumerRecord[bytes, bytes], now: float) -> tuple[str, tuple[float, float]] | None:
        if dict(record.headers).get("agui-seq") != b"0" or record.key is None:
            return None
        return record.key.decode(), (now, record.timestamp / 1000)

    await _first_seen(bootstrap, topic, stop, seen, mark)


async def _open(url: str, total: int) -> float:
    """Seconds from the request to the stream's end (every run's last event)."""
    began = time.perf_counter()
    frames, tail = 0, b"\n"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        async for chunk in resp.content.iter_any():
            data = tail + chunk  # a frame's `id: ` line may begin in one chunk and go on in the next
            frames += data.count(b"\nid: ")
            tail = data[-4:]
    assert frames >= total, (frames, total)
    return time.perf_counter() - began


def _until_ready(metrics: int) -> None:
    while _get(f"http://127.0.0.1:{metrics}/readyz")[0] != 200:
        time.sleep(0.2)


def _until_forgotten(page: str, timeout_s: float = 30) -> int:
    """Until the gateway keeps no run's events in memory (finished runs go once recent_window_ms passed), for
    `timeout_s` at most: the runs it still tracks."""
    deadline = time.monotonic() + timeout_s
    while (tracked := round(_metric(_get(page)[1], _TRACKED))) > 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    return tracked


async def _bench(args: argparse.Namespace, bootstrap: str, logs: Path, broker: int | None) -> dict[str, object]:
    procs = _Processes(logs)
    name = f"threads-{os.getpid()}"
    source, output, display, index = (f"{name}.{role}" for role in ("source", "output", "display", "index"))
    for topic in (source, output, f"{name}.dlq", display, index):
        compacted = {"cleanup.policy": "compact"} if topic in (display, index) else None
        await asyncio.to_thread(create_topic_on, bootstrap, topic, PARTITIONS, config=compacted)
    group = f"{name}-worker"
    try:
        await _fill(bootstrap, source, args.capacity_items)
        procs.start("worker", "-P", "-m", "worker", "run", "--bootstrap-servers", bootstrap, "--source-topic",
                    source, "--output-topic", output, "--dlq-topic", f"{name}.dlq", "--group-id", group,
                    "--display-topic", display, "--thread-index-topic", index, "--metrics-port",
                    str(worker_metrics := free_port()), "--log-format", "json")  # fmt: skip
        capacity = await _capacity(bootstrap, source, group, PARTITIONS, worker_metrics)
        ports = [(free_port(), free_port()) for _ in range(2)]
        common = ("-P", "-m", "worker", "gateway", "--bootstrap-servers", bootstrap, "--output-topic", output,
                  "--display-topic", display, "--insecure-no-auth", "--log-format", "json",
                  "--max-connections", str(args.idle + args.streams + 100))  # fmt: skip
        gateway = procs.start("gateway-a", *common, "--thread-index-topic", index, "--http-port", str(ports[0][0]),
                              "--metrics-port", str(ports[0][1]))  # fmt: skip
        procs.start("gateway-b", *common, "--gateway-group-id", f"{name}-b", "--http-port", str(ports[1][0]),
                    "--metrics-port", str(ports[1][1]))  # fmt: skip
        for _, metrics in ports:
            await asyncio.to_thread(_until_ready, metrics)
        if args.nice:  # ahead of the load: the broker, the gateways, the followers (as they start), the probe
            for pid in (*([broker] if broker else []), *(proc.pid for proc in procs.procs[1:]), os.getpid()):
                _renice(pid, args.nice)
        url = f"http://127.0.0.1:{ports[0][0]}"
        pages = [f"http://127.0.0.1:{metrics}/metrics" for _, metrics in ports]

        # 2. Opening threads of finished runs.
        opened = {f"{name}-open-{t}": _runs(f"open{t}", args.runs_per_thread, f"{name}-open-{t}")
                  for t in range(args.threads)}  # fmt: skip
        await _produce(bootstrap, source, [run for runs in opened.values() for run in runs])
        await _committed_all(bootstrap, source, group, PARTITIONS)
        tracked = await asyncio.to_thread(_until_forgotten, pages[0])
        totals = dict.fromkeys(opened, 0)
        async with aiohttp.ClientSession() as session:
            for thread in opened:
                async with session.get(f"{url}/threads/{thread}") as resp:
                    listed = await resp.json()
                totals[thread] = sum(run["aguiSeq"] + 1 for run in listed["runs"])
                assert len(listed["runs"]) == args.runs_per_thread, listed
        cold, warm = [], []
        for thread in opened:  # the second open at once, while the first one's reads are held
            cold.append(await _open(f"{url}/threads/{thread}/events?follow=false", totals[thread]))
            warm.append(await _open(f"{url}/threads/{thread}/events?follow=false", totals[thread]))

        # 3. and 4. Threads of one run each, followed; idle streams' memory; then a new run in each.
        followed = [f"{name}-live-{t}" for t in range(args.streams)]
        seeds = [run for t, thread in enumerate(followed) for run in _runs(f"seed{t}", 1, thread)]
        await _produce(bootstrap, source, seeds)
        await _committed_all(bootstrap, source, group, PARTITIONS)
        await asyncio.sleep(2)
        rss = _rss_kb(gateway.pid)
        threads_file = logs / "threads.json"
        threads_file.write_text(json.dumps(followed))
        per_thread = max(1, args.idle // args.streams)
        idle = procs.start("idle", "-m", "bench.threads", "--followers", url, str(threads_file), str(per_thread),
                           str(logs / "idle.json"), piped=True)  # fmt: skip
        if args.nice:
            _renice(idle.pid, args.nice)
        assert (await _line(idle)).strip() == b"ready"
        await asyncio.sleep(3)
        stream_kb = (_rss_kb(gateway.pid) - rss) / (per_thread * len(followed))
        _go(idle)
        assert (await _line(idle)).strip() == b"done"
        watchers = procs.start("followers", "-m", "bench.threads", "--followers", url, str(threads_file), "1",
                               str(logs / "arrivals.json"), piped=True)  # fmt: skip
        if args.nice:
            _renice(watchers.pid, args.nice)
        assert (await _line(watchers)).strip() == b"ready"
        rng = random.Random(5)
        new = {thread: _runs(f"new{t}", 1, thread)[0] for t, thread in enumerate(followed)}
        schedule = sorted(  # each new run's lines at random times, over a few seconds from its random start
            (start + i * 0.05, run.root_run_id.encode(), line) for run in new.values()
            for start in [rng.uniform(0, args.duration)] for i, line in enumerate(run.lines))  # fmt: skip
        rate = max(0.0, args.load * capacity - len(schedule) / args.duration)
        background = [(i / rate, key, value) for i, (key, value) in enumerate(itertools.islice(
            interleave(_templates(), runs=None, concurrency=400, salt=f"{name}-bg"), int(rate * args.duration)))
            ] if rate else []  # fmt: skip
        seen: dict[str, tuple[float, float]] = {}
        stop = asyncio.Event()
        probe = asyncio.create_task(_probe(bootstrap, output, seen, stop))
        await asyncio.sleep(1)
        before = [_get(page)[1] for page in pages]
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5)
        await producer.start()
        began = time.monotonic()
        await asyncio.gather(_paced(producer, source, schedule), _paced(producer, source, background))
        await producer.flush()
        await producer.stop()
        produced_s = time.monotonic() - began
        await _committed_all(bootstrap, source, group, PARTITIONS, timeout_s=300)
        await asyncio.sleep(3)
        after = [_get(page)[1] for page in pages]
        _go(watchers)
        assert (await _line(watchers)).strip() == b"done"
        arrivals = json.loads((logs / "arrivals.json").read_text())
        noticed = [run.root_run_id for run in new.values() if run.root_run_id in arrivals and run.root_run_id in seen]
        notice = [arrivals[run] - seen[run][0] for run in noticed]
        committing = [seen[run][0] - seen[run][1] for run in noticed]
        read_a, read_b = (_metric(a, _RECORDS) - _metric(b, _RECORDS) for a, b in zip(after, before, strict=True))

        # 5. Overlapping runs of one thread.
        pairs = [f"{name}-overlap-{t}" for t in range(args.overlaps)]
        firsts = {thread: _runs(f"first{t}", 1, thread)[0] for t, thread in enumerate(pairs)}
        seconds = {thread: _runs(f"second{t}", 1, thread)[0] for t, thread in enumerate(pairs)}
        await _produce(bootstrap, source, [  # each thread known (a finished run) before it is followed
            run for t, thread in enumerate(pairs) for run in _runs(f"known{t}", 1, thread)])
        await _committed_all(bootstrap, source, group, PARTITIONS)
        await asyncio.sleep(2)
        threads_file.write_text(json.dumps(pairs))
        overlapping = procs.start("overlap", "-m", "bench.threads", "--followers", url, str(threads_file), "1",
                                  str(logs / "overlap.json"), piped=True)  # fmt: skip
        if args.nice:
            _renice(overlapping.pid, args.nice)
        assert (await _line(overlapping)).strip() == b"ready"
        plan = []
        for t, thread in enumerate(pairs):
            start = 0.2 * t
            first, second = firsts[thread], seconds[thread]
            plan += [(start + i * 4.0 / len(first.lines), first.root_run_id.encode(), line)
                     for i, line in enumerate(first.lines)]  # fmt: skip
            plan += [(start + 1.0 + i * 0.05, second.root_run_id.encode(), line) for i, line in enumerate(second.lines)]
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5)
        await producer.start()
        await _paced(producer, source, sorted(plan))
        await producer.flush()
        await producer.stop()
        await _committed_all(bootstrap, source, group, PARTITIONS)
        await asyncio.sleep(3)
        _go(overlapping)
        assert (await _line(overlapping)).strip() == b"done"
        stop.set()
        await probe
        waited = json.loads((logs / "overlap.json").read_text())
        waits = [waited[run.root_run_id] - seen[run.root_run_id][0] for run in seconds.values()
                 if run.root_run_id in waited and run.root_run_id in seen]  # fmt: skip
        produced = len(schedule) + len(background)
        return {
            "worker capacity, catching up, items/s": round(capacity),
            f"open a thread of {args.runs_per_thread} finished runs, read from the topic, p50 / p99 ms":
                p50_p99_ms(cold),
            "the same threads opened again, from memory, p50 / p99 ms": p50_p99_ms(warm),
            "runs A still tracked when the threads were first opened": tracked,
            "events per opened thread, mean": round(sum(totals.values()) / len(totals)),
            "memory per open thread stream (waiting for its next run) KB": round(stream_kb, 1),
            "items/s produced while noticing, and as a share of the capacity": (
                round(produced / produced_s), round(produced / produced_s / capacity, 2)),
            f"new run's first event, commit to its thread's stream ({args.streams} followed, {len(notice)} runs), "
            "p50 / p99 ms": p50_p99_ms(notice),
            "the worker's part: its first event's append to its commit seen, p50 / p99 ms": p50_p99_ms(committing),
            "the gateway's notice histogram over these runs and the unfollowed ones, start record's append to the "
            "thread's streams woken, p50 / p99 ms at most": (
                _quantile_between(before[0], after[0], _NOTICE, 0.5),
                _quantile_between(before[0], after[0], _NOTICE, 0.99)),
            "records read meanwhile: with the index / without, ratio": (
                round(read_a), round(read_b), round(read_a / max(1.0, read_b), 3)),
            f"overlapping run's first event, commit to the stream ({len(waits)} runs, the earlier run ends about "
            "3 s after), p50 / p99 ms": p50_p99_ms(waits),
        }
    finally:
        procs.stop_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.threads")
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--runs-per-thread", type=int, default=20)
    parser.add_argument("--streams", type=int, default=100, help="threads followed while new runs start")
    parser.add_argument("--idle", type=int, default=1000, help="open thread streams for the memory figure")
    parser.add_argument("--load", type=float, default=0.25, help="items/s produced, as a share of the capacity")
    parser.add_argument("--duration", type=float, default=30)
    parser.add_argument("--capacity-items", type=int, default=30_000)
    parser.add_argument("--overlaps", type=int, default=20)
    parser.add_argument("--nice", type=int, default=0, help=(
        "the scheduling priority of the broker (when this bench started it), the gateways, the followers and this "
        "process; -10 puts them ahead of the worker, the producer and anything else on the host (needs root)"))
    parser.add_argument("--followers", nargs=4, metavar=("URL", "THREADS_FILE", "PER_THREAD", "OUT"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args(argv)
    if args.followers:
        url, threads_file, per_thread, out = args.followers
        asyncio.run(_followers(url, json.loads(Path(threads_file).read_text()), int(per_thread), out))
        return 0
    figures = on_a_broker("threads", functools.partial(_bench, args))
    print(heading("threads"))
    for name, value in figures.items():
        print(f"  {name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
