"""Builds aiokafka clients from settings; the only place that maps our settings onto client arguments."""

from __future__ import annotations

import functools
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.helpers import create_ssl_context

from worker.client._oauth import ClientCredentialsTokens
from worker.client._settings import ConnectionSettings

__all__ = ["MAX_BATCH_BYTES", "MAX_REQUEST_BYTES", "connection_options", "make_admin", "make_consumer",
           "make_transactional_producer", "principal"]  # fmt: skip

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


def make_consumer(settings: ConnectionSettings, client_id: str, **options: Any) -> AIOKafkaConsumer:
    """A read_committed consumer that commits nothing (a group's offsets go through transactions, or nowhere):
    of no group and reading from the earliest offset unless `options` say otherwise."""
    kwargs: dict[str, Any] = {"group_id": None, "auto_offset_reset": "earliest"} | options
    return AIOKafkaConsumer(client_id=client_id, enable_auto_commit=False, isolation_level="read_committed",
                            **kwargs, **connection_options(settings))  # fmt: skip


def make_transactional_producer(
    settings: ConnectionSettings, client_id: str, transactional_id: str, *, batch_bytes: int = MAX_BATCH_BYTES,
    transaction_timeout_ms: int,
) -> AIOKafkaProducer:  # fmt: skip
    """An idempotent transactional producer, batching up to `batch_bytes` per partition (a batch of small records
    must fit its topic's `max.message.bytes`)."""
    return AIOKafkaProducer(
        client_id=client_id,
        transactional_id=transactional_id,
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
        # Transaction handshakes retry on CONCURRENT_TRANSACTIONS while the last commit's markers are written;
        # aiokafka's 100 ms default backoff would dominate the commit latency.
        retry_backoff_ms=20,
        max_batch_size=batch_bytes,
        max_request_size=MAX_REQUEST_BYTES,
        transaction_timeout_ms=transaction_timeout_ms,
        **connection_options(settings),
    )


def make_admin(settings: ConnectionSettings, client_id: str) -> AIOKafkaAdminClient:
    """An admin client (offsets, groups, topics and configs)."""
    return AIOKafkaAdminClient(client_id=client_id, **connection_options(settings))
