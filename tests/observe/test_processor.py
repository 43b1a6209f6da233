"""The processor contract: listed mutable fields may change, anything else is one of five violations."""

from __future__ import annotations

from typing import Any

import pytest
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    EventType,
    RunFinishedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextPart,
)

from tests.observe._items import (
    extension,
    started,
    terminal,
    text_delta,
    text_start,
    thinking_delta,
    tool_end,
    tool_result,
)
from worker.errors import AguiObservationError
from worker.observe import HarnessAguiStreamObserver, encode_event
from worker.observe._processor import validate_replacement
from worker.wire import HarnessItem


def _with(event_type: EventType, **changes: Any):
    def processor(_: HarnessItem, event: BaseEvent) -> BaseEvent:
        return event.model_copy(update=changes) if event.type == event_type else event

    return processor


def _observe_all(processor: Any, items: list[HarnessItem]) -> list[BaseEvent]:
    observer = HarnessAguiStreamObserver(processor=processor)
    out: list[BaseEvent] = []
    for item in items:
        out.extend(observer.observe(item))
    return out


@pytest.mark.parametrize(
    ("event_type", "field", "value", "items"),
    [
        (EventType.TEXT_MESSAGE_CONTENT, "delta", "HI", [text_delta(1)]),
        (EventType.REASONING_MESSAGE_CONTENT, "delta", "HM", [thinking_delta(1)]),
        (EventType.REASONING_ENCRYPTED_VALUE, "encrypted_value", "sig2", [thinking_delta(1, signature="s")]),
        (EventType.TOOL_CALL_ARGS, "delta", "{}", [tool_end(1)]),
        (EventType.TOOL_CALL_RESULT, "content", "redacted", [tool_result(1)]),
        (EventType.TOOL_CALL_RESULT, "content", [TextPart(text="part")], [tool_result(1)]),
        (EventType.RUN_FINISHED, "result", {"other": True}, [terminal(1)]),
        (EventType.RUN_ERROR, "message", "Hidden.", [terminal(1, "failed")]),
    ],
)
def test_mutable_field_changes_are_published(event_type: EventType, field: str, value: Any, items: list) -> None:
    events = _observe_all(_with(event_type, **{field: value}), [started(), *items])
    changed = [e for e in events if e.type == event_type]
    assert len(changed) == 1
    assert getattr(changed[0], field) == value


def test_dropping_events_removes_them_and_fragment_ids_count_after_drops() -> None:
    big = extension(1, payload={"type": "big", "text": "x" * 60_000})

    def drop_text(_: HarnessItem, event: BaseEvent) -> BaseEvent | None:
        return None if event.type == EventType.TEXT_MESSAGE_START else event

    events = _observe_all(drop_text, [started(), text_delta(2), big])
    assert [e.type for e in events].count(EventType.TEXT_MESSAGE_START) == 0
    assert any(e.type == EventType.TEXT_MESSAGE_CONTENT for e in events)
    frames = [e for e in events if isinstance(e, CustomEvent) and e.name == "a13n.stream.fragment"]
    assert frames and all(f.value["id"] == "thread_t:run-t:1:0" for f in frames)
    assert "".join(f.value["data"] for f in frames).startswith('{"type":"CUSTOM"')

    def drop_custom(_: HarnessItem, event: BaseEvent) -> BaseEvent | None:
        return None if isinstance(event, CustomEvent) else event

    assert _observe_all(drop_custom, [started(), big]) == _observe_all(drop_custom, [started()])


def _violation(processor: Any, items: list[HarnessItem], message: str) -> None:
    def on_content(item: HarnessItem, event: BaseEvent) -> Any:
        return processor(item, event) if event.type == EventType.TEXT_MESSAGE_CONTENT else event

    observer = HarnessAguiStreamObserver(processor=on_content)
    observer.observe(started())
    before = (observer.export(), observer.event_count)
    for item in items:
        with pytest.raises(AguiObservationError, match=message):
            observer.observe(item)
    assert (observer.export(), observer.event_count) == before


def test_non_agui_value_is_refused() -> None:
    _violation(lambda _i, e: e.model_dump(), [text_delta(1)], "returned a non-AG-UI value")


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_invalid_event_is_refused() -> None:
    def broken(_: HarnessItem, event: BaseEvent) -> BaseEvent:
        return TextMessageContentEvent.model_construct(timestamp="soon", message_id=1, delta="x")

    _violation(broken, [text_delta(1)], "returned an invalid AG-UI event")


def test_changed_type_is_refused() -> None:
    def end_instead(_: HarnessItem, event: BaseEvent) -> BaseEvent:
        return TextMessageEndEvent(timestamp=event.timestamp, message_id="m")

    _violation(end_instead, [text_delta(1)], "changed the AG-UI event type")


@pytest.mark.parametrize(
    ("event_type", "changes", "field"),
    [
        (EventType.TEXT_MESSAGE_CONTENT, {"message_id": "other"}, "message_id"),
        (EventType.TEXT_MESSAGE_CONTENT, {"timestamp": 1}, "timestamp"),
        (EventType.TEXT_MESSAGE_START, {"delta": "x"}, "delta"),
        (EventType.CUSTOM, {"name": "renamed"}, "name"),
        (EventType.CUSTOM, {"value": {"thread_id": "thread_t"}}, "value"),
        (EventType.RUN_FINISHED, {"outcome": None}, "outcome"),
        (EventType.TEXT_MESSAGE_CONTENT, {"subagent_run_id": "run-x"}, "subagent_run_id"),
    ],
)
def test_structural_changes_are_refused(event_type: EventType, changes: dict[str, Any], field: str) -> None:
    items = [text_start(1, content="x"), text_delta(2), extension(3), terminal(4)]
    observer = HarnessAguiStreamObserver(processor=_with(event_type, **changes))
    observer.observe(started())
    raised = []
    for item in items:
        try:
            observer.observe(item)
        except AguiObservationError as exc:
            raised.append(str(exc))
    assert raised
    assert set(raised) == {f"The event processor changed structural field {field}"}


def test_changed_source_correlation_is_refused() -> None:
    original = RunFinishedEvent(timestamp=1, raw_event={"thread_id": "t", "sequence": 1}, thread_id="t", run_id="r")
    replacement = original.model_copy(update={"raw_event": {"thread_id": "t", "sequence": 2}})
    with pytest.raises(AguiObservationError, match="changed sequence source correlation"):
        validate_replacement.__globals__["_check_correlation"](original, replacement)


def test_processor_exception_propagates_unwrapped_and_leaves_no_trace() -> None:
    class Boom(RuntimeError):
        pass

    calls = []

    def explode(item: HarnessItem, event: BaseEvent) -> BaseEvent:
        calls.append(event.type)
        if item.sequence == 2 and event.type == EventType.TEXT_MESSAGE_CONTENT:
            raise Boom("no")
        return event

    observer = HarnessAguiStreamObserver(processor=explode)
    observer.observe(started())
    observer.observe(text_start(1))
    before = (observer.export(), observer.event_count)
    with pytest.raises(Boom):
        observer.observe(text_delta(2))
    assert (observer.export(), observer.event_count) == before
    assert EventType.TEXT_MESSAGE_CONTENT in calls


def test_processor_gets_a_copy_and_published_events_are_detached() -> None:
    seen: list[BaseEvent] = []

    def keep(_: HarnessItem, event: BaseEvent) -> BaseEvent:
        seen.append(event)
        return event

    observer = HarnessAguiStreamObserver(processor=keep)
    observer.observe(started())
    (event,) = observer.observe(text_delta(1, text="abc"))[1:]
    seen[-1].delta = "mutated after return"  # type: ignore[attr-defined]
    event.delta = "mutated by caller"  # type: ignore[attr-defined]
    assert [encode_event(e) for e in observer.snapshot()][-1].endswith(b'"delta":"abc"}')
