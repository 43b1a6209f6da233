"""Builds aiokafka clients from settings; the only place that maps our settings onto client arguments."""

from __future__ import annotations

import functools
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.helpers import create_ssl_context

from worker.kafka.oauth import ClientCredentialsTokens
from worker.settings import ConnectionSettings, Settings

__all__ = ["MAX_BATCH_BYTES", "MAX_REQUEST_BYTES", "connection_options", "make_admin", "make_group_consumer",
           "make_replay_consumer", "make_transactional_producer", "principal", "transactional_id"]

MAX_REQUEST_BYTES = 4 * 1024 * 1024  # the producers' max_request_size
MAX_BATCH_BYTES = 256 * 1024  # the producers' batch size, unless a destination takes less


def connection_options(settings: ConnectionSettings) -> dict[str, Any]:
    """Bootstrap servers and security: the keyword arguments every aiokafka client of `run` and `gateway` takes.
    Secrets are read now (from their files, or the environment), so a client made later uses a rotated one."""
    kwargs: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_servers,
        "security_protocol": settings.security_protocol,
    }
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        kwargs["ssl_context"] = create_ssl_context(
            cafile=settings.ssl_cafile,
            certfile=settings.ssl_certfile,
            keyfile=settings.ssl_keyfile,
            password=settings.secret("ssl_password"),
        )
        kwargs["ssl_context"].check_hostname = settings.ssl_check_hostname
    if settings.sasl_mechanism == "OAUTHBEARER":
        kwargs["sasl_mechanism"] = "OAUTHBEARER"
        kwargs["sasl_oauth_token_provider"] = _tokens(settings)
    elif settings.sasl_mechanism is not None:
        kwargs["sasl_mechanism"] = settings.sasl_mechanism
        kwargs["sasl_plain_username"] = settings.sasl_username
        kwargs["sasl_plain_password"] = settings.secret("sasl_password")
    return kwargs


def principal(settings: ConnectionSettings) -> str:
    """The principal the brokers see for these settings, as far as the client knows it: `User:<name>` for SASL PLAIN
    and SCRAM (the default principal mapping); empty otherwise (a certificate's or a token's subject is the
    broker's to map)."""
    if settings.security_protocol.startswith("SASL") and settings.sasl_mechanism != "OAUTHBEARER":
        return f"User:{settings.sasl_username}" if settings.sasl_username else ""
    return ""


@functools.lru_cache(maxsize=4)
def _tokens(settings: ConnectionSettings) -> ClientCredentialsTokens:
    """One token provider per settings, so every client of the process shares its cached token."""
    assert settings.oauth_token_endpoint is not None and settings.oauth_client_id is not None  # checked by settings
    return ClientCredentialsTokens(
        settings.oauth_token_endpoint, settings.oauth_client_id, lambda: settings.secret("oauth_client_secret"),
        scope=settings.oauth_scope, timeout_s=settings.oauth_timeout_ms / 1000,
    )


def transactional_id(settings: Settings, tp: TopicPartition) -> str:
    """The producer id owning one source partition; the same id on every worker is what fences zombies."""
    return f"{settings.transactional_id_prefix}:{settings.group_id}:{tp.topic}:{tp.partition}"


def make_group_consumer(settings: Settings) -> AIOKafkaConsumer:
    """A read_committed group member without auto-commit; offsets go through the producers' transactions."""
    return AIOKafkaConsumer(
        client_id=settings.client_id,
        group_id=settings.group_id,
        group_instance_id=settings.group_instance_id,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
        max_poll_interval_ms=settings.max_poll_interval_ms,
        max_poll_records=settings.max_poll_records,
        # A record's delay counts from its source timestamp, so by default a fetch returns as soon as anything
        # arrives; waiting for 64 KiB (up to 20 ms) took a sixth off the worker's CPU at half load and put
        # about 20 ms on every record.
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        fetch_min_bytes=settings.fetch_min_bytes,
        partition_assignment_strategy=(StickyPartitionAssignor,),
        **connection_options(settings),
    )


def make_replay_consumer(settings: Settings) -> AIOKafkaConsumer:
    """A group-less read_committed consumer that reads history for a rebuild and commits nothing."""
    return AIOKafkaConsumer(
        client_id=f"{settings.client_id}-replay",
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        max_poll_records=max(settings.max_poll_records, 5000),
        fetch_max_wait_ms=100,
        max_partition_fetch_bytes=8 * 1024 * 1024,
        fetch_max_bytes=64 * 1024 * 1024,
        **connection_options(settings),
    )


def make_transactional_producer(
    settings: Settings, tp: TopicPartition, batch_bytes: int = MAX_BATCH_BYTES
) -> AIOKafkaProducer:
    """An idempotent transactional producer for one source partition, batching up to `batch_bytes` per partition
    (`TopicLimits.batch_bytes`: a batch of small records must fit its topic's `max.message.bytes`)."""
    return AIOKafkaProducer(
        client_id=f"{settings.client_id}-p{tp.partition}",
        transactional_id=transactional_id(settings, tp),
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
        # Transaction handshakes retry on CONCURRENT_TRANSACTIONS while the last commit's markers are written;
        # aiokafka's 100 ms default backoff would dominate the commit latency.
        retry_backoff_ms=20,
        max_batch_size=batch_bytes,
        max_request_size=MAX_REQUEST_BYTES,
        transaction_timeout_ms=settings.transaction_timeout_ms,
        **connection_options(settings),
    )


def make_admin(settings: Settings) -> AIOKafkaAdminClient:
    """An admin client for committed-offset look-ups."""
    return AIOKafkaAdminClient(client_id=f"{settings.client_id}-admin", **connection_options(settings))
