"""The documented example: export mid-message as JSON, restore, finish; same as never interrupted."""

from __future__ import annotations

from tests.display._events import BASE_TS, text
from worker.display import DisplayFold, DisplaySnapshot

MESSAGE = "run-example:request-0:part-0:text"
HEAD = [text("START", MESSAGE, BASE_TS), text("CONTENT", MESSAGE, BASE_TS + 1, "Hello")]
TAIL = [text("CONTENT", MESSAGE, BASE_TS + 2, " world"), text("END", MESSAGE, BASE_TS + 3)]


def test_restore_mid_message_equals_uninterrupted_fold() -> None:
    whole = DisplayFold("run-example")
    whole_records = whole.fold(HEAD + TAIL)

    first = DisplayFold("run-example")
    head_records = first.fold(HEAD)
    cut = first.export().model_dump_json()
    [open_item] = DisplaySnapshot.model_validate_json(cut).items
    assert open_item.state == "in_progress" and open_item.content["text"] == "Hello"
    assert open_item.ended_at is None

    resumed = DisplayFold.restore(DisplaySnapshot.model_validate_json(cut))
    tail_records = resumed.fold(TAIL)

    assert resumed.export() == whole.export()
    assert resumed.export().model_dump_json() == whole.export().model_dump_json()
    assert head_records + tail_records == whole_records
    [item] = resumed.export().items
    assert item.content["text"] == "Hello world"
    assert item.state == "completed"
    assert item.kind == "text_message" and item.ordinal == 1
    assert (item.first_stream_id, item.last_stream_id) == ("0-1", "0-4")
    assert [record.sequence for record in tail_records] == [3, 4]


def test_export_does_not_close_or_change_open_items() -> None:
    fold = DisplayFold("run-example")
    fold.fold(HEAD)
    before = fold.export()
    again = fold.export()
    assert before == again
    assert [item.state for item in again.items] == ["in_progress"]
    assert again.continuation.position.sequence == 2
