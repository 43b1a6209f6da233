"""Operations around the core: Prometheus metrics, liveness/readiness over HTTP, and log setup."""

from __future__ import annotations

from worker.ops.health import Health, HealthServer, PartitionState
from worker.ops.logging import configure_logging
from worker.ops.metrics import Metrics

__all__ = ["Health", "HealthServer", "Metrics", "PartitionState", "configure_logging"]
