"""The broker a bench runs on, and the heading its figures print under."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from devtools.kafka_cluster import KafkaCluster

__all__ = ["heading", "on_a_broker"]

_T = TypeVar("_T")


def on_a_broker(name: str, bench: Callable[[str, Path, int | None], Coroutine[Any, Any, _T]]) -> _T:
    """`bench(bootstrap, logs, broker pid)` run on KAFKA_BOOTSTRAP_SERVERS when set (no pid then), else on a
    one-node Kafka started here and stopped after; its logs folder (`bench-<name>-*`) is removed unless
    BENCH_KEEP_LOGS is set."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    cluster = None if external else KafkaCluster.start(nodes=1)
    try:
        logs = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
        if cluster is None:
            result = asyncio.run(bench(external, logs, None))
        else:
            result = asyncio.run(bench(cluster.bootstrap_servers, logs, cluster.pid(0)))
        if not os.environ.get("BENCH_KEEP_LOGS"):
            shutil.rmtree(logs)
        return result
    finally:
        if cluster is not None:
            cluster.stop()


def heading(name: str) -> str:
    """`bench.<name>`, the cores and the conversion core of the installed package (as a fresh process imports it)."""
    build = subprocess.run([sys.executable, "-P", "-c", "from worker._native import describe; print(describe())"],
                           capture_output=True, text=True, check=False).stdout.strip()
    return f"bench.{name} ({os.cpu_count()} cores; the installed package's conversion core: {build})"
