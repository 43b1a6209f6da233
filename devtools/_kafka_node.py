"""One KRaft node (broker and controller in one JVM) of a loopback test cluster: its config and its process.

A node keeps its ports, directory and node id for its whole life, so a restart rejoins with its data.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from devtools._kafka_jars import LOG_CONFIG
from worker.errors import KafkaWorkerError

__all__ = [
    "JVM_OPTIONS_ENV", "LIGHT_JVM", "KafkaNode", "format_storage", "free_port", "free_ports", "render_properties",
]

_PR_SET_PDEATHSIG = 1
# Brokers are forked from this one long-lived thread: PR_SET_PDEATHSIG fires when the forking *thread*
# ends, so a broker dies with the Python process that started it, and not earlier.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-spawner")


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not Linux: rely on stop() and atexit only
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def free_port() -> int:
    """One port that was free on 127.0.0.1 a moment ago."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """Ports that were free on 127.0.0.1 a moment ago (all held open together, so they are distinct)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def render_properties(
    *, node_id: int, port: int, controller_port: int, log_dir: Path, voters: str, cluster_size: int,
    internal_partitions: int, extra: Mapping[str, str],
) -> str:  # fmt: skip
    """The server.properties of one combined node; internal topics get RF min(3, size), min ISR RF-1 (>=1)."""
    rf = min(3, cluster_size)
    min_isr = max(1, rf - 1)
    props: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dir),
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "default.replication.factor": str(rf),
        "min.insync.replicas": str(min_isr),
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": str(rf),
        "offsets.topic.num.partitions": str(internal_partitions),
        "transaction.state.log.replication.factor": str(rf),
        "transaction.state.log.min.isr": str(min_isr),
        "transaction.state.log.num.partitions": str(internal_partitions),
        "share.coordinator.state.topic.replication.factor": str(rf),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        "group.initial.rebalance.delay.ms": "0",
        # A crashed node is noticed within a few seconds instead of the default 9 s.
        "broker.heartbeat.interval.ms": "1000",
        "broker.session.timeout.ms": "6000",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        # The cleaner looks for compactable logs every half second instead of every 15 s, so a test of a
        # compacted topic sees compaction within seconds.
        "log.cleaner.backoff.ms": "500",
    }
    props.update(extra)
    return "".join(f"{key}={value}\n" for key, value in props.items())


# The C1 compiler only and the serial collector: a tool starts faster, and a broker sharing a small machine
# with the worker leaves it the cores (with full tiered compilation, C2's compile thread alone kept 0.4 of
# 2 cores busy through a whole benchmark and tripled the worker's p99 delay).
LIGHT_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
# Set to override a broker's JVM options, e.g. "-XX:+UseG1GC" for a production-like JIT on a large machine.
JVM_OPTIONS_ENV = "HARNESS_AGUI_KAFKA_JVM_OPTIONS"


def _java(
    libs: Path, main: str, args: list[str], node_log: Path, heap: str, *, brief: bool = False,
    system: tuple[str, ...] = (),
) -> list[str]:  # fmt: skip
    chosen = os.environ.get(JVM_OPTIONS_ENV, "").split()
    tuning = [*LIGHT_JVM] if brief or not chosen else chosen
    return [
        "java", f"-Xmx{heap}", *tuning, *system, "-Djava.awt.headless=true", "-Dlog4j2.formatMsgNoLookups=true",
        f"-Dlog4j2.configurationFile={LOG_CONFIG}", f"-Dkafka.node.log={node_log}",
        "-cp", f"{libs}/*", main, *args,
    ]  # fmt: skip


def format_storage(libs: Path, properties: Path, cluster_id: str, node_log: Path) -> None:
    """Run `kafka.tools.StorageTool format` for one node (static voters, so no `--standalone`)."""
    command = _java(libs, "kafka.tools.StorageTool", ["format", f"--cluster-id={cluster_id}", f"--config={properties}"],
                    node_log, "256m", brief=True)  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise KafkaWorkerError(
            f"StorageTool format failed for {properties} (exit {done.returncode}): "
            f"{(done.stdout + done.stderr).strip()[-2000:]}"
        )


@dataclass
class KafkaNode:
    """A node's fixed identity (id, ports, directory) and its current JVM, if running."""

    node_id: int
    port: int
    controller_port: int
    directory: Path
    libs: Path
    heap: str = "512m"
    tls_port: int | None = None  # the mutual-TLS listener of a secured node
    oauth_port: int | None = None  # the OAUTHBEARER listener of a secured node
    system: tuple[str, ...] = ()  # JVM system properties (`-Dname=value`) the node needs
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def properties(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def console_path(self) -> Path:
        return self.directory / "console.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def launch(self) -> None:
        """Start the JVM (no-op if running): stdout/stderr to console.log, Kafka's own log to server.log."""
        with self._lock:
            if self.running:
                return
            command = _java(self.libs, "kafka.Kafka", [str(self.properties)], self.log_path, self.heap,
                            system=self.system)
            with self.console_path.open("ab") as console:
                self.process = _SPAWNER.submit(
                    subprocess.Popen, command, stdin=subprocess.DEVNULL, stdout=console, stderr=console,
                    cwd=self.directory, start_new_session=True, preexec_fn=_die_with_parent,
                ).result()  # fmt: skip

    def halt(self, *, kill: bool = False, timeout: float = 60.0) -> None:
        """SIGTERM (controlled shutdown) or SIGKILL (crash), then wait; a hung SIGTERM ends in SIGKILL."""
        with self._lock:
            process = self.process
            if process is None or process.poll() is not None:
                return
            process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def wait_port(self, deadline: float) -> None:
        """Block until the client port accepts, or raise if the JVM exits or the deadline passes."""
        while True:
            if not self.running:
                code = None if self.process is None else self.process.returncode
                raise KafkaWorkerError(f"Kafka node {self.node_id} exited with code {code} while starting")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise KafkaWorkerError(
                        f"Kafka node {self.node_id} did not accept on 127.0.0.1:{self.port} in time"
                    ) from None
                time.sleep(0.2)

    def tail(self, lines: int = 40) -> str:
        """The last lines of server.log and console.log, for error messages."""
        parts = []
        for path in (self.log_path, self.console_path):
            if path.is_file():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path} (last {len(text)} lines)\n" + "\n".join(text))
        return "\n".join(parts) or f"(no log files in {self.directory})"
