"""What the tail and the history reader share: consumers made alike, the output records' headers read alike, and
the topics' partitions asked of a broker alike."""

from __future__ import annotations

import logging

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import UnknownTopicOrPartitionError, for_code

from worker.gateway.settings import GatewaySettings
from worker.kafka._aiokafka import topic_metadata
from worker.kafka.clients import connection_options
from worker.kafka.diagnosis import Denied, authorization_error

__all__ = ["TERMINAL_TYPES", "header", "make_consumer", "partitions", "seq_and_kind"]

TERMINAL_TYPES = frozenset({b"RUN_FINISHED", b"RUN_ERROR"})
_UNKNOWN_TOPIC, _TOPIC_DENIED = 3, 29
_FETCH_DENIED = "Not authorized to read from topic"  # aiokafka's own warning, which the tail names itself


def header(headers: object, name: str) -> bytes | None:
    """The value of the header `name`, None when the record has none."""
    for key, value in headers:  # type: ignore[attr-defined]
        if key == name:
            return bytes(value)
    return None


def seq_and_kind(headers: list[tuple[str, bytes]]) -> tuple[bytes | None, bytes | None]:
    """An output record's `agui-seq` and `agui-type` headers (None where missing): read where the worker writes
    them, second and third (worker/stream/_build.py), and looked up by name in any other layout."""
    if len(headers) > 2 and headers[1][0] == "agui-seq" and headers[2][0] == "agui-type":
        return headers[1][1], headers[2][1]
    return header(headers, "agui-seq"), header(headers, "agui-type")


def make_consumer(settings: GatewaySettings, role: str, **options: object) -> AIOKafkaConsumer:
    """A read_committed consumer that commits nothing, named after its role; `options` may give it a group."""
    kwargs: dict[str, object] = {"group_id": None, "auto_offset_reset": "earliest"} | options
    return AIOKafkaConsumer(
        client_id=f"{settings.client_id}-gateway-{role}",
        enable_auto_commit=False,
        isolation_level="read_committed",
        **kwargs,
        **connection_options(settings),
    )


class _NamedByTheTail(logging.Filter):
    """Drops aiokafka's warning of a refused fetch: the tail names the topic, the right and the principal."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_FETCH_DENIED)


FETCH_LOG = logging.getLogger("aiokafka.consumer.fetcher")
FETCH_FILTER = _NamedByTheTail()


async def partitions(client: AIOKafkaConsumer, topic: str, role: str, who: str) -> list[TopicPartition]:
    """The topic's partitions, asked of a broker by name without creating the topic (a broker that auto-creates
    topics would make a display topic that is not compacted); AuthorizationError without Describe on it,
    UnknownTopicOrPartitionError (retried) while it does not exist."""
    code, found = await topic_metadata(client, topic)
    if code == _TOPIC_DENIED:
        raise authorization_error((Denied("Topic", topic, ("DESCRIBE",)),), who, f"describe {role} {topic!r}")
    if code == _UNKNOWN_TOPIC:  # retried: the worker creates the display topic when it starts
        raise UnknownTopicOrPartitionError(f"{role} {topic!r} does not exist yet")
    if code:
        raise for_code(code)(f"describing {role} {topic!r}")
    if not found:
        raise UnknownTopicOrPartitionError(f"{role} {topic!r} has no partitions yet")
    return [TopicPartition(topic, partition) for partition in found]
