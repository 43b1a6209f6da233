"""The base of the core's small value classes: a dataclass's equality and repr with a plain slotted `__init__`,
cheaper to call than a dataclass's for the values built once or more per source record.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["FrozenValue", "Value"]


class _Fields:  # noqa: PLW1641  # each subclass decides: Value is unhashable, FrozenValue hashes its fields
    """Equality and repr over `_FIELDS`, in that order."""

    __slots__ = ()
    _FIELDS: ClassVar[tuple[str, ...]] = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._values() == other._values()  # tuples, as a dataclass compares

    def __ne__(self, other: object) -> bool:  # explicit, for subclasses in other modules
        return not self.__eq__(other)

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._FIELDS)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in zip(self._FIELDS, self._values(), strict=True))
        return f"{type(self).__name__}({shown})"


class Value(_Fields):
    """A value compared by its fields; unhashable, as a mutable dataclass is."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]


class FrozenValue(_Fields):
    """A value never changed after `__init__` (its attributes are `Final`), so hashable like a frozen dataclass."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(self._values())
