"""A projection restored from its exported state (as the changelog keeps it) publishes exactly what the
uninterrupted one does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.display._flows import lines_of, project, worker_batches
from worker.display import DisplayProjection
from worker.errors import ConfigError

RUNS = [
    "s02_tool_roundtrip", "s04_suspended", "s07_errors", "s08_extensions", "s09_big_fragments", "c03_child_nested",
    "r0001", "r0002", "r0014", "damaged/d023", "edges/edges2", "synthetic/bounds", "synthetic/failures",
    "synthetic/long",
]  # fmt: skip


def _through_json(projection: DisplayProjection) -> DisplayProjection:
    state: dict[str, Any] = json.loads(json.dumps(projection.export()))
    return DisplayProjection.restore(state)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_restore_of_export_publishes_what_the_uninterrupted_projection_does(data: st.DataObject) -> None:
    run = data.draw(st.sampled_from(RUNS), label="run")
    interval_ms = data.draw(st.sampled_from([0, 300, 1000]), label="interval_ms")
    max_bytes = data.draw(st.sampled_from([8_192, 16_384, 1_048_588]), label="max_bytes")
    lines = lines_of(run)
    batches = sum(1 for _ in worker_batches(lines))
    cuts = data.draw(st.sets(st.integers(min_value=0, max_value=batches), max_size=5), label="cuts")
    whole = project(lines, interval_ms=interval_ms, max_bytes=max_bytes)

    def cut(projection: DisplayProjection, index: int) -> DisplayProjection:
        return _through_json(projection) if index in cuts else projection

    assert project(lines, interval_ms=interval_ms, max_bytes=max_bytes, cut=cut) == whole


def test_export_is_stable_through_json_and_restore() -> None:
    lines = lines_of("synthetic/long")
    exported: list[dict[str, Any]] = []

    def cut(projection: DisplayProjection, index: int) -> DisplayProjection:
        state = projection.export()
        restored = _through_json(projection)
        assert restored.export() == state
        exported.append(state)
        return restored

    project(lines, interval_ms=1000, max_bytes=16_384, cut=cut)
    assert any("evicted" in state["fold"] for state in exported), "eviction state goes through the changelog"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": 2}, "format 2; this worker reads 1"),
        ({"fold": {"items": []}}, "not readable: ValidationError"),
        ({"next_seq": None}, "not readable: TypeError"),
    ],
)
def test_a_state_it_cannot_read_is_refused(change: dict[str, Any], message: str) -> None:
    projection = DisplayProjection("run-t", "thread-t")
    with pytest.raises(ConfigError, match=message):
        DisplayProjection.restore({**projection.export(), **change})
