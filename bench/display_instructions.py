"""Instructions per source item of the partition state (`PartitionState.process` and `checkpoint`, no Kafka) with the
display on against off, counted by valgrind's callgrind: a figure that does not move with the host's load, for
comparing two builds of the display fold side by side.

Usage: .venv/bin/python bench/display_instructions.py [--items N] [--checkpoint-every N] [--pythonpath DIR]

The records are bench/e2e.py's mix (sample runs, 200 open at once, 3 partitions), stamped as a topic filled at
3,750 items/s; each side runs in a process of its own under callgrind, which counts only the instructions inside
`process` and `checkpoint` (the records' generation and the interpreter's start are left out). `--pythonpath`
puts another build of the worker first on the path, to count it instead of the installed one.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from aiokafka.partitioner import DefaultPartitioner

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # for devtools: `worker` stays the installed package (or the one --pythonpath names)

from devtools.sample_runs import interleave, load_samples  # noqa: E402
from worker._heap import freeze_heap  # noqa: E402
from worker.stream import PartitionState, SourceRecord  # noqa: E402

_COUNTED = ("CPyDef__partition___PartitionState___process", "CPyDef__partition___PartitionState___checkpoint")
_REFS = re.compile(rb"I\s+refs:\s+([\d,]+)")


def feed(items: int, checkpoint_every: int, display: bool) -> None:
    """The side that callgrind counts: `items` records through three partition states."""
    partitioner = DefaultPartitioner()
    partitions = [0, 1, 2]
    records = []
    for index, (key, value) in enumerate(interleave(load_samples(), runs=None, concurrency=200, salt="x", seed=1)):
        if index >= items:
            break
        stamp = 1_700_000_000_000 + index * 4 // 15  # 3,750 items/s
        records.append((partitioner(key, partitions, partitions), key, value, stamp))
    freeze_heap()
    states = [PartitionState("src", p, display_interval_ms=5000 if display else None) for p in partitions]
    offsets = [0, 0, 0]
    for partition, key, value, stamp in records:
        state = states[partition]
        state.process(SourceRecord("src", partition, offsets[partition], stamp, key, value))
        offsets[partition] += 1
        if offsets[partition] % checkpoint_every == 0:
            state.checkpoint(offsets[partition])


def count(args: argparse.Namespace, display: bool) -> int:
    """Instructions callgrind counted inside `process` and `checkpoint` for one side."""
    with tempfile.TemporaryDirectory() as scratch:
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={scratch}/out",
                   *(f"--toggle-collect={name}" for name in _COUNTED),
                   sys.executable, __file__, "--side", "on" if display else "off", "--items", str(args.items),
                   "--checkpoint-every", str(args.checkpoint_every)]  # fmt: skip
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
    parser.add_argument("--pythonpath", default="", help="a directory holding another build of `worker`")
    parser.add_argument("--side", choices=("on", "off"), help=argparse.SUPPRESS)  # the process callgrind counts
    args = parser.parse_args()
    if args.side:
        feed(args.items, args.checkpoint_every, args.side == "on")
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("bench/display_instructions.py needs valgrind on the PATH")
    on, off = count(args, display=True), count(args, display=False)
    print(f"instructions per source item ({args.items} items, a checkpoint every {args.checkpoint_every} records "
          f"of a partition): display on {on / args.items:,.0f}, off {off / args.items:,.0f}; "
          f"on / off {on / off:.3f}; the display adds {(on - off) / args.items:,.0f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
