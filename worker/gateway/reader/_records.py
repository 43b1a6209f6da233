"""What the tail and the history reader share: consumers made alike, the output records' headers read alike, and
nothing else."""

from __future__ import annotations

import logging

from aiokafka import AIOKafkaConsumer

from worker.client import make_consumer
from worker.contract import SEQ, TERMINAL_TYPES, TYPE
from worker.gateway.settings import GatewaySettings

__all__ = ["TERMINAL_TYPE_BYTES", "gateway_consumer", "header", "seq_and_kind"]

TERMINAL_TYPE_BYTES = frozenset(kind.encode() for kind in TERMINAL_TYPES)  # as the `agui-type` header holds them
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
    if len(headers) > 2 and headers[1][0] == SEQ and headers[2][0] == TYPE:
        return headers[1][1], headers[2][1]
    return header(headers, SEQ), header(headers, TYPE)


def gateway_consumer(settings: GatewaySettings, role: str, **options: object) -> AIOKafkaConsumer:
    """A read_committed consumer that commits nothing, named after its role; `options` may give it a group."""
    return make_consumer(settings, f"{settings.client_id}-gateway-{role}", **options)


class _NamedByTheTail(logging.Filter):
    """Drops aiokafka's warning of a refused fetch: the tail names the topic, the right and the principal."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_FETCH_DENIED)


FETCH_LOG = logging.getLogger("aiokafka.consumer.fetcher")
FETCH_FILTER = _NamedByTheTail()
