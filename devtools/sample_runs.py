"""Produces sample Harness runs to a source topic: copies of the built-in runs with fresh ids, interleaved.

Each copy of a template in `devtools/samples/` gets new run and thread ids (derived from a salt and the copy
number, so the ids stay valid and unique), is keyed by its root run id, and is produced in source order by an
idempotent producer while other copies' items are interleaved between its own. Usage::

    python -m devtools.sample_runs --bootstrap-servers 127.0.0.1:9092 --topic harness.events --runs 20
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import re
import secrets
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaProducer

__all__ = [
    "SAMPLES_DIR",
    "ProduceStats",
    "SampleRun",
    "interleave",
    "load_samples",
    "main",
    "make_copy",
    "open_runs",
    "produce",
]

SAMPLES_DIR = Path(__file__).resolve().parent / "samples"


@dataclass(frozen=True, slots=True)
class SampleRun:
    """One root stream: its wire lines in source order; `ids` are every run and thread id it mentions."""

    name: str
    root_run_id: str
    lines: tuple[bytes, ...]
    ids: tuple[str, ...]


def _parse(name: str, lines: Sequence[bytes]) -> SampleRun:
    if not lines:
        raise ValueError(f"sample {name!r} has no lines")
    ids: set[str] = set()
    root = ""
    for i, line in enumerate(lines):
        item = json.loads(line)
        if not isinstance(item, dict) or "run_id" not in item or "thread_id" not in item:
            raise ValueError(f"sample {name!r} line {i} is not a wire item with run_id and thread_id")
        if i == 0:
            root = str(item["run_id"])
        ids.update((str(item["run_id"]), str(item["thread_id"])))
    return SampleRun(name, root, tuple(lines), tuple(sorted(ids, key=lambda s: (-len(s), s))))


def load_samples(directory: Path = SAMPLES_DIR) -> list[SampleRun]:
    """Every `<name>.jsonl` run in `directory`, by name (a `<name>.<kind>.jsonl` beside it, as a golden run's expected
    outputs, is not a run); each file's first line is its root run's first item."""
    runs = [
        _parse(path.stem, [ln for ln in path.read_bytes().splitlines() if ln.strip()])
        for path in sorted(directory.glob("*.jsonl"))
        if path.name.count(".") == 1
    ]
    if not runs:
        raise ValueError(f"no sample runs (*.jsonl) in {directory}")
    return runs


def _fresh_id(old: str, salt: str, copy: int) -> str:
    digest = hashlib.sha256(f"{salt}/{copy}/{old}".encode()).hexdigest()[:32]
    return f"run-{digest}" if old.startswith("run") else f"thread_{digest}"


def make_copy(template: SampleRun, salt: str, copy: int) -> SampleRun:
    """`template` with each run id replaced by `run-<32 hex>` and each thread id by `thread_<32 hex>`.

    The new ids depend only on (salt, copy, old id), so the same id maps the same way on every line.
    """
    mapping = {old: _fresh_id(old, salt, copy) for old in template.ids}
    pattern = re.compile(
        rb"(?<![\w-])(" + b"|".join(re.escape(old.encode()) for old in template.ids) + rb")(?![\w-])"
    )
    encoded = {old.encode(): new.encode() for old, new in mapping.items()}
    lines = tuple(pattern.sub(lambda m: encoded[m.group(1)], line) for line in template.lines)
    return SampleRun(
        f"{template.name}#{copy}",
        mapping[template.root_run_id],
        lines,
        tuple(mapping[o] for o in template.ids),
    )


def open_runs(name: str, streams: int, deltas: int) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of `streams` runs `run-<name>-<i>` opened (run_started, then a text part), then `deltas` text
    deltas round-robin over them; none ends, so every run stays open."""
    stamp = "2026-12-01T00:00:00Z"
    keys = [f"run-{name}-{i:06d}" for i in range(streams)]

    def item(i: int, seq: int, event: dict[str, object]) -> tuple[bytes, bytes]:
        body = {"thread_id": f"thread-{name}-{i}", "run_id": keys[i], "sequence": seq, "occurred_at": stamp,
                "event": event}
        return keys[i].encode(), json.dumps(body, separators=(",", ":")).encode()

    for i in range(streams):
        yield item(i, 0, {"schema_version": "1", "kind": "lifecycle", "payload": {"type": "run_started"}})
    for i in range(streams):
        yield item(i, 1, {"event_kind": "part_start", "index": 0, "previous_part_kind": None,
                          "part": {"part_kind": "text", "content": "", "id": None, "provider_name": None,
                                   "provider_details": None}})
    for n in range(deltas):
        i = n % streams
        yield item(i, 2 + n // streams, {"event_kind": "part_delta", "index": 0, "delta": {
            "part_delta_kind": "text", "content_delta": "word ", "provider_name": None, "provider_details": None}})


def interleave(
    templates: Sequence[SampleRun], *, runs: int | None, concurrency: int = 8, salt: str = "", seed: int = 0,
    drop_terminal: bool = False, on_copy: Callable[[int, SampleRun], None] | None = None,
) -> Iterator[tuple[bytes, bytes]]:  # fmt: skip
    """Yield `(key, value)` for `runs` copies (None: forever), up to `concurrency` of them open at once.

    Copy `i` uses template `i % len(templates)`; the next item comes from a seeded-random open copy, so every
    copy's own items stay in order. `drop_terminal` leaves each copy open (its last line is not yielded).
    `on_copy(i, copy)` is told of each copy before its first item is yielded.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    rng = random.Random(seed)
    started = 0
    active: list[tuple[bytes, Iterator[bytes]]] = []

    def start_one() -> None:
        nonlocal started
        copy = make_copy(templates[started % len(templates)], salt, started)
        if on_copy is not None:
            on_copy(started, copy)
        lines = copy.lines[:-1] if drop_terminal and len(copy.lines) > 1 else copy.lines
        active.append((copy.root_run_id.encode(), iter(lines)))
        started += 1

    while True:
        while len(active) < concurrency and (runs is None or started < runs):
            start_one()
        if not active:
            return
        i = rng.randrange(len(active))
        key, lines = active[i]
        line = next(lines, None)
        if line is None:
            active[i] = active[-1]
            active.pop()
            continue
        yield key, line


@dataclass(slots=True)
class ProduceStats:
    """What one `produce` call sent."""

    items: int = 0
    keys: int = 0
    seconds: float = 0.0


async def produce(
    bootstrap_servers: str, topic: str, *, runs: int | None, rate: float = 0.0, concurrency: int = 8,
    salt: str | None = None, seed: int = 0, max_items: int | None = None, drop_terminal: bool = False,
    stop: asyncio.Event | None = None, templates: Sequence[SampleRun] | None = None,
) -> ProduceStats:  # fmt: skip
    """Send interleaved sample runs with an idempotent producer (acks=all) at `rate` items/s (0: unpaced).

    Ends after `runs` copies or `max_items` items, or when `stop` is set; every sent item is acknowledged
    before it returns. `salt` None draws a random one, so repeated calls never reuse a run id.
    """
    chosen = list(templates) if templates is not None else load_samples()
    items = interleave(
        chosen,
        runs=runs,
        concurrency=concurrency,
        salt=salt or secrets.token_hex(8),
        seed=seed,
        drop_terminal=drop_terminal,
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers, enable_idempotence=True, acks="all", linger_ms=5,
        max_batch_size=256 * 1024, max_request_size=4 * 1024 * 1024, client_id="harness-sample-runs",
    )  # fmt: skip
    stats = ProduceStats()
    keys: set[bytes] = set()
    pending: list[asyncio.Future[object]] = []
    await producer.start()
    began = time.monotonic()
    try:
        for key, value in items:
            if (stop is not None and stop.is_set()) or (max_items is not None and stats.items >= max_items):
                break
            if rate > 0:
                ahead = began + stats.items / rate - time.monotonic()
                if ahead > 0:
                    if stop is None:
                        await asyncio.sleep(ahead)
                    else:
                        try:
                            await asyncio.wait_for(stop.wait(), ahead)
                            break
                        except TimeoutError:
                            pass
            pending.append(await producer.send(topic, value=value, key=key))
            keys.add(key)
            stats.items += 1
            if len(pending) >= 1000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    stats.keys = len(keys)
    stats.seconds = time.monotonic() - began
    return stats


def main(argv: list[str] | None = None) -> int:
    """CLI: produce sample runs until the count is reached or SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(
        prog="python -m devtools.sample_runs", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", default="harness.events")
    parser.add_argument("--runs", type=int, default=0, help="number of run copies; 0 = until stopped")
    parser.add_argument("--rate", type=float, default=50.0, help="items per second; 0 = as fast as possible")
    parser.add_argument("--concurrency", type=int, default=8, help="runs open at the same time")
    parser.add_argument("--seed", type=int, default=0, help="seed of the interleaving order")
    parser.add_argument("--salt", default=None, help="fixes the generated run ids (default: random)")
    args = parser.parse_args(argv)

    async def _main() -> ProduceStats:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await produce(
            args.bootstrap_servers, args.topic, runs=args.runs or None, rate=args.rate,
            concurrency=args.concurrency, salt=args.salt, seed=args.seed, stop=stop,
        )  # fmt: skip

    stats = asyncio.run(_main())
    print(
        f"produced {stats.items} items of {stats.keys} runs to {args.topic} in {stats.seconds:.1f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
