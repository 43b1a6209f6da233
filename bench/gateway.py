"""Figures of one `worker gateway` process on a real broker with the real worker producing: delivery latency from
commit with many subscribers over live runs, memory per idle connection, CPU per delivered event, late-join time.

    .venv/bin/python -m bench.gateway [--runs 200] [--subscribers 1000] [--load 0.5] [--duration 40]
        [--idle 2000] [--late-joins 200] [--capacity-items 30000]

Starts a single-node Kafka from the Maven jars unless KAFKA_BOOTSTRAP_SERVERS is set. Every part runs as its own
process, so each one's CPU is its own: the worker (`python -P -m worker run`, the installed package, display topic
on), the gateway (`python -P -m worker gateway`), the source producer, the subscribers' client, the late joiner
(each `python -m bench.gateway` in a role), and this process, which only watches the output topic.

1. The worker's capacity: `--capacity-items` items of sample runs are produced before it starts, and the items per
   second it commits while catching up (from 10% to all of them) are its capacity on this machine.
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
import itertools
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from devtools.kafka_cluster import KafkaCluster, create_topic_on, free_port
from devtools.sample_runs import SampleRun, interleave, load_samples, make_copy

__all__ = ["main"]

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 3
CLK_TCK = os.sysconf("SC_CLK_TCK")
_LATENCY = "harness_agui_gateway_delivery_latency_seconds"


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


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def _ms(values: list[float]) -> tuple[float, float]:
    """p50 and p99 of `values` (seconds), in ms."""
    if not values:
        return float("nan"), float("nan")
    return round(1000 * statistics.median(values), 1), round(1000 * _percentile(values, 0.99), 1)


def _templates() -> list[SampleRun]:
    return [t for t in load_samples() if len(t.lines) >= 8]


def _live_runs(count: int) -> list[SampleRun]:
    templates = _templates()
    return [make_copy(templates[i % len(templates)], "live", i) for i in range(count)]


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


async def _client(url: str, runs: list[str], per_run: int, out_path: str, idle: bool) -> None:
    """The subscribers: `per_run` streams of each run; prints `ready <seconds>` once every stream received its
    run so far and nothing arrived for a second (the seconds: from the first request to the last arrival)."""
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        out: list[str] = []
        arrivals = _Arrivals()
        began = time.monotonic()
        tasks = [asyncio.create_task(_subscribe(session, f"{url}/runs/{run}/events", out, arrivals))
                 for run in runs for _ in range(per_run)]  # fmt: skip
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


async def _producer(bootstrap: str, topic: str, runs: int, duration: float, background_rate: float) -> None:
    """The source: the live runs' lines after their first, at random times over `duration`, and runs nobody follows
    at `background_rate` items/s; prints `ready` once the schedule is built and starts on a line on stdin."""
    rng = random.Random(7)
    live = _live_runs(runs)
    schedule = sorted(  # each run's lines in order, at random times spread over the duration
        (at, r.root_run_id.encode(), line) for r in live
        for at, line in zip(sorted(rng.uniform(0, duration) for _ in r.lines[1:]), r.lines[1:], strict=True)
    )  # fmt: skip
    count = int(background_rate * duration)
    background = [(i / background_rate, key, value) for i, (key, value) in
                  enumerate(itertools.islice(interleave(_templates(), runs=None, concurrency=400, salt="bg"),
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


async def _joiner(url: str, runs: list[str], threads: dict[str, str], count: int, every_s: float) -> None:
    """POSTs on runs in progress, each timed until the gateway's first write arrived whole (complete frames);
    prints the times of those that began with the prelude and of those the gateway replayed from event 0."""
    prelude: list[float] = []
    replayed: list[float] = []
    rng = random.Random(29)
    async with aiohttp.ClientSession() as session:
        for _ in range(count):
            run = rng.choice(runs)
            began = time.perf_counter()
            async with session.post(f"{url}/runs/{run}", json={"threadId": threads[run], "runId": run}) as resp:
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


async def _probe(bootstrap: str, topic: str, keys: set[bytes], seen: dict[str, float], stop: asyncio.Event) -> None:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, isolation_level="read_committed",
                                fetch_max_wait_ms=10, auto_offset_reset="latest", enable_auto_commit=False)  # fmt: skip
    await consumer.start()
    try:
        while not stop.is_set():
            for records in (await consumer.getmany(timeout_ms=100)).values():
                now = time.time()
                for record in records:
                    if record.key in keys:
                        ident = next(v for k, v in record.headers if k == "agui-event-id").decode()
                        seen.setdefault(ident, now)
    finally:
        await consumer.stop()


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


async def _capacity(bootstrap: str, source: str, group: str) -> float:
    """Items/s the worker commits while catching up on the items produced before it started: from the first 10%
    of them committed to the last."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        parts = [TopicPartition(source, p) for p in range(PARTITIONS)]
        total = sum((await consumer.end_offsets(parts)).values())
        began = None
        while True:
            done = 0
            for tp in parts:
                done += await consumer.committed(tp) or 0
            if began is None and done >= total / 10:
                began, first = time.monotonic(), done
            if done >= total:
                assert began is not None
                return (done - first) / max(time.monotonic() - began, 1e-3)
            await asyncio.sleep(0.1)
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


def _histogram_quantile(body: bytes, name: str, share: float) -> float:
    """The upper bound, in ms, of the histogram bucket holding the `share` quantile."""
    buckets = []
    for line in body.decode().splitlines():
        if line.startswith(name + "_bucket{"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float(bound), float(line.split()[-1])))
    total = buckets[-1][1] if buckets else 0.0
    return next((round(1000 * bound, 1) for bound, count in buckets if count >= share * total), float("nan"))


def _renice(pid: int, nice: int) -> None:
    """Set the scheduling priority of every thread of `pid` (a priority is a thread's, not a process's)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):
            os.setpriority(os.PRIO_PROCESS, int(task.name), nice)


async def _bench(args: argparse.Namespace, bootstrap: str, logs: Path, broker: int | None) -> dict[str, object]:
    suffix = str(int(time.time()))
    source, output, dlq, display = (f"bench-gw-{role}-{suffix}" for role in ("source", "output", "dlq", "display"))
    for topic in (source, output, display):
        create_topic_on(bootstrap, topic, PARTITIONS, 1,
                        {"cleanup.policy": "compact"} if topic == display else None)  # fmt: skip
    create_topic_on(bootstrap, dlq, 1, 1)
    procs = _Processes(logs)
    port, metrics = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    group = f"g-{suffix}"
    try:
        # 1. The worker's capacity, catching up on items produced before it started.
        await _fill(bootstrap, source, args.capacity_items)
        worker = procs.start("worker", "-P", "-m", "worker", "run", "--bootstrap-servers", bootstrap,
                             "--source-topic", source, "--output-topic", output, "--dlq-topic", dlq, "--group-id",
                             group, "--display-topic", display, "--metrics-port", "0",
                             "--log-format", "json")  # fmt: skip
        capacity = await _capacity(bootstrap, source, group)
        gateway = procs.start("gateway", "-P", "-m", "worker", "gateway", "--bootstrap-servers", bootstrap,
                              "--output-topic", output, "--display-topic", display, "--insecure-no-auth",
                              "--http-port", str(port), "--metrics-port", str(metrics), "--log-format", "json",
                              "--max-connections", str(args.subscribers + args.idle + 100))  # fmt: skip
        live = _live_runs(args.runs)
        idle = make_copy(_templates()[0], "idle", 0)
        threads = {r.root_run_id: json.loads(r.lines[0])["thread_id"] for r in live}
        while _get(f"http://127.0.0.1:{metrics}/readyz")[0] != 200:  # noqa: ASYNC110 - another process's state
            await asyncio.sleep(0.2)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5)
        await producer.start()
        for run in [*live, idle]:
            await producer.send(source, value=run.lines[0], key=run.root_run_id.encode())
        await producer.stop()
        await _wait_known(url, [r.root_run_id for r in [*live, idle]])

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
        live_items = sum(len(r.lines) - 1 for r in live)
        background_rate = max(1.0, args.load * capacity - live_items / args.duration)
        source_proc = procs.start("producer", "-m", "bench.gateway", "--producer", bootstrap, source,
                                  str(args.runs), str(args.duration), str(background_rate), piped=True)  # fmt: skip
        runs_file.write_text(json.dumps([r.root_run_id for r in live]))
        per_run = max(1, args.subscribers // args.runs)
        client = procs.start("client", "-m", "bench.gateway", "--client", url, str(runs_file), str(per_run),
                             str(logs / "live.txt"), piped=True)  # fmt: skip
        threads_file = logs / "threads.json"
        threads_file.write_text(json.dumps(threads))
        joiner = procs.start("joiner", "-m", "bench.gateway", "--joiner", url, str(threads_file),
                             str(args.late_joins), str(args.duration / max(1, args.late_joins)),
                             piped=True)  # fmt: skip
        caught_up_s = float((await _line(client)).split()[1])
        await _line(source_proc)
        if args.nice:  # ahead of the load: the broker, the gateway, the subscribers, the joiner, the probe
            for pid in (*([broker] if broker else []), gateway.pid, client.pid, joiner.pid, os.getpid()):
                _renice(pid, args.nice)
        seen: dict[str, float] = {}
        stop = asyncio.Event()
        probe = asyncio.create_task(_probe(bootstrap, output, {r.root_run_id.encode() for r in live}, seen, stop))
        await asyncio.sleep(1)
        pids = {"gateway": gateway.pid, "worker": worker.pid, "producer": source_proc.pid,
                "subscribers' client": client.pid, "late joiner": joiner.pid}  # fmt: skip
        gateway_cpu, wall_before = _cpu_s(gateway.pid), time.monotonic()
        split_before = _cpu_split(pids)
        _go(source_proc)
        _go(joiner)
        produced = json.loads(await _line(source_proc))["items"]
        produce_wall = time.monotonic() - wall_before
        split = _split_text(split_before, _cpu_split(pids), produce_wall)
        joins = json.loads(await _line(joiner))
        await asyncio.get_running_loop().run_in_executor(None, client.wait, 300)
        gateway_cpu = _cpu_s(gateway.pid) - gateway_cpu
        wall = time.monotonic() - wall_before
        stop.set()
        await probe
        (logs / "commits.txt").write_text("\n".join(f"{ident} {at:.6f}" for ident, at in seen.items()))
        received = [line.split() for line in (logs / "live.txt").read_text().splitlines()]
        latencies = [float(t) - seen[i] for i, t in received if i in seen]
        _, body = _get(f"http://127.0.0.1:{metrics}/metrics")
        return {
            "worker capacity, catching up, items/s": round(capacity),
            "items/s produced while live, and as a share of the capacity": (
                round(produced / produce_wall), round(produced / produce_wall / capacity, 2)),
            "live runs, subscribers": (args.runs, per_run * args.runs),
            "subscribers connected and sent their runs so far, s": round(caught_up_s, 2),
            "events delivered": len(received),
            "delivery from commit p50 / p99 ms": _ms(latencies),
            "the gateway's own histogram, read to write, p50 / p99 ms at most": (
                _histogram_quantile(body, _LATENCY, 0.5), _histogram_quantile(body, _LATENCY, 0.99)),
            "gateway CPU per delivered event us": round(1e6 * gateway_cpu / max(1, len(received)), 1),
            "gateway CPU per record read us": round(
                1e6 * gateway_cpu / max(1, _metric(body, "harness_agui_gateway_records_read_total")), 1),
            "gateway cores busy": round(gateway_cpu / wall, 2),
            "cores busy while producing": split,
            "memory per idle connection KB": round(idle_kb, 1),
            "late join p50 / p99 ms": _ms(joins["prelude"]),
            "late joins replayed from the first event instead (display not exact): count, p50 / p99 ms": (
                len(joins["replayed"]), *_ms(joins["replayed"])),
            "slow-client drops": _metric(body, "harness_agui_gateway_slow_client_drops_total"),
        }
    finally:
        procs.stop_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--load", type=float, default=0.5, help="items/s produced, as a share of the capacity")
    parser.add_argument("--duration", type=float, default=40)
    parser.add_argument("--idle", type=int, default=2000, help="idle connections for the memory figure")
    parser.add_argument("--late-joins", type=int, default=200)
    parser.add_argument("--capacity-items", type=int, default=30_000)
    parser.add_argument("--nice", type=int, default=0, help=(
        "while live, the scheduling priority of the broker (when this bench started it), the gateway, the "
        "subscribers' client, the late joiner and this process (the probe); -10 puts them ahead of the worker, the "
        "producer and anything else on the host (negative values need root)"))
    parser.add_argument("--client", nargs=4, metavar=("URL", "RUNS_FILE", "PER_RUN", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--hold", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--producer", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--joiner", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client:
        url, runs_file, per_run, out = args.client
        asyncio.run(_client(url, json.loads(Path(runs_file).read_text()), int(per_run), out, args.hold))
        return 0
    if args.producer:
        bootstrap, topic, runs, duration, rate = args.producer
        asyncio.run(_producer(bootstrap, topic, int(runs), float(duration), float(rate)))
        return 0
    if args.joiner:
        url, threads_file, count, every = args.joiner
        threads = json.loads(Path(threads_file).read_text())
        asyncio.run(_joiner(url, list(threads), threads, int(count), float(every)))
        return 0
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    cluster = None if external else KafkaCluster.start(nodes=1)
    try:
        logs = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
        broker = None if cluster is None else cluster._node(0).process.pid  # type: ignore[union-attr]
        figures = asyncio.run(_bench(args, external or cluster.bootstrap_servers, logs, broker))  # type: ignore[union-attr]
        if not os.environ.get("BENCH_KEEP_LOGS"):
            shutil.rmtree(logs)
    finally:
        if cluster is not None:
            cluster.stop()
    build = subprocess.run([sys.executable, "-P", "-c", "from worker._native import describe; print(describe())"],
                           capture_output=True, text=True, check=False).stdout.strip()
    print(f"bench.gateway ({os.cpu_count()} cores; the installed package's conversion core: {build})")
    for name, value in figures.items():
        print(f"  {name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
