"""The inline-delegation payload a stream observer reads to open and close child runs (spec §1b.7)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["InlineDelegation"]


class InlineDelegation(BaseModel):
    """A validated `inline_delegation` payload; started and completed actions name their child run."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["inline_delegation"] = "inline_delegation"
    invocation_id: str = Field(pattern=r"^delegation-[A-Za-z0-9_-]+$", max_length=128)
    action: Literal["started", "completed", "failed"]
    child_instance_id: str = Field(min_length=1, max_length=128)
    subagent: str = Field(min_length=1, max_length=128)
    status: str = Field(min_length=1, max_length=128)
    parent_run_id: str = Field(min_length=1, max_length=256)
    parent_agent_instance_id: str = Field(min_length=1, max_length=256)
    parent_tool_call_id: str | None = Field(default=None, min_length=1, max_length=256)
    child_run_id: str | None = Field(default=None, min_length=1, max_length=256)

    @model_validator(mode="after")
    def _child_named(self) -> InlineDelegation:
        if self.action in ("started", "completed") and self.child_run_id is None:
            raise ValueError(f"inline delegation action {self.action!r} requires child_run_id")
        return self
