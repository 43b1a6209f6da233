"""Checkpoints: export as JSON and restore at any cut, then fold the intact suffix: nothing changes."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.display._golden import event_count, expected_lines, fold_run, source_lines

# Text, tools, suspension, errors, memory, big fragments, argument streams, nested children.
CUT_RUNS = [
    "s02_tool_roundtrip",
    "s04_suspended",
    "s07_errors",
    "s08_extensions",
    "s09_big_fragments",
    "c03_child_nested",
    "r0001",
    "r0002",
]
EVERY_CUT_RUNS = ["s01_hello", "s06_out_of_order", "c01_child_completed"]


@pytest.mark.parametrize("run", EVERY_CUT_RUNS)
def test_restore_at_every_single_cut(run: str) -> None:
    lines, want = source_lines(run), expected_lines(run)
    for cut in range(event_count(run) + 1):
        assert fold_run(lines, [cut]) == want, f"{run}: cut after {cut} events"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_restore_at_random_cuts(data: st.DataObject) -> None:
    run = data.draw(st.sampled_from(CUT_RUNS), label="run")
    total = event_count(run)
    cuts = data.draw(st.sets(st.integers(min_value=0, max_value=total), max_size=6), label="cuts")
    assert fold_run(source_lines(run), cuts) == expected_lines(run)
