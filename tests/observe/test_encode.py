"""encode_event writes exactly what ag-ui's pydantic dump writes, for any JSON value in any field."""

from __future__ import annotations

from typing import Any

from ag_ui.core import BaseEvent, CustomEvent, RunFinishedEvent, TextMessageContentEvent
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.observe import encode_event

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
