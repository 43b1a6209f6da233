"""Golden parity: the CLI flow (decode, events, fold, export) reproduces every reference display file."""

from __future__ import annotations

import pytest

from tests.display._golden import RUNS, expected, fold_run, source_lines


def test_corpus_is_complete() -> None:
    assert len(RUNS) == 112


@pytest.mark.parametrize("run", RUNS)
def test_display_equals_golden(run: str) -> None:
    want = expected(run)
    got = fold_run(source_lines(run))
    assert len(got) == len(want)
    for index, (line, reference) in enumerate(zip(got, want, strict=True)):
        assert line == reference, f"{run} line {index} differs"
