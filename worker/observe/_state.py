"""Per-run conversion state: immutable part cursors, mutable run state and the draft of one item's changes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["CursorKind", "Draft", "PartCursor", "RunState"]

CursorKind = Literal["text", "reasoning", "tool_call"]
# A JSON `true` request index stays a bool, as upstream formats it into part ids ("request-True"); typed
# `object` so that compiled code keeps the value as it is instead of storing the integer 1.
RequestIndex = object


@dataclass(frozen=True, slots=True)
class PartCursor:
    """An open part; replaced, never mutated, so a failed observe cannot leak a change."""

    kind: CursorKind
    part_id: str
    tool_name: str | None = None
    emitted_content: bool = False
    emitted_signature: bool = False

    def __reduce__(self) -> tuple[type[PartCursor], tuple[str, str, str | None, bool, bool]]:
        return PartCursor, (self.kind, self.part_id, self.tool_name, self.emitted_content, self.emitted_signature)


@dataclass(slots=True)
class RunState:
    """One run's cursors; the root state also holds child states and run → thread bindings."""

    request_index: RequestIndex = 0
    parts: dict[int, PartCursor] = field(default_factory=dict)
    children: dict[str, RunState] = field(default_factory=dict)
    threads: dict[str, str] = field(default_factory=dict)

    def __reduce__(self) -> tuple[type[RunState], tuple[object, ...]]:
        # Positional arguments pickle faster than the attribute dict a compiled class would otherwise use.
        return RunState, (self.request_index, self.parts, self.children, self.threads)


class Draft:
    """Staged changes to one RunState (request index and a copy-on-write parts map), applied by `commit`."""

    __slots__ = ("base", "parts", "request_index", "written")

    def __init__(self, base: RunState) -> None:
        self.base = base
        self.request_index: RequestIndex = base.request_index
        self.parts = base.parts
        self.written = False

    def writable_parts(self) -> dict[int, PartCursor]:
        if not self.written:
            self.parts = dict(self.parts)
            self.written = True
        return self.parts

    def commit(self) -> None:
        self.base.request_index = self.request_index
        if self.written:
            self.base.parts = self.parts
