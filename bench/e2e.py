"""End-to-end figures of the worker on a real broker, from one run: exactly-once throughput against a plain
aiokafka passthrough, source-to-visible delay at half the measured maximum, rebuild (replay) speed, and what the
display topic costs in CPU per item.

    .venv/bin/python bench/e2e.py [--items 50000] [--open-streams 1000] [--replay-streams 4500] [--replay-processes 2]
        [--parts abcdefgh] [--history 1000000] [--history-streams 10000]

Starts a single-node Kafka from the Maven jars unless KAFKA_BOOTSTRAP_SERVERS is set. Workers run as
`python -P -m worker run` subprocesses (the installed package, not the checkout), one at a time; their logs go to a
temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import itertools
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # for devtools: `worker` stays the installed package

from devtools.kafka_cluster import KafkaCluster, create_topic_on, free_port  # noqa: E402
from devtools.kafka_tools import GroupLag  # noqa: E402
from devtools.metrics_page import summed_by_name  # noqa: E402
from devtools.sample_runs import SampleRun, interleave, load_samples, open_runs, produce  # noqa: E402
from worker._native import describe  # noqa: E402
from worker.settings import Settings  # noqa: E402
from worker.stream import (  # noqa: E402
    Destination,
    PartitionState,
    SourceRecord,
    to_source_record,
)

__all__ = ["Worker", "commit_delays", "main", "passthrough_throughput", "rebuild", "worker_throughput"]

Placed = tuple[int, bytes, bytes]  # partition, key, value
LAG = "harness_agui_event_loop_lag_seconds"
GC = "harness_agui_gc_duration_seconds"
STALL_LOGGED_MS = 20  # the workers log every turn of the loop this long: the longest one is read from their logs
TURN_GOAL_S = 0.05


# ---- the worker under test ----------------------------------------------------------------------



@dataclass
class Worker:
    """`python -m worker run` with a metrics port, its log in `logdir`."""

    bootstrap: str
    source: str
    output: str
    dlq: str
    group: str
    logdir: Path
    name: str
    commit_interval_ms: int = 100
    replay_processes: int = 0
    extra: tuple[str, ...] = ()
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Worker:
        args = [
            sys.executable, "-P", "-m", "worker", "run", "--bootstrap-servers", self.bootstrap,
            "--source-topic", self.source, "--output-topic", self.output, "--dlq-topic", self.dlq,
            "--group-id", self.group, "--transactional-id-prefix", self.group,
            "--commit-interval-ms", str(self.commit_interval_ms), "--replay-processes", str(self.replay_processes),
            "--metrics-host", "127.0.0.1", "--metrics-port", str(self.port), "--log-format", "json",
            "--stall-warning-ms", str(STALL_LOGGED_MS), *self.extra,
        ]  # fmt: skip
        with (self.logdir / f"{self.name}.log").open("ab") as log:
            self.proc = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        return self

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def log_tail(self, lines: int = 20) -> str:
        path = self.logdir / f"{self.name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    async def _metrics_text(self) -> str:
        def fetch() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
                return str(r.read().decode())

        try:
            return await asyncio.to_thread(fetch)
        except OSError:
            return ""

    async def loop_mark(self) -> LoopMark:
        """The event loop's lag histogram (cumulative count by bound) and the lines of the log, now."""
        buckets: dict[float, float] = {}
        collected: dict[str, float] = {}
        for line in (await self._metrics_text()).splitlines():
            if line.startswith(f"{LAG}_bucket{{"):
                series, _, value = line.rpartition(" ")
                buckets[float(series.split('le="', 1)[1].split('"', 1)[0])] = float(value)
            elif line.startswith((f"{GC}_count{{", f"{GC}_sum{{")):
                series, _, value = line.rpartition(" ")
                collected[series] = float(value)
        return LoopMark(buckets, len(self._log_lines()), collected)

    def _log_lines(self) -> list[str]:
        path = self.logdir / f"{self.name}.log"
        return path.read_text(errors="replace").splitlines() if path.exists() else []

    def loop_turns(self, since: LoopMark, until: LoopMark, *, after: str = "") -> LoopTurns:
        """The loop's lag between two marks: the longest and the work it named from the stall lines of the log
        (after the first line containing `after`, when given), the p99 and the turns over the goal from the
        histogram."""
        lines = self._log_lines()[since.log_lines : until.log_lines]
        if after:
            lines = lines[next((i for i, line in enumerate(lines) if after in line), len(lines)) :]
        stalls = [json.loads(line) for line in lines if '"event loop blocked' in line]
        worst = max(stalls, key=lambda r: r["lag_seconds"], default=None)
        busiest = max(stalls, key=lambda r: r["cpu_seconds"], default=None)
        bounds = sorted(until.buckets)
        counts = [until.buckets[b] - since.buckets.get(b, 0.0) for b in bounds]
        total = counts[-1] if counts else 0.0
        p99 = next((b for b, c in zip(bounds, counts, strict=True) if c >= 0.99 * total), float("nan"))
        over = total - next((c for b, c in zip(bounds, counts, strict=True) if b >= TURN_GOAL_S), total)
        def collected(series: str) -> float:
            return until.collected.get(series, 0.0) - since.collected.get(series, 0.0)

        counts = tuple(int(collected(f'{GC}_count{{generation="{g}"}}')) for g in "012")
        gc_s = sum(collected(f'{GC}_sum{{generation="{g}"}}') for g in "012")
        return LoopTurns(int(total), p99, worst["lag_seconds"] if worst else None,
                         worst["cpu_seconds"] if worst else 0.0, busiest["cpu_seconds"] if busiest else None,
                         busiest["work"] if busiest else "", int(over), busiest["gc_seconds"] if busiest else 0.0,
                         busiest["gc_generation"] if busiest else -1, counts, gc_s)

    async def metrics(self) -> dict[str, float]:
        """Each series of the metrics endpoint summed over its labels ({} while the endpoint is down)."""
        text = await self._metrics_text()
        return summed_by_name(text)

    async def wait_ready(self, partitions: int, within_s: float = 90) -> dict[str, float]:
        """Wait until `partitions` partitions report ready; returns the metrics seen then."""
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited {self.proc.returncode}:\n{self.log_tail()}")
            m = await self.metrics()
            if m.get("harness_agui_partition_ready", 0) >= partitions:
                return m
            await asyncio.sleep(0.05)
        raise TimeoutError(f"worker {self.name} not ready within {within_s:.0f} s:\n{self.log_tail()}")


class LoopMark(NamedTuple):
    buckets: dict[float, float]  # harness_agui_event_loop_lag_seconds: cumulative count by upper bound
    log_lines: int
    collected: dict[str, float]  # harness_agui_gc_duration_seconds: _count and _sum by generation


class LoopTurns(NamedTuple):
    """How long the worker's event loop was held between two marks."""

    samples: int  # lag measurements (one per 10 ms the loop was free to take one)
    p99_s: float  # the upper bound of the histogram bucket holding the 99th percentile
    longest_s: float | None  # the longest lag logged; None: none reached STALL_LOGGED_MS
    longest_cpu_s: float  # the CPU the loop's thread ran in that stretch: the rest, the host gave to others
    own_s: float | None  # the most CPU the loop's thread ran in one logged stretch: the worker's own longest work
    work: str  # the work noted in that stretch
    over_goal: int  # the histogram's lags above the bucket bound of TURN_GOAL_S
    own_gc_s: float = 0.0  # the garbage collections in the stretch of the most own work
    own_gc_generation: int = -1  # the oldest generation they collected; -1: none
    collections: tuple[int, ...] = (0, 0, 0)  # collections of generation 0, 1, 2 between the marks
    gc_s: float = 0.0  # the time they took, all together

    def describe(self) -> str:
        if self.longest_s is None or self.own_s is None:
            return (f"no turn of {STALL_LOGGED_MS} ms or more; p99 <= {self.p99_s * 1000:g} ms over "
                    f"{self.samples} samples; {self.collected()}")
        goal = "OK" if self.own_s <= TURN_GOAL_S else "MISSED"
        collected = (f", a generation-{self.own_gc_generation} collection of {self.own_gc_s * 1000:.0f} ms in it"
                     if self.own_gc_generation >= 0 else "")
        return (f"longest {self.longest_s * 1000:.0f} ms, the loop's thread running {self.longest_cpu_s * 1000:.0f} "
                f"ms of it; the most own work in one {self.own_s * 1000:.0f} ms CPU ({self.work or 'none noted'}"
                f"{collected}), goal <= {TURN_GOAL_S * 1000:.0f} ms {goal}; p99 <= {self.p99_s * 1000:g} ms over "
                f"{self.samples} samples, {self.over_goal} above {TURN_GOAL_S * 1000:.0f} ms; "
                f"{self.collected()}")

    def collected(self) -> str:
        """The garbage collections between the marks, by generation, and their time."""
        return (f"collections of generation 0/1/2: {'/'.join(map(str, self.collections))}, "
                f"{self.gc_s * 1000:.0f} ms in all")


# ---- measurements ----------------------------------------------------------------------


class Rate(NamedTuple):
    """Items per second over a measured stretch, and the CPU the measured process spent per item in it."""

    items_per_s: float
    cpu_us_per_item: float
    children_cpu_us_per_item: float = 0.0  # the worker's child processes
    machine_cores: float = 0.0  # cores the whole machine kept busy meanwhile (broker and load generator included)
    loop: LoopTurns | None = None  # the worker's event loop meanwhile

    def cores(self) -> str:
        """How busy the cores were meanwhile: the whole machine, and the worker and its helper within that."""
        worker = self.cpu_us_per_item * self.items_per_s / 1e6
        helper = self.children_cpu_us_per_item * self.items_per_s / 1e6
        rest = max(0.0, self.machine_cores - worker - helper)
        return f"{self.machine_cores:.2f} (worker {worker:.2f}, its children {helper:.2f}, broker and rest {rest:.2f})"


async def worker_throughput(worker: Worker, total: int, partitions: int) -> Rate:
    """Items/s from the moment every partition is ready (group joined, nothing to rebuild) until the group's
    committed offsets cover all `total` records, and the worker process's CPU per item meanwhile."""
    worker.start()
    await worker.wait_ready(partitions=partitions)
    assert worker.proc is not None
    mark = await worker.loop_mark()
    cpu_before = _cpu_counters(worker.proc.pid)
    children_before = _descendants_cpu(worker.proc.pid)
    began = time.monotonic()
    async with GroupLag(worker.bootstrap, worker.group, worker.source) as probe:
        deadline = began + 600
        while True:
            done = sum((await probe.committed()).values())
            now = time.monotonic()
            if done >= total:
                break
            if now > deadline or (worker.proc is not None and worker.proc.poll() is not None):
                raise RuntimeError(f"worker {worker.name} stuck at {done}/{total}:\n{worker.log_tail()}")
            await asyncio.sleep(0.02)
    cpu_after = _cpu_counters(worker.proc.pid)
    cpu_s = cpu_after[2] - cpu_before[2]
    children_s = _descendants_cpu(worker.proc.pid) - children_before
    machine = (cpu_after[1] - cpu_before[1]) / max(cpu_after[0] - cpu_before[0], 1e-6)
    turns = worker.loop_turns(mark, await worker.loop_mark())
    status = worker.stop()
    if status != 0:
        raise RuntimeError(f"worker {worker.name} exited {status}:\n{worker.log_tail()}")
    return Rate(total / max(now - began, 1e-6), cpu_s / total * 1e6, children_s / total * 1e6, machine, turns)


async def passthrough_throughput(bootstrap: str, source: str, output: str, total: int) -> Rate:
    """Items/s of consume → produce with plain aiokafka (no transactions, no conversion, acks=all), and this
    process's CPU per item meanwhile."""
    consumer = AIOKafkaConsumer(
        source, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
        enable_auto_commit=False, max_poll_records=500,
    )  # fmt: skip
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5)
    await consumer.start()
    await producer.start()
    try:
        seen = 0
        began: float | None = None
        cpu_began = 0.0
        futures: list[asyncio.Future[object]] = []
        while seen < total:
            batches = await consumer.getmany(timeout_ms=1000, max_records=500)
            if began is None and batches:
                began, cpu_began = time.monotonic(), time.process_time()
            for recs in batches.values():
                for r in recs:
                    futures.append(await producer.send(output, r.value, key=r.key, headers=r.headers))
                    seen += 1
            if len(futures) >= 5000:  # a bounded window of unacknowledged sends, as a tuned client would keep
                await asyncio.gather(*futures)
                futures.clear()
        await asyncio.gather(*futures)
        cpu_us = (time.process_time() - cpu_began) / total * 1e6
        return Rate(total / max(time.monotonic() - (began or 0.0), 1e-6), cpu_us)
    finally:
        await producer.stop()
        await consumer.stop()


async def conversion_cost(bootstrap: str, source: str, total: int, *, publish: bool = True) -> float:
    """CPU microseconds per item of the conversion alone (decode, verdicts, observe and, with `publish`, encode
    and output records) on the source's records, read into memory first (best of 3 passes): the worker's work
    beyond the client's, or with `publish=False` what replay does for each record."""
    recs = await _source_records(bootstrap, source, total)
    best = float("inf")
    for _ in range(3):  # fresh states each pass; the best pass, as for the rounds of (a) and (b)
        states = {p: PartitionState(source, p) for p in {r.partition for r in recs}}
        began = time.process_time()
        for rec in recs:
            states[rec.partition].process(rec, publish=publish)
        best = min(best, time.process_time() - began)
    return best / len(recs) * 1e6


async def _source_records(bootstrap: str, source: str, total: int) -> list[SourceRecord]:
    """The first `total` records of `source`, every partition's in offset order."""
    consumer = AIOKafkaConsumer(source, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                                enable_auto_commit=False)  # fmt: skip
    await consumer.start()
    try:
        recs: list[SourceRecord] = []
        while len(recs) < total:
            for part in (await consumer.getmany(timeout_ms=1000, max_records=5000)).values():
                recs.extend(map(to_source_record, part))
    finally:
        await consumer.stop()
    return recs


@dataclass(frozen=True)
class CpuUse:
    """Cores kept busy over a stretch of wall time: the whole machine, the worker, and this bench process."""

    machine: float
    worker: float
    bench: float
    cores: int

    def describe(self) -> str:
        rest = max(0.0, self.machine - self.worker - self.bench)
        return (f"cores busy {self.machine:.2f} of {self.cores} (worker {self.worker:.2f}, "
                f"load generator {self.bench:.2f}, broker and rest {rest:.2f})")


def _cpu_counters(pid: int) -> tuple[float, float, float, float]:
    """Wall clock, machine busy seconds, `pid`'s CPU seconds and this process's CPU seconds, now."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = (sum(fields) - fields[3] - fields[4]) / tick  # all but idle and iowait
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return time.monotonic(), busy, (int(stat[11]) + int(stat[12])) / tick, time.process_time()


def _descendants_cpu(pid: int) -> float:
    """CPU seconds of every process `pid` started, now: the live ones (and theirs) and those it has waited for."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    with contextlib.suppress(OSError):
        waited = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(waited[13]) + int(waited[14])) / tick  # cutime, cstime
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                for child in (task / "children").read_text().split():
                    with contextlib.suppress(OSError):
                        stat = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
                        total += (int(stat[11]) + int(stat[12])) / tick + _descendants_cpu(int(child))
    return total


def _cpu_use(before: tuple[float, float, float, float], after: tuple[float, float, float, float]) -> CpuUse:
    wall = max(after[0] - before[0], 1e-6)
    machine, worker, bench = ((a - b) / wall for a, b in zip(after[1:], before[1:], strict=True))
    return CpuUse(machine, worker, bench, os.cpu_count() or 1)


async def commit_delays(
    worker: Worker, rate: float, seconds: float, templates: list[SampleRun]
) -> tuple[list[tuple[float, float]], float, CpuUse, LoopTurns]:
    """(second of the paced run, delay) of every source record, in source order, the delay being seconds from
    its timestamp until the transaction holding it is visible; the mean source-to-commit delay the worker
    itself measured; and its event loop's turns from the start of the paced run until it caught up.

    Visibility is read from the group's committed offset, which commits in the same transaction as the
    record's output: a record is visible at the first poll (every 10 ms, so a delay reads up to 10 ms long)
    that finds the offset past it. Polling offsets instead of reading every output record, at this pace and
    with the coordinator looked up once, keeps the probe's own cost low: polling every 5 ms with a look-up
    each time took 0.45 of the 2 cores it shares with the broker and the worker.
    """
    worker.start()
    await worker.wait_ready(partitions=3)
    stamps: dict[tuple[int, int], int] = {}
    visible: dict[int, list[tuple[int, float]]] = {}  # partition -> (committed offset, first seen at)
    stop = asyncio.Event()

    async def watch(probe: GroupLag) -> None:
        last: dict[int, int] = {}
        while not stop.is_set():
            got = await probe.committed()
            now = time.time()
            for partition, offset in got.items():
                if offset > last.get(partition, 0):
                    visible.setdefault(partition, []).append((offset, now))
                    last[partition] = offset
            await asyncio.sleep(0.01)

    producer = AIOKafkaProducer(bootstrap_servers=worker.bootstrap, enable_idempotence=True, linger_ms=2)
    await producer.start()
    try:
        async with GroupLag(worker.bootstrap, worker.group, worker.source) as probe:
            watcher = asyncio.create_task(watch(probe))
            # Built before the clock starts, so generating runs takes no CPU from the paced stretch.
            items = list(itertools.islice(
                interleave(templates, runs=None, concurrency=32, salt=secrets.token_hex(6), seed=11),
                int(rate * seconds) + 1,
            ))
            placed = await _placed(producer, worker.source, items)
            assert worker.proc is not None
            mark = await worker.loop_mark()
            cpu_before = _cpu_counters(worker.proc.pid)
            sent = await _paced(producer, worker.source, placed, rate, seconds)
            cpu = _cpu_use(cpu_before, _cpu_counters(worker.proc.pid))
            for partition, future, batch_stamps in sent:
                base = (await future).offset
                for i, ts in enumerate(batch_stamps):
                    stamps[(partition, base + i)] = ts
            async with GroupLag(worker.bootstrap, worker.group, worker.source) as lag:
                await lag.wait_caught_up(within_s=60)
            turns = worker.loop_turns(mark, await worker.loop_mark())
            await asyncio.sleep(0.2)
            stop.set()
            await watcher
        m = await worker.metrics()
        count = m.get("harness_agui_source_to_commit_delay_seconds_count", 0)
        own = m.get("harness_agui_source_to_commit_delay_seconds_sum", float("nan")) / count if count else float("nan")
    finally:
        stop.set()
        await producer.stop()
        worker.stop()
    first = min(stamps.values(), default=0)
    timeline = sorted(
        ((ts - first) / 1000, _visible_at(visible.get(p, []), o) - ts / 1000) for (p, o), ts in stamps.items()
    )
    return timeline, own, cpu, turns


async def _placed(producer: AIOKafkaProducer, topic: str, items: list[tuple[bytes, bytes]]) -> list[Placed]:
    """Each item with the partition the default partitioner gives its key (murmur2 in Python: done up front)."""
    partitioner = DefaultPartitioner()
    partitions = sorted(await producer.partitions_for(topic))
    return [(partitioner(key, partitions, partitions), key, value) for key, value in items]


async def _paced(
    producer: AIOKafkaProducer, topic: str, placed: list[Placed], rate: float, seconds: float
) -> list[tuple[int, asyncio.Future[Any], list[int]]]:
    """Produce `rate` items/s for `seconds`: every 5 ms the items due go out as one batch per partition, each
    stamped with the time it was handed over (cheap enough to leave the cores to the broker and the worker).

    Keys are placed by the default partitioner (`_placed`), so a run's items stay in one partition and in order.
    """
    sent: list[tuple[int, asyncio.Future[Any], list[int]]] = []
    began = time.monotonic()
    done = 0
    while (elapsed := time.monotonic() - began) < seconds:
        due = min(int(elapsed * rate), len(placed))
        ts = int(time.time() * 1000)
        open_batches: dict[int, tuple[Any, list[int]]] = {}
        for partition, key, value in placed[done:due]:
            batch, batch_stamps = open_batches.setdefault(partition, (producer.create_batch(), []))
            if batch.append(timestamp=ts, key=key, value=value) is None:  # full: send it, start another
                sent.append((partition, await producer.send_batch(batch, topic, partition=partition), batch_stamps))
                batch, batch_stamps = open_batches[partition] = (producer.create_batch(), [])
                batch.append(timestamp=ts, key=key, value=value)
            batch_stamps.append(ts)
        done = due
        for partition, (batch, batch_stamps) in open_batches.items():
            sent.append((partition, await producer.send_batch(batch, topic, partition=partition), batch_stamps))
        await asyncio.sleep(0.005)
    return sent


def _visible_at(commits: list[tuple[int, float]], offset: int) -> float:
    """When the first committed offset past `offset` was seen (commits ascend by offset and time)."""
    i = bisect.bisect_right([c for c, _ in commits], offset)
    return commits[i][1] if i < len(commits) else float("inf")


@dataclass
class Rebuild:
    records: int
    seconds: float
    open_streams: int
    live_rate: float
    live_cpu_us: float
    replay_seconds: float = float("nan")
    replay_cpu_us: float = float("nan")  # measured only where printed, (e)
    loop: LoopTurns | None = None  # the restarted worker's event loop from its topic checks until it is ready

    @property
    def replay_rate(self) -> float:
        """Records per second in the replay phase of the rebuild."""
        return self.records / self.replay_seconds if self.replay_seconds > 0 else float("nan")


async def rebuild(
    make: Callable[[str, str], Worker], streams: int, templates: list[SampleRun], *, replay_cpu: bool, rounds: int = 1
) -> list[Rebuild]:
    """Fill one partition with `streams` open streams; then per round, process them live with a fresh group and
    restart: time the rebuild (and, with `replay_cpu`, the CPU one replay process spends per record on them)."""
    cut = [SampleRun(t.name, t.root_run_id, t.lines[: min(12, len(t.lines) - 1)], t.ids) for t in templates]
    first = make("d-live-0", "0")
    stats = await produce(first.bootstrap, first.source, runs=streams, concurrency=streams, templates=cut, seed=5)
    replay_cpu_us = (
        await conversion_cost(first.bootstrap, first.source, stats.items, publish=False) if replay_cpu
        else float("nan")
    )  # fmt: skip
    results = []
    for round_ in range(rounds):
        live = first if round_ == 0 else make(f"d-live-{round_}", str(round_))
        measured = await worker_throughput(live, stats.items, partitions=1)
        live_rate, live_cpu_us = measured.items_per_s, measured.cpu_us_per_item
        again = make(f"d-restart-{round_}", str(round_))
        m, turns = await _rebuilt(again, within_s=300)
        results.append(Rebuild(
            records=int(m.get("harness_agui_rebuild_records_total", 0)),
            seconds=m.get("harness_agui_rebuild_duration_seconds_sum", float("nan")),
            open_streams=int(m.get("harness_agui_open_streams", 0)),
            live_rate=live_rate,
            live_cpu_us=live_cpu_us,
            replay_cpu_us=replay_cpu_us,
            replay_seconds=_replay_seconds(again),
            loop=turns,
        ))  # fmt: skip
    return results


@dataclass(frozen=True)
class HistoryRebuild:
    """One partition of `streams` open streams with `history` records after the oldest one's start, rebuilt by a
    restarted worker from its changelog and, again, without it (replay from the oldest open run)."""

    history: int
    streams: int
    live_rate: float
    changelog_s: list[float]  # per round
    changelog_read: int  # changelog records the restore read
    fallback_s: list[float]  # per round
    fallback_records: int
    live_loop: LoopTurns | None = None  # catching up on the history, checkpoints of every open run included
    restore_loop: LoopTurns | None = None  # the rebuilds from the changelog: the round whose longest turn was longest
    fallback_loop: LoopTurns | None = None  # the same of the rebuilds by replay
    live_cpu_us: float = 0.0  # the worker's CPU per record catching up


async def _produce_fast(bootstrap: str, topic: str, items: Iterator[tuple[bytes, bytes]]) -> int:
    """Send `items` to partition 0 of `topic` in full batches, acknowledged before it returns; how many."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=20,
                                max_batch_size=1024 * 1024, max_request_size=4 * 1024 * 1024)  # fmt: skip
    await producer.start()
    sent, pending = 0, []
    try:
        batch = producer.create_batch()
        for key, value in items:
            if batch.append(timestamp=None, key=key, value=value) is None:
                pending.append(await producer.send_batch(batch, topic, partition=0))
                batch = producer.create_batch()
                batch.append(timestamp=None, key=key, value=value)
                if len(pending) >= 64:
                    await asyncio.gather(*pending)
                    pending.clear()
            sent += 1
        pending.append(await producer.send_batch(batch, topic, partition=0))
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return sent


async def _rebuilt(worker: Worker, within_s: float) -> tuple[dict[str, float], LoopTurns]:
    """Start `worker` on one partition, wait for its one rebuild and stop it; its metrics then, and its event
    loop's turns from its topic checks (the start-up before them left out) until then."""
    worker.start()
    try:
        m = await worker.wait_ready(partitions=1, within_s=within_s)
        while m.get("harness_agui_rebuild_duration_seconds_count", 0) < 1:
            await asyncio.sleep(0.05)
            m = await worker.metrics()
        turns = worker.loop_turns(LoopMark({}, 0, {}), await worker.loop_mark(), after="topics checked")
    finally:
        worker.stop()
    return m, turns


async def _rebuild_seconds(worker: Worker) -> tuple[float, int, LoopTurns]:
    """Start `worker`, wait for its one rebuild; its duration, the source records it replayed and its loop's
    turns."""
    m, turns = await _rebuilt(worker, within_s=900)
    return m.get("harness_agui_rebuild_duration_seconds_sum", float("nan")), int(
        m.get("harness_agui_rebuild_records_total", 0)), turns


async def history_rebuild(
    make: Callable[[str, tuple[str, ...]], Worker], streams: int, history: int, rounds: int
) -> HistoryRebuild:
    """Fill a partition, process it live (checkpoints at the default interval), stop; then, in alternating
    rounds, time a restart's rebuild from the changelog and one with `--no-changelog` (replay from the oldest
    open run)."""
    live = make("f-live", ())
    tag = secrets.token_hex(3)
    total = await _produce_fast(live.bootstrap, live.source, open_runs(f"h{tag}", streams, history))
    caught_up = await worker_throughput(live, total, partitions=1)
    restores, fallbacks, read, replayed = [], [], 0, 0
    restore_turns, fallback_turns = [], []
    for round_ in range(rounds):
        restore = make(f"f-restore{round_}", ())
        seconds, _, turns = await _rebuild_seconds(restore)
        restores.append(seconds)
        restore_turns.append(turns)
        read = int(_rebuild_field(restore, "changelog_records"))
        seconds, replayed, turns = await _rebuild_seconds(make(f"f-fallback{round_}", ("--no-changelog",)))
        fallbacks.append(seconds)
        fallback_turns.append(turns)
    return HistoryRebuild(history, streams, caught_up.items_per_s, restores, read, fallbacks, replayed,
                          caught_up.loop, _worst(restore_turns), _worst(fallback_turns), caught_up.cpu_us_per_item)


def _rebuild_field(worker: Worker, name: str) -> float:
    """A field of the worker's "partition rebuilt" log line (nan when it logged none)."""
    path = worker.logdir / f"{worker.name}.log"
    for line in path.read_text(errors="replace").splitlines():
        if '"partition rebuilt' in line:
            return float(json.loads(line).get(name, "nan"))
    return float("nan")


def _replay_seconds(worker: Worker) -> float:
    """The replay phase of the rebuild (reading and re-running history), from the worker's log line."""
    return _rebuild_field(worker, "replay_seconds")


# ---- the run ----------------------------------------------------------------------


def _rates(values: list[float]) -> str:
    return " / ".join(f"{v:,.0f}" for v in values)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def _delay_rows(
    rate: float, timeline: list[tuple[float, float]], own_mean: float, cpu: CpuUse, turns: LoopTurns, goal_ms: int
) -> list[tuple[str, str, str]]:
    delays = [delay for _, delay in timeline]
    p50, p99 = _pct(delays, 0.5) * 1000, _pct(delays, 0.99) * 1000
    return [
        (f"(c) ts -> committed @{rate:,.0f}/s p50", f"{p50:.0f} ms", f"{len(delays)} records, until committed"),
        ("    p99", f"{p99:.0f} ms", f"goal <= {goal_ms} ms " + ("OK" if p99 <= goal_ms else "MISSED")),
        ("    over the goal", f"{sum(d * 1000 > goal_ms for d in delays)} records", _late_seconds(timeline, goal_ms)),
        ("    worker's own mean to commit", f"{own_mean * 1000:.0f} ms", "harness_agui_source_to_commit_delay"),
        ("    while paced", f"{cpu.machine / cpu.cores:.0%} CPU", cpu.describe()),
        ("    event loop's longest turn / own work", _longest(turns), turns.describe()),
    ]


def _longest(turns: LoopTurns | None) -> str:
    """The longest turn in wall time / the most CPU the loop ran in one logged stretch."""
    if turns is None:
        return "-"
    if turns.longest_s is None or turns.own_s is None:
        return f"< {STALL_LOGGED_MS} ms"
    return f"{turns.longest_s * 1000:.0f} / {turns.own_s * 1000:.0f} ms"


def _worst(turns: list[LoopTurns]) -> LoopTurns:
    return max(turns, key=lambda t: t.longest_s or 0.0)


def _late_seconds(timeline: list[tuple[float, float]], goal_ms: int, shown: int = 6) -> str:
    """Which seconds of the paced run the records over the goal came from: a burst or the whole run."""
    late = Counter(int(at) for at, delay in timeline if delay * 1000 > goal_ms)
    if not late:
        return "none"
    worst = sorted(late.items(), key=lambda kv: -kv[1])[:shown]
    return "by second of the run, most first: " + ", ".join(f"s{second} {n}" for second, n in worst)


async def run(bootstrap: str, args: argparse.Namespace, logdir: Path) -> list[tuple[str, str, str]]:
    tag = secrets.token_hex(4)
    names = itertools.count()

    def topic(role: str, partitions: int = 3) -> str:
        name = f"bench.{tag}.{role}.{next(names)}"
        create_topic_on(bootstrap, name, partitions, 1)
        return name

    templates = load_samples()
    src, dlq = topic("source"), topic("dlq")
    filled = await produce(bootstrap, src, runs=None, max_items=args.items, concurrency=200, seed=1)
    print(f"prefilled {filled.items} items of {filled.keys} runs in {filled.seconds:.1f} s", file=sys.stderr)

    # (a) and (b) alternate over the same records, each with a fresh group and output; the first round also
    # warms the broker's JIT, so each figure is the best of its rounds.
    eos_runs: list[Rate] = []
    plain_runs: list[Rate] = []
    bare_runs: list[Rate] = []  # (g): the worker without the changelog
    for round_ in range(args.rounds):
        worker_a = Worker(bootstrap, src, topic("agui"), dlq, f"bench-{tag}-a{round_}", logdir, f"a{round_}")
        eos_runs.append(await worker_throughput(worker_a, filled.items, 3))
        plain_runs.append(await passthrough_throughput(bootstrap, src, topic("plain"), filled.items))
        said = (f"round {round_}: (a) worker, exactly-once {eos_runs[-1].items_per_s:,.0f} items/s; "
                f"(b) plain passthrough {plain_runs[-1].items_per_s:,.0f} items/s")
        if "g" in args.parts:
            worker_g = Worker(bootstrap, src, topic("agui"), dlq, f"bench-{tag}-g{round_}", logdir, f"g{round_}",
                              extra=("--no-changelog",))
            bare_runs.append(await worker_throughput(worker_g, filled.items, 3))
            said += f"; (g) without the changelog {bare_runs[-1].items_per_s:,.0f} items/s"
        print(said, file=sys.stderr)
    best_eos, best_plain = max(eos_runs), max(plain_runs)
    eos, plain = best_eos.items_per_s, best_plain.items_per_s
    core_us = await conversion_cost(bootstrap, src, filled.items)
    rows = [
        ("(a) worker exactly-once throughput", f"{eos:,.0f} items/s",
         f"{filled.items} items, 3 partitions, best of {_rates([r.items_per_s for r in eos_runs])}"),
        ("(b) plain aiokafka passthrough", f"{plain:,.0f} items/s",
         f"no transactions, no conversion, best of {_rates([r.items_per_s for r in plain_runs])}"),
        ("    ratio a/b", f"{eos / plain:.2f}", "goal >= 1.0 " + ("OK" if eos / plain >= 1.0 else "MISSED")),
        (
            "    ratio of each round",
            " / ".join(f"{a.items_per_s / b.items_per_s:.2f}" for a, b in zip(eos_runs, plain_runs, strict=True)),
            "(a) against the (b) that ran right after it",
        ),
        (
            "    CPU per item",
            f"{best_eos.cpu_us_per_item:.0f} / {best_plain.cpu_us_per_item:.0f} µs",
            f"worker / passthrough process, best rounds; conversion alone (no Kafka, same records) {core_us:.0f} µs",
        ),
    ]
    if bare_runs:
        bare = max(bare_runs)
        cost = 1 - eos / bare.items_per_s
        rows += [
            ("(g) worker without the changelog", f"{bare.items_per_s:,.0f} items/s",
             f"--no-changelog, best of {_rates([r.items_per_s for r in bare_runs])}"),
            ("    checkpoints' cost", f"{cost:.0%}", "(a), checkpoints every 1000 ms, against (g): goal <= 10% "
             + ("OK" if cost <= 0.10 else "MISSED")),
            ("    ratio of each round", " / ".join(f"{a.items_per_s / g.items_per_s:.2f}"
                                                   for a, g in zip(eos_runs, bare_runs, strict=True)),
             f"(a) against the (g) of its round; CPU per item {best_eos.cpu_us_per_item:.0f} against "
             f"{bare.cpu_us_per_item:.0f} µs"),
        ]
    if "h" in args.parts:
        rows += await _display_rows(bootstrap, args, logdir, tag, topic, src, dlq, filled.items)
    if "f" in args.parts:
        rows += await _history_rows(bootstrap, args, logdir, tag, topic, dlq)
    if not set(args.parts) & set("cde"):
        return rows

    paced: list[tuple[float, list[tuple[float, float]], float, CpuUse, LoopTurns]] = []
    for share in (2, 4):  # half the measured maximum (the goal), then a quarter for context
        src_c, out_c = topic(f"source-c{share}"), topic(f"agui-c{share}")
        name = f"c{share}"
        worker_c = Worker(bootstrap, src_c, out_c, dlq, f"bench-{tag}-{name}", logdir, name, args.commit_interval_ms)
        timeline, own_mean, cpu, turns = await commit_delays(worker_c, eos / share, args.paced_seconds, templates)
        delays = [delay for _, delay in timeline]
        paced.append((eos / share, timeline, own_mean, cpu, turns))
        print(
            f"(c) delay at {eos / share:,.0f} items/s over {len(delays)} records: "
            f"p50 {_pct(delays, 0.5) * 1000:.0f} ms, p99 {_pct(delays, 0.99) * 1000:.0f} ms; {cpu.describe()}; "
            f"event loop: {turns.describe()}",
            file=sys.stderr,
        )

    async def rebuilt(streams: int, *, replay_cpu: bool, rounds: int = 1) -> list[Rebuild]:
        src_d, out_d = topic("source-d", 1), topic("agui-d", 1)
        return await rebuild(
            lambda name, group: Worker(bootstrap, src_d, out_d, dlq, f"bench-{tag}-d{streams}-{group}", logdir,
                                       f"{name}-{streams}", args.commit_interval_ms, args.replay_processes,
                                       extra=("--no-changelog",)),  # (d), (e): the replay path itself
            streams, templates, replay_cpu=replay_cpu, rounds=rounds,
        )  # fmt: skip

    (rb,) = await rebuilt(args.open_streams, replay_cpu=False)
    # (e) alternates live runs and rebuilds over the same records, like (a) and (b): best of each, every round shown.
    steady_runs = await rebuilt(args.replay_streams, replay_cpu=True, rounds=args.rounds)
    for i, r in enumerate(steady_runs):
        print(f"round {i}: (e) live {r.live_rate:,.0f} items/s, replay {r.replay_rate:,.0f} rec/s in "
              f"{r.replay_seconds:.2f} s", file=sys.stderr)
    steady = max(steady_runs, key=lambda r: r.replay_rate)
    steady_live = max(r.live_rate for r in steady_runs)
    goal_p99 = args.commit_interval_ms + 100
    return [
        *rows,
        *(row for rate, timeline, own, cpu, turns in paced
          for row in _delay_rows(rate, timeline, own, cpu, turns, goal_p99)),
        (
            "(d) rebuild of one partition",
            f"{rb.seconds:.2f} s",
            f"{rb.records} records replayed, {rb.open_streams} open streams, {args.replay_processes} replay helper "
            "processes (fencing and offset look-ups included)",
        ),
        ("    event loop's longest turn / own work", _longest(rb.loop),
         rb.loop.describe() if rb.loop is not None else ""),
        (
            "    its replay rate",
            f"{rb.replay_rate:,.0f} rec/s",
            f"{rb.replay_rate / rb.live_rate:.1f}x live on the same records ({rb.live_rate:,.0f} items/s); a "
            f"{rb.replay_seconds:.2f} s window, where the first fetch and the shards' hand-back weigh",
        ),
        (
            "(e) replay rate, steady",
            f"{steady.replay_rate:,.0f} rec/s",
            f"{steady.records} records of {steady.open_streams} open streams in {steady.replay_seconds:.2f} s; best "
            f"of {_rates([r.replay_rate for r in steady_runs])}",
        ),
        (
            "    live on the same records",
            f"{steady_live:,.0f} items/s",
            f"one partition, best of {_rates([r.live_rate for r in steady_runs])}",
        ),
        (
            "    replay / live, same records",
            f"{steady.replay_rate / steady_live:.1f}x",
            "goal >= 3x " + ("OK" if steady.replay_rate / steady_live >= 3 else "MISSED"),
        ),
        (
            "    ratio of each round",
            " / ".join(f"{r.replay_rate / r.live_rate:.1f}x" for r in steady_runs),
            "each rebuild against the live run of its own round, just before it",
        ),
        (
            "    CPU per record",
            f"{steady.live_cpu_us:.0f} / {steady.replay_cpu_us:.0f} µs",
            f"live worker / replay of one record in one process (no Kafka): "
            f"{steady.live_cpu_us / steady.replay_cpu_us:.1f}x on equal cores",
        ),
        ("    replay / live (a)", f"{steady.replay_rate / eos:.1f}x", "against the 3-partition figure (a), as context"),
    ]


async def _display_rows(
    bootstrap: str, args: argparse.Namespace, logdir: Path, tag: str, topic: Callable[..., str], src: str, dlq: str,
    total: int,
) -> list[tuple[str, str, str]]:
    """(h): CPU per item of the worker process and every process it starts, with the display topic on and off,
    rounds alternating which goes first over the same records, each worker with a fresh output and display topic
    and group; and the bytes per source item of the display records against the output records."""
    shown: list[Rate] = []
    plain: list[Rate] = []
    for round_ in range(args.rounds):
        for on in (True, False) if round_ % 2 == 0 else (False, True):
            side = "on" if on else "off"
            extra = ("--display-topic", f"bench.{tag}.display.{round_}") if on else ()  # the worker creates it
            if args.display_without_changelog:
                extra = (*extra, "--no-changelog")
            worker = Worker(bootstrap, src, topic("agui"), dlq, f"bench-{tag}-h{side}{round_}", logdir,
                            f"h-{side}{round_}", extra=extra)  # fmt: skip
            (shown if on else plain).append(await worker_throughput(worker, total, 3))
        print(f"round {round_}: (h) display on {_tree_us(shown[-1]):.0f} us CPU per item, off "
              f"{_tree_us(plain[-1]):.0f} us ({_tree_us(shown[-1]) / _tree_us(plain[-1]):.2f}x)", file=sys.stderr)
    ratios = [_tree_us(on) / _tree_us(off) for on, off in zip(shown, plain, strict=True)]
    ratio = statistics.median(ratios)
    best_on, best_off = min(map(_tree_us, shown)), min(map(_tree_us, plain))
    interval = Settings.model_fields["display_interval_ms"].default
    output_bytes, display_bytes = await display_bytes_per_item(bootstrap, src, total, interval)
    return [
        ("(h) CPU per item, display on / off", f"{best_on:.0f} / {best_off:.0f} µs",
         f"the worker process and every process it starts, best of {args.rounds} rounds each"
         + (", both without the changelog; " if args.display_without_changelog else "; ") +
         f"throughput {max(r.items_per_s for r in shown):,.0f} / {max(r.items_per_s for r in plain):,.0f} items/s"),
        ("    on / off", f"{ratio:.2f}", "median of the rounds' ratios; goal <= 1.1 "
         + ("OK" if ratio <= 1.1 else "MISSED") + f"; best against best {best_on / best_off:.2f}"),
        ("    ratio of each round", " / ".join(f"{r:.2f}" for r in ratios), "on against off, same round"),
        ("    bytes per item, display / output", f"{display_bytes:,.0f} / {output_bytes:,.0f} B",
         f"record values, display interval {interval} ms (the default), the same records without Kafka"),
    ]


def _tree_us(rate: Rate) -> float:
    return rate.cpu_us_per_item + rate.children_cpu_us_per_item


async def display_bytes_per_item(bootstrap: str, source: str, total: int, interval_ms: int) -> tuple[float, float]:
    """Bytes of the output and of the display record values per source record, as the worker publishes them for
    `source` with the display on (a function of the source records: computed here without Kafka)."""
    records = await _source_records(bootstrap, source, total)
    states = {p: PartitionState(source, p, display_interval_ms=interval_ms) for p in {r.partition for r in records}}
    output = display = 0
    for record in records:
        for out in states[record.partition].process(record).records:
            size = len(out.value or b"")
            if out.destination is Destination.DISPLAY:
                display += size
            elif out.destination is Destination.OUTPUT:
                output += size
    return output / len(records), display / len(records)


async def _history_rows(
    bootstrap: str, args: argparse.Namespace, logdir: Path, tag: str, topic: Callable[[str, int], str], dlq: str
) -> list[tuple[str, str, str]]:
    """(f): the rebuild of a partition of many open runs after `--history` records and after twice as many."""
    results = []
    for history in (args.history, 2 * args.history):
        src, out = topic("source-f", 1), topic("agui-f", 1)
        group = f"bench-{tag}-f{history}"

        def make(name: str, extra: tuple[str, ...], src: str = src, out: str = out, group: str = group,
                 history: int = history) -> Worker:
            return Worker(bootstrap, src, out, dlq, group, logdir, f"{name}-{history}",
                          replay_processes=args.replay_processes, extra=extra)

        results.append(await history_rebuild(make, args.history_streams, history, args.rounds))
        r = results[-1]
        print(f"(f) {r.history:,} records: live {r.live_rate:,.0f} items/s; rebuild from the changelog "
              f"{_seconds(r.changelog_s)} s, by replay {_seconds(r.fallback_s)} s; longest turns "
              f"{_longest(r.live_loop)} / {_longest(r.restore_loop)} / {_longest(r.fallback_loop)}", file=sys.stderr)
    one, two = results
    rows = []
    for r in results:
        best, fallback = min(r.changelog_s), min(r.fallback_s)
        rows.append((f"(f) rebuild, {r.streams:,} open runs, {r.history:,} records", f"{best:.2f} s",
                     f"from the changelog ({r.changelog_read:,} changelog records read), best of "
                     f"{_seconds(r.changelog_s)}; by replay {fallback:.2f} s ({r.fallback_records:,} records, "
                     f"{args.replay_processes} helpers), best of {_seconds(r.fallback_s)}: {fallback / best:.0f}x, "
                     "goal >= 10x " + ("OK" if fallback >= 10 * best else "MISSED")))
        for what, turns in (("catching up", r.live_loop), ("rebuild from the changelog", r.restore_loop),
                            ("rebuild by replay", r.fallback_loop)):
            rows.append((f"    loop's longest turn / own work, {what}", _longest(turns),
                         turns.describe() if turns is not None else ""))
        if r.live_loop is not None:
            records = r.history + 2 * r.streams  # each run's start and text part, then the history
            cpu_s = r.live_cpu_us * records / 1e6
            rows.append(("    collections catching up", f"{r.live_loop.gc_s / records * 1e6:.1f} µs",
                         f"per record, {r.live_loop.gc_s / cpu_s:.1%} of the worker's CPU ({r.live_cpu_us:.0f} µs "
                         "per record; a collection's time is wall time, the CPU's is the process's)"))
    growth = min(two.changelog_s) / min(one.changelog_s) - 1
    rows.append(("    twice the history", f"{growth:+.0%}", "changelog rebuild, best rounds, goal < 15% "
                 + ("OK" if abs(growth) < 0.15 else "MISSED")
                 + f"; by replay {min(two.fallback_s) / min(one.fallback_s):.1f}x"))
    return rows


def _seconds(values: list[float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/e2e.py", description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=50000, help="source items for (a) and (b)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of (a) and (b), and of (e)")
    parser.add_argument("--open-streams", type=int, default=1000, help="open streams in the rebuilt partition (d)")
    parser.add_argument("--replay-streams", type=int, default=4500,
                        help="open streams of the partition whose steady replay rate (e) is measured (~50k records)")
    parser.add_argument("--paced-seconds", type=float, default=15.0, help="length of the paced run (c)")
    parser.add_argument("--commit-interval-ms", type=int, default=100)
    parser.add_argument("--replay-processes", type=int, default=min(2, os.cpu_count() or 1),
                        help="replay helper processes of the rebuilt workers in (d) and (e); 0 replays in the worker")
    parser.add_argument("--parts", default="abcdefgh",
                        help="which figures: a/b always, c delay, d/e replay, f history rebuild, g changelog cost, "
                             "h display topic cost (CPU per item on against off)")
    parser.add_argument("--history", type=int, default=1_000_000,
                        help="records after the oldest open run's start in (f); it runs this and twice this")
    parser.add_argument("--history-streams", type=int, default=10_000, help="open runs of the partition in (f)")
    parser.add_argument("--display-without-changelog", action="store_true",
                        help="(h) with --no-changelog on both sides: what the display costs besides its checkpoints")
    args = parser.parse_args(argv)
    logdir = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    began = time.monotonic()
    cluster = None if external else KafkaCluster.start(nodes=1)
    try:
        bootstrap = external or cluster.bootstrap_servers  # type: ignore[union-attr]
        rows = asyncio.run(run(bootstrap, args, logdir))
    finally:
        if cluster is not None:
            cluster.stop()
    width = max(len(r[0]) for r in rows)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nend-to-end on {'external Kafka' if external else 'a local single-node Kafka'}, load average {load}, "
          f"{time.monotonic() - began:.0f} s total; worker logs in {logdir}")  # fmt: skip
    print(f"conversion core: {describe()}")
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>14}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
