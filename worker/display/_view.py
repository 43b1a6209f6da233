"""A read-only mapping over a ledger's entries (interpreted: a compiled class cannot derive from Mapping)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from worker.display._ledger import Entry
from worker.display.items import Item

__all__ = ["ItemsView"]


class ItemsView(Mapping[str, Item]):
    """Read-only view of a ledger's items by id, in first-seen (ordinal) order."""

    __slots__ = ("_entries",)

    def __init__(self, entries: dict[str, Entry]) -> None:
        self._entries = entries

    def __getitem__(self, key: str) -> Item:
        return self._entries[key].item()

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries
