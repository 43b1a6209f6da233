"""`encode_event`: the exact output record bytes of an AG-UI event (spec §1e.3, §1e.4)."""

from __future__ import annotations

from typing import Any

import pydantic_core
from ag_ui.core import BaseEvent
from pydantic import BaseModel

__all__ = ["encode_event"]

_Layout = tuple[tuple[str, str, bool], ...]
_LAYOUTS: dict[type[BaseEvent], _Layout] = {}


def _layout(cls: type[BaseEvent]) -> _Layout:
    layout = _LAYOUTS.get(cls)
    if layout is None:
        layout = tuple(
            (name, info.alias or name, not info.is_required() and info.default is None)
            for name, info in cls.model_fields.items()
        )
        _LAYOUTS[cls] = layout
    return layout


def encode_event(event: BaseEvent) -> bytes:
    """Bytes equal to `event.model_dump_json(by_alias=True, exclude_none=True)`, built without the slow path."""
    if event.__pydantic_extra__:
        return _slow(event)
    out: dict[str, Any] = {}
    values = event.__dict__
    for name, alias, omittable in _layout(type(event)):
        value = values[name]
        if value is None:
            if omittable:
                continue
        elif isinstance(value, BaseModel) or (isinstance(value, list) and value and isinstance(value[0], BaseModel)):
            return _slow(event)
        out[alias] = value
    return pydantic_core.to_json(out)


def _slow(event: BaseEvent) -> bytes:
    return type(event).__pydantic_serializer__.to_json(event, by_alias=True, exclude_none=True)
