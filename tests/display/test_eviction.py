"""A display record never exceeds the topic's limit: finished items are evicted oldest first, stated in the
snapshot, and the fold continues after them; a snapshot that cannot fit is withheld, never cut."""

from __future__ import annotations

import pytest
from ag_ui.core import TextMessageContentEvent, TextMessageEndEvent, TextMessageStartEvent

from tests.display._events import BASE_TS, args_delta
from tests.display._flows import lines_of, offer, project, reference_at_items
from worker.display import DisplayFold, DisplayProjection, DisplaySnapshot
from worker.errors import ConfigError
from worker.stream import Destination, OutboundRecord, record_size

LIMIT = 16_384


@pytest.mark.parametrize("run", ["synthetic/long", "r0002", "r0014", "s09_big_fragments"])
def test_records_fit_and_state_what_was_evicted(run: str) -> None:
    lines = lines_of(run)
    reference = reference_at_items(lines)
    records = project(lines, interval_ms=1000, max_bytes=LIMIT)
    before = 0
    for record in records:
        sent = OutboundRecord(Destination.DISPLAY, record.key, record.value, record.headers, None, None)
        assert record_size(sent) <= LIMIT, "the bytes the producer counts for the record alone"
        snapshot = DisplaySnapshot.model_validate_json(record.value)
        whole = DisplaySnapshot.model_validate_json(reference[record.agui_seq])
        assert snapshot.continuation.next_ordinal == whole.continuation.next_ordinal, "ordinals go on"
        evicted = snapshot.evicted
        count = 0 if evicted is None else evicted.count
        assert count - before == record.evicted
        before = count
        if evicted is None:
            assert snapshot.items == whole.items
            continue
        gone = {o for low, high in evicted.ordinals for o in range(low, high + 1)}
        assert len(gone) == evicted.count
        by_ordinal = {item.ordinal: item for item in whole.items}
        assert {by_ordinal[o].id for o in gone if by_ordinal[o].kind != "observation"} == set(evicted.ids)
        assert [item for item in whole.items if item.ordinal not in gone] == snapshot.items
        if record.evicted:
            newest = max(gone)
            assert all(item.ordinal > newest for item in snapshot.items if item.state in ("completed", "failed"))


def test_a_late_change_to_an_evicted_item_is_refused_and_counted() -> None:
    lines = lines_of("synthetic/long")
    final = DisplaySnapshot.model_validate_json(project(lines, interval_ms=1000, max_bytes=LIMIT)[-1].value)
    whole = DisplaySnapshot.model_validate_json(reference_at_items(lines)[max(reference_at_items(lines))])
    [call_0] = [item for item in whole.items if item.content.get("toolCallId") == "call_0"]
    assert "applied_edit" in call_0.content, "convert --display applies the late supplement"
    assert final.evicted is not None and call_0.id in final.evicted.ids
    assert final.evicted.refused == 1
    assert all(item.id != call_0.id for item in final.items), "the evicted item is not recreated"


def test_an_open_item_too_big_to_fit_withholds_the_record_until_the_run_ends() -> None:
    projection = DisplayProjection("run-t", "thread-t", interval_ms=0, max_bytes=4096)
    opened = (TextMessageStartEvent(message_id="m", role="assistant", timestamp=BASE_TS),
              TextMessageContentEvent(message_id="m", delta="x" * 5000, timestamp=BASE_TS))  # fmt: skip
    assert offer(projection, opened, 0, timestamp_ms=BASE_TS, ended=False) is None
    assert projection.withheld == 1 and projection.published_seq == -1
    record = offer(projection, (TextMessageEndEvent(message_id="m", timestamp=BASE_TS + 1),), 2,
                              timestamp_ms=BASE_TS + 1, ended=True)  # fmt: skip
    assert record is not None and record.agui_seq == 2 and record.evicted == 1
    snapshot = DisplaySnapshot.model_validate_json(record.value)
    assert snapshot.items == [] and snapshot.evicted is not None and snapshot.evicted.ordinals == [(1, 1)]


def test_only_finished_items_and_no_growing_argument_stream_are_evictable() -> None:
    fold = DisplayFold("run-t")
    fold.apply([TextMessageStartEvent(message_id="m", role="assistant").model_dump(mode="json", by_alias=True),
                args_delta(1, '{"a"', BASE_TS)])  # fmt: skip
    [text_id, stream_id] = list(fold.items)
    assert fold.evictable() == []
    with pytest.raises(ConfigError, match="cannot be evicted"):
        fold.evict([stream_id])
    assert fold.evictable(ended=True) == [text_id, stream_id]
    fold.apply([TextMessageEndEvent(message_id="m").model_dump(mode="json", by_alias=True)])
    assert fold.evictable() == [text_id, stream_id], "another event came between: the stream cannot grow"
    assert fold.evict([stream_id]) == 1
    evicted = fold.evicted
    assert evicted is not None and (evicted.count, evicted.ordinals, evicted.ids) == (1, [(2, 2)], [])
    restored = DisplayFold.restore(DisplaySnapshot.model_validate_json(fold.export().model_dump_json()))
    assert restored.export() == fold.export()
