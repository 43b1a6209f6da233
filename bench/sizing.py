"""Sizing figures: memory per open stream, per open run with the display fold, per remembered ended run and per
assigned partition, and CPU per 1,000 items/s, with the table docs/sizing.md turns them into.

Usage: .venv/bin/python bench/sizing.py [--streams N] [--open-runs N] [--copies N] [--busy-partitions N,N]
                                        [--no-broker]

Part 1 (no broker) feeds the first half of each golden run, cloned under fresh root run ids, to one partition's
state (`PartitionState`, as the worker holds it) and measures with tracemalloc what stays allocated per open run,
with the display topic off and on (each open run's display projection, folded in the same state), and what a
checkpoint of them all allocates beside it while its changelog records are alive. Part 2 starts a loopback Kafka
broker and the real worker (`python -m worker run`, which folds the display in its own process) and reads its
resident memory: idle with 1 and with 12 partitions (the fixed cost of a partition); the most it holds while
catching up on a backlog in 12 partitions and in each other count of `--busy-partitions` (`--copies` copies of the
corpus, or in more than 12 partitions as many per partition as the 12 have: what each partition catching up adds),
and what stays resident after; and after the first halves of `--open-runs` runs on one partition (the open runs as
the process holds them); and its CPU per item over the 12 partitions' backlog. Each of these is measured with the
display topic off and on, of the worker process and its descendants (their number is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import os
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # for devtools and the tests' support: `worker` stays the installed package

from tests.stream._support import checkpoint  # noqa: E402
from worker._native import describe  # noqa: E402
from worker.stream import PartitionState, SourceRecord  # noqa: E402

if TYPE_CHECKING:
    from devtools.kafka_cluster import KafkaCluster

TOPIC = "harness.events"
MIB = 1024 * 1024


def load_runs(corpus: Path) -> list[list[dict[str, object]]]:
    runs = []
    for path in sorted(corpus.glob("*.jsonl")):
        if path.name.count(".") == 1:
            runs.append([orjson.loads(line) for line in path.read_bytes().split(b"\n") if line.strip()])
    return runs


def clone(run: list[dict[str, object]], root: str, upto: int | None = None) -> Iterator[tuple[bytes, bytes]]:
    original = run[0]["run_id"]
    for item in run if upto is None else run[:upto]:
        yield root.encode(), orjson.dumps({**item, "run_id": root} if item["run_id"] == original else item)


def _records(runs: list[list[dict[str, object]]], streams: int, *, ended: bool) -> tuple[list[SourceRecord], int]:
    records = []
    offset = 0
    for n in range(streams):
        run = runs[n % len(runs)]
        for key, value in clone(run, f"run-{n}", upto=None if ended else max(1, len(run) // 2)):
            records.append(SourceRecord(TOPIC, 0, offset, 1_700_000_000_000 + offset, key, value))
            offset += 1
    return records, offset


def _warmed_state(
    runs: list[list[dict[str, object]]], streams: int, *, display: bool, ended: bool
) -> tuple[PartitionState, list[SourceRecord], int]:
    """An empty partition state with room for `streams` runs, their records and the offset after them; another
    state has processed and checkpointed the first 200 records before, so what the process allocates once for the
    first of them (imports, caches) is not counted per run."""
    state = PartitionState(TOPIC, 0, max_open_streams=streams + 1, closed_stream_memory=streams + 1,
                           display_interval_ms=1000 if display else None)  # fmt: skip
    records, offset = _records(runs, streams, ended=ended)
    warm = PartitionState(TOPIC, 0, display_interval_ms=1000 if display else None)
    for record in records[:200]:
        warm.process(record)
    checkpoint(warm, 200)
    return state, records, offset


def _resident() -> int:
    """This process's resident bytes, after the allocator gave back what it could."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no VmRSS in /proc/self/status")


def resident_per_run(runs: list[list[dict[str, object]]], streams: int, *, display: bool) -> float:
    """Resident bytes a partition's state adds per open run, in this process: everything, the native engine's
    allocations included (which tracemalloc does not see)."""
    state, records, _ = _warmed_state(runs, streams, display=display, ended=False)
    before = _resident()
    for record in records:
        state.process(record)
    after = _resident()
    assert state.open_streams == streams, (state.open_streams, streams)
    return (after - before) / streams


def resident_in_child(corpus: Path, streams: int, *, display: bool) -> float:
    """`resident_per_run` measured in a fresh process (resident memory once grown is not given back whole)."""
    done = subprocess.run([sys.executable, __file__, "--corpus", str(corpus), "--streams", str(streams),
                           "--resident-side", "on" if display else "off"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return float(done.stdout.split()[-1])


def held_per_run(
    runs: list[list[dict[str, object]]], streams: int, *, display: bool, ended: bool = False
) -> tuple[float, float]:
    """Bytes a partition's state keeps per run: `streams` runs fed their first half (open), or whole (`ended`:
    what a remembered ended run costs); and the most a checkpoint of them all (every run changed since the last)
    allocates beside that, per run, while its changelog records are alive."""
    state, records, offset = _warmed_state(runs, streams, display=display, ended=ended)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for record in records:
        state.process(record)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    changelog = checkpoint(state, offset)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del changelog
    counted = state.remembered_streams if ended else state.open_streams
    assert counted == streams, (counted, streams)
    return (after - before) / streams, (peak - after) / streams


# ---- part 2: the real worker on a loopback broker ---------------------------------------------------------------

def _tree(pid: int) -> list[int]:
    """`pid` and its descendants."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{current}/task"):
                todo += [int(c) for c in Path(f"/proc/{current}/task/{task}/children").read_text().split()]
    return out


def rss_bytes(pid: int) -> int:
    """Resident memory of `pid` and its descendants."""
    total = 0
    for member in _tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
    return total


def cpu_seconds(pid: int) -> float:
    """User and system CPU of `pid` and its live descendants so far (with the children they waited for)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for member in _tree(pid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / tick
    return total


class Worker:
    """`python -P -m worker run` (the installed package, not the checkout) on the loopback broker, its log in a
    temporary file."""

    def __init__(self, bootstrap: str, source: str, group: str, log: Path, *extra: str) -> None:
        self.log = log
        command = [sys.executable, "-P", "-m", "worker", "run", "--bootstrap-servers", bootstrap,
                   "--source-topic", source, "--output-topic", f"{source}.out", "--dlq-topic", f"{source}.dlq",
                   "--group-id", group, "--metrics-port", "0", "--log-format", "json", *extra]  # fmt: skip
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT)

    def wait_ready(self, partitions: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while self.rebuilt() < partitions:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"worker not ready:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def rebuilt(self) -> int:
        """Partitions that went live so far (their rebuild is logged)."""
        count = 0
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                count += str(orjson.loads(line).get("msg", "")).startswith("partition rebuilt")
        return count

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


async def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    from aiokafka import AIOKafkaProducer  # noqa: PLC0415

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=20)
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


class PeakRss:
    """The most resident memory of `pid` and its descendants while the `with` block runs, sampled every 0.2 s."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.2):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes(self.pid))


def _topics(cluster: KafkaCluster, source: str, partitions: int) -> None:
    """The worker's source topic with `partitions` partitions, its output topic alike, a one-partition DLQ."""
    for topic, count in ((source, partitions), (f"{source}.out", partitions), (f"{source}.dlq", 1)):
        cluster.create_topic(topic, count)


def broker_figures(
    runs: list[list[dict[str, object]]], copies: int, open_runs: int, counts: list[int], workdir: Path
) -> dict[str, float]:
    from devtools.kafka_cluster import KafkaCluster  # noqa: PLC0415
    from devtools.kafka_tools import wait_caught_up  # noqa: PLC0415

    out: dict[str, float] = {}
    with KafkaCluster.start(nodes=1) as cluster:
        bs = cluster.bootstrap_servers
        # Open runs held by the worker process: its resident memory idle on one partition, then after the first
        # halves of `open_runs` runs (each stays open), display off and on.
        halves = [pair for n in range(open_runs)
                  for pair in clone(runs[n % len(runs)], f"open-{n}", upto=max(1, len(runs[n % len(runs)]) // 2))]
        for label, display in (("open", False), ("open_display", True)):
            source = label.replace("_", "-")
            _topics(cluster, source, 1)
            extra = ("--display-topic", f"{source}.view") if display else ()
            worker = Worker(bs, source, f"g-{source}", workdir / f"{source}.log", *extra)
            try:
                worker.wait_ready(1)
                time.sleep(5)  # settled: producers started, a poll or two
                out[f"rss_idle_1{'_display' if display else ''}"] = idle = rss_bytes(worker.process.pid)
                asyncio.run(produce(bs, source, halves))
                asyncio.run(wait_caught_up(bs, f"g-{source}", source, within_s=900))
                time.sleep(5)
                out[label] = (rss_bytes(worker.process.pid) - idle) / open_runs
                out[f"{label}_children"] = len(_tree(worker.process.pid)) - 1
            finally:
                worker.stop()
        # A worker of 12 partitions idle (against 1, the fixed cost of a partition); then catching up on a backlog
        # of whole runs in each of `counts`, 12 among them (beyond 12, as much per partition as the 12 have):
        # the most it holds meanwhile (records fetched and waiting for their transaction, their output, producer
        # batches, as the allocator keeps them), what stays resident after, and over the 12 partitions' backlog its
        # CPU per item.
        for label, display in (("cpu", False), ("cpu_display", True)):
            suffix = "_display" if display else ""
            source = f"idle12{suffix.replace('_', '-')}"
            _topics(cluster, source, 12)
            extra = ("--display-topic", f"{source}.view") if display else ()
            worker = Worker(bs, source, f"g-{source}", workdir / f"{source}.log", *extra)
            try:
                worker.wait_ready(12)
                time.sleep(5)
                out[f"rss_idle_12{suffix}"] = rss_bytes(worker.process.pid)
            finally:
                worker.stop()
            for partitions in counts:
                flat = [pair for n in range(copies * max(partitions, 12) // 12) for i, run in enumerate(runs)
                        for pair in clone(run, f"cpu-{partitions}-{n}-{i}")]  # fmt: skip
                source = f"{label.replace('_', '-')}-{partitions}.in"
                _topics(cluster, source, partitions)
                asyncio.run(produce(bs, source, flat))
                extra = ("--display-topic", f"{source}.view") if display else ()
                worker = Worker(bs, source, f"g-{source}", workdir / f"{source}.log", *extra)
                try:
                    worker.wait_ready(partitions)
                    begin = cpu_seconds(worker.process.pid)
                    with PeakRss(worker.process.pid) as peak:
                        asyncio.run(wait_caught_up(bs, f"g-{source}", source, within_s=900))
                        spent = cpu_seconds(worker.process.pid) - begin
                    if partitions == 12:
                        out[label] = spent / len(flat)
                        out[f"{label}_children"] = len(_tree(worker.process.pid)) - 1
                    out[f"items_{partitions}"] = len(flat)
                    out[f"rss_peak_{partitions}{suffix}"] = peak.peak
                    time.sleep(5)
                    out[f"rss_busy_{partitions}{suffix}"] = rss_bytes(worker.process.pid)
                finally:
                    worker.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=ROOT / "tests" / "data" / "golden")
    parser.add_argument("--streams", type=int, default=2000, help="open runs the tracemalloc figures are measured on")
    parser.add_argument("--open-runs", type=int, default=4000,
                        help="open runs the worker process's resident memory is measured on")  # fmt: skip
    parser.add_argument("--copies", type=int, default=20, help="copies of the golden corpus the CPU is measured on")
    parser.add_argument("--busy-partitions", default="1,48",
                        help="partition counts, besides 12, the worker catches up in (comma-separated)")  # fmt: skip
    parser.add_argument("--no-broker", action="store_true", help="part 1 only (no broker, no worker process)")
    parser.add_argument("--resident-side", choices=("on", "off"), help=argparse.SUPPRESS)  # one resident figure
    args = parser.parse_args()
    runs = load_runs(args.corpus)
    if args.resident_side:
        print(resident_per_run(runs, args.streams, display=args.resident_side == "on"))
        return
    print(f"conversion core: {describe()}; {len(runs)} golden runs; Python {sys.version.split()[0]}")
    stream, stream_cp = held_per_run(runs, args.streams, display=False)
    display, display_cp = held_per_run(runs, args.streams, display=True)
    ended, _ = held_per_run(runs, args.streams, display=False, ended=True)
    stream_rss = resident_in_child(args.corpus, args.streams, display=False)
    display_rss = resident_in_child(args.corpus, args.streams, display=True)
    print(f"memory per open run, display off: {stream / 1024:6.1f} KiB held, {stream_cp / 1024:5.1f} KiB more while a "
          f"checkpoint writes it ({args.streams:,} runs, each half fed; tracemalloc: Python objects); "
          f"{stream_rss / 1024:.1f} KiB resident (everything, native allocations included)")
    print(f"memory per open run, display on:  {display / 1024:6.1f} KiB held, {display_cp / 1024:5.1f} KiB more while "
          f"a checkpoint writes it (its display projection included); {display_rss / 1024:.1f} KiB resident")
    print(f"memory per remembered run:        {ended / 1024:6.1f} KiB (ended runs kept by --closed-stream-memory)")
    if not args.no_broker:
        with tempfile.TemporaryDirectory(prefix="sizing-") as tmp:
            counts = sorted({12, *(int(count) for count in args.busy_partitions.split(",") if count.strip())})
            f = broker_figures(runs, args.copies, args.open_runs, counts, Path(tmp))
        print("\nthe worker process (resident, with its descendants):")
        for suffix, what in (("", "display off"), ("_display", "display on")):
            idle1, idle12 = f[f"rss_idle_1{suffix}"], f[f"rss_idle_12{suffix}"]
            print(f"  {what}: idle {idle1 / MIB:.1f} MiB with 1 partition, {idle12 / MIB:.1f} MiB with 12 "
                  f"({(idle12 - idle1) / 11 / MIB:.2f} MiB per idle partition)")
            for count in counts:
                peak, after = f[f"rss_peak_{count}{suffix}"], f[f"rss_busy_{count}{suffix}"]
                print(f"    catching up on {f[f'items_{count}']:,.0f} items in {count} partitions: at most "
                      f"{peak / MIB:.1f} MiB, {after / MIB:.1f} MiB after")
            if counts[-1] > 12:
                high = counts[-1]
                per = (f[f"rss_peak_{high}{suffix}"] - f[f"rss_peak_12{suffix}"]) / (high - 12)
                print(f"    each partition catching up beyond 12, up to {high}: {per / MIB:.1f} MiB")
        for label, what in (("open", "display off"), ("open_display", "display on")):
            print(f"  {what}: {f[label] * args.open_runs / MIB:.1f} MiB more with {args.open_runs:,} open runs on one "
                  f"partition, {f[label] / 1024:.1f} KiB per open run (that partition's load included)")
        for label, what in (("cpu", "display off"), ("cpu_display", "display on")):
            per_item = f[label]
            print(f"  CPU per item, {what}: {per_item * 1e6:.1f} us over {f['items_12']:,.0f} items in 12 "
                  f"partitions: {per_item * 1000:.3f} cores per 1,000 items/s")
        children = {f[k] for k in ("open_children", "open_display_children", "cpu_children", "cpu_display_children")}
        print(f"  child processes: {', '.join(f'{c:.0f}' for c in sorted(children))}")
    remembered = 10_000 * ended
    print("\nN open runs per partition need (held and one checkpoint; add the remembered ended runs, "
          f"{remembered / MIB:.0f} MiB per partition at the default 10,000, the fixed cost per partition, and the "
          "process):")
    print("| open runs per partition | display off | display on |")
    print("|---|---|---|")
    for n in (100, 1_000, 10_000, 100_000):
        print(f"| {n:,} | {n * (stream + stream_cp) / MIB:,.1f} MiB | {n * (display + display_cp) / MIB:,.1f} MiB |")


if __name__ == "__main__":
    main()
