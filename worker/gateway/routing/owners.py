"""Which gateway replica answers for which run: the partition -> replica map of the gateway group's latest
assignment, and this replica's own partitions with whether each was read far enough to be served.

A run belongs to the partition its key hashes to in the output topic (the display topic is co-partitioned), and a
partition to the one replica the group assigned it; every replica learns the whole map with its own assignment,
so any replica can send a request to the run's owner (Kafka Streams' interactive queries).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from typing import NamedTuple

from worker.client import partition_for

__all__ = ["Owners", "Route", "Target", "Where"]


class Target(NamedTuple):
    """What a request asks for: a run or a thread (`kind`), by the key its records are partitioned by."""

    kind: str
    key: str

    def __str__(self) -> str:
        return f"{self.kind} {self.key!r}"


class Where(Enum):
    """Where a key's requests are answered."""

    HERE = "here"  # this replica owns the partition and has read it: serve
    LOADING = "loading"  # this replica owns the partition and is still reading its display records: 503
    PEER = "peer"  # another replica owns it: forward
    NOBODY = "nobody"  # no replica owns it now (before the first assignment, or a member without an address): 503


class Route(NamedTuple):
    """The answer for one key: where, its partition, and the owner's advertised URL when that is a peer."""

    where: Where
    partition: int
    url: str = ""


class Owners:
    """The partition map as last assigned (`assign`), this replica's own partitions among it, and which of those
    are ready (`loaded`). Changed only by the tail's rebalance callbacks, read by every request."""

    def __init__(self, url: str) -> None:
        self.url = url  # this replica's advertised URL
        self.partitions = 0  # of the output topic, once described
        self.generation = 0  # assignments received so far
        self._urls: dict[int, str] = {}
        self._mine: frozenset[int] = frozenset()
        self._loaded: set[int] = set()

    @property
    def mine(self) -> frozenset[int]:
        """The partitions the latest assignment gave this replica."""
        return self._mine

    @property
    def ready(self) -> bool:
        """An assignment arrived and every partition it gave this replica is loaded."""
        return self.generation > 0 and self.mine <= self._loaded

    def assign(self, urls: Mapping[int, str], mine: Iterable[int]) -> tuple[frozenset[int], frozenset[int]]:
        """Take a new map and this replica's partitions in it; returns the partitions this replica gained and those
        it lost (a kept one stays loaded). Its own partitions are served here whatever URL the map gives them."""
        before, after = self._mine, frozenset(mine)
        self._urls = {p: url for p, url in urls.items() if p not in after} | dict.fromkeys(after, self.url)
        self._mine = after
        self.generation += 1
        self._loaded &= after
        return after - before, before - after

    def loaded(self, partitions: Iterable[int]) -> None:
        """These own partitions were read to the display topic's end offsets taken when they were assigned."""
        self._loaded.update(p for p in partitions if p in self._mine)

    @property
    def serving(self) -> int:
        """Own partitions loaded and served."""
        return len(self._loaded)

    def partition_of(self, key: str) -> int:
        """The partition of a key's records in both topics (the worker keys them by run)."""
        return partition_for(key.encode(), self.partitions)

    def route(self, key: str) -> Route:
        """Where the requests of `key` (a run id, or another key partitioned alike) are answered now."""
        if self.partitions <= 0:
            return Route(Where.NOBODY, -1)
        partition = self.partition_of(key)
        if partition in self._mine:
            return Route(Where.HERE if partition in self._loaded else Where.LOADING, partition)
        url = self._urls.get(partition, "")
        if not url or url == self.url:  # no owner, or a stale map naming this replica: ask again shortly
            return Route(Where.NOBODY, partition)
        return Route(Where.PEER, partition, url)
