"""Operations around the core: Prometheus metrics, liveness/readiness over HTTP (the one probe server of both
commands), the event loop's lag, log setup, and the settings of all of these (`ProcessSettings`)."""

from __future__ import annotations

from worker.ops.health import Health, HealthServer, Readiness
from worker.ops.logging import configure_logging
from worker.ops.loop import LoopMonitor, working_on
from worker.ops.metrics import Metrics
from worker.ops.settings import ProcessSettings

__all__ = ["Health", "HealthServer", "LoopMonitor", "Metrics", "ProcessSettings", "Readiness", "configure_logging",
           "working_on"]  # fmt: skip
