"""Instructions per source item of the partition state (`PartitionState.process_batch` and `checkpoint`, no Kafka)
with the display on against off, counted by valgrind's callgrind: a figure that does not move with the host's load,
for comparing two builds of the display fold side by side.

Usage: .venv/bin/python bench/display_instructions.py [--items N] [--checkpoint-every N] [--batch N]
                                                      [--pythonpath DIR] [--cpu ROUNDS [--cpu-batches N,N]]
                                                      [--cpu-only]

The records are bench/e2e.py's mix (sample runs, 200 open at once, 3 partitions), stamped as a topic filled at
3,750 items/s, `--batch` records of a partition at a time (32, as the worker's partition task takes them); each
side runs in a process of its own under callgrind, which counts only the instructions inside `process_batch` and
`checkpoint` (the records' generation and the interpreter's start are left out). `--pythonpath` puts another build
of the worker first on the path, to count it instead of the installed one (a build with `process_batch`). `--cpu`
also times the same records without valgrind, in one process, at each batch size of `--cpu-batches`, ROUNDS rounds
alternating the order: CPU per item of each side (best rounds), the ratio that instructions alone do not show when
the display's instructions run at a lower rate than the conversion's (`--cpu-only` skips the count).
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
sys.path.append(str(ROOT))  # for devtools: `worker` stays the installed package (or the one --pythonpath names)

from devtools.sample_runs import interleave, load_samples  # noqa: E402
from worker._heap import freeze_heap  # noqa: E402
from worker.stream import PartitionState, SourceRecord  # noqa: E402

_COUNTED = ("CPyDef__partition___PartitionState___process_batch", "CPyDef__partition___PartitionState___checkpoint")
_REFS = re.compile(rb"I\s+refs:\s+([\d,]+)")


_PARTITIONS = [0, 1, 2]
Records = list[tuple[int, bytes, bytes, int]]


def records(items: int) -> Records:
    """The first `items` records of the mix: partition, key, value, timestamp."""
    partitioner = DefaultPartitioner()
    out = []
    for index, (key, value) in enumerate(interleave(load_samples(), runs=None, concurrency=200, salt="x", seed=1)):
        if index >= items:
            break
        stamp = 1_700_000_000_000 + index * 4 // 15  # 3,750 items/s
        out.append((partitioner(key, _PARTITIONS, _PARTITIONS), key, value, stamp))
    return out


def feed(fed: Records, checkpoint_every: int, display: bool, batch: int) -> None:
    """The side that callgrind counts: the records through three partition states, `batch` consecutive records of
    a partition at a time (`process_batch`, as the worker's partition task takes a fetched batch)."""
    states = [PartitionState("src", p, display_interval_ms=5000 if display else None) for p in _PARTITIONS]
    offsets = [0, 0, 0]
    held: list[list[SourceRecord]] = [[] for _ in _PARTITIONS]
    for partition, key, value, stamp in fed:
        state, waiting = states[partition], held[partition]
        waiting.append(SourceRecord("src", partition, offsets[partition], stamp, key, value))
        offsets[partition] += 1
        due = offsets[partition] % checkpoint_every == 0
        if due or len(waiting) == batch:
            state.process_batch(waiting)
            waiting.clear()
        if due:
            state.checkpoint(offsets[partition])
    for state, waiting in zip(states, held, strict=True):
        state.process_batch(waiting)


def cpu(args: argparse.Namespace) -> dict[tuple[int, bool], float]:
    """CPU µs per item of each side at each of `args.cpu_batches`, best of `args.cpu` rounds, each round running
    them all in an order that alternates from round to round."""
    fed = records(args.items)
    freeze_heap()
    sides = [(batch, display) for batch in args.cpu_batches for display in (True, False)]
    best = dict.fromkeys(sides, float("inf"))
    for round_ in range(args.cpu):
        for batch, display in sides if round_ % 2 == 0 else sides[::-1]:
            began = time.process_time()
            feed(fed, args.checkpoint_every, display, batch)
            best[batch, display] = min(best[batch, display], (time.process_time() - began) / len(fed) * 1e6)
            gc.collect()
    return best


def count(args: argparse.Namespace, display: bool) -> int:
    """Instructions callgrind counted inside `process` and `checkpoint` for one side."""
    with tempfile.TemporaryDirectory() as scratch:
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={scratch}/out",
                   *(f"--toggle-collect={name}" for name in _COUNTED),
                   sys.executable, __file__, "--side", "on" if display else "off", "--items", str(args.items),
                   "--checkpoint-every", str(args.checkpoint_every), "--batch", str(args.batch)]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same set orders in every run
        if args.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, (args.pythonpath, env.get("PYTHONPATH"))))
        done = subprocess.run(command, capture_output=True, env=env, cwd=scratch, check=False)
    found = _REFS.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind failed ({done.returncode}): {done.stderr.decode(errors='replace')[-2000:]}")
    return int(found.group(1).replace(b",", b""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=4000)
    parser.add_argument("--checkpoint-every", type=int, default=1000,
                        help="records of one partition between checkpoints")  # fmt: skip
    parser.add_argument("--batch", type=int, default=32,
                        help="records of a partition processed together (the worker's partition task takes 32)")
    parser.add_argument("--pythonpath", default="", help="a directory holding another build of `worker`")
    parser.add_argument("--cpu", type=int, default=0, metavar="ROUNDS", help="also time both sides, without valgrind")
    parser.add_argument("--cpu-batches", type=lambda text: [int(n) for n in text.split(",")], default=[1, 32],
                        help="the batch sizes --cpu times, comma-separated (default 1,32)")
    parser.add_argument("--cpu-only", action="store_true", help="time with --cpu, count no instructions")
    parser.add_argument("--side", choices=("on", "off"), help=argparse.SUPPRESS)  # the process callgrind counts
    args = parser.parse_args()
    if args.side:
        fed = records(args.items)
        freeze_heap()
        feed(fed, args.checkpoint_every, args.side == "on", args.batch)
        return 0
    if not args.cpu_only:
        if shutil.which("valgrind") is None:
            raise SystemExit("bench/display_instructions.py needs valgrind on the PATH")
        on, off = count(args, display=True), count(args, display=False)
        print(f"instructions per source item ({args.items} items, a checkpoint every {args.checkpoint_every} "
              f"records of a partition, {args.batch} at a time): display on {on / args.items:,.0f}, off "
              f"{off / args.items:,.0f}; on / off {on / off:.3f}; the display adds {(on - off) / args.items:,.0f}")
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
