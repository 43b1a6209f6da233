"""Every knob of `python -m worker gateway`, read from flags and the same `WORKER_*` variables as `run`."""

from __future__ import annotations

import socket
import urllib.parse
from typing import Self

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from worker.errors import ConfigError
from worker.gateway.directory import BYTES_PER_INDEXED_RUN
from worker.gateway.threads import BYTES_PER_INDEXED_THREAD_RUN
from worker.ops import ProcessSettings

__all__ = ["GatewaySettings"]


class GatewaySettings(ProcessSettings):
    """Gateway configuration; the broker connection, the topic names and logging share the worker's variables, so
    one ConfigMap and Secret serve both commands."""

    model_config = SettingsConfigDict(env_prefix="WORKER_", extra="forbid", frozen=True)

    output_topic: str = Field("agui.events", description="The worker's output topic of AG-UI events, keyed by run.")
    display_topic: str = Field("", description=(
        "The worker's display topic (its `display_topic`): the late-join prelude and the run directory come from it; "
        "required."
    ))
    thread_index_topic: str = Field("", description=(
        "The worker's thread index topic (its `thread_index_topic`), co-partitioned with the output topic: threads "
        "are served from it; empty: the thread endpoints answer 404 `no-thread-index`."
    ))
    http_host: str = Field("0.0.0.0", description="Address the HTTP API (runs, viewer) listens on.")
    http_port: int = Field(8080, ge=0, le=65535, description="Port of the HTTP API; 0 picks a free one.")
    auth_key_file: str | None = Field(None, description=(
        "File holding the HMAC key (at least 32 bytes) that signs access tokens naming no `kid` (HS256 JWTs, and "
        "v1 tokens until 0.5.0); one of auth_key_file, auth_keys_dir and auth_jwks_url is required unless "
        "insecure_no_auth."
    ))
    insecure_no_auth: bool = Field(
        False, description="Serve every run to anyone, without a token: for a laptop only, never a shared cluster."
    )
    cors_origins: str = Field("", description=(
        "Comma-separated origins a browser may call the API from (`*` for any); empty: same origin only."
    ))
    max_connections: int = Field(
        10_000, ge=1, description="Open event streams at most; beyond, 503 with Retry-After."
    )
    retry_after_s: int = Field(5, ge=1, le=3600, description="Retry-After of a 503 answer, in seconds.")
    connection_queue_events: int = Field(1_024, ge=16, le=1_000_000, description=(
        "Events queued for one connection at most; a client that falls further behind is dropped (and resumes "
        "with Last-Event-ID)."
    ))
    max_tracked_runs: int = Field(100_000, ge=1, description=(
        "Live runs whose recent events the gateway keeps in memory for late joins and resumes; beyond, the least "
        "recently active are dropped and read back from the output topic when asked for."
    ))
    recent_events_per_run: int = Field(4_096, ge=16, description=(
        "Recent events kept per tracked run at most (those after its latest display record, and those younger "
        "than recent_window_ms)."
    ))
    recent_window_ms: int = Field(10_000, ge=0, le=600_000, description=(
        "Events younger than this stay in memory even when a display record covers them, so a client that "
        "reconnects soon resumes without a read of the output topic."
    ))
    max_indexed_runs: int = Field(1_000_000, ge=1, description=(
        f"Runs of the display topic the gateway can find (about {BYTES_PER_INDEXED_RUN} bytes each, docs/sizing.md); "
        "beyond, the least recently updated are forgotten and answered 404."
    ))
    max_thread_runs: int = Field(1_000_000, ge=1, description=(
        "Runs of the threads of this replica's thread index partitions kept in memory (about "
        f"{BYTES_PER_INDEXED_THREAD_RUN} bytes each); "
        "beyond, the least recently changed threads no stream follows are forgotten and answered 404."
    ))
    display_cache_bytes: int = Field(64 * 1024 * 1024, ge=0, description=(
        "Display records kept in memory for late joins, most recently updated first; others are read back."
    ))
    history_readers: int = Field(4, ge=1, le=64, description=(
        "Consumers that read older events of the output topic (a cursor or a whole run not in memory), each "
        "serving one request at a time."
    ))
    fetch_max_wait_ms: int = Field(
        50, ge=1, le=10_000, description="Longest a fetch of the topics' tail waits for new records."
    )
    keepalive_ms: int = Field(15_000, ge=100, le=60_000, description=(
        "No stream stays silent longer: a quiet stream gets a `: keep-alive` comment every half to whole of this."
    ))
    max_body_bytes: int = Field(
        1024 * 1024, ge=1024, description="Largest accepted POST body (a RunAgentInput); larger ones get 413."
    )
    drain_timeout_ms: int = Field(10_000, ge=0, description=(
        "On SIGTERM: streams are closed with a comment (POST streams with RUN_ERROR) and the process waits this "
        "long for them to finish."
    ))
    gateway_group_id: str = Field("", description=(
        "Consumer group the gateway replicas of one deployment share the output topic's partitions in (nothing is "
        "committed); empty: `harness-agui-gateway.<output_topic>`."
    ))
    advertised_url: str = Field("", description=(
        "Base URL at which the other replicas reach this one's HTTP API (in Kubernetes the pod's IP); empty: "
        "`http://<host name>:<http_port>`."
    ))
    peer_key_file: str | None = Field(None, description=(
        "File holding the key (at least 32 bytes) that authenticates requests one replica forwards to another; "
        "default: auth_key_file. Without either, forwarded requests are marked but not signed (the owner still "
        "checks every client's token), and the gateway says so at start unless insecure_no_auth."
    ))
    forward_wait_ms: int = Field(30_000, ge=0, le=600_000, description=(
        "How long a request for a run whose partition has no reachable owner (a rebalance, a replica that died) "
        "waits for one before it is answered 503 with Retry-After."
    ))
    session_timeout_ms: int = Field(10_000, ge=1_000, description=(
        "Gateway group session timeout: how long a replica that stopped without leaving keeps its partitions."
    ))
    heartbeat_interval_ms: int = Field(3_000, ge=100, description="Gateway group heartbeat interval.")
    auth_keys_dir: str | None = Field(None, description=(
        "Directory of HMAC keys (at least 32 bytes each) for HS256 JWTs, one file per key named by the `kid` of "
        "the tokens it signs (a mounted Kubernetes Secret works as it is); names starting with a dot are left out."
    ))
    auth_jwks_url: str | None = Field(None, description=(
        "JWKS URL of the identity provider whose RS256 and ES256 JWTs are accepted (https; http on a loopback "
        "address only); needs auth_audience and auth_issuer."
    ))
    auth_audience: str | None = Field(
        None, description="The `aud` every JWT must name; required with auth_jwks_url, unchecked when unset."
    )
    auth_issuer: str | None = Field(
        None, description="The `iss` every JWT must carry; required with auth_jwks_url, unchecked when unset."
    )
    auth_keys_max_age_s: int = Field(300, ge=1, le=86_400, description=(
        "The keys are read again (the files, the JWKS URL) once this old, so a key taken away is refused soon."
    ))
    auth_keys_min_refresh_s: int = Field(30, ge=0, le=3600, description=(
        "A token naming a `kid` the gateway lacks makes it read its keys again at most this often, however "
        "many such tokens come."
    ))
    auth_leeway_s: int = Field(
        30, ge=0, le=300, description="Clock difference allowed when checking a JWT's `exp` and `nbf`, in seconds."
    )

    @model_validator(mode="after")
    def _servable(self) -> Self:
        if not self.display_topic:
            raise ConfigError("display_topic is required: the gateway finds runs and builds late joins from it")
        if self.display_topic == self.output_topic:
            raise ConfigError(f"display_topic and output_topic must differ, both are {self.output_topic!r}")
        if self.thread_index_topic in (self.output_topic, self.display_topic):
            raise ConfigError(f"thread_index_topic {self.thread_index_topic!r} must differ from the output and display "
                              "topics")  # fmt: skip
        if not (self.auth_key_file or self.auth_keys_dir or self.auth_jwks_url or self.insecure_no_auth):
            raise ConfigError(
                "auth_key_file, auth_keys_dir or auth_jwks_url is required (the keys that sign access tokens); for "
                "a local try only, --insecure-no-auth serves every run to anyone"
            )
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be below "
                              f"session_timeout_ms ({self.session_timeout_ms})")
        if self.auth_jwks_url:
            self._jwks_usable(self.auth_jwks_url)
        return self

    def _jwks_usable(self, url: str) -> None:
        if not (self.auth_audience and self.auth_issuer):
            raise ConfigError("auth_jwks_url needs auth_audience and auth_issuer: without them the identity "
                              "provider's tokens for any application would be accepted")  # fmt: skip
        parts = urllib.parse.urlsplit(url)
        loopback = parts.hostname in ("localhost", "::1") or (parts.hostname or "").startswith("127.")
        if parts.scheme != "https" and not (parts.scheme == "http" and loopback):
            raise ConfigError(f"auth_jwks_url {url!r} must be an https URL (http only on a loopback address): "
                              "whoever can change the keys in transit could mint tokens")  # fmt: skip

    @property
    def group(self) -> str:
        """The gateway group's id."""
        return self.gateway_group_id or f"harness-agui-gateway.{self.output_topic}"

    @property
    def peer_url(self) -> str:
        """The URL this replica advertises to the others."""
        return (self.advertised_url or f"http://{socket.gethostname()}:{self.http_port}").rstrip("/")

    @property
    def allowed_origins(self) -> tuple[str, ...]:
        """The CORS origins, parsed."""
        return tuple(origin.strip() for origin in self.cors_origins.split(",") if origin.strip())
