"""`PartitionState.process_batch`: the conversion of a batch first, then its display folds, with the very outcomes
(display records included) and changelog that one `process` per record gives."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from ag_ui.core import BaseEvent

from tests.stream._fakes import FAKE_CORE, fake_encode
from tests.stream._support import TOPIC, checkpoint, golden_names, golden_source, item, records
from tests.stream.test_display import displayed, interleaved, run_id
from worker.errors import GapError
from worker.stream import GapPolicy, Outcome, PartitionState, SourceRecord


def _one_by_one(recs: list[SourceRecord], **options: Any) -> tuple[list[Outcome], list[Any]]:
    state = PartitionState(TOPIC, 0, **options)
    outcomes = [state.process(rec) for rec in recs]
    return outcomes, list(checkpoint(state, recs[-1].offset + 1))


def _batched(recs: list[SourceRecord], size: int, **options: Any) -> tuple[list[Outcome], list[Any]]:
    state = PartitionState(TOPIC, 0, **options)
    outcomes: list[Outcome] = []
    for start in range(0, len(recs), size):
        done, error = state.process_batch(recs[start : start + size])
        assert error is None
        outcomes += done
    return outcomes, list(checkpoint(state, recs[-1].offset + 1))


def _gapped() -> list[SourceRecord]:
    lines = golden_source("s02_tool_roundtrip")
    key = run_id("s02_tool_roundtrip")
    return [*interleaved(["s01_hello"]), *records([(key, line) for i, line in enumerate(lines) if i != 6], start=50)]


def _cannot_encode(event: BaseEvent) -> bytes:
    if getattr(event, "value", {}).get("seq") == 1:
        raise OverflowError("cannot encode this one")
    return fake_encode(event)


CASES = {
    "golden runs interleaved": (lambda: interleaved(golden_names()[:12]), {"display_interval_ms": 0}),
    "a cadence of 5 s": (lambda: interleaved(golden_names()[:12], step=700), {"display_interval_ms": 5000}),
    "evicted and withheld records": (lambda: interleaved(["r0014", "r0095"]),
                                     {"display_interval_ms": 0, "display_max_bytes": 4096}),
    "a gap's run error": (_gapped, {"display_interval_ms": 60_000}),
    "an event too large": (lambda: interleaved(["s09_big_fragments", "s01_hello"]),
                           {"display_interval_ms": 60_000, "max_record_bytes": 2048}),
    "events that cannot be encoded": (
        lambda: records([("run-a", item("run-a", 0)), ("run-b", item("run-b", 0)), ("run-a", item("run-a", 1, emit=2)),
                         ("run-a", item("run-a", 2))]),
        {"display_interval_ms": 0, "core": dataclasses.replace(FAKE_CORE, encode_event=_cannot_encode)}),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("size", [1, 3, 32, 10_000])
def test_a_batch_gives_the_outcomes_and_changelog_of_one_record_at_a_time(case: str, size: int) -> None:
    make, options = CASES[case]
    recs = make()
    expected_outcomes, expected_changelog = _one_by_one(recs, **options)
    outcomes, changelog = _batched(recs, size, **options)
    assert displayed(expected_outcomes), "the case publishes display records"
    assert outcomes == expected_outcomes
    assert changelog == expected_changelog


def test_a_batch_stops_at_the_record_that_raises_with_the_outcomes_before_it_complete() -> None:
    recs = _gapped()
    gap_at = next(i for i, rec in enumerate(recs) if rec.offset >= 50 + 6)  # the record after the missing line
    reference = PartitionState(TOPIC, 0, display_interval_ms=0, gap_policy=GapPolicy.HALT)
    expected = [reference.process(rec) for rec in recs[:gap_at]]
    state = PartitionState(TOPIC, 0, display_interval_ms=0, gap_policy=GapPolicy.HALT)
    outcomes, error = state.process_batch(recs)
    assert isinstance(error, GapError)
    assert displayed(outcomes) and outcomes == expected
    # the refused record changed nothing: the state checkpoints where the reference stands
    assert list(checkpoint(state, recs[gap_at].offset)) == list(checkpoint(reference, recs[gap_at].offset))
