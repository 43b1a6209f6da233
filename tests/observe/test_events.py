"""`new_event` builds what the model's constructor builds, and only models it may stand in for exist."""

from __future__ import annotations

import inspect

import ag_ui.core
import pytest
from ag_ui.core import BaseEvent, CustomEvent, TextMessageContentEvent, ToolCallStartEvent
from pydantic import BaseModel, ValidationError

from worker.observe._events import new_event

EVENT_CLASSES = [
    obj for obj in vars(ag_ui.core).values() if inspect.isclass(obj) and issubclass(obj, BaseEvent)
]


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda cls: cls.__name__)
def test_no_ag_ui_event_has_its_own_constructor_or_post_init(cls: type[BaseEvent]) -> None:
    assert cls.__init__ is BaseModel.__init__
    assert cls.model_post_init is BaseModel.model_post_init


@pytest.mark.parametrize(
    ("cls", "fields"),
    [
        (TextMessageContentEvent, {"timestamp": 1, "message_id": "m", "delta": "hi"}),
        (ToolCallStartEvent, {"timestamp": 2, "tool_call_id": "c", "tool_call_name": "t", "parent_message_id": None}),
        (CustomEvent, {"name": "n", "value": {"a": [1, 2]}, "raw_event": None}),
    ],
)
def test_new_event_equals_the_constructed_model_fields_set_included(
    cls: type[BaseEvent], fields: dict[str, object]
) -> None:
    built, constructed = new_event(cls, **fields), cls(**fields)
    assert type(built) is cls
    assert built == constructed
    assert built.model_fields_set == constructed.model_fields_set
    assert built.model_dump_json(by_alias=True, exclude_none=True) == constructed.model_dump_json(
        by_alias=True, exclude_none=True
    )


def test_new_event_refuses_what_the_constructor_refuses() -> None:
    with pytest.raises(ValidationError) as by_constructor:
        TextMessageContentEvent(timestamp="soon", message_id="m", delta=3)
    with pytest.raises(ValidationError) as by_new_event:
        new_event(TextMessageContentEvent, timestamp="soon", message_id="m", delta=3)
    assert by_new_event.value.errors() == by_constructor.value.errors()
