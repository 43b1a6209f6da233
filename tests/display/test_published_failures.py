"""A tool failure read from the output topic's CUSTOM event equals the one read from the source item, except for
the one answer the payload-free projection cannot tell from media; bounds applied to event JSON equal
`bound_event`."""

from __future__ import annotations

from typing import Any

import pytest
from ag_ui.core import (
    AudioPart,
    DataSource,
    DocumentPart,
    ImagePart,
    TextPart,
    ToolCallArgsEvent,
    ToolCallResultEvent,
    UrlSource,
    VideoPart,
)

from tests.display._synthetic import BIG, BINARY, DATA_IMAGE, HTTP_IMAGE, LOOKALIKE, UPLOADED
from worker.display import bound_event, bound_event_json
from worker.observe import encode_event, public_tool_result_content, public_value, tool_result_content

VALUES: list[Any] = [
    "plain text",
    {"error": "x", "code": 3},
    [1, "two", None],
    HTTP_IMAGE,
    DATA_IMAGE,
    BINARY,
    UPLOADED,
    [BINARY, "caption"],
    [HTTP_IMAGE, DATA_IMAGE, BINARY, UPLOADED, {"note": [BINARY]}],
    [{"nested": BINARY}],
    [LOOKALIKE, BINARY],
    [],
]


def _dumped(content: Any) -> Any:
    return content if isinstance(content, str) else [part.model_dump(mode="json") for part in content]


@pytest.mark.parametrize("value", VALUES)
def test_public_content_reads_back_as_the_source_content(value: Any) -> None:
    assert _dumped(public_tool_result_content(public_value(value))) == _dumped(tool_result_content(value))


@pytest.mark.parametrize("value", [LOOKALIKE, [LOOKALIKE], [LOOKALIKE, "text"]])
def test_a_plain_answer_shaped_as_payload_free_media_is_the_exception(value: Any) -> None:
    assert isinstance(tool_result_content(value), str)
    assert isinstance(public_tool_result_content(public_value(value)), list)


@pytest.mark.parametrize(
    "event",
    [
        ToolCallResultEvent(message_id="m", tool_call_id="c", content=BIG),
        ToolCallResultEvent(message_id="m", tool_call_id="c", content="short"),
        ToolCallResultEvent(message_id="m", tool_call_id="c", content=[TextPart(text=BIG)]),
        ToolCallResultEvent(message_id="m", tool_call_id="c", content=[TextPart(text="ok")], role="tool"),
        ToolCallArgsEvent(tool_call_id="c", delta=BIG),
        ToolCallArgsEvent(tool_call_id="c", delta="{}"),
    ],
)
def test_bound_event_json_equals_bound_event(event: Any) -> None:
    data = event.model_dump(mode="json", by_alias=True)
    bounded = bound_event_json(data)
    assert bounded == bound_event(event).model_dump(mode="json", by_alias=True)
    assert (bounded is data) == (bound_event(event) is event)


_SMALLEST_PARTS: list[Any] = [
    TextPart(text=""),
    ImagePart(source=UrlSource(value="")),
    ImagePart(source=DataSource(value="", mime_type="a")),
    AudioPart(source=UrlSource(value="")),
    VideoPart(source=UrlSource(value="")),
    DocumentPart(source=UrlSource(value="")),
]


@pytest.mark.parametrize("part", _SMALLEST_PARTS, ids=lambda part: type(part).__name__)
def test_what_bound_event_measures_stays_within_eight_times_the_published_bytes(part: Any) -> None:
    """The premise of `bound_event_json`'s shortcut for a result published in few bytes."""
    event = ToolCallResultEvent(message_id="m", tool_call_id="c", content=[part] * 50)
    assert len(event.model_dump_json()) <= 8 * len(encode_event(event))


@pytest.mark.parametrize("parts", [1, 1_500, 6_000])
def test_bound_event_json_given_the_published_size_equals_bound_event(parts: int) -> None:
    event = ToolCallResultEvent(
        message_id="m", tool_call_id="c", content=[TextPart(text="twenty characters...")] * parts
    )
    data = event.model_dump(mode="json", by_alias=True)
    bounded = bound_event_json(data, len(encode_event(event)))
    assert bounded == bound_event(event).model_dump(mode="json", by_alias=True)
    assert (bounded is data) == (bound_event(event) is event)
