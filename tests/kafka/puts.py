"""Publishing without a broker: an open transaction that takes every record at once and remembers where each went."""

from __future__ import annotations

__all__ = ["PutLog"]


class PutLog:
    """An open transaction (`publishing._Open`) that takes every record at once, remembering (topic, key,
    partition) in the order they were put or sent."""

    def __init__(self) -> None:
        self.put: list[tuple[str, bytes | None, int | None]] = []

    def append(self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]],
               partition: int) -> bool:  # fmt: skip
        self.put.append((topic, key, partition))
        return True

    async def send(self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]],
                   partition: int | None = None) -> None:  # fmt: skip
        self.put.append((topic, key, partition))
