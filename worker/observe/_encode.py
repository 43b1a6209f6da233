"""`encode_event`: the exact output record bytes of an AG-UI event (spec §1e.3, §1e.4)."""

from __future__ import annotations

from typing import Any

import orjson
import pydantic_core
from ag_ui.core import BaseEvent
from pydantic import BaseModel

__all__ = ["ORJSON_AGREES", "encode_event"]

# Floats are the only values whose spelling could differ between the two encoders; use orjson (several times
# faster) only when this installation spells every probe exactly as pydantic does.
_FLOAT_PROBES = [
    0.1, -0.0, 1.0, 100.0, 1e-5, 2.5e-5, 1e-7, 1e15, 1e16, 1e21, 1e22, 1.5e300, 5e-324, 1.7976931348623157e308,
    123456789012.0, 9007199254740993.0, 1.2345678901234567e19, 0.30000000000000004, 3.0e-310,
]
ORJSON_AGREES = orjson.dumps(_FLOAT_PROBES) == pydantic_core.to_json(_FLOAT_PROBES)
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
    out = _fields(event)
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
