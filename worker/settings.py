"""Every knob of `python -m worker run`, read from flags and `WORKER_*` environment variables."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from worker.errors import ConfigError

__all__ = ["GapPolicy", "OpenStreamPolicy", "Settings"]


class GapPolicy(StrEnum):
    """What a sequence gap in a run does: close the run with RUN_ERROR, or halt the partition."""

    CLOSE_RUN = "close-run"
    HALT = "halt"


class OpenStreamPolicy(StrEnum):
    """What happens when a partition already holds `max_open_streams` open streams and a new one begins."""

    DEAD_LETTER = "dead-letter"
    HALT = "halt"


class Settings(BaseSettings):
    """Worker configuration; environment variables are the field names upper-cased with a `WORKER_` prefix."""

    model_config = SettingsConfigDict(env_prefix="WORKER_", extra="forbid", frozen=True)

    bootstrap_servers: str = "127.0.0.1:9092"
    source_topic: str = "harness.events"
    output_topic: str = "agui.events"
    dlq_topic: str = "harness.events.dlq"
    group_id: str = "harness-agui-worker"
    transactional_id_prefix: str = "harness-agui-worker"
    group_instance_id: str | None = None
    client_id: str = "harness-agui-worker"

    commit_interval_ms: int = Field(100, ge=1, le=60_000)
    max_records_per_transaction: int = Field(1000, ge=1, le=1_000_000)
    transaction_timeout_ms: int = Field(60_000, ge=1_000)
    session_timeout_ms: int = Field(10_000, ge=1_000)
    heartbeat_interval_ms: int = Field(3_000, ge=100)
    max_poll_interval_ms: int = Field(300_000, ge=1_000)
    max_poll_records: int = Field(500, ge=1)

    gap_policy: GapPolicy = GapPolicy.CLOSE_RUN
    max_open_streams: int = Field(100_000, ge=1)
    open_stream_policy: OpenStreamPolicy = OpenStreamPolicy.DEAD_LETTER
    closed_stream_memory: int = Field(10_000, ge=0)
    rebuild_lookback_ms: int = Field(24 * 3_600_000, ge=0)

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: SecretStr | None = None
    ssl_check_hostname: bool = True

    metrics_host: str = "0.0.0.0"
    metrics_port: int = Field(9464, ge=0, le=65535)
    log_format: Literal["auto", "json", "text"] = "auto"
    log_level: str = "INFO"
    shutdown_timeout_ms: int = Field(20_000, ge=100)

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if len({self.source_topic, self.output_topic, self.dlq_topic}) != 3:
            raise ConfigError(
                "source_topic, output_topic and dlq_topic must differ: "
                f"{self.source_topic!r}, {self.output_topic!r}, {self.dlq_topic!r}"
            )
        if self.security_protocol.startswith("SASL") and self.sasl_mechanism is None:
            raise ConfigError(f"security_protocol={self.security_protocol} needs sasl_mechanism")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be below "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )
        return self
