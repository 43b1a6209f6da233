"""Whether the group gives a partition to this member now: asked of the group coordinator before every producer start.

Starting a producer (InitProducerId) fences whoever holds the transactional id. Without KIP-447 that is the only
zombie fencing there is, so it must never hit the real owner: a member starts a partition's producer only while
the coordinator's stable group lists this member with that partition. A member the group has evicted (a resumed
zombie) finds itself absent and waits for the group instead.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from aiokafka import TopicPartition
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import for_code

from worker.client import ErrorCode, bounded

__all__ = ["Ownership", "confirm_owner", "owner_in"]

_RETRIABLE_CODES = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                              ErrorCode.NOT_COORDINATOR})


class Ownership(Enum):
    """The coordinator's answer: this member owns the partition, does not, or cannot be told (rebalancing)."""

    OWNER = "owner"
    NOT_OWNER = "not-owner"
    UNKNOWN = "unknown"


def owner_in(groups: list[dict[str, Any]], group_id: str, member: str, tp: TopicPartition) -> Ownership:
    """Decide from DescribeGroups entries (`to_object()` form) whether `member` holds `tp` in a stable group.

    Only a stable group shows its assignment; while it rebalances the answer is UNKNOWN. A group error other
    than a coordinator moving is raised as the client's error (a missing ACL among them).
    """
    for group in groups:
        if group.get("group") != group_id:
            continue
        code = int(group.get("error_code", 0))
        if code in _RETRIABLE_CODES:
            return Ownership.UNKNOWN
        if code:
            raise for_code(code)(f"describing group {group_id!r}")
        state = group.get("state", "")
        if state in ("Empty", "Dead"):
            return Ownership.NOT_OWNER
        if state != "Stable":
            return Ownership.UNKNOWN
        for entry in group.get("members", []):
            if member and entry.get("member_id") == member:
                raw = entry.get("member_assignment")
                if not raw:
                    return Ownership.NOT_OWNER
                assignment = ConsumerProtocolMemberAssignment.decode(raw)
                return Ownership.OWNER if tp in assignment.partitions() else Ownership.NOT_OWNER
        return Ownership.NOT_OWNER
    return Ownership.UNKNOWN


async def confirm_owner(admin: Any, group_id: str, member: str, tp: TopicPartition, seconds: float) -> Ownership:
    """Ask the group coordinator (DescribeGroups, within `seconds`) whether `member` owns `tp` now."""
    where = f"{tp.topic}[{tp.partition}]"
    responses = await bounded(admin.describe_consumer_groups([group_id]), seconds, "describe-group", where)
    groups = [group for response in responses for group in response.to_object()["groups"]]
    return owner_in(groups, group_id, member, tp)
