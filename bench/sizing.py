"""Sizing figures: memory per open stream, per open run with the display fold, per remembered ended run and per
assigned partition, and CPU per 1,000 items/s, with the table docs/sizing.md turns them into.

Usage: .venv/bin/python bench/sizing.py [--streams N] [--no-broker] [--copies N]

Part 1 (no broker) feeds the first half of each golden run, cloned under fresh root run ids, to one partition's
state (`PartitionState`, as the worker holds it) and measures what stays allocated per open run (tracemalloc),
with the display topic off and on (the display fold in this process; with the default fold helper process the
same projections live in the helper, in the same pod). Part 2 starts a loopback Kafka broker and the real worker:
its resident memory idle with 1 and with 12 assigned partitions (the difference is the fixed cost of a partition:
its transactional producer, fetch buffers and state), and its CPU (with its helper processes) per item over the
golden corpus, with the display topic off and on.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from worker._native import describe  # noqa: E402
from worker.stream import PartitionState, SourceRecord  # noqa: E402

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


def held_per_run(runs: list[list[dict[str, object]]], streams: int, *, display: bool, ended: bool = False) -> float:
    """Bytes a partition's state keeps per run: `streams` runs fed their first half (open), or whole (`ended`:
    what a remembered ended run costs)."""
    state = PartitionState(TOPIC, 0, max_open_streams=streams + 1, closed_stream_memory=streams + 1,
                           display_interval_ms=1000 if display else None)  # fmt: skip
    records = []
    offset = 0
    for n in range(streams):
        run = runs[n % len(runs)]
        for key, value in clone(run, f"run-{n}", upto=None if ended else max(1, len(run) // 2)):
            records.append(SourceRecord(TOPIC, 0, offset, 1_700_000_000_000 + offset, key, value))
            offset += 1
    warm = PartitionState(TOPIC, 0, display_interval_ms=1000 if display else None)
    for record in records[:200]:
        warm.process(record)
    del warm
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for record in records:
        state.process(record)
    if display:
        state.take_display_work()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    counted = state.remembered_streams if ended else state.open_streams
    assert counted == streams, (counted, streams)
    return (after - before) / streams


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
    """Resident memory of `pid` and its helper processes."""
    total = 0
    for member in _tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
    return total


def cpu_seconds(pid: int) -> float:
    """User and system CPU of `pid` and its live helper processes so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for member in _tree(pid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / tick
    return total


class Worker:
    """`python -m worker run` on the loopback broker, its log in a temporary file."""

    def __init__(self, bootstrap: str, source: str, group: str, log: Path, *extra: str) -> None:
        self.log = log
        command = [sys.executable, "-m", "worker", "run", "--bootstrap-servers", bootstrap, "--source-topic", source,
                   "--output-topic", f"{source}.out", "--dlq-topic", f"{source}.dlq", "--group-id", group,
                   "--metrics-port", "0", "--log-format", "json", *extra]  # fmt: skip
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


def broker_figures(runs: list[list[dict[str, object]]], copies: int, workdir: Path) -> dict[str, float]:
    from devtools.kafka_cluster import KafkaCluster  # noqa: PLC0415
    from devtools.kafka_tools import wait_caught_up  # noqa: PLC0415

    out: dict[str, float] = {}
    with KafkaCluster.start(nodes=1) as cluster:
        bs = cluster.bootstrap_servers
        for partitions, display in ((1, False), (12, False), (1, True)):
            source = f"idle{partitions}{'-display' if display else ''}"
            for topic, count in ((source, partitions), (f"{source}.out", partitions), (f"{source}.dlq", 1)):
                cluster.create_topic(topic, count)
            extra = ("--display-topic", f"{source}.view") if display else ()
            worker = Worker(bs, source, f"g-{source}", workdir / f"{source}.log", *extra)
            try:
                worker.wait_ready(partitions)
                time.sleep(5)  # settled: the producers started, a poll or two
                out[f"rss_idle_{partitions}{'_display' if display else ''}"] = rss_bytes(worker.process.pid)
            finally:
                worker.stop()
        records = []
        for n in range(copies):
            for i, run in enumerate(runs):
                records.append(list(clone(run, f"cpu-{n}-{i}")))
        flat = [pair for run in records for pair in run]  # each run in order; runs one after the other
        for label, extra in (("cpu", ()), ("cpu_display", ("--display-topic", "cpu-display.view"))):
            source = f"{label.replace('_', '-')}.in"
            for topic, count in ((source, 3), (f"{source}.out", 3), (f"{source}.dlq", 1)):
                cluster.create_topic(topic, count)
            asyncio.run(produce(bs, source, flat))
            worker = Worker(bs, source, f"g-{label}", workdir / f"{label}.log", *extra)
            try:
                worker.wait_ready(3)
                begin = cpu_seconds(worker.process.pid)
                asyncio.run(wait_caught_up(bs, f"g-{label}", source, within_s=600))
                out[label] = (cpu_seconds(worker.process.pid) - begin) / len(flat)
                out[f"{label}_items"] = len(flat)
            finally:
                worker.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=ROOT / "tests" / "data" / "golden")
    parser.add_argument("--streams", type=int, default=2000, help="open runs the memory figures are measured on")
    parser.add_argument("--copies", type=int, default=20, help="copies of the golden corpus the CPU is measured on")
    parser.add_argument("--no-broker", action="store_true", help="part 1 only (no broker, no worker process)")
    args = parser.parse_args()
    runs = load_runs(args.corpus)
    print(f"conversion core: {describe()}; {len(runs)} golden runs; Python {sys.version.split()[0]}")
    stream = held_per_run(runs, args.streams, display=False)
    display = held_per_run(runs, args.streams, display=True)
    ended = held_per_run(runs, args.streams, display=False, ended=True)
    print(f"memory per open run:          {stream / 1024:7.1f} KiB ({args.streams} runs, each half fed)")
    print(f"memory per open run, display: {display / 1024:7.1f} KiB (the display fold in process)")
    print(f"memory per remembered run:    {ended / 1024:7.1f} KiB (ended runs kept by --closed-stream-memory)")
    partition = base = None
    if not args.no_broker:
        with tempfile.TemporaryDirectory(prefix="sizing-") as tmp:
            figures = broker_figures(runs, args.copies, Path(tmp))
        base = figures["rss_idle_1"]
        partition = (figures["rss_idle_12"] - figures["rss_idle_1"]) / 11
        print(f"worker process, idle, 1 partition:    {base / MIB:6.1f} MiB resident (with its helper processes)")
        print(f"worker process, idle, 12 partitions:  {figures['rss_idle_12'] / MIB:6.1f} MiB: "
              f"{partition / MIB:.2f} MiB per partition")
        print(f"worker process, idle, 1 partition, display topic on: {figures['rss_idle_1_display'] / MIB:6.1f} MiB "
              "(the fold helper process included)")
        for label, what in (("cpu", "display off"), ("cpu_display", "display on, fold helper included")):
            per_item = figures[label]
            print(f"CPU per item, {what}: {per_item * 1e6:5.1f} us over {figures[f'{label}_items']:.0f} items: "
                  f"{per_item * 1000:.3f} cores per 1,000 items/s")
    remembered = 10_000 * ended
    print("\nN open runs per partition need (state only; add the remembered ended runs, "
          f"{remembered / MIB:.0f} MiB per partition at the default 10,000, and the fixed cost per partition):")
    print("| open runs per partition | display off | display on |")
    print("|---|---|---|")
    for n in (100, 1_000, 10_000, 100_000):
        print(f"| {n:,} | {n * stream / MIB:,.1f} MiB | {n * display / MIB:,.1f} MiB |")
    if partition is not None and base is not None:
        print(f"\nfixed: {base / MIB:.0f} MiB per worker process, {partition / MIB:.1f} MiB per partition")


if __name__ == "__main__":
    main()
