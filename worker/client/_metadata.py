"""A topic's metadata, asked of a broker by name, for the worker and the gateway alike: the partitions, or the one
error that says what to fix (a missing Describe right named with the principal)."""

from __future__ import annotations

from typing import Any

from aiokafka.errors import UnknownTopicOrPartitionError, for_code

from worker.client._aiokafka import topic_metadata
from worker.client._codes import ErrorCode
from worker.client._diagnosis import Denied, authorization_error

__all__ = ["check_described", "topic_partitions"]


def check_described(code: int, topic: str, role: str, who: str) -> None:
    """Raise for the error code a broker gave for describing `topic` (`role`: the setting naming it):
    AuthorizationError naming the right when denied (`who`: the principal, when known), the client's error else."""
    if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
        raise authorization_error((Denied("Topic", topic, ("DESCRIBE",)),), who, f"describe {role} {topic!r}")
    if code:
        raise for_code(code)(f"describing {role} {topic!r}")


async def topic_partitions(client: Any, topic: str, role: str, who: str) -> list[int]:
    """The sorted partition ids of `topic`, asked through `client` (a started consumer) without creating the topic
    (a broker that auto-creates topics would make a display topic that is not compacted); AuthorizationError
    without Describe on it, UnknownTopicOrPartitionError (worth retrying) while it does not exist or has no
    partitions yet."""
    code, partitions = await topic_metadata(client, topic)
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        raise UnknownTopicOrPartitionError(f"{role} {topic!r} does not exist yet")
    check_described(code, topic, role, who)
    if not partitions:
        raise UnknownTopicOrPartitionError(f"{role} {topic!r} has no partitions yet")
    return partitions
