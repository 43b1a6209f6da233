"""Instructions per source item of the partition state (`PartitionState.process_batch` and `checkpoint`, no Kafka)
with the display on against off, and the native display fold's own instructions per event, counted by valgrind's
callgrind: figures that do not move with the host's load, for comparing two builds of the display side by side.

Usage: .venv/bin/python bench/display_instructions.py [--items N] [--checkpoint-every N] [--batch N]
                                                      [--corpus mix|golden] [--interval-ms MS]
                                                      [--pythonpath DIR] [--cpu ROUNDS [--cpu-batches N,N]]
                                                      [--cpu-only]

The records are bench/e2e.py's mix (sample runs, 200 open at once, 3 partitions) or, with `--corpus golden`, the
golden runs (tests/data/golden, with items of up to 194 KB) copied and interleaved the same way, stamped as a topic
filled at 3,750 items/s, `--batch` records of a partition at a time (32, as the worker's partition task takes them),
the display on at `--interval-ms` (5,000, the worker's default). Each side
runs in a process of its own under callgrind, which counts the whole process; a third process that makes the same
records and states but feeds none is subtracted from both, leaving the feeding alone (`process_batch` and
`checkpoint`). Each of the three makes one display projection first, so that what one imports on first use counts
in none. With the native build, the display side is counted once more with collection only inside the
native projection's calls (`offer`, where the events are folded and a record due is written, and `complete`): the
fold's own instructions per event the partition published. `--pythonpath` puts another build of the worker
first on the path, to count it instead of the installed one. `--cpu` also times the same records without valgrind,
in one process, at each batch size of `--cpu-batches`, ROUNDS rounds alternating the order: CPU per item of each
side (best rounds), the ratio that instructions alone do not show when the display's instructions run at a lower
rate than the conversion's (`--cpu-only` skips the count).
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiokafka.partitioner import DefaultPartitioner

ROOT = Path(__file__).resolve().parent.parent
# For devtools and the tests' support: `worker` stays the installed package (or the one --pythonpath names).
sys.path.append(str(ROOT))

from devtools.sample_runs import SAMPLES_DIR, interleave, load_samples  # noqa: E402
from tests.stream._support import checkpoint  # noqa: E402
from worker._heap import freeze_heap  # noqa: E402
from worker._native import describe, native  # noqa: E402
from worker.display import DisplayProjection  # noqa: E402
from worker.stream import Destination, PartitionState, SourceRecord  # noqa: E402

# The native projection's entry points: collection toggles on entering and off leaving each.
_FOLD = ("*DisplayProjection*__pymethod_offer__*", "*DisplayProjection*__pymethod_complete__*")
_REFS = re.compile(rb"I\s+refs:\s+([\d,]+)")
_EVENTS = re.compile(rb"events published: (\d+)")


_PARTITIONS = [0, 1, 2]
Records = list[tuple[int, bytes, bytes, int]]


_CORPORA = {"mix": SAMPLES_DIR, "golden": ROOT / "tests" / "data" / "golden"}


def records(items: int, corpus: str) -> Records:
    """The first `items` records of the corpus's runs interleaved: partition, key, value, timestamp."""
    partitioner = DefaultPartitioner()
    out = []
    runs = load_samples(_CORPORA[corpus])
    for index, (key, value) in enumerate(interleave(runs, runs=None, concurrency=200, salt="x", seed=1)):
        if index >= items:
            break
        stamp = 1_700_000_000_000 + index * 4 // 15  # 3,750 items/s
        out.append((partitioner(key, _PARTITIONS, _PARTITIONS), key, value, stamp))
    return out


def feed(fed: Records, checkpoint_every: int, interval_ms: int | None, batch: int) -> int:
    """The side that callgrind counts: the records through three partition states, `batch` consecutive records of
    a partition at a time (`process_batch`, as the worker's partition task takes a fetched batch), the display on at
    `interval_ms` (None: off); returns the events published (each output record one)."""
    states = [PartitionState("src", p, display_interval_ms=interval_ms) for p in _PARTITIONS]
    offsets = [0, 0, 0]
    held: list[list[SourceRecord]] = [[] for _ in _PARTITIONS]
    events = 0

    def process(state: PartitionState, waiting: list[SourceRecord]) -> int:
        outcomes, _ = state.process_batch(waiting)
        waiting.clear()
        return sum(record.destination is Destination.OUTPUT for outcome in outcomes for record in outcome.records)

    for partition, key, value, stamp in fed:
        state, waiting = states[partition], held[partition]
        waiting.append(SourceRecord("src", partition, offsets[partition], stamp, key, value))
        offsets[partition] += 1
        due = offsets[partition] % checkpoint_every == 0
        if due or len(waiting) == batch:
            events += process(state, waiting)
        if due:
            checkpoint(state, offsets[partition])
    for state, waiting in zip(states, held, strict=True):
        events += process(state, waiting)
    return events


def cpu(args: argparse.Namespace) -> dict[tuple[int, bool], float]:
    """CPU µs per item of each side at each of `args.cpu_batches`, best of `args.cpu` rounds, each round running
    them all in an order that alternates from round to round."""
    fed = records(args.items, args.corpus)
    freeze_heap()
    sides = [(batch, display) for batch in args.cpu_batches for display in (True, False)]
    best = dict.fromkeys(sides, float("inf"))
    for round_ in range(args.cpu):
        for batch, display in sides if round_ % 2 == 0 else sides[::-1]:
            began = time.process_time()
            feed(fed, args.checkpoint_every, args.interval_ms if display else None, batch)
            best[batch, display] = min(best[batch, display], (time.process_time() - began) / len(fed) * 1e6)
            gc.collect()
    return best


def count(args: argparse.Namespace, side: str, toggles: tuple[str, ...] = ()) -> tuple[int, int]:
    """Instructions callgrind counted for one side (`on`, `off` or `none`) and the events it published; with
    `toggles`, only inside those functions."""
    with tempfile.TemporaryDirectory() as scratch:
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={scratch}/out",
                   *(f"--toggle-collect={name}" for name in toggles),
                   sys.executable, __file__, "--side", side, "--items", str(args.items),
                   "--checkpoint-every", str(args.checkpoint_every), "--batch", str(args.batch),
                   "--corpus", args.corpus, "--interval-ms", str(args.interval_ms)]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same set orders in every run
        if args.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, (args.pythonpath, env.get("PYTHONPATH"))))
        done = subprocess.run(command, capture_output=True, env=env, cwd=scratch, check=False)
    found, events = _REFS.search(done.stderr), _EVENTS.search(done.stderr)
    if done.returncode != 0 or found is None or events is None:
        raise SystemExit(f"callgrind failed ({done.returncode}): {done.stderr.decode(errors='replace')[-2000:]}")
    return int(found.group(1).replace(b",", b"")), int(events.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=4000)
    parser.add_argument("--checkpoint-every", type=int, default=1000,
                        help="records of one partition between checkpoints")  # fmt: skip
    parser.add_argument("--batch", type=int, default=32,
                        help="records of a partition processed together (the worker's partition task takes 32)")
    parser.add_argument("--corpus", choices=sorted(_CORPORA), default="mix", help="the runs fed (default mix)")
    parser.add_argument("--interval-ms", type=int, default=5000, help="the display interval of the display side")
    parser.add_argument("--pythonpath", default="", help="a directory holding another build of `worker`")
    parser.add_argument("--cpu", type=int, default=0, metavar="ROUNDS", help="also time both sides, without valgrind")
    parser.add_argument("--cpu-batches", type=lambda text: [int(n) for n in text.split(",")], default=[1, 32],
                        help="the batch sizes --cpu times, comma-separated (default 1,32)")
    parser.add_argument("--cpu-only", action="store_true", help="time with --cpu, count no instructions")
    parser.add_argument("--side", choices=("on", "off", "none"), help=argparse.SUPPRESS)  # the process counted
    args = parser.parse_args()
    if args.side:
        # One projection in every side: the modules a projection imports on first use (compiled from source where
        # bytecode is not written) are then a cost of all three, not of the display's items.
        DisplayProjection("warm-up", "warm-up")
        fed = records(args.items, args.corpus)
        freeze_heap()
        interval = args.interval_ms if args.side == "on" else None
        events = 0 if args.side == "none" else feed(fed, args.checkpoint_every, interval, args.batch)
        print(f"events published: {events}", file=sys.stderr)
        return 0
    print(f"build: the worker under {args.pythonpath}" if args.pythonpath else f"build: {describe()}")
    if not args.cpu_only:
        if shutil.which("valgrind") is None:
            raise SystemExit("bench/display_instructions.py needs valgrind on the PATH")
        (on, events), (off, _), (none, _) = count(args, "on"), count(args, "off"), count(args, "none")
        on, off = on - none, off - none
        print(f"instructions per source item ({args.items} items of the {args.corpus} runs, {events} events, a "
              f"checkpoint every {args.checkpoint_every} records of a partition, {args.batch} at a time, display "
              f"interval {args.interval_ms} ms): display on "
              f"{on / args.items:,.0f}, off {off / args.items:,.0f}; on / off {on / off:.3f}; the display adds "
              f"{(on - off) / args.items:,.0f} per item, {(on - off) / events:,.0f} per event")
        if native():
            fold, _ = count(args, "on", _FOLD)
            print(f"the native display fold (its projection's offer and complete): {fold / events:,.0f} "
                  f"instructions per event")
    if args.cpu:
        best = cpu(args)
        for batch in args.cpu_batches:
            cpu_on, cpu_off = best[batch, True], best[batch, False]
            print(f"CPU per source item, batches of {batch} records of a partition, without valgrind (best of "
                  f"{args.cpu} rounds): display on {cpu_on:.1f} µs, off {cpu_off:.1f} µs; on / off "
                  f"{cpu_on / cpu_off:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
