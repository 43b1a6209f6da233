"""Builders of source records, loaders of the golden runs, and changelogs folded as compaction keeps them, shared
by the stream tests."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Unpack

import orjson

from worker.stream import PartitionState, SourceRecord, StateOptions, StreamCore, read_checkpoint_header

TOPIC = "harness.events"
DATA = Path(__file__).resolve().parent.parent / "data"
GOLDEN = DATA / "golden"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
BASE_MS = 1_748_736_000_000  # 2025-06-01T00:00:00Z


def golden_path(name: str) -> Path:
    """Path of a file of the golden set in tests/data/golden/."""
    path = GOLDEN / name
    if not path.exists():
        raise FileNotFoundError(f"golden file {path} does not exist")
    return path


def golden_names() -> list[str]:
    """Names of the golden runs that have a stream-observer output."""
    names = sorted(p.name.removesuffix(".stream.agui.jsonl") for p in GOLDEN.glob("*.stream.agui.jsonl"))
    if not names:
        raise FileNotFoundError(f"no golden runs in {GOLDEN}")
    return names


def golden_source(name: str) -> list[bytes]:
    """The source lines of golden run `name` as record values."""
    return [line for line in golden_path(f"{name}.jsonl").read_bytes().splitlines() if line.strip()]


def golden_stream_output(name: str) -> list[bytes]:
    """The stream observer's expected output lines of `name`, without the error lines."""
    lines = golden_path(f"{name}.stream.agui.jsonl").read_bytes().splitlines()
    return [line for line in lines if line.strip() and not line.startswith(b'{"error"')]


def item(
    run: str,
    seq: int,
    *,
    thread: str | None = None,
    terminal: bool = False,
    ms: int | None = None,
    **extra: object,
) -> bytes:
    """A wire-shaped item for the fake core (`extra` adds fake-only fields such as refuse and emit)."""
    ms = BASE_MS + 1_000 * seq if ms is None else ms
    body: dict[str, object] = {
        "thread_id": thread or f"thread_{run.replace('-', '')}",
        "run_id": run,
        "sequence": seq,
        "occurred_at": (_EPOCH + timedelta(milliseconds=ms)).isoformat(),
    }
    body["result" if terminal else "event"] = {"status": "completed"} if terminal else {"kind": "x"}
    body.update(extra)
    return orjson.dumps(body)


def records(
    pairs: Iterable[tuple[bytes | str | None, bytes | None]],
    *,
    start: int = 0,
    partition: int = 0,
    step: int = 1,
) -> list[SourceRecord]:
    """Source records with increasing offsets (`step` apart) from (key, value) pairs; str keys are encoded."""
    out = []
    for i, (key, value) in enumerate(pairs):
        offset = start + i * step
        raw_key = key.encode() if isinstance(key, str) else key
        out.append(SourceRecord(TOPIC, partition, offset, 1_700_000_000_000 + offset, raw_key, value,
                                (("h", b"v"),)))
    return out


def header(headers: tuple[tuple[str, bytes], ...], name: str) -> str:
    """The single value of header `name`, decoded."""
    values = [v for k, v in headers if k == name]
    assert len(values) == 1, f"header {name} occurs {len(values)} times in {headers}"
    return values[0].decode()


Changelog = dict[bytes, bytes]
Delta = list[tuple[bytes, bytes | None]]


def checkpoint(state: PartitionState, offset: int) -> Delta:
    """The changelog records a checkpoint of `state` at source offset `offset` writes, taken at once: the parts
    production cuts (`checkpoint_parts`), joined."""
    return [record for part in state.checkpoint_parts(offset, math.inf) for record in part]


def restore(
    topic: str, partition: int, values: Mapping[bytes, bytes], *, core: StreamCore | None = None,
    **options: Unpack[StateOptions],
) -> tuple[PartitionState, int]:  # fmt: skip
    """The state a changelog partition holds (`values`) and the offset it covers, restored at once: the parts
    production restores in (`restore_in_parts`), run to their end."""
    parts = PartitionState.restore_in_parts(topic, partition, values, options, core=core, part_s=math.inf)
    while True:
        try:
            next(parts)
        except StopIteration as done:
            restored: tuple[PartitionState, int] = done.value
            return restored


def fold(changelog: Changelog, delta: Delta) -> Changelog:
    """`changelog` (latest value per key) after a checkpoint's `delta` is written to it and compacted; fails on a
    checkpoint that writes a key twice."""
    keys = [key for key, _ in delta]
    assert len(keys) == len(set(keys)), f"a checkpoint wrote a key twice: {keys}"
    for key, value in delta:
        if value is None:
            changelog.pop(key, None)
        else:
            changelog[key] = value
    return changelog


def image(state: PartitionState, offset: int) -> Changelog:
    """Every key of `state` at source offset `offset` as a compacted changelog holds it after a checkpoint there:
    told that its changelog holds nothing (`adopt_changelog_keys(())`), the state writes every live key. This marks
    the state checkpointed at `offset`, with no change left for its next checkpoint: take it after the state's own
    checkpoints are checked. Fails unless the keys written are those the partition record and the state count."""
    state.adopt_changelog_keys(())
    values = fold({}, checkpoint(state, offset))
    head = read_checkpoint_header(values, state.topic, state.partition)
    assert head is not None and head.offset == offset, head
    streams = sum(key.startswith(b"stream:") for key in values)
    ended = sum(key.startswith(b"ended:") for key in values)
    assert (streams, ended) == (head.open_streams, head.ended_streams) == (state.open_streams, state.remembered_streams)
    assert len(values) == streams + ended + 1, sorted(values)
    return values
