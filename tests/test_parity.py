"""The native build and the pure-Python reference are one program: every corpus the project has, fed through a
partition's state with the display topic on in both builds, gives the same bytes — output records, display
records, dead letters (verdicts and reasons), and the changelog records of every checkpoint — and a checkpoint
written by either build restores in the other and continues as the uninterrupted run does (a rolling upgrade mixes
them).

Corpora: the golden runs (every source file, the edge and damaged ones included) interleaved as the adversarial
source interleaves them, with late duplicates, mis-keyed records, gaps and poison; the display's synthetic runs
(content bounds, fragments, failed tool results with media, runs that outgrow a small display topic); and
generated runs (tests/observe's strategy: children, delegations, terminals)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from tests.display._synthetic import SYNTHETIC
from tests.golden_bytes import changelog_value
from tests.kafka.adversarial import adversarial_source
from tests.native import native_core, use_build
from tests.observe._runs import wire_runs
from tests.stream._support import checkpoint, restore
from worker.stream import PartitionState, SourceRecord, default_core, reference_core

TOPIC = "src"
Fed = list[tuple[bytes, bytes | None, int]]  # key, value, timestamp
Transcript = list[tuple[Any, ...]]

# State options each corpus runs with: the display at its default cadence, a cadence of every record with a small
# topic (paging and withheld records), and a record limit (RUN_ERROR closings).
OPTIONS: dict[str, dict[str, Any]] = {
    "default": {"display_interval_ms": 5000},
    "every-record-small-topic": {"display_interval_ms": 0, "display_max_bytes": 4096},
    "record-limit": {"display_interval_ms": 250, "max_record_bytes": 3000, "max_open_streams": 6,
                     "closed_stream_memory": 10},
}  # fmt: skip


def _state(build: str, options: dict[str, Any]) -> PartitionState:
    return PartitionState(TOPIC, 0, core=default_core() if build == "native" else reference_core(), **options)


def _records(fed: Fed, start: int = 0) -> Iterator[SourceRecord]:
    for offset, (key, value, stamp) in enumerate(fed[start:], start):
        yield SourceRecord(TOPIC, 0, offset, stamp, key, value)


def _changelog(records: Sequence[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
    return [(key, changelog_value(value)) for key, value in records]


def transcript(
    build: str, fed: Fed, options: dict[str, Any], monkeypatch: pytest.MonkeyPatch, *, batch: int = 32,
    every: int = 50, state: PartitionState | None = None, start: int = 0,
) -> tuple[Transcript, dict[bytes, bytes]]:  # fmt: skip
    """What `build` makes of `fed` from record `start` on (in batches, a checkpoint every `every` records): every
    outcome and checkpoint record in order, and the changelog's latest value per key at the end."""
    use_build(build, monkeypatch)
    state = state if state is not None else _state(build, options)
    out: Transcript = []
    latest: dict[bytes, bytes] = {}
    records = list(_records(fed, start))
    for first in range(0, len(records), batch):
        chunk = records[first : first + batch]
        outcomes, error = state.process_batch(chunk)
        assert error is None, f"{build}: {type(error).__name__}: {error}"
        for outcome in outcomes:
            shown = tuple((r.destination.value, r.key, r.value, r.headers) for r in outcome.records)
            out.append(("outcome", outcome.verdict.value, outcome.reason, shown))
        if (start + first) // every != (start + first + len(chunk)) // every:
            changelog = checkpoint(state, chunk[-1].offset + 1)
            out.append(("checkpoint", _changelog(changelog)))
            for key, value in changelog:
                if value is None:
                    latest.pop(key, None)
                else:
                    latest[key] = value
    return out, latest


def assert_same(fed: Fed, options: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Both builds give the same transcript; a checkpoint of either, restored by the other halfway, continues
    with the same outcomes as the uninterrupted run."""
    native_core()
    pure, _ = transcript("pure", fed, options, monkeypatch)
    native, _ = transcript("native", fed, options, monkeypatch)
    assert len(native) == len(pure)
    differ = [i for i, (a, b) in enumerate(zip(pure, native, strict=True)) if a != b]
    if differ:
        a, b = repr(pure[differ[0]]), repr(native[differ[0]])
        at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        pytest.fail(f"entry {differ[0]} differs from character {at}:\npure   {a[max(0, at - 300) : at + 300]}\n"
                    f"native {b[max(0, at - 300) : at + 300]}")  # fmt: skip
    half = max(1, len(fed) // 2)
    for writer, reader in (("pure", "native"), ("native", "pure")):
        _, latest = transcript(writer, fed[:half], options, monkeypatch, every=half)
        use_build(reader, monkeypatch)
        core = default_core() if reader == "native" else reference_core()
        restored, offset = restore(TOPIC, 0, latest, core=core, **options)
        rest, _ = transcript(reader, fed, options, monkeypatch, state=restored, start=offset)
        whole, _ = transcript(reader, fed, options, monkeypatch)
        outcomes = [entry for entry in whole if entry[0] == "outcome"][offset:]
        assert [entry for entry in rest if entry[0] == "outcome"] == outcomes, f"{writer} -> {reader}"


def _stamped(pairs: Sequence[tuple[bytes, bytes | None]], step_ms: int = 97) -> Fed:
    return [(key, value, 1_750_000_000_000 + index * step_ms) for index, (key, value) in enumerate(pairs)]


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
@pytest.mark.parametrize("seed", [1, 2])
def test_the_golden_runs_with_every_trouble_give_the_same_bytes(
    seed: int, options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert_same(_stamped(adversarial_source(seed).records), options, monkeypatch)


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_the_display_synthetic_runs_give_the_same_bytes(
    options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fed: list[tuple[bytes, bytes | None]] = []
    for make in SYNTHETIC.values():
        lines = [line.encode() for line in make()]
        key = json.loads(lines[0])["run_id"].encode()
        fed += [(key, line) for line in lines]
    assert_same(_stamped(fed, step_ms=301), options, monkeypatch)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=wire_runs())
def test_generated_runs_give_the_same_bytes(runs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    key = runs[0]["run_id"].encode()
    fed = [(key, json.dumps(item).encode()) for item in runs]
    assert_same(_stamped(fed, step_ms=1500), OPTIONS["every-record-small-topic"], monkeypatch)
