"""`encode_event`: the exact output record bytes of an AG-UI event (spec §1e.3, §1e.4)."""

from __future__ import annotations

from typing import Any

import orjson
import pydantic_core
from ag_ui.core import BaseEvent
from pydantic import BaseModel

__all__ = ["encode_event"]

# Floats are the only values whose spelling could differ between the two encoders; use orjson (several times
# faster) only when this installation spells every probe exactly as pydantic does.
_FLOAT_PROBES = [
    0.1, -0.0, 1.0, 100.0, 1e-5, 2.5e-5, 1e-7, 1e15, 1e16, 1e21, 1e22, 1.5e300, 5e-324, 1.7976931348623157e308,
    123456789012.0, 9007199254740993.0, 1.2345678901234567e19, 0.30000000000000004, 3.0e-310,
]
_ORJSON_AGREES = orjson.dumps(_FLOAT_PROBES) == pydantic_core.to_json(_FLOAT_PROBES)
_Layout = tuple[tuple[str, str, bool, bool], ...]
_LAYOUTS: dict[type[BaseEvent], _Layout] = {}


def _layout(cls: type[BaseEvent]) -> _Layout:
    """Per field: name, alias, omitted-when-None, may-hold-an-ag-ui-model (those take pydantic's path)."""
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


def encode_event(event: BaseEvent) -> bytes:
    """Bytes equal to `event.model_dump_json(by_alias=True, exclude_none=True)`, without the wrap serializer."""
    if event.__pydantic_extra__:
        return _slow(event)
    out: dict[str, Any] = {}
    values = event.__dict__
    for name, alias, omittable, modelled in _layout(type(event)):
        value = values[name]
        if value is None:
            if omittable:
                continue
        elif modelled and (isinstance(value, BaseModel) or (type(value) is list and value)):
            return _slow(event)
        out[alias] = value
    if _ORJSON_AGREES:
        try:
            return orjson.dumps(out)
        except (TypeError, orjson.JSONEncodeError):
            return _slow(event)  # a model inside an Any field, integers beyond 64 bits, lone surrogates
    return pydantic_core.to_json(out)


def _slow(event: BaseEvent) -> bytes:
    return type(event).__pydantic_serializer__.to_json(event, by_alias=True, exclude_none=True)
