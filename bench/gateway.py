"""Figures of `worker gateway` on a real broker with the real worker producing, from one run: delivery latency from
commit with many subscribers over live runs, memory per idle connection, CPU per delivered event, late-join time.

    .venv/bin/python -m bench.gateway [--runs 200] [--subscribers 1000] [--background-rate 3000] [--duration 40]
        [--idle 2000] [--late-joins 200]

Starts a single-node Kafka from the Maven jars unless KAFKA_BOOTSTRAP_SERVERS is set; the worker, the gateway and
the subscribers' client run as separate processes (the client is this module with `--client`), so each process's
CPU is its own. "From commit" is measured against a read_committed consumer in this process that polls the output
topic with a 10 ms fetch wait: the moment it first sees an event stands for the event's commit.
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
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from devtools.kafka_cluster import KafkaCluster, create_topic_on, free_port
from devtools.sample_runs import SampleRun, interleave, load_samples, make_copy

__all__ = ["main"]

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 3
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


# ---- the subscribers' client (a separate process) ------------------------------------------------------


async def _subscribe(session: aiohttp.ClientSession, url: str, out: list[str]) -> None:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=None)) as resp:
        buffer = b""
        async for chunk in resp.content.iter_any():
            now = time.time()
            buffer += chunk
            *frames, buffer = buffer.split(b"\n\n")
            for frame in frames:
                if frame.startswith(b"id: "):
                    ident = frame[4 : frame.index(b"\n")].decode()
                    out.append(f"{ident} {now:.6f}")


async def _client(url: str, runs: list[str], per_run: int, out_path: str, idle: bool) -> None:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        out: list[str] = []
        tasks = [asyncio.create_task(_subscribe(session, f"{url}/runs/{run}/events", out))
                 for run in runs for _ in range(per_run)]  # fmt: skip
        await asyncio.sleep(3 if idle else 2)
        print("ready", flush=True)
        if idle:
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            return
        failed = [r for r in await asyncio.gather(*tasks, return_exceptions=True) if isinstance(r, BaseException)]
        if failed:
            print(f"{len(failed)} of {len(tasks)} streams failed, first: {failed[0]!r}", file=sys.stderr)
        Path(out_path).write_text("\n".join(out))  # noqa: ASYNC240 - once, at the end


# ---- the bench ------------------------------------------------------------------------------------------


class _Processes:
    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *args: str, stdin: bool = False) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE if name == "client" else
                                (self.logs / f"{name}.log").open("ab"), stderr=(self.logs / f"{name}.err").open("ab"),
                                stdin=subprocess.PIPE if stdin else None)  # fmt: skip
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


async def _paced(producer: AIOKafkaProducer, topic: str, records: list[tuple[float, bytes, bytes]]) -> None:
    """Send each (offset in seconds from now, key, value) at its time."""
    start = time.monotonic()
    for at, key, value in records:
        delay = start + at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await producer.send(topic, value=value, key=key)


async def _late_joins(
    url: str, runs: list[str], threads: dict[str, str], count: int, every_s: float
) -> tuple[list[float], list[float]]:
    """Times of POSTs on runs in progress until their first chunk: (those that began with the prelude, those the
    gateway replayed from the first event)."""
    times: list[float] = []
    replays: list[float] = []
    rng = random.Random(29)
    async with aiohttp.ClientSession() as session:
        for _ in range(count):
            run = rng.choice(runs)
            began = time.perf_counter()
            async with session.post(f"{url}/runs/{run}", json={"threadId": threads[run], "runId": run}) as resp:
                first = await resp.content.readany()  # the prelude and whatever tail was ready, written together
                (replays if first.startswith(b"id:") else times).append(time.perf_counter() - began)
            await asyncio.sleep(every_s)
    return times, replays


async def _bench(args: argparse.Namespace, bootstrap: str, logs: Path) -> dict[str, object]:
    suffix = str(int(time.time()))
    source, output, dlq, display = (f"bench-gw-{role}-{suffix}" for role in ("source", "output", "dlq", "display"))
    for topic in (source, output, display):
        create_topic_on(bootstrap, topic, PARTITIONS, 1,
                        {"cleanup.policy": "compact"} if topic == display else None)  # fmt: skip
    create_topic_on(bootstrap, dlq, 1, 1)
    procs = _Processes(logs)
    port, metrics = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    try:
        procs.start("worker", "-m", "worker", "run", "--bootstrap-servers", bootstrap, "--source-topic", source,
                    "--output-topic", output, "--dlq-topic", dlq, "--group-id", f"g-{suffix}", "--display-topic",
                    display, "--metrics-port", "0", "--log-format", "json")  # fmt: skip
        gateway = procs.start("gateway", "-m", "worker", "gateway", "--bootstrap-servers", bootstrap,
                              "--output-topic", output, "--display-topic", display, "--insecure-no-auth",
                              "--http-port", str(port), "--metrics-port", str(metrics), "--log-format", "json",
                              "--max-connections", str(args.subscribers + args.idle + 100))  # fmt: skip
        templates = [t for t in load_samples() if len(t.lines) >= 8]
        live: list[SampleRun] = [make_copy(templates[i % len(templates)], "live", i) for i in range(args.runs)]
        idle = make_copy(templates[0], "idle", 0)
        threads = {r.root_run_id: json.loads(r.lines[0])["thread_id"] for r in live}
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5)
        await producer.start()
        for run in [*live, idle]:
            await producer.send(source, value=run.lines[0], key=run.root_run_id.encode())
        await producer.flush()
        while _get(f"http://127.0.0.1:{metrics}/readyz")[0] != 200:  # noqa: ASYNC110 - another process's state
            await asyncio.sleep(0.2)
        await _wait_known(url, [r.root_run_id for r in [*live, idle]])

        # Idle connections first, on a run that stays quiet: the gateway's RSS grows by their memory.
        await asyncio.sleep(2)
        rss_before = _rss_kb(gateway.pid)
        runs_file = logs / "runs.json"
        runs_file.write_text(json.dumps([idle.root_run_id]))
        holder = procs.start("client", "-m", "bench.gateway", "--client", url, str(runs_file), str(args.idle),
                             str(logs / "idle.txt"), "--hold", stdin=True)  # fmt: skip
        assert holder.stdout is not None
        await asyncio.get_running_loop().run_in_executor(None, holder.stdout.readline)
        await asyncio.sleep(2)
        idle_kb = (_rss_kb(gateway.pid) - rss_before) * 1024 / args.idle / 1024
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(30)

        # Live: `subscribers` connections over the live runs, their remaining lines spread over `duration`, the
        # background runs (no subscribers) paced at `background_rate` items per second.
        runs_file.write_text(json.dumps([r.root_run_id for r in live]))
        per_run = max(1, args.subscribers // args.runs)
        client = procs.start("client", "-m", "bench.gateway", "--client", url, str(runs_file), str(per_run),
                             str(logs / "live.txt"))  # fmt: skip
        assert client.stdout is not None
        await asyncio.get_running_loop().run_in_executor(None, client.stdout.readline)
        rng = random.Random(7)
        schedule = sorted(  # each run's lines in order, at random times spread over the duration
            (at, r.root_run_id.encode(), line) for r in live
            for at, line in zip(sorted(rng.uniform(0, args.duration) for _ in r.lines[1:]), r.lines[1:], strict=True)
        )  # fmt: skip
        background_count = int(args.background_rate * args.duration)
        background = [(i / args.background_rate, key, value) for i, (key, value) in
                      enumerate(itertools.islice(interleave(templates, runs=None, concurrency=400, salt="bg"),
                                                 background_count))]  # fmt: skip
        seen: dict[str, float] = {}
        stop = asyncio.Event()
        probe = asyncio.create_task(_probe(bootstrap, output, {r.root_run_id.encode() for r in live}, seen, stop))
        await asyncio.sleep(1)
        cpu_before, wall_before = _cpu_s(gateway.pid), time.monotonic()
        joins = asyncio.create_task(_late_joins(url, [r.root_run_id for r in live], threads, args.late_joins,
                                                args.duration / max(1, args.late_joins)))  # fmt: skip
        await asyncio.gather(_paced(producer, source, schedule), _paced(producer, source, background))
        await producer.flush()
        late, replays = await joins
        await asyncio.get_running_loop().run_in_executor(None, client.wait, 300)
        cpu = _cpu_s(gateway.pid) - cpu_before
        wall = time.monotonic() - wall_before
        stop.set()
        await probe
        await producer.stop()
        received = [line.split() for line in (logs / "live.txt").read_text().splitlines()]
        latencies = [float(t) - seen[i] for i, t in received if i in seen]
        _, body = _get(f"http://127.0.0.1:{metrics}/metrics")
        return {
            "live runs": args.runs, "subscribers": per_run * args.runs,
            "items/s produced": round((len(schedule) + len(background)) / args.duration),
            "events delivered": len(received),
            "delivery from commit p50 / p99 ms": (round(1000 * statistics.median(latencies), 1),
                                                   round(1000 * _percentile(latencies, 0.99), 1)),
            "gateway CPU per delivered event us": round(1e6 * cpu / max(1, len(received)), 1),
            "gateway cores busy": round(cpu / wall, 2),
            "memory per idle connection KB": round(idle_kb, 1),
            "late join p50 / p99 ms": (round(1000 * statistics.median(late), 1),
                                       round(1000 * _percentile(late, 0.99), 1)),
            "late joins replayed from the first event instead (display not exact): count, p50 ms": (
                len(replays), round(1000 * statistics.median(replays), 1) if replays else None),
            "slow-client drops": _metric(body, "harness_agui_gateway_slow_client_drops_total"),
        }
    finally:
        procs.stop_all()


def _metric(body: bytes, name: str) -> float:
    return sum(float(line.split()[-1]) for line in body.decode().splitlines() if line.startswith(name + " "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--background-rate", type=float, default=3000, help="items/s of runs nobody follows")
    parser.add_argument("--duration", type=float, default=40)
    parser.add_argument("--idle", type=int, default=2000, help="idle connections for the memory figure")
    parser.add_argument("--late-joins", type=int, default=200)
    parser.add_argument("--client", nargs=4, metavar=("URL", "RUNS_FILE", "PER_RUN", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--hold", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client:
        url, runs_file, per_run, out = args.client
        asyncio.run(_client(url, json.loads(Path(runs_file).read_text()), int(per_run), out, args.hold))
        return 0
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    cluster = None if external else KafkaCluster.start(nodes=1)
    try:
        logs = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
        figures = asyncio.run(_bench(args, external or cluster.bootstrap_servers, logs))  # type: ignore[union-attr]
        if not os.environ.get("BENCH_KEEP_LOGS"):
            shutil.rmtree(logs)
    finally:
        if cluster is not None:
            cluster.stop()
    print(f"bench.gateway ({os.cpu_count()} cores)")
    for name, value in figures.items():
        print(f"  {name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
