"""The native AG-UI event types write every event byte for byte as `encode_event` does: each event the observers
make from every golden run (both observers), and generated events holding the values whose spelling differs
between encoders (floats, integers beyond 64 bits, control and non-ASCII characters)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    RunErrorEvent,
    RunFinishedEvent,
    TextMessageStartEvent,
    TextPart,
    ToolCallResultEvent,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.native import native_core
from worker.errors import DecodeError
from worker.observe import HarnessAguiObserver, HarnessAguiStreamObserver, encode_event
from worker.wire import decode_item

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden"
SOURCES = sorted(p for p in GOLDEN.rglob("*.jsonl") if ".agui." not in p.name and ".display." not in p.name)


def _events(path: Path, observer: HarnessAguiObserver) -> list[BaseEvent]:
    out: list[BaseEvent] = []
    for line in path.read_bytes().splitlines():
        try:
            out.extend(observer.observe(decode_item(line)))
        except (DecodeError, ValueError, TypeError):
            continue  # refused lines make no events
    return out


def test_every_event_of_the_golden_runs_encodes_identically() -> None:
    core = native_core()
    checked = 0
    for path in SOURCES:
        for observer in (HarnessAguiStreamObserver(retain_events=False), HarnessAguiObserver(retain_events=False)):
            for event in _events(path, observer):
                assert core.encode_event(event) == encode_event(event), (path.name, event)
                checked += 1
    assert checked > 5000


_KEYS = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8)
_JSON: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(alphabet=st.characters(exclude_categories=["Cs"])),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=20,
)


@st.composite
def _generated(draw: st.DrawFn) -> BaseEvent:
    kind = draw(st.sampled_from(["custom", "finished", "error", "result", "start"]))
    stamp = draw(st.none() | st.integers(min_value=0, max_value=2**53 - 1))
    text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
    if kind == "custom":
        return CustomEvent(timestamp=stamp, name=draw(text), value=draw(_JSON), subagent_run_id=draw(st.none() | text))
    if kind == "finished":
        return RunFinishedEvent(timestamp=stamp, thread_id=draw(text), run_id=draw(text), result=draw(_JSON),
                                raw_event=draw(_JSON))
    if kind == "error":
        return RunErrorEvent(timestamp=stamp, message=draw(text), code=draw(st.none() | text),
                             raw_event=draw(st.dictionaries(_KEYS, _JSON, max_size=3)))
    if kind == "result":
        content: Any = draw(text) if draw(st.booleans()) else [TextPart(text=draw(text))]
        return ToolCallResultEvent(timestamp=stamp, message_id=draw(text), tool_call_id=draw(text), content=content,
                                   role="tool")
    return TextMessageStartEvent(timestamp=stamp, message_id=draw(text), role="assistant",
                                 metadata=draw(st.none() | st.dictionaries(_KEYS, _JSON, max_size=3)))


@settings(max_examples=400, deadline=None)
@given(_generated())
def test_generated_events_encode_identically(event: BaseEvent) -> None:
    assert native_core().encode_event(event) == encode_event(event)


@pytest.mark.parametrize("value", [1e-7, 1e-5, 2.5e-5, 1e16, 1e15, -0.0, 5e-324, 1.7976931348623157e308, 0.1, 2**64,
                                   -(2**63) - 1, "\u2028\ufeff\x00\x1f\x7f\"\\/<", {"b": 1, "a": [None, True]}])
def test_values_the_encoders_could_spell_differently(value: Any) -> None:
    event = CustomEvent(timestamp=1, name="x", value={"v": value})
    assert native_core().encode_event(event) == encode_event(event)


def test_an_event_with_extra_fields_is_left_to_the_python_encoder() -> None:
    event = CustomEvent(timestamp=1, name="x", value=None, unexpected=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="extra fields"):
        native_core().encode_event(event)
