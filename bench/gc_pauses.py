"""The cyclic garbage collector's pauses and CPU cost while a partition of many open runs catches up, per collector
policy, without Kafka: CPU per record, the longest collection and the longest stretch of work between two yields
of the worker's loop, each policy in its own fresh process, policies interleaved round after round.

Usage: .venv/bin/python bench/gc_pauses.py [--streams N] [--records N] [--rounds N] [--policies P,P,...]

A policy is `T0/T1/T2` (the collector's thresholds after the start-up freeze, as `worker/_heap.py` sets them) with
`+freeze` to freeze the heap again once the open runs are built (where a rebuild ends). Each process opens
`--streams` runs (the records of `bench/e2e.py` (f): a start and a text part each, then text deltas round-robin),
then processes `--records` deltas the way a live partition task does: consumed records made `--fetch` at a time
while fewer than half of `--pending` wait, 32 converted between two yields, their outcomes (and a future per record
sent) held until a commit every `--commit-records`, a checkpoint cut in parts every `--checkpoint-records` and held
until its commit. Only that processing is timed (CPU of this thread); a stretch is a fetch, a chunk of 32 records or
a part of a checkpoint. The worker makes more short-lived containers per record than this model (the Kafka client's),
so it collects more often: compare the policies here, and the worker's own collections in `bench/e2e.py` (f).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import statistics
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # for bench and devtools: `worker` stays the installed package

from aiokafka.structs import ConsumerRecord  # noqa: E402

from devtools.sample_runs import open_runs  # noqa: E402
from worker._heap import freeze_heap  # noqa: E402
from worker._native import describe  # noqa: E402
from worker.stream import PartitionState, to_source_record  # noqa: E402

TOPIC = "bench.gc"
CHUNK = 32  # records converted between two yields (the partition task's chunk)


class Collections:
    """Every collection's generation and the CPU it took (thread time), from `gc.callbacks`."""

    def __init__(self) -> None:
        self.began = 0.0
        self.seconds = 0.0  # collections within the current stretch
        self.taken: list[tuple[int, float]] = []

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.began = time.thread_time()
            return
        took = time.thread_time() - self.began
        self.seconds += took
        self.taken.append((info["generation"], took))


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One process, one policy: open the runs, then process the deltas as a catching-up task does."""
    thresholds, _, extra = args.child.partition("+")
    pairs = list(open_runs("gc", args.streams, args.records))
    gc.collect()
    freeze_heap()  # as `worker run` starts: what is loaded now is never scanned
    gc.set_threshold(*map(int, thresholds.split("/")))
    state = PartitionState(TOPIC, 0)
    offset = 0

    def fetched(count: int) -> list[ConsumerRecord[bytes, bytes]]:
        nonlocal offset
        out = []
        for key, value in pairs[offset : offset + count]:
            out.append(ConsumerRecord(TOPIC, 0, offset, 1_700_000_000_000 + offset, 0, key, value, None, len(key),
                                      len(value), ()))
            offset += 1
        return out

    while offset < 2 * args.streams:  # open the runs, as a rebuild does
        for _ in range(0, args.fetch, CHUNK):
            state.process_batch([to_source_record(rec) for rec in fetched(min(CHUNK, 2 * args.streams - offset))],
                                publish=False)
    if extra == "freeze":
        freeze_heap(collect=False)
        gc.set_threshold(*map(int, thresholds.split("/")))
    collections = Collections()
    gc.callbacks.append(collections)
    loop = asyncio.new_event_loop()  # never run: its futures stand for the producer's, one per record sent
    inbox: deque[ConsumerRecord[bytes, bytes]] = deque()  # fetched, not yet converted
    # the open transaction's records: (outcome, offset, source timestamp) and what was sent of it
    held: list[tuple[tuple[Any, int, int], list[tuple[asyncio.Future[None], Any]]]] = []
    checkpoint: list[Any] = []
    longest, longest_gc, stretches = 0.0, 0.0, 0
    since_commit = since_checkpoint = 0
    began = time.thread_time()
    while offset < len(pairs) or inbox:
        collections.seconds = 0.0
        start = time.thread_time()
        if len(inbox) <= args.pending // 2 and offset < len(pairs):
            inbox.extend(fetched(args.fetch))  # fetching resumes at half the backlog's bound
            took = time.thread_time() - start  # a fetch's records are made in a stretch of their own
            if took > longest:
                longest, longest_gc = took, collections.seconds
            collections.seconds = 0.0
            start = time.thread_time()
        chunk = [inbox.popleft() for _ in range(min(CHUNK, len(inbox)))]
        outcomes, error = state.process_batch([to_source_record(rec) for rec in chunk])
        assert error is None, error
        for rec, outcome in zip(chunk, outcomes, strict=True):  # a future and its entry per record sent
            sent = [(loop.create_future(), out) for out in outcome.records]
            held.append(((outcome, rec.offset, rec.timestamp), sent))
        since_commit += len(chunk)
        since_checkpoint += len(chunk)
        took = time.thread_time() - start
        stretches += 1
        if took > longest:
            longest, longest_gc = took, collections.seconds
        if since_commit >= args.commit_records:
            if since_checkpoint >= args.checkpoint_records:
                for part in state.checkpoint_parts(chunk[-1].offset + 1):
                    collections.seconds = 0.0
                    start = time.thread_time()
                    checkpoint.extend(part)
                    took = time.thread_time() - start
                    if took > longest:
                        longest, longest_gc = took, collections.seconds
                since_checkpoint = 0
            held, checkpoint, since_commit = [], [], 0  # committed: the transaction's records go
    spent = time.thread_time() - began
    gc.callbacks.remove(collections)
    by_gen = {str(g): [s for gen, s in collections.taken if gen == g] for g in range(3)}
    return {
        "policy": args.child, "cpu_us": spent / args.records * 1e6,
        "gc_share": sum(s for _, s in collections.taken) / spent,
        "collections": {g: len(v) for g, v in by_gen.items()},
        "longest_gc_ms": {g: max(v, default=0.0) * 1000 for g, v in by_gen.items()},
        "longest_ms": longest * 1000, "longest_gc_in_it_ms": longest_gc * 1000, "stretches": stretches,
        "tracked": len(gc.get_objects()), "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=10_000, help="open runs of the partition")
    parser.add_argument("--records", type=int, default=100_000, help="text deltas processed after they opened")
    parser.add_argument("--rounds", type=int, default=3, help="processes per policy, policies interleaved")
    parser.add_argument("--policies", default="50000/20/100,20000/2/100,10000/2/100,10000/1/100",
                        help="comma-separated: T0/T1/T2, optionally +freeze")
    parser.add_argument("--commit-records", type=int, default=1000, help="records per transaction")
    parser.add_argument("--checkpoint-records", type=int, default=10_000, help="records between two checkpoints")
    parser.add_argument("--pending", type=int, default=20_000, help="consumed records fetched ahead at most")
    parser.add_argument("--fetch", type=int, default=20_000, help="consumed records made at once by a fetch")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    policies = args.policies.split(",")
    print(f"{describe()}; {args.streams:,} open runs, {args.records:,} records per process, {args.rounds} rounds",
          file=sys.stderr)
    results: dict[str, list[dict[str, Any]]] = {p: [] for p in policies}
    for round_ in range(args.rounds):
        order = policies[round_ % len(policies):] + policies[: round_ % len(policies)]
        for policy in order:
            command = [sys.executable, __file__, "--child", policy, "--streams", str(args.streams), "--records",
                       str(args.records), "--commit-records", str(args.commit_records), "--checkpoint-records",
                       str(args.checkpoint_records), "--pending", str(args.pending), "--fetch", str(args.fetch)]
            out = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
            results[policy].append(out)
            print(f"round {round_} {policy}: {out['cpu_us']:.1f} us/record, gc {out['gc_share']:.1%}, longest "
                  f"{out['longest_ms']:.1f} ms (gc {out['longest_gc_in_it_ms']:.1f}), collections "
                  f"{out['collections']}, longest by generation {out['longest_gc_ms']}", file=sys.stderr)
    base = statistics.median(r["cpu_us"] for r in results[policies[0]])
    print("| policy | CPU per record, median (rounds) | / first | GC share | collections 0/1/2 per process | "
          "longest collection 0/1/2, median of the processes' (longest of all) | longest stretch (GC in it) | "
          "tracked objects, max RSS |")
    print("|---|---|---|---|---|---|---|---|")
    for policy, runs in results.items():
        cpu = statistics.median(r["cpu_us"] for r in runs)
        worst = max(runs, key=lambda r: r["longest_ms"])
        gens = "/".join(f"{statistics.median(r['longest_gc_ms'][g] for r in runs):.1f}" for g in "012")
        gens += " (" + "/".join(f"{max(r['longest_gc_ms'][g] for r in runs):.1f}" for g in "012") + ")"
        counts = "/".join(f"{statistics.median(r['collections'][g] for r in runs):.0f}" for g in "012")
        spread = ", ".join(f"{r['cpu_us']:.1f}" for r in runs)
        print(f"| {policy} | {cpu:.1f} µs ({spread}) | {cpu / base:.3f} | "
              f"{statistics.median(r['gc_share'] for r in runs):.1%} | {counts} | {gens} ms | "
              f"{worst['longest_ms']:.1f} ms ({worst['longest_gc_in_it_ms']:.1f}) | "
              f"{statistics.median(r['tracked'] for r in runs):,.0f}, {max(r['maxrss_mb'] for r in runs):.0f} MB |")


if __name__ == "__main__":
    main()
