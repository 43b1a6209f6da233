"""The exportable continuation of an observer: pydantic models of its run state (spec §1c export/restore)."""

from __future__ import annotations

from typing import cast

from pydantic import BaseModel, ConfigDict, Field

from worker.observe._state import CursorKind, PartCursor, RunState

__all__ = ["CursorModel", "ObserverContinuation", "StateModel"]


class CursorModel(BaseModel):
    """Exported form of a PartCursor."""

    model_config = ConfigDict(extra="forbid")
    kind: CursorKind
    part_id: str
    tool_name: str | None = None
    emitted_content: bool = False
    emitted_signature: bool = False


class StateModel(BaseModel):
    """Exported form of a RunState (integer part indices become JSON object keys; a `true` request index stays
    a bool, as the part ids it names spell it)."""

    model_config = ConfigDict(extra="forbid")
    request_index: bool | int = 0
    parts: dict[int, CursorModel] = Field(default_factory=dict)
    children: dict[str, StateModel] = Field(default_factory=dict)
    threads: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def of(cls, state: RunState) -> StateModel:
        return cls(
            request_index=cast(bool | int, state.request_index),
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
