"""Reassembly of `a13n.stream.fragment` frames into the CUSTOM events they split; loss never yields data."""

from __future__ import annotations

from typing import Any

from ag_ui.core import CustomEvent
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from worker.observe import FRAGMENT_EVENT_NAME

__all__ = ["Assembly", "CustomEventAssembler", "FragmentState"]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_PENDING = 8


class Assembly(BaseModel):
    """The frames received so far for one fragmented event, in index order; `size` is their UTF-8 bytes."""

    model_config = ConfigDict(extra="forbid")
    count: int = Field(ge=1)
    parts: list[str] = Field(default_factory=list)
    size: int = Field(default=0, ge=0)


class FragmentState(BaseModel):
    """The assembler's resumable state: only incomplete assemblies, never completed events."""

    model_config = ConfigDict(extra="forbid")
    pending: dict[str, Assembly] = Field(default_factory=dict)
    gap: bool = False
    max_bytes: int = Field(default=DEFAULT_MAX_BYTES, ge=1)
    max_pending: int = Field(default=DEFAULT_MAX_PENDING, ge=1)


def _frame_fields(value: object) -> tuple[str, int, int, str] | None:
    """The (id, index, count, data) of a well-formed frame value, else None."""
    if not isinstance(value, dict):
        return None
    identity, index, count, data = (value.get(key) for key in ("id", "index", "count", "data"))
    if not (isinstance(identity, str) and isinstance(index, int) and isinstance(count, int)):
        return None
    if not (0 <= index < count and isinstance(data, str)):
        return None
    return identity, index, count, data


class CustomEventAssembler:
    """Joins in-order frames per id within `max_bytes` buffered and `max_pending` assemblies.

    Any anomaly (malformed or out-of-order frame, eviction, byte bound) drops that assembly and sets `gap`.
    """

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_BYTES, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        if max_bytes < 1:
            raise ValueError(f"assembler max_bytes must be >= 1, got {max_bytes}")
        if max_pending < 1:
            raise ValueError(f"assembler max_pending must be >= 1, got {max_pending}")
        self.max_bytes = max_bytes
        self.max_pending = max_pending
        self.gap = False
        self._pending: dict[str, Assembly] = {}
        self._buffered = 0

    @property
    def pending(self) -> int:
        """How many fragmented events are incomplete."""
        return len(self._pending)

    def export(self) -> FragmentState:
        """A detached copy of the pending assemblies and the gap flag."""
        state = FragmentState(
            pending=self._pending, gap=self.gap, max_bytes=self.max_bytes, max_pending=self.max_pending
        )
        return state.model_copy(deep=True) if self._pending else state

    @classmethod
    def restore(cls, state: FragmentState) -> CustomEventAssembler:
        """An assembler that continues exactly where the exported one stood."""
        copied = state.model_copy(deep=True)
        assembler = cls(max_bytes=copied.max_bytes, max_pending=copied.max_pending)
        assembler._pending = dict(copied.pending)
        assembler._buffered = sum(assembly.size for assembly in copied.pending.values())
        assembler.gap = copied.gap
        return assembler

    def _drop(self, identity: str) -> None:
        assembly = self._pending.pop(identity, None)
        if assembly is not None:
            self._buffered -= assembly.size

    def _lose(self, identity: str | None = None) -> None:
        if identity is not None:
            self._drop(identity)
        self.gap = True

    def accept(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """The event itself if it is not a frame; the reassembled event dict on a final frame; else None."""
        if event.get("name") != FRAGMENT_EVENT_NAME:
            return event
        fields = _frame_fields(event.get("value"))
        if fields is None:
            self._lose()
            return None
        identity, index, count, data = fields
        if index == 0:
            self._drop(identity)
            while len(self._pending) >= self.max_pending:
                self._lose(next(iter(self._pending)))
            self._pending[identity] = Assembly(count=count)
        assembly = self._pending.get(identity)
        size = len(data.encode("utf-8"))
        in_order = assembly is not None and assembly.count == count and len(assembly.parts) == index
        if assembly is None or not in_order or self._buffered + size > self.max_bytes:
            self._lose(identity)
            return None
        assembly.parts.append(data)
        assembly.size += size
        self._buffered += size
        if len(assembly.parts) < count:
            return None
        self._drop(identity)
        return self._decode("".join(assembly.parts))

    def _decode(self, text: str) -> dict[str, Any] | None:
        try:
            inner = CustomEvent.model_validate_json(text)
        except ValidationError:
            self._lose()
            return None
        if inner.name == FRAGMENT_EVENT_NAME:
            self._lose()
            return None
        dumped: dict[str, Any] = inner.model_dump(mode="json", by_alias=True)
        return dumped
