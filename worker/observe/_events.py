"""AG-UI events built straight through their models' validators."""

from __future__ import annotations

from typing import Any, TypeVar, cast

from ag_ui.core import BaseEvent

__all__ = ["new_event"]

_E = TypeVar("_E", bound=BaseEvent)


def new_event(cls: type[_E], /, **fields: Any) -> _E:
    """`cls(**fields)`, validated the same way, without `BaseModel.__init__`'s Python frame (about 0.6 µs each).

    Valid for models without their own `__init__` or `model_post_init`, which no AG-UI event has (tested).
    """
    return cast(_E, cls.__pydantic_validator__.validate_python(fields))
