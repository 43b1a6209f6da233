"""A real Apache Kafka 4.x KRaft cluster on loopback, started from the Maven jars, for tests and demos.

Every node is a combined broker+controller JVM with its own free ports and data directory; node indexes
are 0-based and node `i` has Kafka node id `i + 1`; whatever comes from Kafka metadata (a leader, a
coordinator) is a node id, turned into an index with `index_of`. Usage::

    with KafkaCluster.start(nodes=3) as cluster:
        cluster.create_topic("t", partitions=2)
        ... cluster.bootstrap_servers ...
        leader = cluster.index_of(cluster.leader_of("t", 0))
        cluster.stop_node(leader, kill=True)
        cluster.start_node(leader)

CLI: ``python -m devtools.kafka_cluster [--nodes N]`` prints the bootstrap servers and runs until Ctrl-C;
``--resolve-only`` just fills the jar cache.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import base64
import shutil
import signal
import sys
import tempfile
import time
import uuid
import weakref
from collections.abc import Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from devtools._kafka_jars import KAFKA_VERSION, resolve_jars
from devtools._kafka_node import KafkaNode, format_storage, free_port, free_ports, render_properties
from worker.errors import ConfigError, KafkaWorkerError

if TYPE_CHECKING:  # the secured mode's module needs `cryptography`, a test dependency
    from devtools.kafka_security import BrokerSecurity

__all__ = ["KAFKA_VERSION", "KafkaCluster", "create_topic_on", "free_port", "main", "resolve_jars"]

_T = TypeVar("_T")
_LIVE: weakref.WeakSet[KafkaCluster] = weakref.WeakSet()


def _run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine to completion on a private loop in a private thread (safe inside a running loop)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-admin") as pool:
        return pool.submit(asyncio.run, coro).result()


async def _broker_ids(bootstrap: str, options: Mapping[str, Any]) -> set[int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000, **options)
    try:
        await admin.start()
        info = await admin.describe_cluster()
        return {int(broker["node_id"]) for broker in info["brokers"]}
    finally:
        await admin.close()


async def _create_topic(bootstrap: str, topic: NewTopic, deadline: float, options: Mapping[str, Any]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000, **options)
    await admin.start()
    try:
        response = await admin.create_topics([topic])
        for entry in response.topic_errors:
            name, code = entry[0], entry[1]
            if code != 0:
                message = entry[2] if len(entry) > 2 else ""
                raise KafkaWorkerError(f"creating topic {name!r} failed with error code {code}: {message}")
        while True:
            described = {t["topic"]: t for t in await admin.describe_topics([topic.name])}
            info = described.get(topic.name)
            partitions = [] if info is None or info["error_code"] else info["partitions"]
            if len(partitions) == topic.num_partitions and all(p["leader"] >= 0 for p in partitions):
                return
            if time.monotonic() > deadline:
                raise KafkaWorkerError(f"topic {topic.name!r} has no leader for every partition: {info}")
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def _leader(bootstrap: str, topic: str, partition: int, options: Mapping[str, Any]) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000, **options)
    await admin.start()
    try:
        for info in await admin.describe_topics([topic]):
            for entry in info["partitions"]:
                if entry["partition"] == partition:
                    return int(entry["leader"])
    finally:
        await admin.close()
    raise KafkaWorkerError(f"partition {topic}-{partition} is not in the cluster metadata")


def create_topic_on(
    bootstrap_servers: str, name: str, partitions: int = 1, replication_factor: int = 1,
    config: Mapping[str, str] | None = None, *, timeout: float = 60.0, client: Mapping[str, Any] | None = None,
) -> None:  # fmt: skip
    """Create a topic on any cluster (not only a launched one) and wait until every partition has a leader;
    `client` holds the admin client's security arguments."""
    topic = NewTopic(name, partitions, replication_factor, topic_configs=dict(config or {}))
    _run(_create_topic(bootstrap_servers, topic, time.monotonic() + timeout, client or {}))


def _cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class KafkaCluster:
    """A running loopback KRaft cluster; it owns its JVMs and (unless given) its temporary directory."""

    def __init__(
        self, nodes: list[KafkaNode], workdir: Path, *, owns_workdir: bool, timeout: float,
        security: BrokerSecurity | None = None,
    ) -> None:  # fmt: skip
        self._nodes = nodes
        self.security = security
        self._workdir = workdir
        self._owns_workdir = owns_workdir
        self._timeout = timeout
        self._stopped = False
        _LIVE.add(self)

    # ---- lifecycle -------------------------------------------------------------------------------------
    @classmethod
    def start(
        cls, nodes: int = 1, *, version: str = KAFKA_VERSION, workdir: Path | None = None,
        broker_config: Mapping[str, str] | None = None, internal_partitions: int = 3, heap: str = "512m",
        timeout: float = 120.0, security: BrokerSecurity | None = None,
    ) -> KafkaCluster:  # fmt: skip
        """Format and start `nodes` combined nodes, returning once every broker is in the cluster metadata.

        Internal topics get replication factor min(3, nodes) and min ISR one less (at least 1);
        `broker_config` overrides any server property. With `security`, clients connect over SASL_SSL (or mutual
        TLS, or OAUTHBEARER on a listener of its own) and the authorizer denies what no ACL allows
        (`client_options` connects as the admin). Raises KafkaWorkerError
        with the log tails on failure.
        """
        if nodes < 1:
            raise ConfigError(f"a Kafka cluster needs at least one node, got nodes={nodes}")
        if internal_partitions < 1:
            raise ConfigError(f"internal_partitions must be >= 1, got {internal_partitions}")
        libs = resolve_jars(version)
        if shutil.which("java") is None:
            raise KafkaWorkerError("cannot start Kafka: `java` (17 or newer) is not on PATH")
        owns = workdir is None
        root = Path(tempfile.mkdtemp(prefix="kafka-cluster-")) if workdir is None else workdir
        settings = {"internal_partitions": internal_partitions, "extra": dict(broker_config or {})}
        for attempt in (1, 2):
            cluster = cls._build(root, libs, nodes, heap, settings, owns_workdir=owns, timeout=timeout,
                                 security=security)
            try:
                cluster._boot(libs)
            except BaseException as exc:
                detail = cluster._tails()
                cluster.stop(keep_workdir=True)
                if not isinstance(exc, KafkaWorkerError):
                    raise
                if attempt == 1 and ("BindException" in detail or "Address already in use" in detail):
                    continue  # another process took a port between free_ports() and the bind: new ports
                raise KafkaWorkerError(f"{exc}\nworkdir kept at {root}\n{detail}") from exc
            break
        return cluster

    @classmethod
    def _build(
        cls, root: Path, libs: Path, nodes: int, heap: str, settings: dict[str, Any], *, owns_workdir: bool,
        timeout: float, security: BrokerSecurity | None,
    ) -> KafkaCluster:  # fmt: skip
        per_node = 2 if security is None else 4
        ports = free_ports(per_node * nodes)
        system = () if security is None else security.jvm_options()
        members = [
            KafkaNode(i + 1, ports[per_node * i], ports[per_node * i + 1], root / f"node-{i + 1}", libs, heap,
                      tls_port=ports[per_node * i + 2] if security is not None else None,
                      oauth_port=ports[per_node * i + 3] if security is not None else None, system=system)
            for i in range(nodes)
        ]  # fmt: skip
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in members)
        for node in members:
            shutil.rmtree(node.directory, ignore_errors=True)
            node.directory.mkdir(parents=True)
            extra = dict(settings["extra"])
            if security is not None and node.tls_port is not None and node.oauth_port is not None:
                extra = {**security.node_properties(port=node.port, controller_port=node.controller_port,
                                                    tls_port=node.tls_port, oauth_port=node.oauth_port),
                         **extra}  # fmt: skip
            node.properties.write_text(render_properties(
                node_id=node.node_id, port=node.port, controller_port=node.controller_port,
                log_dir=node.directory / "data", voters=voters, cluster_size=nodes,
                internal_partitions=settings["internal_partitions"], extra=extra,
            ))  # fmt: skip
        return cls(members, root, owns_workdir=owns_workdir, timeout=timeout, security=security)

    def _boot(self, libs: Path) -> None:
        cluster_id = _cluster_id()
        with ThreadPoolExecutor(max_workers=min(self.size, 3)) as pool:
            formats = [
                pool.submit(format_storage, libs, n.properties, cluster_id, n.directory / "format.log")
                for n in self._nodes
            ]
            for future in formats:
                future.result()
        for node in self._nodes:
            node.launch()
        self._await_ready(list(range(self.size)))

    @classmethod
    async def start_async(cls, nodes: int = 1, **options: Any) -> KafkaCluster:
        """`start` run in a worker thread, so the calling event loop keeps running."""
        return await asyncio.to_thread(lambda: cls.start(nodes, **options))

    def stop(self, *, keep_workdir: bool = False) -> None:
        """Stop every node (SIGTERM together, SIGKILL after 5 s) and delete the directory if it is ours."""
        if self._stopped:
            return
        self._stopped = True
        for node in self._nodes:
            if node.running and node.process is not None:
                node.process.send_signal(signal.SIGTERM)
        for node in self._nodes:
            node.halt(timeout=5.0)
        if self._owns_workdir and not keep_workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
        _LIVE.discard(self)

    async def stop_async(self) -> None:
        """`stop` run in a worker thread."""
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> KafkaCluster:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    async def __aenter__(self) -> KafkaCluster:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop_async()

    # ---- nodes -----------------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Number of nodes, running or not."""
        return len(self._nodes)

    @property
    def bootstrap_servers(self) -> str:
        """`127.0.0.1:<port>` of every node, comma-separated (clients skip a stopped one)."""
        return ",".join(f"127.0.0.1:{node.port}" for node in self._nodes)

    @property
    def client_options(self) -> dict[str, Any]:
        """aiokafka client arguments beside `bootstrap_servers`: none, or the admin's security on a secured cluster."""
        return {} if self.security is None else self.security.admin_options()

    @property
    def tls_bootstrap_servers(self) -> str:
        """`127.0.0.1:<port>` of every node's mutual-TLS listener (secured clusters only)."""
        return ",".join(f"127.0.0.1:{node.tls_port}" for node in self._nodes if node.tls_port is not None)

    @property
    def oauth_bootstrap_servers(self) -> str:
        """`127.0.0.1:<port>` of every node's OAUTHBEARER listener (secured clusters only)."""
        return ",".join(f"127.0.0.1:{node.oauth_port}" for node in self._nodes if node.oauth_port is not None)

    @property
    def workdir(self) -> Path:
        """The directory holding every node's config, data and logs."""
        return self._workdir

    def node_id(self, i: int) -> int:
        """Kafka `node.id` of node index `i` (always `i + 1`)."""
        return self._node(i).node_id

    def index_of(self, node_id: int) -> int:
        """Node index of a Kafka node id."""
        return self._node(node_id - 1).node_id - 1

    def is_running(self, i: int) -> bool:
        """Whether node `i`'s JVM is alive."""
        return self._node(i).running

    def pid(self, i: int) -> int | None:
        """The process id of node `i`'s JVM while it runs, None once it stopped."""
        node = self._node(i)
        return node.process.pid if node.process is not None and node.running else None

    def log_path(self, i: int) -> Path:
        """Kafka's own log file of node `i` (it survives restarts; appended to)."""
        return self._node(i).log_path

    def log_tail(self, i: int, lines: int = 40) -> str:
        """The last lines of node `i`'s log and console output."""
        return self._node(i).tail(lines)

    def stop_node(self, i: int, *, kill: bool = False) -> None:
        """Stop node `i`: SIGTERM for a controlled shutdown (waits for it), or SIGKILL for a crash."""
        self._node(i).halt(kill=kill)

    async def stop_node_async(self, i: int, *, kill: bool = False) -> None:
        """`stop_node` run in a worker thread."""
        await asyncio.to_thread(lambda: self.stop_node(i, kill=kill))

    def start_node(self, i: int) -> None:
        """Restart node `i` with its data and ports; returns once it is back in the cluster metadata."""
        node = self._node(i)
        node.launch()
        try:
            self._await_ready([i])
        except KafkaWorkerError as exc:
            raise KafkaWorkerError(f"{exc}\n{node.tail()}") from exc

    async def start_node_async(self, i: int) -> None:
        """`start_node` run in a worker thread."""
        await asyncio.to_thread(self.start_node, i)

    # ---- topics ----------------------------------------------------------------------------------------
    def create_topic(
        self, name: str, partitions: int = 1, replication_factor: int | None = None,
        config: Mapping[str, str] | None = None,
    ) -> None:  # fmt: skip
        """Create a topic (RF defaults to min(3, size)) and wait until every partition has a leader."""
        rf = min(3, self.size) if replication_factor is None else replication_factor
        create_topic_on(self.bootstrap_servers, name, partitions, rf, config, timeout=self._timeout,
                        client=self.client_options)

    async def create_topic_async(
        self, name: str, partitions: int = 1, replication_factor: int | None = None,
        config: Mapping[str, str] | None = None,
    ) -> None:  # fmt: skip
        """`create_topic` on the calling event loop."""
        rf = min(3, self.size) if replication_factor is None else replication_factor
        topic = NewTopic(name, partitions, rf, topic_configs=dict(config or {}))
        await _create_topic(self.bootstrap_servers, topic, time.monotonic() + self._timeout, self.client_options)

    def leader_of(self, topic: str, partition: int = 0) -> int:
        """Kafka node id of the current leader of `topic`-`partition` (-1 if it has none); see `index_of`."""
        return _run(_leader(self.bootstrap_servers, topic, partition, self.client_options))

    # ---- internals -------------------------------------------------------------------------------------
    def _node(self, i: int) -> KafkaNode:
        if not 0 <= i < len(self._nodes):
            raise ConfigError(f"node index must be in [0, {len(self._nodes)}), got {i}")
        return self._nodes[i]

    def _await_ready(self, indexes: list[int]) -> None:
        deadline = time.monotonic() + self._timeout
        for i in indexes:
            self._nodes[i].wait_port(deadline)
        wanted = {self._nodes[i].node_id for i in indexes}
        bootstrap = ",".join(f"127.0.0.1:{self._nodes[i].port}" for i in indexes)
        seen: set[int] | str = set()
        while True:
            for i in indexes:
                if not self._nodes[i].running:
                    raise KafkaWorkerError(f"Kafka node {self._nodes[i].node_id} exited while starting")
            try:
                seen = _run(_broker_ids(bootstrap, self.client_options))
                if wanted <= seen:
                    return
            except (TimeoutError, KafkaError, OSError) as exc:
                seen = f"{type(exc).__name__}: {exc}"
            if time.monotonic() > deadline:
                raise KafkaWorkerError(
                    f"brokers {sorted(wanted)} not all registered after {self._timeout:.0f} s (last seen: {seen})"
                )
            time.sleep(0.25)

    def _tails(self) -> str:
        return "\n".join(node.tail() for node in self._nodes)


@atexit.register
def _stop_leftovers() -> None:
    for cluster in list(_LIVE):
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: start a cluster, print its bootstrap servers, run until Ctrl-C or SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m devtools.kafka_cluster", description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1, help="number of combined broker+controller nodes")
    parser.add_argument("--version", default=KAFKA_VERSION, help="Kafka release (Maven kafka_2.13)")
    parser.add_argument("--resolve-only", action="store_true", help="only resolve the jars into the cache")
    args = parser.parse_args(argv)
    if args.resolve_only:
        began = time.monotonic()
        libs = resolve_jars(args.version, verbose=True)
        print(f"Kafka {args.version} jars ready in {libs} ({time.monotonic() - began:.1f} s)")
        return 0

    def _terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    began = time.monotonic()
    cluster = KafkaCluster.start(args.nodes, version=args.version)
    try:
        print(
            f"Kafka {args.version}, {args.nodes} node(s), ready in {time.monotonic() - began:.1f} s",
            file=sys.stderr,
        )
        print(f"logs: {cluster.workdir}/node-*/server.log", file=sys.stderr)
        print(cluster.bootstrap_servers, flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("stopping", file=sys.stderr)
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
