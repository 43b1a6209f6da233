"""A soak of the worker and the gateway: a steady stream of new runs for `--minutes`, and whether their resident
memory levels off.

    .venv/bin/python bench/soak.py [--minutes 60] [--rate 4000] [--concurrency 1600] [--partitions 3]
        [--sample-every 4000] [--max-indexed-runs 100000] [--heap SECONDS [--tracemalloc]] [--trim SECONDS]
    .venv/bin/python bench/soak.py --costs | --report SOAK_JSON

Starts a single-node Kafka from the Maven jars unless KAFKA_BOOTSTRAP_SERVERS is set, then one worker
(`python -P -m worker run --display-topic ...`, defaults otherwise) and one gateway (`python -P -m worker gateway`,
`--max-indexed-runs` as given), each a process of its own, and a producer process sending copies of the sample runs
(`devtools/samples/`, fresh run and thread ids each) at `--rate` items/s, `--concurrency` of them under way at once.
Every minute it prints each process's resident memory (sampled every 5 s), the items/s the worker processed, its
open runs and lag, and the gateway's tracked runs, indexed runs and display cache; at the end, each process's level
over the last third of the run and its growth there (a least-squares line through the samples, from its start to
its end, over its value at the start), beside what docs/sizing.md's formula gives for the gauges then.

Every `--sample-every`th run is checked exact once it ended: its events in the output topic and its stream through
the gateway (`GET /runs/{id}/events` from event 0) must be those the same run gives under its original ids (its
template through a `PartitionState` in this process), ids mapped back.

`--costs` measures only what each entry of docs/sizing.md's formula costs (resident bytes, each kind in a fresh
process); `--report SOAK_JSON` prints the summary of a finished soak again from the `soak.json` it kept.

With `--heap SECONDS` both processes run under `bench/_heap_trace.py`, which writes what their heap holds every
SECONDS, and the end adds how it changed over the last two thirds: pymalloc's arenas and malloc's heap (in use and
free), objects by type in each collector generation, large buffers by holder and, with `--tracemalloc` (slower,
and its own table inflates malloc's heap), the bytes by allocating line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import aiohttp
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import RecordMetadata

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # for devtools and the tests' support: `worker` stays the installed package

from devtools.kafka_cluster import KafkaCluster, create_topic_on, free_port  # noqa: E402
from devtools.kafka_tools import GroupLag  # noqa: E402
from devtools.metrics_page import summed_by_name  # noqa: E402
from devtools.sample_runs import SampleRun, interleave, load_samples, make_copy  # noqa: E402
from tests.stream._support import checkpoint  # noqa: E402
from worker._native import describe  # noqa: E402
from worker.client import partition_for  # noqa: E402
from worker.contract import TERMINAL_TYPES, TYPE  # noqa: E402
from worker.gateway.directory import DisplayPointer, RunDirectory  # noqa: E402
from worker.gateway.hub import Hub  # noqa: E402
from worker.gateway.settings import GatewaySettings  # noqa: E402
from worker.settings import Settings  # noqa: E402
from worker.stream import Destination, OutboundRecord, PartitionState, SourceRecord  # noqa: E402

__all__ = ["main"]

MIB = 1024 * 1024
SAMPLE_S = 5.0  # resident memory sampled this often
COMMIT_WITHIN_S = 120.0  # a sampled run is checked once the worker committed its last item, or after this long
READ_WITHIN_S = 60.0  # a sampled run's events are looked for this long in the output topic
KNOWN_WITHIN_S = 30.0  # and asked of the gateway this long while it answers 404 (its tail not there yet)
DISPLAY_INTERVAL_MS: int = Settings.model_fields["display_interval_ms"].default  # the worker's
CLOSED_STREAM_MEMORY: int = Settings.model_fields["closed_stream_memory"].default  # per partition
RECENT_WINDOW_S: float = GatewaySettings.model_fields["recent_window_ms"].default / 1000
SWEEP_S = 1.0  # the gateway trims its recent events this often (worker/gateway/server.py)
RETENTION_MS = 20 * 60 * 1000  # the source and output topics keep 20 minutes: a sampled run is checked well within


# ---- the reference: each template's output events under its original ids ---------------------------------------


def reference_events(template: SampleRun) -> list[bytes]:
    """The values of the output records the run gives, through one partition's state, display on."""
    return [r.value or b"" for r in _records(template) if r.destination is Destination.OUTPUT]


def final_display(template: SampleRun) -> bytes:
    """The value of the run's last display record (what the gateway keeps of an ended run)."""
    return [r.value or b"" for r in _records(template) if r.destination is Destination.DISPLAY][-1]


def _records(template: SampleRun) -> list[OutboundRecord]:
    state = PartitionState("reference", 0, display_interval_ms=DISPLAY_INTERVAL_MS)
    records: list[OutboundRecord] = []
    for offset, line in enumerate(template.lines):
        record = SourceRecord("reference", 0, offset, 1_700_000_000_000 + offset, template.root_run_id.encode(), line)
        records += state.process(record).records
    return records


def to_original(value: bytes, copy: SampleRun, template: SampleRun) -> bytes:
    """`value` with the copy's run and thread ids replaced by the template's."""
    for new, old in zip(copy.ids, template.ids, strict=True):
        value = value.replace(new.encode(), old.encode())
    return value


# ---- what each entry of docs/sizing.md's formula costs: resident bytes, each measured in a fresh process ---------

COSTS = {  # name -> (entries measured, what one is)
    "open run": (2_000, "an open run of the worker, display on, halfway through (the first half of a sample run), and "
                         "its changelog record while a checkpoint writes it"),
    "remembered run": (10_000, "an ended run the worker remembers (closed_stream_memory)"),
    "tracked run": (20_000, "a run the gateway tracks, with its first recent event"),
    "recent event": (100_000, "an event of a tracked run the gateway keeps (recent_events_per_run, recent_window_ms)"),
    "indexed run": (100_000, "a run the gateway's directory can find, at its cap after as many more came and went"),
    "cached byte": (64 * MIB, "a byte of the gateway's display cache (display_cache_bytes), with its entry's share"),
}


def _own_resident() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _settled() -> int:
    gc.collect()
    return _own_resident()


def _copies(salt: str, count: int, start: int = 0) -> Iterator[SampleRun]:
    templates = load_samples()
    for n in range(start, start + count):
        yield make_copy(templates[n % len(templates)], salt, n)


def _feed(state: PartitionState, runs: Iterator[SampleRun], *, half: bool, offset: int) -> int:
    for run in runs:
        lines = run.lines[: max(1, len(run.lines) // 2)] if half else run.lines
        for line in lines:
            state.process(SourceRecord("cost", 0, offset, 1_700_000_000_000 + offset, run.root_run_id.encode(), line))
            offset += 1
    return offset


def measure_cost(name: str) -> float:
    """Resident bytes per entry of `name` (COSTS), grown in this process from a warmed-up start."""
    count = COSTS[name][0]
    if name in {"open run", "remembered run"}:
        state = PartitionState("cost", 0, display_interval_ms=DISPLAY_INTERVAL_MS, max_open_streams=count + 1000,
                               closed_stream_memory=count + 1000)  # fmt: skip
        offset = _feed(state, _copies("warm", 1000), half=False, offset=0)  # the allocator and the caches warmed
        checkpoint(state, offset)
        before = _settled()
        offset = _feed(state, _copies("cost", count), half=name == "open run", offset=offset)
        changelog = checkpoint(state, offset)  # each changed run's record, alive beside its state until it is sent
        held = _settled()
        del changelog
        return (held - before) / count
    if name in {"tracked run", "recent event"}:
        hub = Hub(max_runs=count + 1, max_recent=count + 1, window_s=3600.0, queue_events=1024, clock=lambda: 0.0)
        events = [v for t in load_samples() for v in reference_events(t)]
        runs = count if name == "tracked run" else 100
        before = _settled()
        for n in range(count):
            run = f"run-{n % runs:032x}"
            value = bytes(bytearray(events[n % len(events)]))  # a value of its own, as each record read has
            hub.publish(n % 3, n, run, n // runs, value, 1_700_000_000_000 + n, False, 0.0)
        return (_settled() - before) / count
    directory = RunDirectory(count if name == "indexed run" else 10 * count, 0 if name == "indexed run" else count)
    values = [final_display(t) for t in load_samples()]
    before = _settled()
    total, n = 0, 0
    while (total < count) if name == "cached byte" else (n < 2 * count):
        pointer = DisplayPointer(n % 3, n, n, 1_700_000_000_000 + n, f"thread_{n:032x}")
        value = bytes(bytearray(values[n % len(values)])) if name == "cached byte" else b"{}"
        directory.update(f"run-{n:032x}", pointer, value)
        total += len(value)
        n += 1
    return (_settled() - before) / (directory.cached_bytes if name == "cached byte" else count)


def measured_costs() -> dict[str, float]:
    """Every entry's cost, each measured in a process of its own (`--cost NAME`)."""
    costs = {}
    for name in COSTS:
        out = subprocess.run([sys.executable, "-P", str(Path(__file__).resolve()), "--cost", name], cwd=ROOT,
                             check=True, capture_output=True, text=True).stdout  # fmt: skip
        costs[name] = float(out)
    return costs


# ---- the producer (a process of its own) --------------------------------------------------------------------------


async def _produce(bootstrap: str, topic: str, rate: float, concurrency: int, salt: str, sample_every: int) -> None:
    """Copies of the sample runs at `rate` items/s until SIGTERM: a JSON line on stdout for each sampled copy once
    its last item is acknowledged, and every 10 s one with the items sent so far."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=5,
                                max_batch_size=256 * 1024, client_id="soak-producer")  # fmt: skip
    await producer.start()
    watched: dict[bytes, list[int]] = {}  # a sampled copy's key -> [copy number, items left, first sent (ms)]

    def on_copy(number: int, copy: SampleRun) -> None:
        if number % sample_every == 0:
            watched[copy.root_run_id.encode()] = [number, len(copy.lines), 0]

    items = interleave(load_samples(), runs=None, concurrency=concurrency, salt=salt, on_copy=on_copy)
    sent, began, reported = 0, time.monotonic(), time.monotonic()
    # Sent items not yet acknowledged, in the order sent, each with its report if it ends a sampled copy: never
    # waited for while sending (a broker round trip per batch waited for caps the rate on a loaded host).
    pending: deque[tuple[asyncio.Future[RecordMetadata], dict[str, object] | None]] = deque()

    def acknowledged() -> None:
        while pending and pending[0][0].done():
            future, line = pending.popleft()
            where = future.result()
            if line is not None:
                print(json.dumps({**line, "partition": where.partition, "offset": where.offset}), flush=True)

    try:
        for key, value in items:
            if stop.is_set():
                break
            ahead = began + sent / rate - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
            future = await producer.send(topic, value=value, key=key)
            sent += 1
            line = None
            entry = watched.get(key)
            if entry is not None:
                entry[2] = entry[2] or int(time.time() * 1000)
                entry[1] -= 1
                if entry[1] == 0:
                    del watched[key]
                    line = {"sample": key.decode(), "copy": entry[0], "first_ms": entry[2]}
            pending.append((future, line))
            acknowledged()
            if time.monotonic() - reported >= 10:
                reported = time.monotonic()
                print(json.dumps({"sent": sent}), flush=True)
    finally:
        await asyncio.gather(*(future for future, _ in pending))
        acknowledged()
        await producer.stop()
    print(json.dumps({"sent": sent}), flush=True)


# ---- the processes under test ----------------------------------------------------------------------------------


@dataclass
class Proc:
    """A `python -m worker ...` process, its log in `logdir`, its metrics at `metrics_port`."""

    name: str
    args: list[str]
    logdir: Path
    metrics_port: int
    heap_s: float = 0.0
    tracemalloc: bool = False
    trim_s: float = 0.0
    env: dict[str, str] = field(default_factory=dict)  # added to this environment
    proc: subprocess.Popen[bytes] | None = None
    rss: list[tuple[float, int]] = field(default_factory=list)  # (seconds since the start of the soak, bytes)

    @property
    def heap(self) -> Path:
        return self.logdir / f"{self.name}.heap.jsonl"

    def start(self) -> Proc:
        command = [sys.executable, "-P"]
        if self.heap_s or self.trim_s:
            command += [str(ROOT / "bench" / "_heap_trace.py"), str(self.heap), str(self.heap_s),
                        str(int(self.tracemalloc)), str(self.trim_s), "--"]  # fmt: skip
        with (self.logdir / f"{self.name}.log").open("ab") as log:
            self.proc = subprocess.Popen([*command, "-m", "worker", *self.args], cwd=ROOT, stdout=log,
                                         stderr=subprocess.STDOUT, env={**os.environ, **self.env})  # fmt: skip
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, lines: int = 15) -> str:
        path = self.logdir / f"{self.name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def resident(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def cpu_s(self) -> float:
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def metrics(self) -> dict[str, float]:
        """Each series of the metrics page summed over its labels; {} while it does not answer."""

        def fetch() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
                return str(r.read().decode())

        try:
            text = await asyncio.to_thread(fetch)
        except OSError:
            return {}
        return summed_by_name(text)


# ---- checking sampled runs ---------------------------------------------------------------------------------------


@dataclass
class Checks:
    """Sampled runs checked, and those found not exact (with what differed)."""

    topic: int = 0
    gateway: int = 0
    uncommitted: int = 0  # not checked: the worker had not committed the run's last item within COMMIT_WITHIN_S
    failed: list[str] = field(default_factory=list)


class Sample(NamedTuple):
    """A sampled run as the producer reports it once its last item is acknowledged: the copy's number, when its
    first item was sent (ms), and where its last item is in the source topic."""

    copy: int
    first_ms: int
    partition: int
    offset: int


class Checker:
    """Checks each sampled run once the worker's group committed its last item, one run at a time: its output
    records (read from where the output topic's timestamps reach its first item's send time) and its stream
    through the gateway, against the reference."""

    def __init__(self, bootstrap: str, topics: dict[str, str], group: str, partitions: int, gateway_url: str,
                 salt: str) -> None:  # fmt: skip
        self.templates = load_samples()
        self.reference = {t.name: reference_events(t) for t in self.templates}
        self.bootstrap, self.topics, self.group, self.partitions = bootstrap, topics, group, partitions
        self.gateway_url, self.salt = gateway_url, salt
        self.waiting: deque[Sample] = deque()
        self.checks = Checks()

    def add(self, sample: Sample) -> None:
        self.waiting.append(sample)

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop` and every run sent by then is checked, each once the worker committed its last item (or
        counted `uncommitted` after `COMMIT_WITHIN_S`)."""
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                                    isolation_level="read_committed", max_poll_records=2000)  # fmt: skip
        await consumer.start()
        try:
            async with aiohttp.ClientSession() as session, GroupLag(self.bootstrap, self.group,
                                                                    self.topics["source"]) as lag:  # fmt: skip
                drained = 0.0
                while self.waiting or not stop.is_set():
                    if not self.waiting:
                        await asyncio.sleep(1)
                        continue
                    sample = self.waiting.popleft()
                    deadline = time.monotonic() + COMMIT_WITHIN_S
                    while (committed := (await lag.committed()).get(sample.partition, 0)) <= sample.offset:
                        if stop.is_set():  # once the load stopped, the worker has COMMIT_WITHIN_S to finish
                            drained = drained or time.monotonic() + COMMIT_WITHIN_S
                            deadline = min(deadline, drained)
                        if time.monotonic() > deadline:
                            break
                        await asyncio.sleep(1)
                    if committed > sample.offset:
                        await self._check(consumer, session, sample)
                    else:
                        self.checks.uncommitted += 1
        finally:
            await consumer.stop()

    async def _check(self, consumer: AIOKafkaConsumer, session: aiohttp.ClientSession, sample: Sample) -> None:
        template = self.templates[sample.copy % len(self.templates)]
        copy = make_copy(template, self.salt, sample.copy)
        want = self.reference[template.name]
        key = copy.root_run_id
        why = ""
        try:
            got = await self._from_topic(consumer, key, sample.first_ms, len(want))
        except Exception as exc:  # a failed read is a failed check, said as such
            got, why = [], f"read failed: {exc!r}"
        back = [to_original(v, copy, template) for v in got]
        self.checks.topic += 1
        if back != want:
            self.checks.failed.append(f"{key} ({template.name}) in the output topic: {why or _difference(want, back)}")
        why = ""
        try:
            frames = await self._through_gateway(session, key)
        except Exception as exc:
            frames, why = [], f"stream failed: {exc!r}"
        ids = [i for i, _ in frames]
        back = [to_original(v, copy, template) for _, v in frames]
        self.checks.gateway += 1
        if back != want or ids != [f"{key}:{n}" for n in range(len(want))]:
            self.checks.failed.append(f"{key} ({template.name}) through the gateway: {why or _difference(want, back)}")

    async def _from_topic(self, consumer: AIOKafkaConsumer, key: str, first_ms: int, count: int) -> list[bytes]:
        """The run's output records, read from where the topic's timestamps reach `first_ms` until its terminal
        event or `count` of them (waiting up to `READ_WITHIN_S` for a worker that is behind)."""
        tp = TopicPartition(self.topics["output"], partition_for(key.encode(), self.partitions))
        consumer.assign([tp])
        found = (await consumer.offsets_for_times({tp: first_ms - 5000}))[tp]
        if found is None:
            raise RuntimeError("no output record as young as the run")
        consumer.seek(tp, found.offset)
        values: list[bytes] = []
        raw = key.encode()
        deadline = time.monotonic() + READ_WITHIN_S
        while len(values) < count and time.monotonic() < deadline:
            for record in (await consumer.getmany(tp, timeout_ms=1000, max_records=2000)).get(tp, []):
                if record.key == raw:
                    values.append(record.value or b"")
                    if dict(record.headers).get(TYPE, b"").decode() in TERMINAL_TYPES:
                        return values
        return values

    async def _through_gateway(self, session: aiohttp.ClientSession, key: str) -> list[tuple[str, bytes]]:
        frames: list[tuple[str, bytes]] = []
        timeout = aiohttp.ClientTimeout(total=60)
        deadline = time.monotonic() + KNOWN_WITHIN_S
        while True:
            async with session.get(f"{self.gateway_url}/runs/{key}/events", timeout=timeout) as response:
                body = await response.read()
                if response.status == 200:
                    break
                if response.status != 404 or time.monotonic() > deadline:
                    raise RuntimeError(f"HTTP {response.status}: {body[:200]!r}")
            await asyncio.sleep(1)
        for frame in body.split(b"\n\n"):
            ident, data = "", b""
            for part in frame.split(b"\n"):
                if part.startswith(b"id: "):
                    ident = part[4:].decode()
                elif part.startswith(b"data: "):
                    data = part[6:]
            if ident:
                frames.append((ident, data))
        return frames


def _difference(want: list[bytes], got: list[bytes]) -> str:
    if len(want) != len(got):
        return f"{len(got)} events, not {len(want)}"
    first = next(i for i, (a, b) in enumerate(zip(want, got, strict=True)) if a != b)
    return f"event {first} differs: {got[first][:120]!r} against {want[first][:120]!r}"


# ---- the soak --------------------------------------------------------------------------------------------------


@dataclass
class Minute:
    """What one minute's line prints."""

    at: float
    worker_mib: float
    gateway_mib: float
    items_per_s: float
    worker_cores: float
    gateway_cores: float
    host_cores: float  # the whole machine's busy cores, every process on it
    worker: dict[str, float]
    gateway: dict[str, float]


def growth(samples: list[tuple[float, int]], since: float) -> tuple[float, float]:
    """(mean, growth as a share of the fitted value at `since`) of the samples from `since` on, the growth that of a
    least-squares line from the first such sample to the last."""
    points = [(t, v) for t, v in samples if t >= since]
    n = len(points)
    if n < 2:
        return float("nan"), float("nan")
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    slope = sum((t - mean_t) * (v - mean_v) for t, v in points) / sum((t - mean_t) ** 2 for t, _ in points)
    start = mean_v + slope * (points[0][0] - mean_t)
    return mean_v, slope * (points[-1][0] - points[0][0]) / start


async def soak(args: argparse.Namespace, bootstrap: str, logdir: Path, topics: dict[str, str]) -> int:
    salt = secrets.token_hex(6)
    group = f"soak-{salt}"
    worker = Proc("worker", [
        "run", "--bootstrap-servers", bootstrap, "--source-topic", topics["source"], "--output-topic",
        topics["output"], "--dlq-topic", topics["dlq"], "--display-topic", topics["display"], "--group-id", group,
        "--transactional-id-prefix", group, "--metrics-host", "127.0.0.1", "--log-format", "json",
        *args.worker_args.split(),
    ], logdir, free_port(), args.heap, args.tracemalloc, args.trim, dict(args.env))  # fmt: skip
    worker.args += ["--metrics-port", str(worker.metrics_port)]
    http_port = free_port()
    gateway = Proc("gateway", [
        "gateway", "--bootstrap-servers", bootstrap, "--output-topic", topics["output"], "--display-topic",
        topics["display"], "--insecure-no-auth", "--http-host", "127.0.0.1", "--http-port", str(http_port),
        "--metrics-host", "127.0.0.1", "--log-format", "json", "--gateway-group-id", f"soak-gw-{salt}",
        "--max-indexed-runs", str(args.max_indexed_runs), *args.gateway_args.split(),
    ], logdir, free_port(), args.heap, args.tracemalloc, args.trim, dict(args.env))  # fmt: skip
    gateway.args += ["--metrics-port", str(gateway.metrics_port)]
    procs = [worker.start(), gateway.start()]
    producer: subprocess.Popen[bytes] | None = None
    try:
        await _ready(worker, gateway, args.partitions)
        checker = Checker(bootstrap, topics, group, args.partitions, f"http://127.0.0.1:{http_port}", salt)
        producer = _start_producer(args, bootstrap, topics["source"], salt, logdir)
        sent = [0]
        reading = asyncio.create_task(_read_producer(producer, checker, sent))
        stop = asyncio.Event()
        checking = asyncio.create_task(checker.run(stop))
        began = time.monotonic()
        duration = args.minutes * 60
        minutes: list[Minute] = []
        last = {"t": 0.0, "records": (await worker.metrics()).get("harness_agui_source_records_total", 0.0),
                "sent": 0.0, "worker": worker.cpu_s(), "gateway": gateway.cpu_s(), "host": _busy_s()}  # fmt: skip
        print(f"{'min':>4} {'worker MiB':>10} {'gateway MiB':>11} {'items/s':>8} {'sent/s':>7} {'open runs':>9} "
              f"{'lag':>7} {'tracked':>7} {'indexed':>8} {'cache MiB':>9} {'cores: worker':>13} {'gateway':>7} "
              f"{'host':>4} {'checked':>7} {'failed':>6}")  # fmt: skip
        next_sample = 0.0
        while (now := time.monotonic() - began) < duration:
            for proc in procs:
                if not proc.alive():
                    raise RuntimeError(f"{proc.name} exited:\n{proc.log_tail()}")
            if now >= next_sample:
                for proc in procs:
                    proc.rss.append((now, proc.resident()))
                next_sample += SAMPLE_S
            if now - last["t"] >= 60 or (not minutes and now >= 60):
                w, g = await worker.metrics(), await gateway.metrics()
                records = w.get("harness_agui_source_records_total", 0.0)
                span = now - last["t"]
                cpu = {"worker": worker.cpu_s(), "gateway": gateway.cpu_s(), "host": _busy_s()}
                cores = {k: (cpu[k] - last[k]) / span for k in cpu}
                minute = Minute(now, worker.rss[-1][1] / MIB, gateway.rss[-1][1] / MIB,
                                (records - last["records"]) / span, cores["worker"], cores["gateway"], cores["host"],
                                w, g)  # fmt: skip
                minutes.append(minute)
                print(f"{now / 60:4.0f} {minute.worker_mib:10.1f} {minute.gateway_mib:11.1f} "
                      f"{minute.items_per_s:8,.0f} {(sent[0] - last['sent']) / span:7,.0f} "
                      f"{w.get('harness_agui_open_streams', 0):9,.0f} "
                      f"{w.get('harness_agui_consumer_lag_records', 0):7,.0f} "
                      f"{g.get('harness_agui_gateway_tracked_runs', 0):7,.0f} "
                      f"{g.get('harness_agui_gateway_indexed_runs', 0):8,.0f} "
                      f"{g.get('harness_agui_gateway_display_cache_bytes', 0) / MIB:9.1f} "
                      f"{minute.worker_cores:13.2f} {minute.gateway_cores:7.2f} {minute.host_cores:4.2f} "
                      f"{checker.checks.gateway:7} {len(checker.checks.failed):6}", flush=True)  # fmt: skip
                last = {"t": now, "records": records, "sent": float(sent[0]), **cpu}
            await asyncio.sleep(0.5)
        producer.send_signal(signal.SIGTERM)
        await asyncio.to_thread(producer.wait, 60)
        await reading
        stop.set()
        await checking
        _keep(logdir / "soak.json", args, worker, gateway, minutes, checker.checks, duration)
        return _summary(args, worker, gateway, minutes, checker.checks, duration)
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
        for proc in procs:
            proc.stop()


def _busy_s() -> float:
    """CPU seconds the whole machine spent busy (all but idle and iowait), now."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _start_producer(args: argparse.Namespace, bootstrap: str, source: str, salt: str,
                    logdir: Path) -> subprocess.Popen[bytes]:  # fmt: skip
    with (logdir / "producer.log").open("ab") as log:
        return subprocess.Popen([sys.executable, "-P", str(Path(__file__).resolve()), "--producer", bootstrap, source,
                                 str(args.rate), str(args.concurrency), salt, str(args.sample_every)],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=log)  # fmt: skip


def _status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=2) as response:
        return int(response.status)


async def _ready(worker: Proc, gateway: Proc, partitions: int, within_s: float = 180) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for proc in (worker, gateway):
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited:\n{proc.log_tail()}")
        if (await worker.metrics()).get("harness_agui_partition_ready", 0) >= partitions:
            with contextlib.suppress(OSError):
                if await asyncio.to_thread(_status, f"http://127.0.0.1:{gateway.metrics_port}/readyz") == 200:
                    return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"not ready within {within_s:.0f} s:\n{worker.log_tail()}\n{gateway.log_tail()}")


async def _read_producer(producer: subprocess.Popen[bytes], checker: Checker, sent: list[int]) -> None:
    assert producer.stdout is not None
    reader = producer.stdout
    while line := await asyncio.to_thread(reader.readline):
        data = json.loads(line)
        if "sample" in data:
            checker.add(Sample(data["copy"], data["first_ms"], data["partition"], data["offset"]))
        else:
            sent[0] = int(data["sent"])


def _keep(path: Path, args: argparse.Namespace, worker: Proc, gateway: Proc, minutes: list[Minute], checks: Checks,
          duration: float) -> None:  # fmt: skip
    """What the summary is made of, for `--report` to print it again (with this file's summary of the day)."""
    kept = {name: value for name, value in vars(args).items() if name != "producer"}
    rss = {"worker": worker.rss, "gateway": gateway.rss}
    path.write_text(json.dumps({"args": kept, "duration": duration, "rss": rss, "minutes": [asdict(m) for m in minutes],
                                "checks": asdict(checks)}))  # fmt: skip


def _report(path: Path) -> int:
    """The summary of a finished soak again, from the soak.json it kept in its log folder."""
    data = json.loads(path.read_text())
    args = argparse.Namespace(**data["args"])
    args.env = [tuple(pair) for pair in args.env]
    procs = []
    for name in ("worker", "gateway"):
        proc = Proc(name, [], path.parent, 0)
        proc.rss = [(t, v) for t, v in data["rss"][name]]
        procs.append(proc)
    minutes = [Minute(**m) for m in data["minutes"]]
    checks = Checks(**data["checks"])
    return _summary(args, procs[0], procs[1], minutes, checks, data["duration"])


def _summary(args: argparse.Namespace, worker: Proc, gateway: Proc, minutes: list[Minute], checks: Checks,
             duration: float) -> int:  # fmt: skip
    since = duration * 2 / 3
    print(f"\nsoak: {args.minutes:g} min at {args.rate:,.0f} items/s, {args.concurrency:,} runs under way, "
          f"{args.partitions} partitions, display on"
          + "".join(f", {name}={value}" for name, value in args.env)
          + (f", malloc_trim every {args.trim:g} s" if args.trim else "")
          + "; the worker and the gateway resident, over the last third:")
    late = [m for m in minutes if m.at >= since]
    for proc in (worker, gateway):
        level, grew = growth(proc.rss, since)
        peak = max(v for t, v in proc.rss if t >= since)
        print(f"  {proc.name}: level {level / MIB:.1f} MiB, grew {100 * grew:+.2f}% (goal <= 2%), highest "
              f"{peak / MIB:.1f} MiB")
    if late:
        rates = [m.items_per_s for m in late]
        print(f"  items/s the worker processed, by minute of the last third: {min(rates):,.0f} to {max(rates):,.0f}")
    print(f"  sampled runs checked: {checks.topic} in the output topic, {checks.gateway} through the gateway; "
          f"not exact: {len(checks.failed)}; not committed by the worker within {COMMIT_WITHIN_S:.0f} s, so not "
          f"checked: {checks.uncommitted}")
    for failure in checks.failed[:10]:
        print(f"    {failure}")
    _formula(args, worker, gateway, minutes, since)
    if args.heap:
        for proc in (worker, gateway):
            _heap_summary(proc, since / 2)
    return 0 if not checks.failed and not checks.uncommitted else 1


def _formula(args: argparse.Namespace, worker: Proc, gateway: Proc, minutes: list[Minute], since: float) -> None:
    """docs/sizing.md's formula beside each process's level over the last third: the process idle (its first sample,
    before the load), its working memory at the load (what the first third held beyond the entries then) and the
    entries of the last third at their measured costs (`measured_costs`)."""
    mean_run = sum(len(t.lines) for t in load_samples()) / len(load_samples())
    previous: Minute | None = None
    rows: list[tuple[float, dict[str, tuple[float, dict[str, float]]]]] = []  # at, by process: resident, entries
    for m in minutes:
        if previous is not None:
            events = m.worker.get("harness_agui_output_events_total", 0.0) - previous.worker.get(
                "harness_agui_output_events_total", 0.0)  # fmt: skip
            open_runs = m.worker.get("harness_agui_open_streams", 0.0)
            ended = m.worker.get("harness_agui_source_records_total", 0.0) / mean_run - open_runs
            remembered = min(max(ended, 0.0), CLOSED_STREAM_MEMORY * args.partitions)
            held = {"open run": open_runs, "remembered run": remembered}
            indexed = {"tracked run": m.gateway.get("harness_agui_gateway_tracked_runs", 0.0),
                       "recent event": events / (m.at - previous.at) * (RECENT_WINDOW_S + SWEEP_S),
                       "indexed run": m.gateway.get("harness_agui_gateway_indexed_runs", 0.0),
                       "cached byte": m.gateway.get("harness_agui_gateway_display_cache_bytes", 0.0)}  # fmt: skip
            rows.append((m.at, {"worker": (m.worker_mib * MIB, held), "gateway": (m.gateway_mib * MIB, indexed)}))
        previous = m
    early = [by for at, by in rows if at <= since / 2]
    late = [by for at, by in rows if at >= since]
    if not early or not late:
        print("  formula: too short a soak (it needs minutes in its first third after the first, and in its last)")
        return
    costs = measured_costs()
    for proc in (worker, gateway):
        idle = proc.rss[0][1]

        def entries(held: dict[str, float]) -> float:
            return sum(count * costs[name] for name, count in held.items())

        working = sum(by[proc.name][0] - idle - entries(by[proc.name][1]) for by in early) / len(early)
        names = late[0][proc.name][1]
        counts = {name: sum(by[proc.name][1][name] for by in late) / len(late) for name in names}
        value = idle + working + entries(counts)
        level, _ = growth(proc.rss, since)
        print(f"  {proc.name}, docs/sizing.md's formula: idle {idle / MIB:.1f} MiB + working {working / MIB:.1f} MiB"
              + "".join(f" + {counts[n]:,.0f} {n}s x {costs[n]:,.0f} B" if n != "cached byte" else
                        f" + {counts[n] / MIB:,.1f} MiB cached x {costs[n]:.2f}" for n in counts)
              + f" = {value / MIB:.1f} MiB, the level {100 * (value / level - 1):+.1f}% (goal within 15%)")  # fmt: skip


def _heap_summary(proc: Proc, since: float) -> None:
    """How the heap of `proc` changed between its first dump at `since` or later and its last."""
    dumps = [json.loads(line) for line in proc.heap.read_text().splitlines()] if proc.heap.exists() else []
    late = [d for d in dumps if d["t"] >= since]
    if len(late) < 2:
        print(f"  {proc.name}: fewer than two heap dumps after {since / 60:.1f} min")
        return
    first, last = late[0], late[-1]

    def mib(d: dict[str, object], *names: str) -> str:
        return "/".join(f"{int(d.get(n, 0)) / MIB:.0f}" for n in names)  # type: ignore[call-overload]

    print(f"  {proc.name}, heap from {first['t'] / 60:.1f} to {last['t'] / 60:.1f} min (MiB): resident "
          f"{first['rss'] / MIB:.0f} -> {last['rss'] / MIB:.0f}; pymalloc arenas/allocated/free in pools/unused "
          f"pools {mib(first['pymalloc'], 'arenas', 'allocated', 'available', 'unused_pools')} -> "
          f"{mib(last['pymalloc'], 'arenas', 'allocated', 'available', 'unused_pools')}; malloc heaps/mmapped/in "
          f"use/free {mib(first['malloc'], 'arena', 'hblkhd', 'uordblks', 'fordblks')} -> "
          f"{mib(last['malloc'], 'arena', 'hblkhd', 'uordblks', 'fordblks')}; collector counts {first['gc_count']} "
          f"-> {last['gc_count']}")
    for generation, (a, b) in enumerate(zip(first["generations"], last["generations"], strict=True)):
        kinds = sorted(((b["types"].get(k, 0) - a["types"].get(k, 0), k) for k in b["types"]), reverse=True)[:6]
        print(f"    generation {generation}: {a['objects']:,} -> {b['objects']:,} objects; grew most: "
              + ", ".join(f"{k} {d:+,}" for d, k in kinds))
    for name, (count, size) in sorted(last["large"].items(), key=lambda item: -item[1][1])[:6]:
        print(f"    buffers of 256 KiB or more held by {name}: {count} ({size / MIB:.1f} MiB)")
    if "lines" in first and "lines" in last:
        before = {site: size for site, size, _ in first["lines"]}
        after = {site: (size, count) for site, size, count in last["lines"]}
        print(f"    traced {first['traced'] / MIB:.1f} -> {last['traced'] / MIB:.1f} MiB; grew most:")
        for delta, site in sorted(((after[s][0] - before.get(s, 0), s) for s in after), reverse=True)[:15]:
            print(f"    {delta / 1024:+10.1f} KiB to {after[site][0] / 1024:10.1f} KiB in {after[site][1]:>9,} blocks  "
                  f"{site}")


def _assignment(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/soak.py", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--rate", type=float, default=4000, help="items per second sent to the source topic")
    parser.add_argument("--concurrency", type=int, default=1600, help="runs under way at once")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--sample-every", type=int, default=4000, help="every Nth run is checked exact")
    parser.add_argument("--max-indexed-runs", type=int, default=100_000, help="the gateway's max_indexed_runs")
    parser.add_argument("--worker-args", default="", help="more flags of `worker run`")
    parser.add_argument("--gateway-args", default="", help="more flags of `worker gateway`")
    parser.add_argument("--env", action="append", default=[], type=_assignment, metavar="NAME=VALUE",
                        help="set in the worker's and the gateway's environment (e.g. MALLOC_ARENA_MAX=2); repeatable")
    parser.add_argument("--heap", type=float, default=0.0, metavar="SECONDS",
                        help="write what both processes' heaps hold every SECONDS (bench/_heap_trace.py)")
    parser.add_argument("--tracemalloc", action="store_true", help="with --heap: trace every allocation too")
    parser.add_argument("--trim", type=float, default=0.0, metavar="SECONDS",
                        help="call glibc's malloc_trim(0) in both processes every SECONDS, from a thread of their own")
    parser.add_argument("--report", type=Path, metavar="SOAK_JSON",
                        help="print the summary of a finished soak again from the soak.json in its log folder")
    parser.add_argument("--costs", action="store_true",
                        help="measure only what each entry of docs/sizing.md's formula costs, without a broker")
    parser.add_argument("--cost", choices=COSTS, help=argparse.SUPPRESS)
    parser.add_argument("--producer", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.report:
        return _report(args.report)
    if args.cost:
        print(measure_cost(args.cost))
        return 0
    if args.costs:
        for name, cost in measured_costs().items():
            print(f"{name}: {cost:,.{1 if cost >= 10 else 3}f} bytes ({COSTS[name][1]}; {COSTS[name][0]:,} measured)")
        return 0
    if args.producer:
        bootstrap, topic, rate, concurrency, salt, every = args.producer
        asyncio.run(_produce(bootstrap, topic, float(rate), int(concurrency), salt, int(every)))
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the processes and the broker on the way out
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    cluster = None if external else KafkaCluster.start(nodes=1)
    bootstrap = external or cluster.bootstrap_servers  # type: ignore[union-attr]
    logdir = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    suffix = secrets.token_hex(4)
    topics = {role: f"soak-{role}-{suffix}" for role in ("source", "output", "dlq", "display")}
    kept = {"retention.ms": str(RETENTION_MS), "segment.bytes": str(64 * MIB)}
    try:
        for role in ("source", "output"):
            create_topic_on(bootstrap, topics[role], args.partitions, 1, kept)
        create_topic_on(bootstrap, topics["display"], args.partitions, 1,
                        {"cleanup.policy": "compact,delete", **kept})  # fmt: skip
        create_topic_on(bootstrap, topics["dlq"], 1, 1)
        print(f"bench/soak.py ({os.cpu_count()} cores; load {os.getloadavg()[0]:.1f}; the installed package's "
              f"conversion core: {describe()}); logs in {logdir}", flush=True)
        return asyncio.run(soak(args, bootstrap, logdir, topics))
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
