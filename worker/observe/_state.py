"""Per-run conversion state: immutable part cursors, mutable run state and the draft of one item's changes."""

from __future__ import annotations

from typing import Final, Literal

from worker._value import FrozenValue, Value

__all__ = ["CursorKind", "Draft", "PartCursor", "RunState", "state_data"]

CursorKind = Literal["text", "reasoning", "tool_call"]
# A JSON `true` request index stays a bool, as upstream formats it into part ids ("request-True"); typed
# `object` so that compiled code keeps the value as it is instead of storing the integer 1.
RequestIndex = object


class PartCursor(FrozenValue):
    """An open part; replaced, never mutated, so a failed observe cannot leak a change."""

    __slots__ = ("emitted_content", "emitted_signature", "kind", "part_id", "tool_name")
    _FIELDS = ("kind", "part_id", "tool_name", "emitted_content", "emitted_signature")

    def __init__(
        self, kind: CursorKind, part_id: str, tool_name: str | None = None, emitted_content: bool = False,
        emitted_signature: bool = False,
    ) -> None:  # fmt: skip
        self.kind: Final = kind
        self.part_id: Final = part_id
        self.tool_name: Final = tool_name
        self.emitted_content: Final = emitted_content
        self.emitted_signature: Final = emitted_signature

    def __reduce__(self) -> tuple[type[PartCursor], tuple[str, str, str | None, bool, bool]]:
        return PartCursor, (self.kind, self.part_id, self.tool_name, self.emitted_content, self.emitted_signature)


class RunState(Value):
    """One run's cursors; the root state also holds child states and run → thread bindings."""

    __slots__ = ("children", "parts", "request_index", "threads")
    _FIELDS = ("request_index", "parts", "children", "threads")

    def __init__(
        self, request_index: RequestIndex = 0, parts: dict[int, PartCursor] | None = None,
        children: dict[str, RunState] | None = None, threads: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.request_index = request_index
        self.parts: dict[int, PartCursor] = {} if parts is None else parts
        self.children: dict[str, RunState] = {} if children is None else children
        self.threads: dict[str, str] = {} if threads is None else threads

    def __reduce__(self) -> tuple[type[RunState], tuple[object, ...]]:
        # Positional arguments pickle faster than the attribute dict a compiled class would otherwise use.
        return RunState, (self.request_index, self.parts, self.children, self.threads)


def state_data(state: RunState) -> dict[str, object]:
    """`state` as the JSON data of its StateModel (`model_dump(mode="json")`), built without pydantic."""
    return {
        "request_index": state.request_index,
        "parts": {
            str(index): {
                "kind": cursor.kind, "part_id": cursor.part_id, "tool_name": cursor.tool_name,
                "emitted_content": cursor.emitted_content, "emitted_signature": cursor.emitted_signature,
            }
            for index, cursor in state.parts.items()
        },
        "children": {run: state_data(child) for run, child in state.children.items()},
        "threads": dict(state.threads),
    }  # fmt: skip


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
