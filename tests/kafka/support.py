"""Broker-test plumbing: source runs from the golden corpus, a worker subprocess, read_committed collection."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from worker.errors import AguiObservationError, DecodeError, KafkaWorkerError
from worker.observe import HarnessAguiStreamObserver, announced_child, encode_event
from worker.wire import decode_item

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
ROOT = Path(__file__).resolve().parents[2]


def source_files() -> list[Path]:
    """Every golden source run (not the reference outputs)."""
    return sorted(p for p in GOLDEN.glob("*.jsonl") if p.name.count(".") == 1)


def read_lines(path: Path) -> list[bytes]:
    return [ln for ln in path.read_bytes().split(b"\n") if ln.strip() and not ln.startswith(b"#")]


def rekey(lines: list[bytes], suffix: str) -> tuple[str, list[bytes]]:
    """A copy of a run under a new root run id, so one corpus run can be produced many times."""
    root = json.loads(lines[0])["run_id"]
    new_root = f"{root}-{suffix}"
    out = []
    for ln in lines:
        try:
            obj = json.loads(ln)
        except ValueError:
            out.append(ln)
            continue
        if isinstance(obj, dict) and obj.get("run_id") == root:
            obj["run_id"] = new_root
        out.append(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode())
    return new_root, out


@dataclass
class Run:
    """One source run with what the worker makes of it: the events, the lines the observer rejects, and the lines
    of a run neither the root nor announced in the stream (dead-lettered as mis-keyed)."""

    key: str
    lines: list[bytes]
    events: list[bytes] = field(default_factory=list)
    rejected: list[bytes] = field(default_factory=list)
    mis_keyed: list[bytes] = field(default_factory=list)


def converted(key: str, lines: list[bytes]) -> Run:
    """Convert a run as the offline converter does (stream observer, encode_event, errors in place), leaving out
    the items of runs that are neither the root `key` nor a child announced before them."""
    run = Run(key, lines)
    observer = HarnessAguiStreamObserver(retain_events=False)
    members = {key}
    for ln in lines:
        try:
            item = decode_item(ln)
            if item.run_id not in members:
                run.mis_keyed.append(ln)
                continue
            run.events.extend(encode_event(e) for e in observer.observe(item))
        except (DecodeError, AguiObservationError, TypeError, ValidationError):
            run.rejected.append(ln)
            continue
        child = announced_child(item)
        if child is not None:
            members.add(child)
    return run


def corpus(copies: int = 1, *, names: list[str] | None = None) -> list[Run]:
    """`copies` re-keyed copies of the golden source runs (all of them, or those named)."""
    files = [p for p in source_files() if names is None or p.stem in names]
    runs = []
    for i, path in itertools.product(range(copies), files):
        key, lines = rekey(read_lines(path), f"c{i}")
        runs.append(converted(key, lines))
    return runs


def in_thread(run: Run, thread_id: str) -> Run:
    """The same run with every item in thread `thread_id` (a corpus run keeps its golden thread otherwise)."""
    lines = []
    for line in run.lines:
        try:
            obj = json.loads(line)
        except ValueError:
            lines.append(line)
            continue
        if isinstance(obj, dict) and "thread_id" in obj:
            obj["thread_id"] = thread_id
        lines.append(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode())
    return converted(run.key, lines)


def interleave(runs: list[Run]) -> list[tuple[bytes, bytes]]:
    """Round-robin the runs' lines into one (key, value) sequence; each run stays in order."""
    iters = [iter([(r.key.encode(), ln) for ln in r.lines]) for r in runs]
    out: list[tuple[bytes, bytes]] = []
    while iters:
        nxt = []
        for it in iters:
            item = next(it, None)
            if item is not None:
                out.append(item)
                nxt.append(it)
        iters = nxt
    return out


async def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], *, pace_s: float = 0.0,
                  client: Mapping[str, Any] | None = None) -> None:
    """Send records with an idempotent producer; `pace_s` sleeps between records to spread them in time; `client`
    holds security arguments (a secured broker's admin)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5, **(client or {}))
    await producer.start()
    try:
        futures = []
        for key, value in records:
            futures.append(await producer.send(topic, value=value, key=key))
            if pace_s:
                await asyncio.sleep(pace_s)
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


@dataclass(frozen=True)
class Out:
    key: str
    value: bytes
    headers: dict[str, str]
    partition: int
    offset: int


async def collect(bootstrap: str, topic: str, *, expect: int, timeout_s: float, settle_s: float = 3.0,
                  client: Mapping[str, Any] | None = None) -> list[Out]:
    """Read a topic read_committed from the start until `expect` records arrived, then `settle_s` more."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False, auto_offset_reset="earliest", **(client or {}))
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        if not parts:
            await consumer._client.force_metadata_update()
            parts = consumer.partitions_for_topic(topic) or set()
        consumer.assign([TopicPartition(topic, p) for p in sorted(parts)])
        got: list[Out] = []
        deadline = time.monotonic() + timeout_s
        settle_until: float | None = None
        while True:
            now = time.monotonic()
            if settle_until is None and len(got) >= expect:
                settle_until = now + settle_s
            if (settle_until is not None and now >= settle_until) or now >= deadline:
                return got
            batches = await consumer.getmany(timeout_ms=200)
            for recs in batches.values():
                got.extend(Out(r.key.decode() if r.key else "", r.value,
                               {k: v.decode() for k, v in r.headers}, r.partition, r.offset) for r in recs)
    finally:
        await consumer.stop()


def by_key(records: list[Out]) -> dict[str, list[Out]]:
    grouped: dict[str, list[Out]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        grouped[r.key].append(r)
    return grouped


def assert_exactly_once(records: list[Out], runs: list[Run]) -> None:
    """Every run's events appear once, in order, with ids `<key>:0..n-1`, equal to the converter's output."""
    grouped = by_key(records)
    assert set(grouped) == {r.key for r in runs if r.events}, "unexpected or missing run keys in the output"
    for run in runs:
        got = grouped.get(run.key, [])
        ids = [o.headers["agui-event-id"] for o in got]
        dupes = len(ids) - len(set(ids))
        assert dupes == 0, f"{run.key}: {dupes} duplicated event ids"
        want = [f"{run.key}:{n}" for n in range(len(run.events))]
        missing = sorted(set(want) - set(ids), key=want.index)[:8]
        first_off = next((i for i, (a, b) in enumerate(zip(ids, want, strict=False)) if a != b), None)
        assert ids == want, f"{run.key}: {len(ids)} of {len(want)} ids; missing {missing}, first wrong at {first_off}"
        assert [o.value for o in got] == run.events, f"{run.key}: output differs from convert"


def expected_total(runs: list[Run]) -> int:
    return sum(len(r.events) for r in runs)


class WorkerProcess:
    """`python -m worker run` as a child process with its log in a file; signals model crashes and zombies."""

    def __init__(self, log_dir: Path, name: str, bootstrap: str, source: str, output: str, dlq: str, group: str,
                 *extra: str, env: dict[str, str] | None = None, metrics_port: int = 0) -> None:
        self.log_path = log_dir / f"{name}.log"
        self.args = [sys.executable, "-m", "worker", "run", "--bootstrap-servers", bootstrap,
                     "--source-topic", source, "--output-topic", output, "--dlq-topic", dlq,
                     "--group-id", group, "--metrics-port", str(metrics_port), "--log-format", "json", *extra]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        return self

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.wait(10)

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM and wait: a clean stop commits open transactions and exits 0."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.signal(signal.SIGTERM)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout_s)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def children(self, command: str) -> list[int]:
        """Process ids of the worker's live child processes whose command line contains `command`."""
        if not self.alive:
            return []
        assert self.proc is not None
        try:
            pids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        except OSError:
            return []
        found = []
        for pid in pids:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if command in cmdline:
                found.append(int(pid))
        return found

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_records(self) -> list[dict[str, Any]]:
        return json_log_records(self.log())


def json_log_records(log: str) -> list[dict[str, Any]]:
    """The lines of a `--log-format json` log that are JSON, in order; anything else a process wrote is left out."""
    out = []
    for line in log.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def http_get(port: int, path: str) -> tuple[int, str]:
    """Status and body of a GET on the worker's metrics and probe server."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def metric(port: int, name: str, **labels: str) -> float:
    """The sum of a running worker's samples named `name` whose labels include `labels`."""
    status, body = http_get(port, "/metrics")
    assert status == 200, body
    return sum(sample.value for family in text_string_to_metric_families(body) for sample in family.samples
               if sample.name == name and labels.items() <= sample.labels.items())


async def committed(bootstrap: str, group: str, tp: TopicPartition) -> int:
    """The group's committed offset of `tp`, -1 when it has none."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        try:
            entry = (await admin.list_consumer_group_offsets(group, partitions=[tp])).get(tp)
        except KafkaError:  # the group coordinator is still starting (a fresh broker): nothing committed yet
            return -1
        return -1 if entry is None else int(entry.offset)
    finally:
        await admin.close()


@dataclass(frozen=True)
class Rec:
    """One record as `read_topic` read it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]

    def header(self, name: str) -> str:
        return next((v.decode() for k, v in self.headers if k == name), "")


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    parts = consumer.partitions_for_topic(topic)
    if not parts:
        await consumer._client.force_metadata_update()
        parts = consumer.partitions_for_topic(topic)
    assert parts, f"topic {topic} has no partitions"
    return [TopicPartition(topic, p) for p in sorted(parts)]


async def read_topic(bootstrap: str, topic: str) -> list[Rec]:
    """Every committed record of `topic`, read to the end offsets taken at start (no writer may be running)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = await _partitions(consumer, topic)
        consumer.assign(tps)
        end = await consumer.end_offsets(tps)
        todo = {tp for tp in tps if end[tp] > 0}
        out: list[Rec] = []
        deadline = time.monotonic() + 60
        while todo:
            assert time.monotonic() < deadline, f"reading {topic} stalled before {end}"
            for recs in (await consumer.getmany(*todo, timeout_ms=500)).values():
                out.extend(Rec(r.partition, r.offset, r.key, r.value, tuple(r.headers)) for r in recs)
            for tp in list(todo):
                if await consumer.position(tp) >= end[tp]:
                    todo.discard(tp)
        return out
    finally:
        await consumer.stop()


async def wait_caught_up(
    bootstrap: str, group: str, source: str, timeout_s: float, partitions: set[int] | None = None
) -> None:
    """Until the group's committed offset of every source partition (of those in `partitions`) is its end offset."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await admin.start()
    await consumer.start()
    try:
        tps = [tp for tp in await _partitions(consumer, source) if partitions is None or tp.partition in partitions]
        end = await consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                committed = await admin.list_consumer_group_offsets(group, partitions=tps)
            except KafkaError:  # the group coordinator is still starting (a fresh broker)
                committed = {}
            behind = {tp.partition: (committed[tp].offset if tp in committed else -1, end[tp])
                      for tp in tps if tp not in committed or committed[tp].offset < end[tp]}
            if not behind:
                return
            assert time.monotonic() < deadline, f"group {group} not caught up: (committed, end) {behind}"
            await asyncio.sleep(0.5)
    finally:
        await consumer.stop()
        await admin.close()


async def reset_offsets(bootstrap: str, group: str, topic: str, offset: int) -> None:
    """What `kafka-consumer-groups.sh --reset-offsets --to-offset` does for an empty group (no metadata)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = await _partitions(consumer, topic)
        consumer.assign(tps)
        await consumer.commit(dict.fromkeys(tps, offset))
    finally:
        await consumer.stop()


class RecordBatch:
    """A stand-in of the record batch a checkpoint fills (aiokafka's BatchBuilder surface), for stand-in producers:
    `create_batch` returns one, `send_batch` reads its `records`."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]] = []

    def append(self, *, timestamp: int | None, key: bytes | None, value: bytes | None,
               headers: list[tuple[str, bytes]]) -> object:
        self.records.append((key, value, headers))
        return object()

    def record_count(self) -> int:
        return len(self.records)

    def close(self) -> None:
        return None


class _RunningSender:
    """A producer's sender task that never ends."""

    @staticmethod
    def done() -> bool:
        return False


class StandInInternals:
    """What `observe_producer` reads of a transactional producer, for a stand-in producer to inherit: a transaction
    manager with no state known yet and a sender that runs (so an abort is always tried)."""

    def __init__(self) -> None:
        self._txn_manager = SimpleNamespace(state=None, _transaction_waiter=None)
        self._sender = SimpleNamespace(sender_task=_RunningSender())


async def phase_after(txn: Any) -> str:
    """Where a transaction (`worker.live.transaction.Transaction`) that is not open stands, as its next `begin`
    shows it: "broken" when the begin is refused (a broken transaction never opens again), else "idle" (a new one
    began, so ask last)."""
    assert not txn.is_open, "an open transaction"
    try:
        await txn.begin()
    except KafkaWorkerError as exc:
        assert "illegal transaction move broken -> open" in str(exc), exc
        return "broken"
    return "idle"
