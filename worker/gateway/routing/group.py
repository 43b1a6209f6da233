"""The gateway group's assignor: replicas share the output topic's partitions, and each learns who owns which.

Each member puts its advertised URL and the partitions it owns now in its subscription's user data; the leader
gives every member a balanced share (keeping what each owns where the balance allows, so a rebalance moves as few
runs as it can) and puts the whole partition -> URL map in every member's assignment. No offsets are committed:
the group only divides the reading and tells every replica where each run is served.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import orjson
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata

__all__ = ["OwnersAssignor", "balanced"]

_log = logging.getLogger(__name__)


def balanced(partitions: Iterable[int], owned: Mapping[str, Collection[int]]) -> dict[str, list[int]]:
    """Every partition to one member, each member `len // members` or one more, a member keeping what it owns
    (`owned`) as far as that balance allows; members in sorted order break ties, so every leader computes the same."""
    members = sorted(owned)
    if not members:
        return {}
    every = sorted(set(partitions))
    base, extra = divmod(len(every), len(members))
    kept: dict[str, list[int]] = {}
    claimed: set[int] = set()
    for member in members:
        mine = [p for p in sorted(set(owned[member])) if p in every and p not in claimed][: base + 1]
        kept[member] = mine
        claimed.update(mine)
    over = [member for member in members if len(kept[member]) > base]
    for member in over[extra:]:  # at most `extra` members keep one more than `base`
        claimed.discard(kept[member].pop())
    free = [p for p in every if p not in claimed]
    for member in members:
        while len(kept[member]) < base:
            kept[member].append(free.pop(0))
    plus = sum(1 for member in members if len(kept[member]) > base)
    for member in members:
        if free and len(kept[member]) == base and plus < extra:
            kept[member].append(free.pop(0))
            plus += 1
    return {member: sorted(parts) for member, parts in kept.items()}


def _user_data(raw: bytes | None) -> dict[str, Any]:
    try:
        value = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class OwnersAssignor:
    """The gateway group's partition assignment strategy (aiokafka calls `name`, `metadata`, `assign` and
    `on_assignment`); `owned()` tells the partitions this member owns now, `on_owners` takes every new map."""

    name = "harness-agui-gateway"
    version = 0

    def __init__(
        self, url: str, owned: Callable[[], Collection[int]], on_owners: Callable[[dict[int, str]], None]
    ) -> None:
        self._url = url
        self._owned = owned
        self._on_owners = on_owners

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        # "held" is the key replicas of every version read: a rolling upgrade mixes them (kept, see the glossary).
        data = orjson.dumps({"url": self._url, "held": sorted(self._owned())})
        return ConsumerProtocolMemberMetadata(self.version, sorted(topics), data)

    def assign(
        self, cluster: Any, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        topics = sorted({topic for metadata in members.values() for topic in metadata.subscription})
        if len(topics) != 1:
            _log.error("gateway group members subscribe to %s; they must all read one output topic", topics)
        topic = topics[0] if topics else ""
        partitions = cluster.partitions_for_topic(topic) or set()
        data = {member: _user_data(metadata.user_data) for member, metadata in members.items()}
        owned = {member: [p for p in value.get("held", []) if isinstance(p, int)] for member, value in data.items()}
        shares = balanced(partitions, owned)
        urls = {str(p): str(data[member].get("url", "")) for member, parts in shares.items() for p in parts}
        owners = orjson.dumps({"owners": urls})
        return {
            member: ConsumerProtocolMemberAssignment(self.version, [(topic, shares.get(member, []))], owners)
            for member in members
        }

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        urls = _user_data(assignment.user_data).get("owners", {})
        if not isinstance(urls, dict):
            urls = {}
        owners = {int(p): str(url) for p, url in urls.items() if str(p).isascii() and str(p).isdigit()}
        self._on_owners(owners)
