"""encode_event writes exactly what ag-ui's pydantic dump writes, for any JSON value in any field."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    EventType,
    RunErrorEvent,
    RunFinishedEvent,
    SubagentFinishedEvent,
    TextMessageContentEvent,
    ToolCallResultEvent,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.observe._runs import decode_all, wire_runs
from worker.errors import AguiObservationError, DecodeError
from worker.observe import HarnessAguiStreamObserver, encode_event, encode_event_data, loads_exact
from worker.wire import decode_item

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)


def _expected(event: BaseEvent) -> bytes:
    return event.model_dump_json(by_alias=True, exclude_none=True).encode()


@settings(max_examples=300, deadline=None)
@given(value=st.dictionaries(st.text(max_size=5), JSON, max_size=4), sub=st.none() | st.text(max_size=5))
def test_custom_values(value: dict[str, Any], sub: str | None) -> None:
    event = CustomEvent(timestamp=1, name="n", value=value, subagent_run_id=sub)
    assert encode_event(event) == _expected(event)


@settings(max_examples=200, deadline=None)
@given(result=JSON, raw=st.dictionaries(st.text(max_size=3), JSON, max_size=3), text=st.text())
def test_run_finished_and_text(result: Any, raw: dict[str, Any], text: str) -> None:
    finished = RunFinishedEvent(timestamp=2, thread_id="t", run_id="r", result=result, raw_event=raw)
    assert encode_event(finished) == _expected(finished)
    content = TextMessageContentEvent(timestamp=3, message_id="m", delta=text)
    assert encode_event(content) == _expected(content)


def test_tricky_floats_and_big_integers() -> None:
    values = [1e16, 1e-7, 1e15, 2.5e-5, 5e-324, 1.7976931348623157e308, -0.0, 0.1 + 0.2, 2**64, -(2**90)]
    event = CustomEvent(timestamp=1, name="n", value={"v": values})
    assert encode_event(event) == _expected(event)
    assert b"1e+16" in encode_event(event) and b"1e-7" in encode_event(event)


TEXT = st.text(max_size=6)
OPT_TEXT = st.none() | TEXT
USAGE = st.lists(
    st.fixed_dictionaries({}, optional={"provider": OPT_TEXT, "inputTokens": st.none() | st.integers(0, 10**6),
                                        "model": OPT_TEXT, "totalTokens": st.integers(0, 10**6)}),
    max_size=2,
)  # fmt: skip
INTERRUPT = st.fixed_dictionaries(
    {"id": TEXT, "reason": TEXT},
    optional={"message": OPT_TEXT, "toolCallId": OPT_TEXT, "metadata": st.none() | st.dictionaries(TEXT, JSON)},
)
RUN_OUTCOME = st.none() | st.sampled_from([{"type": "cancelled"}, {"type": "success"}]) | st.fixed_dictionaries(
    {"type": st.just("success"), "pendingToolCallIds": st.none() | st.lists(TEXT, max_size=2)}
) | st.fixed_dictionaries({"type": st.just("interrupt"), "interrupts": st.lists(INTERRUPT, min_size=1, max_size=2)})
SUBAGENT_OUTCOME = st.none() | st.just({"type": "success"}) | st.fixed_dictionaries(
    {"type": st.just("suspended")}, optional={"interruptIds": st.none() | st.lists(TEXT, max_size=2)}
)
SOURCE = st.fixed_dictionaries({"type": st.just("data"), "value": TEXT, "mimeType": TEXT}) | st.fixed_dictionaries(
    {"type": st.just("url"), "value": TEXT}, optional={"mimeType": OPT_TEXT}
)
MEDIA = st.sampled_from(["image", "audio", "video", "document"])
PART = st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}, optional={"id": OPT_TEXT, "metadata": JSON}) | (
    st.fixed_dictionaries({"type": MEDIA, "source": SOURCE}, optional={"id": OPT_TEXT})
)


@settings(max_examples=300, deadline=None)
@given(
    outcome=RUN_OUTCOME, usage=st.none() | USAGE, sub_outcome=SUBAGENT_OUTCOME, result=JSON,
    content=TEXT | st.lists(PART, max_size=3), extra=st.none() | st.dictionaries(st.sampled_from(["zz", "x"]), JSON),
)  # fmt: skip
def test_events_holding_ag_ui_models(
    outcome: Any, usage: Any, sub_outcome: Any, result: Any, content: Any, extra: dict[str, Any] | None
) -> None:
    """Nested models (outcomes, token usage, content parts) are written as pydantic writes them, extras too."""
    events = [
        RunFinishedEvent.model_validate(
            {"threadId": "t", "runId": "r", "result": result, "outcome": outcome, "usage": usage, **(extra or {})}
        ),
        RunErrorEvent.model_validate({"message": "m", "usage": usage}),
        SubagentFinishedEvent.model_validate({"subagentRunId": "s", "outcome": sub_outcome, "result": result}),
        ToolCallResultEvent.model_validate({"messageId": "m", "toolCallId": "c", "content": content}),
    ]
    for event in events:
        assert encode_event(event) == _expected(event)


# ---- encode_event_data: the encoding and the JSON object it parses back into ---------------------------------------


def _parsed(event: BaseEvent) -> dict[str, Any]:
    parsed: dict[str, Any] = loads_exact(encode_event(event))
    return parsed


def event_data(event: BaseEvent, *, plain: bool = False) -> dict[str, Any] | None:
    value, data = encode_event_data(event, plain=plain)
    assert value == encode_event(event)
    return data


@settings(max_examples=300, deadline=None)
@given(value=st.dictionaries(st.text(max_size=5), JSON, max_size=4), sub=st.none() | st.text(max_size=5))
def test_the_data_is_what_parsing_the_encoding_gives(value: dict[str, Any], sub: str | None) -> None:
    event = CustomEvent(timestamp=1, name="n", value=value, subagent_run_id=sub)
    data = event_data(event)
    assert data == _parsed(event)
    assert data is not None and list(data) == list(_parsed(event)), "in the same field order"
    assert type(data["type"]) is str


@pytest.mark.parametrize(
    "value",
    [(1, 2), [float("nan")], {"x": float("inf")}, {1: "key"}, {"when": datetime.now(UTC)}, [EventType.CUSTOM],
     {"nested": [{"deep": ("tuple",)}]}],
    ids=["tuple", "nan", "infinity", "int-key", "datetime", "enum", "nested-tuple"],
)  # fmt: skip
def test_the_data_is_refused_where_parsing_would_change_it(value: Any) -> None:
    event = CustomEvent(timestamp=1, name="n", value=value)
    assert event_data(event) is None
    assert event_data(event, plain=True) is not None, "a caller may vouch for its values instead"


def test_a_lone_surrogate_fails_the_encoding_and_the_data_alike() -> None:
    event = CustomEvent(timestamp=1, name="n", value="lone \udc80 surrogate")
    with pytest.raises(ValueError, match="surrogates not allowed"):
        encode_event(event)
    with pytest.raises(ValueError, match="surrogates not allowed"):
        encode_event_data(event)


def test_the_data_of_models_and_big_integers() -> None:
    events = [
        CustomEvent(timestamp=1, name="n", value={"v": [2**64, -(2**90), 1e16, -0.0]}),
        ToolCallResultEvent.model_validate({"messageId": "m", "toolCallId": "c", "content": [
            {"type": "text", "text": "a"}, {"type": "image", "source": {"type": "url", "value": "u"}}]}),
        RunFinishedEvent.model_validate({"threadId": "t", "runId": "r", "outcome": {"type": "success"}}),
    ]  # fmt: skip
    for event in events:
        assert event_data(event) == _parsed(event)


GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden"
SOURCE_RUNS = sorted(path for path in GOLDEN.glob("**/*.jsonl") if path.name.count(".") == 1)


@pytest.mark.parametrize("path", SOURCE_RUNS, ids=lambda path: path.stem)
def test_the_observers_events_hold_plain_json_data(path: Path) -> None:
    """What the default core relies on to skip the check (`encode_event_data(..., plain=True)`)."""
    observer = HarnessAguiStreamObserver(retain_events=False)
    for line in path.read_bytes().split(b"\n"):
        if not line.strip() or line.startswith(b"#"):
            continue
        with contextlib.suppress(DecodeError, AguiObservationError, ValidationError, TypeError):
            for event in observer.observe(decode_item(line)):
                assert event_data(event) == _parsed(event)


@settings(max_examples=150, deadline=None)
@given(run=wire_runs())
def test_the_observers_events_hold_plain_json_data_in_any_run(run: list[dict[str, Any]]) -> None:
    observer = HarnessAguiStreamObserver(retain_events=False)
    for item in decode_all(run):
        with contextlib.suppress(AguiObservationError, ValidationError, TypeError):
            for event in observer.observe(item):
                assert event_data(event) == _parsed(event)
