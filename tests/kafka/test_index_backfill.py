"""Upgrading on existing topics: runs a worker published without the thread index get their records from
`worker index`, the same bytes a worker with the index on writes for them, in the same partitions; a second run of
the command writes nothing; a run left open before the upgrade ends with the upgraded worker's end record, and
`inspect --thread` lists every run of the thread, none without its start."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.kafka.conftest import TopicFactory, UniqueNames
from tests.kafka.support import (
    ROOT,
    Rec,
    WorkerProcess,
    converted,
    corpus,
    in_thread,
    interleave,
    produce,
    read_topic,  # fmt: skip
    wait_caught_up,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(400)]

THREAD = "thread-upgraded"


def _command(bootstrap: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "worker", *args, "--bootstrap-servers", bootstrap],
                          cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _indexed(records: list[Rec]) -> dict[bytes | None, list[tuple[int, Any, bytes | None]]]:
    found: dict[bytes | None, list[tuple[int, Any, bytes | None]]] = {}
    for rec in sorted(records, key=lambda r: r.offset):
        found.setdefault(rec.key, []).append((rec.partition, rec.headers, rec.value))
    return found


def test_worker_index_writes_what_the_worker_would_have_and_nothing_twice(
    kafka_bootstrap: str, topic_factory: TopicFactory, unique_names: UniqueNames, tmp_path: Path
) -> None:
    ended = [in_thread(run, THREAD) for run in corpus(names=["s01_hello", "s05_failed", "r0000", "r0001"])]
    (whole,) = [in_thread(run, THREAD) for run in corpus(names=["s02_tool_roundtrip"])]
    half = converted(whole.key, whole.lines[: len(whole.lines) // 2])
    rest = [(whole.key.encode(), line) for line in whole.lines[len(half.lines):]]
    source = topic_factory("source", partitions=2)
    old, reference = [(topic_factory(f"{name}-out", partitions=3), topic_factory(f"{name}-dlq"))
                      for name in ("old", "reference")]  # fmt: skip
    index, reference_index = unique_names("index"), unique_names("reference-index")
    groups = [unique_names("old"), unique_names("reference")]
    workers: list[WorkerProcess] = []

    def worker(name: str, sink: tuple[str, str], group: str, *extra: str) -> WorkerProcess:
        started = WorkerProcess(tmp_path, name, kafka_bootstrap, source, *sink, group, *extra).start()
        workers.append(started)
        return started

    try:
        asyncio.run(produce(kafka_bootstrap, source, interleave([*ended, half])))
        before = worker("before", old, groups[0])  # 0.3.0's way: no index
        asyncio.run(wait_caught_up(kafka_bootstrap, groups[0], source, 120))
        assert before.stop() == 0
        flags = ["--source-topic", source, "--output-topic", old[0], "--dlq-topic", old[1], "--group-id", groups[0],
                 "--thread-index-topic", index]  # fmt: skip
        after = worker("after", old, groups[0], "--thread-index-topic", index)  # the upgrade: creates the index
        deadline = time.monotonic() + 60
        while after.log().count("partition rebuilt") < 2:  # live: the index topic exists
            assert time.monotonic() < deadline and after.alive, after.log()[-2000:]
            time.sleep(0.2)
        written = json.loads(_command(kafka_bootstrap, "index", *flags, "--json"))
        assert written["runs"] == 5 and written["without_event_0"] == 0, written
        assert (written["starts_written"], written["ends_written"]) == (5, 4), written
        again = json.loads(_command(kafka_bootstrap, "index", *flags, "--json"))
        assert again["starts_written"] == again["ends_written"] == 0 and again["already_indexed"] == 9, again
        asyncio.run(produce(kafka_bootstrap, source, rest))  # the open run ends after the upgrade
        asyncio.run(wait_caught_up(kafka_bootstrap, groups[0], source, 120))
        assert after.stop() == 0
        worker("reference", reference, groups[1], "--thread-index-topic", reference_index)
        asyncio.run(wait_caught_up(kafka_bootstrap, groups[1], source, 120))
        backfilled, calm = (asyncio.run(read_topic(kafka_bootstrap, topic)) for topic in (index, reference_index))
    except AssertionError:
        for w in workers:
            print(f"---- {w.log_path.name}\n{w.log()[-2500:]}")
        raise
    finally:
        for w in workers:
            if w.alive:
                w.kill()
    assert _indexed(backfilled) == _indexed(calm), "the backfill wrote other records than a worker with the index"
    assert len(backfilled) == 10 and all(len(v) == 1 for v in _indexed(backfilled).values())
    listed = json.loads(_command(kafka_bootstrap, "inspect", *flags, "--thread", THREAD, "--json"))
    assert not listed["unstarted"] and [run["state"] for run in listed["runs"]].count("running") == 0, listed
    assert {run["runId"] for run in listed["runs"]} == {run.key for run in [*ended, whole]}
