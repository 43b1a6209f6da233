"""When a display record is due depends on event numbers, source timestamps and the run's end only: a withheld
record moves the cadence on like a published one, so a feeder can tell what is due before anything is folded."""

from __future__ import annotations

import pytest
from ag_ui.core import TextMessageContentEvent, TextMessageEndEvent, TextMessageStartEvent

from tests.display._events import BASE_TS
from tests.display._flows import offer
from worker.display import DisplayProjection
from worker.display.cadence import DisplayCadence
from worker.errors import ConfigError, WorkerError


def test_due_with_the_first_events_then_per_interval_either_way_and_with_the_end() -> None:
    cadence = DisplayCadence("run-c", 1000)
    assert cadence.due(BASE_TS, ended=False) is None, "nothing to show before the first event"
    cadence.advance(0, 2)
    assert cadence.due(BASE_TS, ended=False) == 1
    cadence.advance(2, 1)
    assert cadence.due(BASE_TS + 999, ended=False) is None
    assert cadence.due(BASE_TS - 999, ended=False) is None
    assert cadence.due(BASE_TS - 1000, ended=False) == 2, "a clock that steps back counts the same distance"
    cadence.advance(3, 1)
    assert cadence.due(BASE_TS - 1000, ended=True) == 3, "the run's end is always due"
    assert cadence.due(BASE_TS + 10**6, ended=True) is None, "never twice for the same last event"
    assert (cadence.next_seq, cadence.attempted_seq, cadence.anchor_ms) == (4, 3, BASE_TS - 1000)


def test_events_must_continue_the_numbering() -> None:
    cadence = DisplayCadence("run-c", 0, next_seq=5)
    with pytest.raises(WorkerError, match="run run-c expected event n=5, got n=4"):
        cadence.advance(4, 1)
    with pytest.raises(WorkerError, match="expected event n=5, got n=5"):
        cadence.advance(5, -1)
    with pytest.raises(ConfigError, match="interval"):
        DisplayCadence("run-c", -1)


def _too_big(projection: DisplayProjection) -> None:
    opened = (TextMessageStartEvent(message_id="m", role="assistant", timestamp=BASE_TS),
              TextMessageContentEvent(message_id="m", delta="x" * 5000, timestamp=BASE_TS))  # fmt: skip
    assert offer(projection, opened, 0, timestamp_ms=BASE_TS, ended=False) is None


def test_a_withheld_record_is_retried_at_the_next_interval_not_with_every_record() -> None:
    projection = DisplayProjection("run-w", "thread-w", interval_ms=1000, max_bytes=4096)
    _too_big(projection)
    assert projection.withheld == 1 and projection.published_seq == -1
    more = (TextMessageContentEvent(message_id="m", delta="y", timestamp=BASE_TS),)
    assert offer(projection, more, 2, timestamp_ms=BASE_TS + 500, ended=False) is None
    assert projection.withheld == 1, "not due again within the interval"
    assert offer(projection, more, 3, timestamp_ms=BASE_TS + 1000, ended=False) is None
    assert projection.withheld == 2, "due again one interval after the withheld one"
    record = offer(projection, (TextMessageEndEvent(message_id="m", timestamp=BASE_TS),), 4,
                              timestamp_ms=BASE_TS + 1001, ended=True)  # fmt: skip
    assert record is not None and record.agui_seq == 4


def test_the_attempted_record_survives_export_and_restore() -> None:
    projection = DisplayProjection("run-w", "thread-w", interval_ms=1000, max_bytes=4096)
    _too_big(projection)
    state = projection.export()
    assert (state["published_seq"], state["attempted_seq"], state["anchor_ms"]) == (-1, 1, BASE_TS)
    more = (TextMessageContentEvent(message_id="m", delta="y", timestamp=BASE_TS),)
    restored = DisplayProjection.restore(state)
    assert restored.export() == state
    for each in (projection, restored):
        assert offer(each, more, 2, timestamp_ms=BASE_TS + 500, ended=False) is None, "not due within the interval"
    assert restored.export() == projection.export() and restored.withheld == 1


def test_a_state_without_attempted_seq_resumes_from_the_last_published_record() -> None:
    projection = DisplayProjection("run-o", "thread-o", interval_ms=1000)
    first = (TextMessageStartEvent(message_id="m", role="assistant", timestamp=BASE_TS),)
    assert offer(projection, first, 0, timestamp_ms=BASE_TS, ended=False) is not None
    state = projection.export()
    del state["attempted_seq"]
    restored = DisplayProjection.restore(state)
    assert restored.export() == projection.export()
