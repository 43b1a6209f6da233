"""What every long-running process of the package has beside its broker connection: the settings `run` and `gateway`
share, read from the same `WORKER_*` variables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from worker.client import ConnectionSettings

__all__ = ["ProcessSettings"]


class ProcessSettings(ConnectionSettings):
    """What every long-running process of the package has beside its broker connection (`run` and `gateway` alike,
    from the same variables): its metrics and probe server, its log lines, and the event loop's stall warning."""

    model_config = SettingsConfigDict(env_prefix="WORKER_", extra="forbid", frozen=True)

    metrics_host: str = Field("0.0.0.0", description="Address of the metrics and probe server.")
    metrics_port: int = Field(
        9464, ge=0, le=65535, description="Port of `/metrics`, `/livez`, `/readyz`; 0 turns the server off."
    )
    log_format: Literal["auto", "json", "text"] = Field(
        "auto", description="`json` lines, readable `text`, or `auto` (text on a terminal, else json)."
    )
    log_level: str = Field("INFO", description="Log level: DEBUG, INFO, WARNING or ERROR.")
    stall_warning_ms: int = Field(100, ge=0, le=60_000, description=(
        "A turn of the event loop that holds it this long logs a WARNING naming the work in progress, the "
        "garbage collection and the CPU the loop got meanwhile; 0: never. The event loop's lag "
        "(`harness_agui_event_loop_lag_seconds`, the gateway's `harness_agui_gateway_event_loop_lag_seconds`) is "
        "measured at every turn."
    ))
