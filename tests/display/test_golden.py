"""Golden parity: the CLI flow (decode, events, fold, export) reproduces every reference display file."""

from __future__ import annotations

import json

import pytest

from tests.display._golden import RUNS, expected_lines, fold_run, source_lines
from worker.display import DisplayFold, DisplaySnapshot


def test_corpus_is_complete() -> None:
    assert len(RUNS) == 112


@pytest.mark.parametrize("run", RUNS)
def test_display_equals_golden(run: str) -> None:
    want = expected_lines(run)
    got = fold_run(source_lines(run))
    assert len(got) == len(want)
    for index, (line, reference) in enumerate(zip(got, want, strict=True)):
        assert json.loads(line) == json.loads(reference), f"{run} line {index} differs as JSON"
        # Records via Observed.model_dump_json(), the last line as '{"snapshot":' + json + '}': same bytes.
        assert line == reference, f"{run} line {index} differs in bytes"


@pytest.mark.parametrize("run", RUNS)
def test_reference_snapshot_round_trips_and_restores(run: str) -> None:
    last = expected_lines(run)[-1]
    text = last.removeprefix('{"snapshot":').removesuffix("}")
    snapshot = DisplaySnapshot.model_validate_json(text)
    assert snapshot.model_dump_json() == text
    assert DisplayFold.restore(snapshot).export().model_dump_json() == text
