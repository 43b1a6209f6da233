"""An open run's native display holds each finished item in its written form: nothing more than writing a record
of its items leaves behind, so an open run between records costs what it costs right after one."""

from __future__ import annotations

import orjson
import pytest
from ag_ui.core import BaseEvent, CustomEvent, TextMessageContentEvent, TextMessageEndEvent, TextMessageStartEvent

from tests.display._events import BASE_TS, args_delta
from tests.display._flows import offer
from worker.display import DisplayProjection
from worker.display._native_projection import NativeDisplayProjection


def _held(events: list[BaseEvent]) -> tuple[int, int]:
    """The engine's heap after the events, and after writing its items (its exported state)."""
    projection = DisplayProjection("run-t", "thread_t", interval_ms=60_000)
    assert isinstance(projection, NativeDisplayProjection)
    offer(projection, events[:1], 0, timestamp_ms=BASE_TS, ended=False)  # the run's first record is due here
    for n, event in enumerate(events[1:], start=1):
        offer(projection, (event,), n, timestamp_ms=BASE_TS, ended=False)
    held = projection.heap_bytes()
    projection.export_json()
    return held, projection.heap_bytes()


def test_a_finished_argument_stream_is_held_written_once_another_event_follows(build: str) -> None:
    if build == "pure":
        pytest.skip("the reference holds Python objects: heap_bytes is the native engine's")
    start = TextMessageStartEvent(message_id="m0", role="assistant", timestamp=BASE_TS)
    stream = [CustomEvent.model_validate(args_delta(1, '{"path": "' + "a" * 400 * n, BASE_TS, n)) for n in (1, 2, 3)]
    after = TextMessageStartEvent(message_id="m1", role="assistant", timestamp=BASE_TS)
    held, written = _held([start, *stream, after])
    assert held <= written  # writing keeps the open message's JSON beside its content
    growing, written = _held([start, *stream])
    assert growing > written, "a stream the next event may still grow keeps its content"


def test_an_open_item_is_held_once_after_a_record_wrote_it(build: str) -> None:
    if build == "pure":
        pytest.skip("the reference holds Python objects: heap_bytes is the native engine's")
    held = []
    for interval_ms in (0, 60_000):  # a record after every event, or after the first only
        projection = DisplayProjection("run-t", "thread_t", interval_ms=interval_ms)
        assert isinstance(projection, NativeDisplayProjection)
        offer(projection, (TextMessageStartEvent(message_id="m", role="assistant"),), 0, timestamp_ms=BASE_TS,
              ended=False)  # fmt: skip
        record = offer(projection, (TextMessageContentEvent(message_id="m", delta="x" * 4000),), 1,
                       timestamp_ms=BASE_TS, ended=False)  # fmt: skip
        assert (record is not None) == (interval_ms == 0)
        held.append(projection.heap_bytes())
    assert held[0] == held[1], "the record of the open message left its JSON behind"


def test_finished_items_are_held_in_fewer_bytes_than_their_json(build: str) -> None:
    """A finished item keeps its JSON from its content on, in one allocation with its id, and its ordinal, stream
    ids and times as numbers: less than its JSON, whose head spells them out."""
    if build == "pure":
        pytest.skip("the reference holds Python objects: heap_bytes is the native engine's")
    notes = [CustomEvent(name="x.note", value={"n": n}, timestamp=BASE_TS) for n in range(200)]
    projection = DisplayProjection("run-t", "thread_t", interval_ms=60_000)
    assert isinstance(projection, NativeDisplayProjection)
    for n, event in enumerate(notes):
        offer(projection, (event,), n, timestamp_ms=BASE_TS, ended=False)
    items = orjson.loads(projection.export_json())["fold"]["items"]
    assert len(items) == len(notes)
    assert projection.heap_bytes() < sum(len(orjson.dumps(item)) for item in items)


@pytest.mark.parametrize("interval_ms", [0, 60_000])  # a record after every event (one reads the item as it
def test_a_long_finished_item_is_held_packed(build: str, interval_ms: int) -> None:  # finishes), or the first only
    """A finished item whose JSON from its content on is 1 KiB or more is held packed (LZ4; deflate from 4 KiB on,
    once the offer that finished it returns), its bytes the same when written: a text of repeated words in a
    fraction of its length."""
    if build == "pure":
        pytest.skip("the reference holds Python objects: heap_bytes is the native engine's")
    text = " ".join(["the quick brown fox jumps over the lazy dog"] * 200)
    projection = DisplayProjection("run-t", "thread_t", interval_ms=interval_ms)
    assert isinstance(projection, NativeDisplayProjection)
    events = (
        TextMessageStartEvent(message_id="m", role="assistant"),
        TextMessageContentEvent(message_id="m", delta=text),
        TextMessageEndEvent(message_id="m"),
    )
    records = [offer(projection, (event,), n, timestamp_ms=BASE_TS, ended=False) for n, event in enumerate(events)]
    assert projection.heap_bytes() < len(text) // 4
    if interval_ms == 0:
        assert records[-1] is not None
        (item,) = orjson.loads(records[-1].value)["items"]
        assert item["state"] == "completed"
        assert item["content"]["text"] == text
    (item,) = orjson.loads(projection.export_json())["fold"]["items"]
    assert item["state"] == "completed"
    assert item["content"]["text"] == text
    assert projection.heap_bytes() < len(text) // 4
