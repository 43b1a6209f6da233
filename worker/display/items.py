"""Display items: the stably identified blocks a fold produces, and the per-event references to them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from worker.display._ids import item_id
from worker.display.memory import MemorySource

__all__ = [
    "ContentRef",
    "Item",
    "ItemKind",
    "ItemRef",
    "ItemState",
    "Observed",
    "StreamPosition",
    "item_id",
]

ItemKind = Literal["text_message", "reasoning_message", "tool_call", "observation"]
ItemState = Literal["in_progress", "completed", "interrupted", "failed"]


class StreamPosition(BaseModel):
    """A fold position: the attempt and the fold-local event sequence; printed as `attempt-sequence`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    attempt: int = Field(ge=0)
    sequence: int = Field(ge=0)

    def __str__(self) -> str:
        return f"{self.attempt}-{self.sequence}"


class ContentRef(BaseModel):
    """A host-owned immutable value that an item refers to instead of embedding it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    size_bytes: int = Field(ge=0)
    media_type: Literal["text/plain", "application/json"]
    preview: str
    truncated: bool = False


class Item(BaseModel):
    """One display block; `ordinal` is its dense place in the run; `ended_at` is set once it is finished."""

    model_config = ConfigDict(extra="forbid")
    id: str
    ordinal: int = Field(ge=1)
    kind: ItemKind
    state: ItemState
    first_stream_id: str
    last_stream_id: str
    started_at: datetime
    ended_at: datetime | None = None
    content: dict[str, JsonValue]
    content_refs: dict[str, ContentRef] = Field(default_factory=dict, exclude_if=lambda refs: not refs)


class ItemRef(BaseModel):
    """The item one event changed, as it stands after that event."""

    model_config = ConfigDict(extra="forbid")
    id: str
    kind: ItemKind
    state: ItemState
    ordinal: int = Field(ge=1)
    response_group: str | None = None
    failure: dict[str, JsonValue] | None = None
    memory_sources: tuple[MemorySource, ...] | None = Field(default=None, exclude_if=lambda sources: sources is None)


class Observed(BaseModel):
    """One AG-UI event at its fold sequence, with the item it changed (None when it changed none)."""

    model_config = ConfigDict(extra="forbid")
    sequence: int
    event: dict[str, Any]
    item: ItemRef | None
