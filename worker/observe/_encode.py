"""`encode_event`: the exact output record bytes of an AG-UI event (spec §1e.3, §1e.4); `encode_event_data`: those
bytes and the JSON object they parse back into, taken from the event without parsing any text."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pydantic_core
from ag_ui.core import BaseEvent, EventType
from pydantic import BaseModel

__all__ = ["ORJSON_AGREES", "encode_event", "encode_event_data"]

# Floats are the only values whose spelling could differ between the two encoders; use orjson (several times
# faster) only when this installation spells every probe exactly as pydantic does.
_FLOAT_PROBES = [
    0.1, -0.0, 1.0, 100.0, 1e-5, 2.5e-5, 1e-7, 1e15, 1e16, 1e21, 1e22, 1.5e300, 5e-324, 1.7976931348623157e308,
    123456789012.0, 9007199254740993.0, 1.2345678901234567e19, 0.30000000000000004, 3.0e-310,
]
ORJSON_AGREES = orjson.dumps(_FLOAT_PROBES) == pydantic_core.to_json(_FLOAT_PROBES)
_TYPE_NAMES: dict[object, str] = {member: member.value for member in EventType}
_Layout = tuple[tuple[str, str, bool, bool], ...]
_LAYOUTS: dict[type[BaseModel], _Layout] = {}


def _layout(cls: type[BaseModel]) -> _Layout:
    """Per field: name, alias, omitted-when-None, may-hold-an-ag-ui-model (those are written field by field)."""
    layout = _LAYOUTS.get(cls)
    if layout is None:
        layout = tuple(
            (
                name,
                info.alias or name,
                not info.is_required() and info.default is None,
                "ag_ui." in str(info.annotation),
            )
            for name, info in cls.model_fields.items()
        )
        _LAYOUTS[cls] = layout
    return layout


def _fields(model: BaseModel) -> dict[str, Any] | None:
    """The model as a JSON object keyed by alias, nested ag-ui models likewise; None where only pydantic can
    write it (extra fields, or a model field holding something other than models)."""
    if model.__pydantic_extra__:
        return None
    out: dict[str, Any] = {}
    values = model.__dict__
    for name, alias, omittable, modelled in _layout(type(model)):
        value = values[name]
        if value is None:
            if omittable:
                continue
        elif modelled:
            if isinstance(value, BaseModel):
                value = _fields(value)
                if value is None:
                    return None
            elif type(value) is list:
                items = [_fields(element) if isinstance(element, BaseModel) else None for element in value]
                if None in items:
                    return None
                value = items
        out[alias] = value
    return out


def encode_event(event: BaseEvent) -> bytes:
    """Bytes equal to `event.model_dump_json(by_alias=True, exclude_none=True)`, without the wrap serializer."""
    return _encoded(event, _fields(event))


def encode_event_data(event: BaseEvent, *, plain: bool = False) -> tuple[bytes, dict[str, Any] | None]:
    """`encode_event(event)` and the JSON object those bytes parse back into, the event's fields read once; the
    object is None when only parsing tells (a value other than plain JSON data: a tuple, a non-finite float, a
    datetime, ...).

    With `plain` the caller vouches that every value the event holds is plain JSON data (as the observer's events
    hold, built from decoded JSON), and that is not checked. The object shares the event's values: a reader must
    not change them.
    """
    out = _fields(event)
    value = _encoded(event, out)
    if out is None:
        return value, None
    kind = out.get("type")
    if type(kind) is not str:
        out["type"] = _TYPE_NAMES.get(kind, kind)  # an EventType is written as its value
    return value, out if plain or _plain(out) else None


def _encoded(event: BaseEvent, out: dict[str, Any] | None) -> bytes:
    if out is None:
        return _slow(event)
    if ORJSON_AGREES:
        try:
            return orjson.dumps(out)
        except (TypeError, orjson.JSONEncodeError):
            return _slow(event)  # a model inside an Any field, integers beyond 64 bits, lone surrogates
    return pydantic_core.to_json(out)


def _slow(event: BaseEvent) -> bytes:
    return type(event).__pydantic_serializer__.to_json(event, by_alias=True, exclude_none=True)


def _plain(value: object) -> bool:
    """Whether `value` is JSON data that writing and parsing give back unchanged: dicts with string keys, lists,
    strings, integers, booleans, None and finite floats, each of exactly that type (a string with a lone surrogate
    cannot be encoded at all)."""
    if isinstance(value, str):
        return type(value) is str
    if isinstance(value, dict):
        return type(value) is dict and all(type(key) is str and _plain(item) for key, item in value.items())
    if isinstance(value, list):
        return type(value) is list and all(_plain(item) for item in value)
    if value is None or type(value) is bool or type(value) is int:
        return True
    return type(value) is float and math.isfinite(value)
