"""Operations around the core: Prometheus metrics, liveness/readiness over HTTP, the event loop's lag, and log
setup."""

from __future__ import annotations

from worker.ops.health import Health, HealthServer, Readiness
from worker.ops.logging import configure_logging
from worker.ops.loop import LoopMonitor, working_on
from worker.ops.metrics import Metrics

__all__ = ["Health", "HealthServer", "LoopMonitor", "Metrics", "Readiness", "configure_logging", "working_on"]
