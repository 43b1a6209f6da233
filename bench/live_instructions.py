"""Instructions per source item of the live worker's own per-record work, without a broker, counted by valgrind's
callgrind: processing (what the partition task does with a chunk of fetched records: `to_source_record` and
`PartitionState.process_batch`, with the output record limit the worker sets) and publishing (what `CommitPipeline`
adds: putting the outcomes into transactions, noting their sources and committing), figures that do not move with
the host's load, for comparing two builds of the record path side by side.

Usage: .venv/bin/python bench/live_instructions.py [--items N] [--pythonpath DIR]

The records are bench/display_instructions.py's (bench/e2e.py's mix: sample runs, 200 open at once, 3 partitions),
as aiokafka consumer records, fed 32 consecutive records of a partition at a time as the partition task takes them,
the display off. The pipelines put into real aiokafka batch builders; their producer stands in for the broker and
answers every call at once, and a transaction commits when it holds 1,000 source records (the default) and at the
end. Each side runs in a process of its own under callgrind: one that makes the records and feeds none, one that
processes them, one that processes and publishes them; the differences are the two figures. `--pythonpath` puts
another build of the worker first on the path, to count it instead of the installed one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.structs import ConsumerRecord

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # for bench and devtools: `worker` stays the installed package (or --pythonpath's)

from bench.display_instructions import records  # noqa: E402
from worker._heap import freeze_heap  # noqa: E402
from worker._native import describe  # noqa: E402
from worker.live.pipeline import CommitPipeline, CommitPolicy  # noqa: E402
from worker.live.publishing import Destinations, KeyPartitioner  # noqa: E402
from worker.live.transaction import Transaction  # noqa: E402
from worker.ops import Metrics  # noqa: E402
from worker.settings import Settings  # noqa: E402
from worker.stream import PartitionState, Verdict, to_source_record  # noqa: E402

_REFS = re.compile(rb"I\s+refs:\s+([\d,]+)")
_PARTITIONS = (0, 1, 2)
_CHUNK = 32  # records of a partition processed together, as the partition task takes them
_LIMIT = 1 << 20  # the output record limit, as the worker sets it from the output topic's


class _Producer:
    """The producer calls a transaction makes, each answered at once; batches are real aiokafka batch builders."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(1 << 20, 0, is_transactional=True)

    def _done(self) -> asyncio.Future[None]:
        future: asyncio.Future[None] = self._loop.create_future()
        future.set_result(None)
        return future

    async def begin_transaction(self) -> None:
        return None

    async def commit_transaction(self) -> None:
        return None

    async def send_offsets_to_transaction(self, offsets: Any, group_id: str) -> None:
        return None

    async def send_batch(self, batch: BatchBuilder, topic: str, partition: int) -> asyncio.Future[None]:
        return self._done()

    async def send(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
                   partition: Any = None) -> asyncio.Future[None]:  # fmt: skip
        return self._done()


def consumer_records(items: int) -> list[ConsumerRecord[bytes, bytes]]:
    """The first `items` records of the mix as the consumer hands them out, offsets counted per partition."""
    offsets = dict.fromkeys(_PARTITIONS, 0)
    out = []
    for partition, key, value, stamp in records(items, "mix"):
        out.append(ConsumerRecord("src", partition, offsets[partition], stamp, 0, key, value, None, len(key),
                                  len(value), []))  # fmt: skip
        offsets[partition] += 1
    return out


async def feed(fed: list[ConsumerRecord[bytes, bytes]], publish: bool) -> int:
    """The side callgrind counts: the records through three partition states, each chunk's outcomes added to its
    partition's pipeline and ticked when `publish`, as the partition task does; returns the records processed."""
    loop = asyncio.get_running_loop()
    policy = CommitPolicy(Settings(commit_interval_ms=60_000, transaction_timeout_ms=120_000))
    destinations = Destinations("out", "dlq", "display", "changelog", KeyPartitioner(3))
    metrics = Metrics()

    async def no_checkpoint(offset: int, final: bool) -> None:
        return None

    def failed(exc: BaseException) -> None:
        raise SystemExit(f"a pipeline failed: {exc!r}")

    states = {p: PartitionState("src", p, max_record_bytes=_LIMIT) for p in _PARTITIONS}
    pipelines = {
        p: CommitPipeline(Transaction(_Producer(loop), TopicPartition("src", p), "group"), 0, policy=policy,  # type: ignore[arg-type]
                          destinations=lambda: destinations, metrics=metrics, checkpoint=no_checkpoint,
                          on_failure=failed, on_sent=lambda n: None, on_end=lambda: None)
        for p in _PARTITIONS
    }  # fmt: skip
    held: dict[int, list[ConsumerRecord[bytes, bytes]]] = {p: [] for p in _PARTITIONS}
    tally: dict[Verdict, int] = {}

    async def process(partition: int, chunk: list[ConsumerRecord[bytes, bytes]]) -> None:
        state, pipeline = states[partition], pipelines[partition]
        outcomes, error = state.process_batch([to_source_record(rec) for rec in chunk])
        if error is not None:
            raise SystemExit(f"the partition state failed: {error!r}")
        for outcome in outcomes:
            tally[outcome.verdict] = tally.get(outcome.verdict, 0) + 1
        if publish:
            after = chunk[-1].offset + 1
            await pipeline.add(outcomes, [rec.timestamp for rec in chunk], next_offset=after,
                               replay_from=state.replay_from(after))  # fmt: skip
            await pipeline.tick()

    for rec in fed:
        waiting = held[rec.partition]
        waiting.append(rec)
        if len(waiting) == _CHUNK:
            held[rec.partition] = []
            await process(rec.partition, waiting)
    for partition, waiting in held.items():
        if waiting:
            await process(partition, waiting)
    if publish:
        for pipeline in pipelines.values():
            if not await pipeline.close():
                raise SystemExit("a pipeline failed to commit")
    return sum(tally.values())


def count(args: argparse.Namespace, side: str) -> int:
    """Instructions callgrind counted for one side (`none`, `process` or `publish`)."""
    with tempfile.TemporaryDirectory() as scratch:
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={scratch}/out", sys.executable, __file__,
                   "--side", side, "--items", str(args.items)]  # fmt: skip
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
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--pythonpath", default="", help="a directory holding another build of `worker`")
    parser.add_argument("--side", choices=("none", "process", "publish"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        fed = consumer_records(args.items)
        freeze_heap()
        if args.side != "none":
            asyncio.run(feed(fed, publish=args.side == "publish"))
        return 0
    print(f"build: the worker under {args.pythonpath}" if args.pythonpath else f"build: {describe()}")
    if shutil.which("valgrind") is None:
        raise SystemExit("bench/live_instructions.py needs valgrind on the PATH")
    none, process, publish = count(args, "none"), count(args, "process"), count(args, "publish")
    print(f"instructions per source item ({args.items} items, {_CHUNK} records of a partition at a time, "
          f"max_record_bytes {_LIMIT}): processing {(process - none) / args.items:,.0f}, publishing "
          f"{(publish - process) / args.items:,.0f}, in all {(publish - none) / args.items:,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
