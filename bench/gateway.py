"""Figures of one `worker gateway` process on a real broker with the real worker producing: delivery latency from
commit with many subscribers over live runs, memory per idle connection, CPU per delivered event, late-join time.

    .venv/bin/python -m bench.gateway [--runs 200] [--subscribers 1000] [--load 0.5] [--duration 40]
        [--idle 2000] [--late-joins 200] [--capacity-items 30000]

Starts a single-node Kafka from the Maven jars unless KAFKA_BOOTSTRAP_SERVERS is set. Every part runs as its own
process, so each one's CPU is its own: the worker (`python -P -m worker run`, the installed package, display topic
on), the gateway (`python -P -m worker gateway`), the source producer, the subscribers' client, the late joiner
(each `python -m bench.gateway` in a role), and this process, which only watches the output topic.

1. The worker's capacity: `--capacity-items` items of sample runs are produced before it starts, and the items per
   second it commits while catching up (all of them, from its readiness) are its capacity on this machine.
2. Memory per idle connection: `--idle` connections to one quiet run; the gateway's resident memory grows by them.
3. Live: `--runs` runs, `--subscribers` connections spread over them; the runs' lines are spread at random over
   `--duration` seconds, and runs nobody follows make up the rest of `--load` times the capacity. Delivery latency
   runs from an event's commit to its arrival at a subscriber: a read_committed consumer in this process, polling
   the output topic with a 10 ms fetch wait, stands for the commit (the moment it first sees the event).
4. Late joins, meanwhile: `--late-joins` POSTs (as `HttpAgent` sends) on runs in progress, each timed until the
   gateway's first write has arrived whole: the late-join prelude and every event after it the gateway held.

The processes share the machine's cores as the kernel schedules them; `--nice -10` gives the broker, the gateway,
the subscribers, the late joiner and the probe precedence over the worker, the producer and the rest of the host
while live.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

import aiohttp
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import ConsumerRecord

from bench._broker import heading, on_a_broker
from bench._latency import p50_p99_ms
from devtools.kafka_cluster import create_topic_on, free_port
from devtools.sample_runs import SampleRun, interleave, load_samples, make_copy
from worker.client import partition_for

__all__ = ["main"]

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 3
SCALED_PARTITIONS = 12  # with --replicas
CLK_TCK = os.sysconf("SC_CLK_TCK")
_LATENCY = "harness_agui_gateway_delivery_latency_seconds"
_RECORDS = "harness_agui_gateway_records_read_total"
_SERVING = 'harness_agui_gateway_partitions{state="serving"}'
_IDLE_S = 5.0  # with --replicas: each replica's CPU with nothing produced, before the reading window
_V = TypeVar("_V")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _children_cpu_s(pid: int) -> float:
    """CPU seconds of `pid`'s live child processes (the worker starts none unless it replays with helpers)."""
    total = 0.0
    with contextlib.suppress(OSError):
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            with contextlib.suppress(OSError):
                total += _cpu_s(int(child))
    return total


def _machine_busy_s() -> float:
    """CPU seconds the whole machine spent busy (all but idle and iowait), now."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / CLK_TCK


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _templates() -> list[SampleRun]:
    return [t for t in load_samples() if len(t.lines) >= 8]


def _live_runs(count: int, tag: str = "live") -> list[SampleRun]:
    templates = _templates()
    return [make_copy(templates[i % len(templates)], tag, i) for i in range(count)]


def _targets(url: str, runs: list[str | list[str]]) -> list[tuple[str, str]]:
    """(run, base URL) of each entry of a runs file: a run id (served at `url`) or a [run id, base URL] pair."""
    return [(entry, url) if isinstance(entry, str) else (entry[0], entry[1]) for entry in runs]


# ---- the roles (each a process of its own) ------------------------------------------------------------


class _Arrivals:
    """When the subscribers last received anything, and how many received something."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.started = 0


async def _subscribe(session: aiohttp.ClientSession, url: str, out: list[str], arrivals: _Arrivals) -> None:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=None)) as resp:
        buffer = b""
        first = True
        async for chunk in resp.content.iter_any():
            now = time.time()
            if not chunk.startswith(b":"):  # a keep-alive comment is not the run arriving
                arrivals.last = time.monotonic()
            if first:
                arrivals.started += 1
                first = False
            buffer += chunk
            *frames, buffer = buffer.split(b"\n\n")
            for frame in frames:
                if frame.startswith(b"id: "):
                    ident = frame[4 : frame.index(b"\n")].decode()
                    out.append(f"{ident} {now:.6f}")


async def _client(url: str, runs: list[str | list[str]], per_run: int, out_path: str, idle: bool,
                  waves: bool = False) -> None:  # fmt: skip
    """The subscribers: `per_run` streams of each entry of `runs` (`_targets`); prints `ready <seconds>` once every
    stream received its run so far and nothing arrived for a second (the seconds: from the first request to the
    last arrival). With `waves`, the first stream of each (run, URL) opens first and the others once every first
    one has received something, as viewers arriving after a run's first one."""
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        out: list[str] = []
        arrivals = _Arrivals()
        began = time.monotonic()
        targets = [target for target in _targets(url, runs) for _ in range(per_run)]
        later: list[tuple[str, str]] = []
        if waves:
            firsts = list(dict.fromkeys(targets))
            later = list(targets)
            for target in firsts:
                later.remove(target)
            targets = firsts
        tasks = [asyncio.create_task(_subscribe(session, f"{base}/runs/{run}/events", out, arrivals))
                 for run, base in targets]  # fmt: skip
        if later:
            while arrivals.started < len(tasks) and time.monotonic() - began < 300:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            tasks += [asyncio.create_task(_subscribe(session, f"{base}/runs/{run}/events", out, arrivals))
                      for run, base in later]  # fmt: skip
        while ((arrivals.started < len(tasks) or time.monotonic() - arrivals.last < 1.0)  # noqa: ASYNC110
               and time.monotonic() - began < 300):  # fmt: skip
            await asyncio.sleep(0.1)  # a quiet second is a time, not an event
        print(f"ready {arrivals.last - began:.3f}", flush=True)
        if idle:
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            return
        failed = [r for r in await asyncio.gather(*tasks, return_exceptions=True) if isinstance(r, BaseException)]
        if failed:
            print(f"{len(failed)} of {len(tasks)} streams failed, first: {failed[0]!r}", file=sys.stderr)
        Path(out_path).write_text("\n".join(out))  # noqa: ASYNC240 - once, at the end


async def _paced(producer: AIOKafkaProducer, topic: str, records: list[tuple[float, bytes, bytes]]) -> None:
    """Send each (offset in seconds from now, key, value) at its time."""
    start = time.monotonic()
    for at, key, value in records:
        delay = start + at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await producer.send(topic, value=value, key=key)


async def _producer(bootstrap: str, topic: str, runs: int, duration: float, background_rate: float,
                    tag: str = "live") -> None:  # fmt: skip
    """The source: the live runs' lines after their first, at random times over `duration`, and runs nobody follows
    at `background_rate` items/s; prints `ready` once the schedule is built and starts on a line on stdin. `tag`
    names the live runs (`_live_runs`) and, unless "live", the runs nobody follows."""
    rng = random.Random(7)
    live = _live_runs(runs, tag)
    schedule = sorted(  # each run's lines in order, at random times spread over the duration
        (at, r.root_run_id.encode(), line) for r in live
        for at, line in zip(sorted(rng.uniform(0, duration) for _ in r.lines[1:]), r.lines[1:], strict=True)
    )  # fmt: skip
    count = int(background_rate * duration)
    background = [(i / background_rate, key, value) for i, (key, value) in
                  enumerate(itertools.islice(interleave(_templates(), runs=None, concurrency=400,
                                                       salt="bg" if tag == "live" else f"bg-{tag}"),
                                             count))]  # fmt: skip
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5)
    await producer.start()
    try:
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        await asyncio.gather(_paced(producer, topic, schedule), _paced(producer, topic, background))
        await producer.flush()
    finally:
        await producer.stop()
    print(json.dumps({"items": len(schedule) + len(background)}), flush=True)


async def _joiner(url: str, runs: list[str], threads: dict[str, str], count: int, every_s: float,
                  routes: dict[str, list[str]] | None = None, on_go: bool = False) -> None:  # fmt: skip
    """POSTs on runs in progress, each timed until the gateway's first write arrived whole (complete frames);
    prints the times of those that began with the prelude and of those the gateway replayed from event 0. With
    `routes`, each POST goes to one of its run's base URLs at random instead of `url`; with `on_go`, the first
    waits for a line on stdin."""
    if on_go:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    prelude: list[float] = []
    replayed: list[float] = []
    rng = random.Random(29)
    pick = random.Random(31)
    async with aiohttp.ClientSession() as session:
        for _ in range(count):
            run = rng.choice(runs)
            base = pick.choice(routes[run]) if routes else url
            began = time.perf_counter()
            async with session.post(f"{base}/runs/{run}", json={"threadId": threads[run], "runId": run}) as resp:
                first = b""
                while not first.endswith(b"\n\n"):
                    first += await resp.content.readany()
                (replayed if first.startswith(b"id:") else prelude).append(time.perf_counter() - began)
            await asyncio.sleep(every_s)
    print(json.dumps({"prelude": prelude, "replayed": replayed}), flush=True)


# ---- the bench ------------------------------------------------------------------------------------------


class _Processes:
    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *args: str, piped: bool = False) -> subprocess.Popen[bytes]:
        out = subprocess.PIPE if piped else (self.logs / f"{name}.log").open("ab")
        proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=out,
                                stderr=(self.logs / f"{name}.err").open("ab"),
                                stdin=subprocess.PIPE if piped else None)  # fmt: skip
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(20)
            if proc.poll() is None:
                proc.kill()


async def _line(proc: subprocess.Popen[bytes]) -> bytes:
    assert proc.stdout is not None
    return await asyncio.get_running_loop().run_in_executor(None, proc.stdout.readline)


def _go(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(b"go\n")
    proc.stdin.flush()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read()
    except OSError:
        return 0, b""


async def _wait_known(url: str, runs: list[str]) -> None:
    async with aiohttp.ClientSession() as session:
        for run in runs:
            for _ in range(600):
                async with session.get(f"{url}/runs/{run}/display") as resp:
                    if resp.status == 200:
                        break
                await asyncio.sleep(0.05)
            else:
                raise RuntimeError(f"run {run} never reached the gateway")


async def _first_seen(bootstrap: str, topic: str, stop: asyncio.Event, seen: dict[str, _V],
                      mark: Callable[[ConsumerRecord[bytes, bytes], float], tuple[str, _V] | None]) -> None:
    """Until `stop` is set, `seen[name] = value` for the first record committed to `topic` from now on for which
    `mark(record, time.time() it was fetched)` gives `(name, value)` (a read_committed consumer, fetching within
    10 ms of a commit)."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, isolation_level="read_committed",
                                fetch_max_wait_ms=10, auto_offset_reset="latest", enable_auto_commit=False)  # fmt: skip
    await consumer.start()
    try:
        while not stop.is_set():
            for records in (await consumer.getmany(timeout_ms=50)).values():
                now = time.time()
                for record in records:
                    if (marked := mark(record, now)) is not None:
                        seen.setdefault(*marked)
    finally:
        await consumer.stop()


async def _probe(bootstrap: str, topic: str, keys: set[bytes], seen: dict[str, float], stop: asyncio.Event) -> None:
    """When each event of the runs keyed `keys` was first seen committed, by event id."""

    def mark(record: ConsumerRecord[bytes, bytes], now: float) -> tuple[str, float] | None:
        if record.key not in keys:
            return None
        return next(v for k, v in record.headers if k == "agui-event-id").decode(), now

    await _first_seen(bootstrap, topic, stop, seen, mark)


async def _fill(bootstrap: str, source: str, items: int) -> None:
    """`items` items of sample runs, for the worker to catch up on."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=20)
    await producer.start()
    try:
        for key, value in itertools.islice(interleave(_templates(), runs=None, concurrency=400, salt="cap"), items):
            await producer.send(source, value=value, key=key)
        await producer.flush()
    finally:
        await producer.stop()


async def _committed_all(bootstrap: str, source: str, group: str, partitions: int, timeout_s: float = 120) -> None:
    """Until the worker's group has committed every record of the source produced so far."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        parts = [TopicPartition(source, p) for p in range(partitions)]
        ends = await consumer.end_offsets(parts)
        deadline = time.monotonic() + timeout_s
        while True:
            behind = [tp for tp, end in ends.items() if (await consumer.committed(tp) or 0) < end]
            if not behind:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not commit the source's records within {timeout_s} s")
            await asyncio.sleep(0.2)
    finally:
        await consumer.stop()


async def _capacity(bootstrap: str, source: str, group: str, partitions: int, metrics: int) -> float:
    """Items/s the worker commits while catching up on the items produced before it started: all of them, from its
    readiness (every partition live, nothing processed yet; its metrics port `metrics`) to the last one committed,
    as bench/e2e.py's (a) counts. Not from a share committed: the first commits come once most items are fetched
    and processed, and the rest then commits in a burst whose rate overstates the worker's several times."""
    while (await asyncio.to_thread(_get, f"http://127.0.0.1:{metrics}/readyz"))[0] != 200:  # noqa: ASYNC110
        await asyncio.sleep(0.05)  # another process's state, polled
    began = time.monotonic()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        parts = [TopicPartition(source, p) for p in range(partitions)]
        total = sum((await consumer.end_offsets(parts)).values())
        while sum([await consumer.committed(tp) or 0 for tp in parts]) < total:  # noqa: ASYNC110 - polls the broker
            await asyncio.sleep(0.05)
        return total / (time.monotonic() - began)
    finally:
        await consumer.stop()


def _cpu_split(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds, now: the machine's busy time and each process's (the worker with any child processes)."""
    split = {"machine": _machine_busy_s(), "this process (probe)": time.process_time()}
    for name, pid in pids.items():
        split[name] = _cpu_s(pid) + (_children_cpu_s(pid) if name == "worker" else 0.0)
    return split


def _split_text(before: dict[str, float], after: dict[str, float], wall: float) -> str:
    busy = {name: (after[name] - before[name]) / wall for name in before}
    machine = busy.pop("machine")
    rest = max(0.0, machine - sum(busy.values()))
    parts = ", ".join(f"{name} {value:.2f}" for name, value in busy.items())
    return f"{machine:.2f} of {os.cpu_count()}: {parts}, broker and the rest {rest:.2f}"


def _metric(body: bytes, name: str) -> float:
    return sum(float(line.split()[-1]) for line in body.decode().splitlines() if line.startswith(name + " "))


def _histogram_quantile(bodies: bytes | list[bytes], name: str, share: float) -> float:
    """The upper bound, in ms, of the histogram bucket holding the `share` quantile (of several replicas' histograms
    summed, given a list of their pages)."""
    counts: dict[float, float] = {}
    for body in [bodies] if isinstance(bodies, bytes) else bodies:
        for line in body.decode().splitlines():
            if line.startswith(name + "_bucket{"):
                bound = float(line.split('le="', 1)[1].split('"', 1)[0])
                counts[bound] = counts.get(bound, 0.0) + float(line.split()[-1])
    buckets = sorted(counts.items())
    total = buckets[-1][1] if buckets else 0.0
    return next((round(1000 * bound, 1) for bound, count in buckets if count >= share * total), float("nan"))


def _renice(pid: int, nice: int) -> None:
    """Set the scheduling priority of every thread of `pid` (a priority is a thread's, not a process's)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):
            os.setpriority(os.PRIO_PROCESS, int(task.name), nice)


@dataclass
class _Setup:
    """What every phase shares: the broker, the topics, the worker running on them and its capacity."""

    args: argparse.Namespace
    bootstrap: str
    source: str
    output: str
    display: str
    partitions: int
    group: str  # the worker's
    procs: _Processes
    logs: Path
    broker: int | None
    worker: int
    capacity: float


class _Live(NamedTuple):
    """What the live phase measured."""

    produced: int
    produce_wall: float
    split: str
    caught_up_s: float
    received: int
    latencies: list[float]
    joins: dict[str, list[float]]
    cpu: list[float]  # each gateway's CPU seconds over `wall`
    wall: float
    connected: list[bytes]  # each gateway's metrics once the subscribers were connected (scaled phases only)
    before: list[bytes]  # each gateway's metrics when producing began
    after: list[bytes]  # and after the subscribers' streams ended


def _start_gateway(setup: _Setup, name: str, port: int, metrics: int, *extra: str) -> subprocess.Popen[bytes]:
    args = setup.args
    return setup.procs.start(name, "-P", "-m", "worker", "gateway", "--bootstrap-servers", setup.bootstrap,
                             "--output-topic", setup.output, "--display-topic", setup.display, "--insecure-no-auth",
                             "--http-port", str(port), "--metrics-port", str(metrics), "--log-format", "json",
                             "--max-connections", str(args.subscribers + args.idle + 100), *extra)  # fmt: skip


def _pages(metrics_urls: list[str]) -> list[bytes]:
    return [_get(f"{url}/metrics")[1] for url in metrics_urls]


async def _first_lines(setup: _Setup, url: str, runs: list[SampleRun]) -> None:
    """The runs' first lines produced, and each run known to the gateway at `url` (or through it)."""
    producer = AIOKafkaProducer(bootstrap_servers=setup.bootstrap, enable_idempotence=True, linger_ms=5)
    await producer.start()
    for run in runs:
        await producer.send(setup.source, value=run.lines[0], key=run.root_run_id.encode())
    await producer.stop()
    await _wait_known(url, [r.root_run_id for r in runs])


async def _live(setup: _Setup, gateways: list[subprocess.Popen[bytes]], metrics_urls: list[str], url: str,
                live: list[SampleRun], entries: list[str | list[str]], per_run: int,
                routes: dict[str, list[str]] | None, tag: str) -> _Live:  # fmt: skip
    """The live phase: the live runs' lines and runs nobody follows at the load, `per_run` subscribers of each
    entry of `entries` (`_targets`), late joins (through `routes` when given) and the probe of commits."""
    args, procs, logs = setup.args, setup.procs, setup.logs
    live_items = sum(len(r.lines) - 1 for r in live)
    background_rate = max(1.0, args.load * setup.capacity - live_items / args.duration)
    source_proc = procs.start(f"producer-{tag}", "-m", "bench.gateway", "--producer", setup.bootstrap, setup.source,
                              str(args.runs), str(args.duration), str(background_rate), tag, piped=True)  # fmt: skip
    runs_file = logs / f"runs-{tag}.json"
    runs_file.write_text(json.dumps(entries))
    out = logs / f"{tag}.txt"
    client = procs.start(f"client-{tag}", "-m", "bench.gateway", "--client", url, str(runs_file), str(per_run),
                         str(out), *(("--waves",) if routes is not None else ()), piped=True)  # fmt: skip
    threads = {r.root_run_id: json.loads(r.lines[0])["thread_id"] for r in live}
    threads_file = logs / f"threads-{tag}.json"
    threads_file.write_text(json.dumps(threads))
    routes_file = "-"
    if routes is not None:
        routes_file = str(logs / f"routes-{tag}.json")
        Path(routes_file).write_text(json.dumps(routes))  # noqa: ASYNC240 - once, before the phase
    joiner = procs.start(f"joiner-{tag}", "-m", "bench.gateway", "--joiner", url, str(threads_file),
                         str(args.late_joins), str(args.duration / max(1, args.late_joins)), routes_file,
                         *(("--on-go",) if routes is not None else ()), piped=True)  # fmt: skip
    caught_up_s = float((await _line(client)).split()[1])
    connected = _pages(metrics_urls) if routes is not None else []
    await _line(source_proc)
    if args.nice:  # ahead of the load: the broker, the gateways, the subscribers, the joiner, the probe
        for pid in (*([setup.broker] if setup.broker else []), *(g.pid for g in gateways), client.pid, joiner.pid,
                    os.getpid()):  # fmt: skip
            _renice(pid, args.nice)
    seen: dict[str, float] = {}
    stop = asyncio.Event()
    probe = asyncio.create_task(_probe(setup.bootstrap, setup.output, {r.root_run_id.encode() for r in live}, seen,
                                       stop))  # fmt: skip
    await asyncio.sleep(1)
    names = ["gateway"] if len(gateways) == 1 else [f"gateway {i + 1}" for i in range(len(gateways))]
    pids = {**{name: g.pid for name, g in zip(names, gateways, strict=True)}, "worker": setup.worker,
            "producer": source_proc.pid, "subscribers' client": client.pid, "late joiner": joiner.pid}  # fmt: skip
    before = _pages(metrics_urls) if routes is not None else []
    gateway_cpu, wall_before = [_cpu_s(g.pid) for g in gateways], time.monotonic()
    split_before = _cpu_split(pids)
    _go(source_proc)
    _go(joiner)
    produced = json.loads(await _line(source_proc))["items"]
    produce_wall = time.monotonic() - wall_before
    split = _split_text(split_before, _cpu_split(pids), produce_wall)
    joins = json.loads(await _line(joiner))
    await asyncio.get_running_loop().run_in_executor(None, client.wait, 300)
    gateway_cpu = [_cpu_s(g.pid) - cpu for g, cpu in zip(gateways, gateway_cpu, strict=True)]
    wall = time.monotonic() - wall_before
    stop.set()
    await probe
    (logs / f"commits-{tag}.txt").write_text("\n".join(f"{ident} {at:.6f}" for ident, at in seen.items()))
    received = [line.split() for line in out.read_text().splitlines()]
    latencies = [float(t) - seen[i] for i, t in received if i in seen]
    return _Live(produced, produce_wall, split, caught_up_s, len(received), latencies, joins, gateway_cpu, wall,
                 connected, before, _pages(metrics_urls))  # fmt: skip


async def _single(setup: _Setup) -> dict[str, object]:
    """One gateway (the default): memory per idle connection, then the live phase with every subscriber on it."""
    args, procs, logs = setup.args, setup.procs, setup.logs
    port, metrics = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    gateway = _start_gateway(setup, "gateway", port, metrics)
    live = _live_runs(args.runs)
    idle = make_copy(_templates()[0], "idle", 0)
    while _get(f"http://127.0.0.1:{metrics}/readyz")[0] != 200:  # noqa: ASYNC110 - another process's state
        await asyncio.sleep(0.2)
    await _first_lines(setup, url, [*live, idle])

    # 2. Idle connections, on a run that stays quiet: the gateway's RSS grows by their memory.
    await asyncio.sleep(2)
    rss_before = _rss_kb(gateway.pid)
    runs_file = logs / "runs.json"
    runs_file.write_text(json.dumps([idle.root_run_id]))
    holder = procs.start("holder", "-m", "bench.gateway", "--client", url, str(runs_file), str(args.idle),
                         str(logs / "idle.txt"), "--hold", piped=True)  # fmt: skip
    await _line(holder)
    await asyncio.sleep(2)
    idle_kb = (_rss_kb(gateway.pid) - rss_before) / args.idle
    _go(holder)
    holder.wait(30)

    # 3. and 4. Live runs with their subscribers, runs nobody follows, late joins.
    per_run = max(1, args.subscribers // args.runs)
    measured = await _live(setup, [gateway], [f"http://127.0.0.1:{metrics}"], url, live,
                           [r.root_run_id for r in live], per_run, None, "live")  # fmt: skip
    gateway_cpu = measured.cpu[0]
    _, body = _get(f"http://127.0.0.1:{metrics}/metrics")
    capacity, produced, produce_wall = setup.capacity, measured.produced, measured.produce_wall
    return {
        "worker capacity, catching up, items/s": round(capacity),
        "items/s produced while live, and as a share of the capacity": (
            round(produced / produce_wall), round(produced / produce_wall / capacity, 2)),
        "live runs, subscribers": (args.runs, per_run * args.runs),
        "subscribers connected and sent their runs so far, s": round(measured.caught_up_s, 2),
        "events delivered": measured.received,
        "delivery from commit p50 / p99 ms": p50_p99_ms(measured.latencies),
        "the gateway's own histogram, read to write, p50 / p99 ms at most": (
            _histogram_quantile(body, _LATENCY, 0.5), _histogram_quantile(body, _LATENCY, 0.99)),
        "gateway CPU per delivered event us": round(1e6 * gateway_cpu / max(1, measured.received), 1),
        "gateway CPU per record read us": round(
            1e6 * gateway_cpu / max(1, _metric(body, "harness_agui_gateway_records_read_total")), 1),
        "gateway cores busy": round(gateway_cpu / measured.wall, 2),
        "cores busy while producing": measured.split,
        "memory per idle connection KB": round(idle_kb, 1),
        "late join p50 / p99 ms": p50_p99_ms(measured.joins["prelude"]),
        "late joins replayed from the first event instead (display not exact): count, p50 / p99 ms": (
            len(measured.joins["replayed"]), *p50_p99_ms(measured.joins["replayed"])),
        "slow-client drops": _metric(body, "harness_agui_gateway_slow_client_drops_total"),
    }


# ---- scaled out: N replicas in one gateway group ---------------------------------------------------------------


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


async def _divided(metrics_urls: list[str], partitions: int, timeout_s: float = 180) -> None:
    """Until every replica is ready and serves its balanced share of the partitions."""
    low, high = divmod(partitions, len(metrics_urls))
    deadline = time.monotonic() + timeout_s
    while True:
        shares = [int(_metric(body, _SERVING)) if _get(f"{url}/readyz")[0] == 200 else -1
                  for url, body in zip(metrics_urls, _pages(metrics_urls), strict=True)]  # fmt: skip
        if sum(shares) == partitions and all(low <= s <= low + (1 if high else 0) for s in shares):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the replicas did not divide the {partitions} partitions in {timeout_s} s: {shares}")
        await asyncio.sleep(0.5)


def _assigned(log: Path) -> list[int]:
    """The partitions of the replica's latest "gateway group assignment" log line."""
    partitions: list[int] = []
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and str(record.get("msg", "")).startswith("gateway group assignment"):
            partitions = [int(p) for p in record.get("partitions", [])]
    return partitions


def _owners(logs: Path, names: list[str], partitions: int) -> dict[int, int]:
    """Partition -> index of the replica that owns it, from the replicas' logs."""
    owner: dict[int, int] = {}
    for index, name in enumerate(names):
        for partition in _assigned(logs / f"{name}.err"):
            if partition in owner:
                raise RuntimeError(f"partition {partition} is in the assignments of two replicas")
            owner[partition] = index
    if sorted(owner) != list(range(partitions)):
        raise RuntimeError(f"the replicas' logs assign partitions {sorted(owner)}, not all {partitions}")
    return owner


async def _reading(setup: _Setup, gateways: list[subprocess.Popen[bytes]], metrics_urls: list[str],
                   tag: str) -> dict[str, object]:  # fmt: skip
    """Records read and CPU per replica while only runs nobody follows are produced, at the load, and until the
    worker has committed them all."""
    args = setup.args
    replicas = len(gateways)
    source_proc = setup.procs.start(f"producer-{tag}", "-m", "bench.gateway", "--producer", setup.bootstrap,
                                    setup.source, "0", str(args.read_window), str(args.load * setup.capacity), tag,
                                    piped=True)  # fmt: skip
    await _line(source_proc)
    if args.nice:
        for pid in (*([setup.broker] if setup.broker else []), *(g.pid for g in gateways), os.getpid()):
            _renice(pid, args.nice)
    names = [f"gateway {i + 1}" for i in range(replicas)]
    pids = {**{name: g.pid for name, g in zip(names, gateways, strict=True)}, "worker": setup.worker,
            "producer": source_proc.pid}  # fmt: skip
    idle_before, idle_wall = [_cpu_s(g.pid) for g in gateways], time.monotonic()
    await asyncio.sleep(_IDLE_S)
    idle_wall = time.monotonic() - idle_wall
    idle = [(_cpu_s(g.pid) - before) / idle_wall for g, before in zip(gateways, idle_before, strict=True)]
    read_before = [_metric(body, _RECORDS) for body in _pages(metrics_urls)]
    cpu_before, wall = [_cpu_s(g.pid) for g in gateways], time.monotonic()
    split_before = _cpu_split(pids)
    _go(source_proc)
    produced = json.loads(await _line(source_proc))["items"]
    produce_wall = time.monotonic() - wall
    split = _split_text(split_before, _cpu_split(pids), produce_wall)
    await _committed_all(setup.bootstrap, setup.source, setup.group, setup.partitions)
    await asyncio.sleep(1)  # the last commit reaches the replicas
    read = [_metric(body, _RECORDS) - before for body, before in zip(_pages(metrics_urls), read_before, strict=True)]
    cpu = [_cpu_s(g.pid) - before for g, before in zip(gateways, cpu_before, strict=True)]
    wall = time.monotonic() - wall
    total = sum(read)
    shares = [replicas * r / max(1.0, total) for r in read]
    reading = [c - rate * wall for c, rate in zip(cpu, idle, strict=True)]  # over what it spends idle
    return {
        "seconds from the first item to the last record read": round(wall, 1),
        "items/s produced (nobody follows these runs)": round(produced / produce_wall),
        "records read, all replicas; per second": (int(total), round(total / wall)),
        "records read per replica (times N over the total)": [
            f"{int(r)} ({share:.2f})" for r, share in zip(read, shares, strict=True)],
        "each replica's records read within 10% of 1/N": "met" if all(abs(s - 1) <= 0.1 for s in shares) else (
            f"missed: the farthest {max(shares, key=lambda s: abs(s - 1)):.2f} times 1/N"),
        "CPU per replica, cores": [round(c / wall, 3) for c in cpu],
        "CPU per replica, cores, mean": round(sum(cpu) / wall / replicas, 3),
        "CPU per record read per replica us": [round(1e6 * c / max(1.0, r), 1) for c, r in zip(cpu, read, strict=True)],
        f"idle CPU per replica before, cores ({_IDLE_S:.0f} s, nothing produced)": [round(c, 3) for c in idle],
        "CPU for reading per replica (its CPU less its idle rate), s": [round(c, 2) for c in reading],
        "CPU for reading per replica, s, mean": round(sum(reading) / replicas, 2),
        "CPU for reading per record read per replica us": [
            round(1e6 * c / max(1.0, r), 1) for c, r in zip(reading, read, strict=True)],
        "cores busy while producing": split,
    }


def _non_owner_routes(live: list[SampleRun], owner: dict[int, int], urls: list[str], partitions: int,
                      per_run: int) -> tuple[list[str | list[str]], dict[str, list[str]], int]:  # fmt: skip
    """Each subscriber's [run, replica URL], the replicas that do not own its run taken in turn (the only one when
    there is one), each run's non-owners for the late joins, and how many subscribers reach a non-owner."""
    entries: list[str | list[str]] = []
    routes: dict[str, list[str]] = {}
    through = 0
    for index, run in enumerate(r.root_run_id for r in live):
        mine = owner[partition_for(run.encode(), partitions)]
        others = [i for i in range(len(urls)) if i != mine] or [mine]
        routes[run] = [urls[i] for i in others]
        for j in range(per_run):
            chosen = others[(index + j) % len(others)]
            entries.append([run, urls[chosen]])
            through += chosen != mine
    return entries, routes, through


async def _scaled(setup: _Setup, replicas: int) -> dict[str, object]:
    """`replicas` gateways in a gateway group of their own: the partitions they divide, records read and CPU per
    replica with nobody following, then the live phase with every subscriber and late join on a non-owner."""
    args = setup.args
    group = f"bench-gw-{int(time.time())}-{replicas}"
    names = [f"gateway-{replicas}-{i + 1}" for i in range(replicas)]
    ports = [(free_port(), free_port()) for _ in names]
    urls = [f"http://127.0.0.1:{port}" for port, _ in ports]
    metrics_urls = [f"http://127.0.0.1:{metrics}" for _, metrics in ports]
    gateways = [_start_gateway(setup, name, port, metrics, "--gateway-group-id", group, "--advertised-url", url)
                for name, (port, metrics), url in zip(names, ports, urls, strict=True)]  # fmt: skip
    try:
        began = time.monotonic()
        await _divided(metrics_urls, setup.partitions)
        divided_s = time.monotonic() - began
        owner = _owners(setup.logs, names, setup.partitions)
        live = _live_runs(args.runs, f"live{replicas}")
        await _first_lines(setup, urls[0], live)
        reading = await _reading(setup, gateways, metrics_urls, f"read{replicas}")
        per_run = max(1, args.subscribers // args.runs)
        entries, routes, through = _non_owner_routes(live, owner, urls, setup.partitions, per_run)
        measured = await _live(setup, gateways, metrics_urls, urls[0], live, entries, 1, routes, f"live{replicas}")
    finally:
        _stop(gateways)
    read_live = [_metric(after, _RECORDS) - _metric(before, _RECORDS)
                 for before, after in zip(measured.before, measured.after, strict=True)]  # fmt: skip
    forwarded = [int(_metric(body, 'harness_agui_gateway_connections{reader="forwarded"}'))
                 for body in measured.connected]  # fmt: skip
    relays = [int(_metric(body, "harness_agui_gateway_relays")) for body in measured.connected]
    produced, produce_wall = measured.produced, measured.produce_wall
    return {
        "replicas; started to the partitions divided, s": (replicas, round(divided_s, 1)),
        "partitions per replica (from their logs)": [sum(1 for o in owner.values() if o == i) for i in range(replicas)],
        **{f"reading: {name}": value for name, value in reading.items()},
        "live: items/s produced, and as a share of the capacity": (
            round(produced / produce_wall), round(produced / produce_wall / setup.capacity, 2)),
        "live: subscribers, of them on a replica that does not own the run": (len(entries), through),
        "live: subscribers connected and sent their runs so far, s": round(measured.caught_up_s, 2),
        "live: forwarded streams per replica, streams to owners (relays) per replica, once connected": (
            forwarded, relays),
        "live: streams that followed an open relay; requests forwarded": (
            int(sum(_metric(body, "harness_agui_gateway_relayed_streams_total") for body in measured.after)),
            int(sum(_metric(body, 'harness_agui_gateway_forwarded_requests_total{outcome="ok"}')
                    for body in measured.after))),
        "live: events delivered": measured.received,
        "live: delivery from commit p50 / p99 ms": p50_p99_ms(measured.latencies),
        "live: the replicas' own histogram, read to write, p50 / p99 ms at most": (
            _histogram_quantile(measured.after, _LATENCY, 0.5), _histogram_quantile(measured.after, _LATENCY, 0.99)),
        "live: late join p50 / p99 ms": p50_p99_ms(measured.joins["prelude"]),
        "live: late joins replayed from the first event instead: count, p50 / p99 ms": (
            len(measured.joins["replayed"]), *p50_p99_ms(measured.joins["replayed"])),
        "live: records read per replica": [int(r) for r in read_live],
        "live: CPU per replica, cores": [round(c / measured.wall, 3) for c in measured.cpu],
        "live: cores busy while producing": measured.split,
        "live: slow-client drops": int(sum(_metric(body, "harness_agui_gateway_slow_client_drops_total")
                                           for body in measured.after)),
    }


async def _bench(args: argparse.Namespace, bootstrap: str, logs: Path, broker: int | None) -> list[dict[str, object]]:
    partitions = SCALED_PARTITIONS if args.replicas else PARTITIONS
    suffix = str(int(time.time()))
    source, output, dlq, display = (f"bench-gw-{role}-{suffix}" for role in ("source", "output", "dlq", "display"))
    for topic in (source, output, display):
        create_topic_on(bootstrap, topic, partitions, 1,
                        {"cleanup.policy": "compact"} if topic == display else None)  # fmt: skip
    create_topic_on(bootstrap, dlq, 1, 1)
    procs = _Processes(logs)
    group = f"g-{suffix}"
    try:
        # 1. The worker's capacity, catching up on items produced before it started.
        await _fill(bootstrap, source, args.capacity_items)
        worker = procs.start("worker", "-P", "-m", "worker", "run", "--bootstrap-servers", bootstrap,
                             "--source-topic", source, "--output-topic", output, "--dlq-topic", dlq, "--group-id",
                             group, "--display-topic", display, "--metrics-port", str(worker_metrics := free_port()),
                             "--log-format", "json")  # fmt: skip
        capacity = await _capacity(bootstrap, source, group, partitions, worker_metrics)
        setup = _Setup(args, bootstrap, source, output, display, partitions, group, procs, logs, broker, worker.pid,
                       capacity)  # fmt: skip
        if not args.replicas:
            return [await _single(setup)]
        phases = []
        for replicas in args.replicas:
            phases.append({"worker capacity, catching up, items/s": round(capacity), **await _scaled(setup, replicas)})
        return phases
    finally:
        procs.stop_all()


def _replica_counts(text: str) -> list[int]:
    counts = [int(part) for part in text.split(",") if part.strip()]
    if not counts or any(n < 1 or n > SCALED_PARTITIONS for n in counts):
        raise argparse.ArgumentTypeError(f"replica counts between 1 and {SCALED_PARTITIONS}, e.g. 1,2,4")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--load", type=float, default=0.5, help="items/s produced, as a share of the capacity")
    parser.add_argument("--duration", type=float, default=40)
    parser.add_argument("--idle", type=int, default=2000, help="idle connections for the memory figure")
    parser.add_argument("--late-joins", type=int, default=200)
    parser.add_argument("--capacity-items", type=int, default=30_000)
    parser.add_argument("--replicas", type=_replica_counts, help=(
        f"e.g. 1,2,4: instead of one gateway, {SCALED_PARTITIONS}-partition topics and, one count after the other, "
        "that many replicas in a gateway group of their own: records read and CPU per replica, then delivery and "
        "late joins with every subscriber on a replica that does not own its run (no idle-connection figure)"))
    parser.add_argument("--read-window", type=float, default=15, help=(
        "with --replicas: seconds of load nobody follows, over which records read and CPU per replica are taken"))
    parser.add_argument("--nice", type=int, default=0, help=(
        "while live, the scheduling priority of the broker (when this bench started it), the gateway, the "
        "subscribers' client, the late joiner and this process (the probe); -10 puts them ahead of the worker, the "
        "producer and anything else on the host (negative values need root)"))
    parser.add_argument("--client", nargs=4, metavar=("URL", "RUNS_FILE", "PER_RUN", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--hold", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--waves", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--on-go", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--producer", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument("--joiner", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client:
        url, runs_file, per_run, out = args.client
        asyncio.run(_client(url, json.loads(Path(runs_file).read_text()), int(per_run), out, args.hold,
                            args.waves))
        return 0
    if args.producer:
        bootstrap, topic, runs, duration, rate, tag = args.producer
        asyncio.run(_producer(bootstrap, topic, int(runs), float(duration), float(rate), tag))
        return 0
    if args.joiner:
        url, threads_file, count, every, routes_file = args.joiner
        threads = json.loads(Path(threads_file).read_text())
        routes = None if routes_file == "-" else json.loads(Path(routes_file).read_text())
        asyncio.run(_joiner(url, list(threads), threads, int(count), float(every), routes, args.on_go))
        return 0
    phases = on_a_broker("gateway", functools.partial(_bench, args))
    print(heading("gateway"))
    for figures in phases:
        if args.replicas:
            print(f"  -- {figures['replicas; started to the partitions divided, s'][0]} replica(s)")  # type: ignore[index]
        for name, value in figures.items():
            print(f"  {name}: {value}")
    if args.replicas and len(phases) > 1:
        print("  -- side by side (replicas: " + ", ".join(str(n) for n in args.replicas) + ")")
        for name in ("reading: CPU per replica, cores, mean", "reading: CPU for reading per replica, s, mean",
                     "reading: each replica's records read within 10% of 1/N",
                     "live: delivery from commit p50 / p99 ms", "live: late join p50 / p99 ms"):  # fmt: skip
            print(f"  {name}: " + " | ".join(str(figures[name]) for figures in phases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
