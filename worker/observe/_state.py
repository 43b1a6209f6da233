"""Per-run conversion state: immutable part cursors, mutable run state, and the exportable continuation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CursorModel", "Draft", "ObserverContinuation", "PartCursor", "RunState", "StateModel"]

CursorKind = Literal["text", "reasoning", "tool_call"]


@dataclass(frozen=True, slots=True)
class PartCursor:
    """An open part; replaced, never mutated, so a failed observe cannot leak a change."""

    kind: CursorKind
    part_id: str
    tool_name: str | None = None
    emitted_content: bool = False
    emitted_signature: bool = False


@dataclass(slots=True)
class RunState:
    """One run's cursors; the root state also holds child states and run → thread bindings."""

    request_index: int = 0
    parts: dict[int, PartCursor] = field(default_factory=dict)
    children: dict[str, RunState] = field(default_factory=dict)
    threads: dict[str, str] = field(default_factory=dict)


class Draft:
    """Staged changes to one RunState (request index and a copy-on-write parts map), applied by `commit`."""

    __slots__ = ("base", "parts", "request_index", "written")

    def __init__(self, base: RunState) -> None:
        self.base = base
        self.request_index = base.request_index
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


class CursorModel(BaseModel):
    """Exported form of a PartCursor."""

    model_config = ConfigDict(extra="forbid")
    kind: CursorKind
    part_id: str
    tool_name: str | None = None
    emitted_content: bool = False
    emitted_signature: bool = False


class StateModel(BaseModel):
    """Exported form of a RunState (integer part indices become JSON object keys)."""

    model_config = ConfigDict(extra="forbid")
    request_index: int = 0
    parts: dict[int, CursorModel] = Field(default_factory=dict)
    children: dict[str, StateModel] = Field(default_factory=dict)
    threads: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def of(cls, state: RunState) -> StateModel:
        return cls(
            request_index=state.request_index,
            parts={
                i: CursorModel(
                    kind=c.kind, part_id=c.part_id, tool_name=c.tool_name,
                    emitted_content=c.emitted_content, emitted_signature=c.emitted_signature,
                )
                for i, c in state.parts.items()
            },
            children={run: cls.of(child) for run, child in state.children.items()},
            threads=dict(state.threads),
        )

    def to_state(self) -> RunState:
        return RunState(
            request_index=self.request_index,
            parts={
                i: PartCursor(c.kind, c.part_id, c.tool_name, c.emitted_content, c.emitted_signature)
                for i, c in self.parts.items()
            },
            children={run: child.to_state() for run, child in self.children.items()},
            threads=dict(self.threads),
        )


class ObserverContinuation(BaseModel):
    """Everything an observer needs to continue mid-run, without its event journal."""

    model_config = ConfigDict(extra="forbid")
    thread_id: str | None = None
    run_id: str | None = None
    state: StateModel = Field(default_factory=StateModel)
