"""Where a record goes: the output partition of a key, picked like Kafka's default partitioner but hashed once."""

from __future__ import annotations

from aiokafka.partitioner import murmur2

__all__ = ["KeyRouter"]


class KeyRouter:
    """Maps a key to `murmur2(key) & 0x7fffffff % partitions`, caching at most `cap` keys (root run ids)."""

    __slots__ = ("_cache", "_cap", "partitions")

    def __init__(self, partitions: int, cap: int = 100_000) -> None:
        self.partitions = partitions
        self._cap = cap
        self._cache: dict[bytes, int] = {}

    def __call__(self, key: bytes) -> int:
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) >= self._cap:
                self._cache.clear()
            hit = self._cache[key] = (murmur2(key) & 0x7FFFFFFF) % self.partitions
        return hit
