"""Apache Kafka's standard command-line tools (kafka-consumer-groups.sh and friends) run from the Maven jars.

The jars of `org.apache.kafka:kafka-tools` at the launcher's Kafka version are resolved once into
`<cache>/kafka-tools-<version>/libs`; that directory is complete exactly when its stamp holds the digest of
the pom and version that produced it. Usage::

    python -m devtools.kafka_tools consumer-groups --bootstrap-server 127.0.0.1:9092 --group g --describe
    python -m devtools.kafka_tools topics --bootstrap-server 127.0.0.1:9092 --list
    python -m devtools.kafka_tools console-consumer --bootstrap-server ... --topic t --from-beginning
    python -m devtools.kafka_tools acls --bootstrap-server ... --command-config admin.properties --list

`configs` (kafka-configs.sh) is still the broker's own class in Kafka 4.1, so it runs on the broker's jars.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from devtools._kafka_jars import cache_root, resolve_jars, resolve_maven_libs
from devtools.kafka_cluster import KAFKA_VERSION
from worker.errors import ConfigError, KafkaWorkerError

__all__ = [
    "POM",
    "TOOLS",
    "GroupLag",
    "committed_lag",
    "java_command",
    "main",
    "resolve_tools",
    "run_tool",
    "tools_home",
    "wait_caught_up",
]

POM = Path(__file__).resolve().parent / "kafka-tools" / "pom.xml"

TOOLS: dict[str, str] = {
    "consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "topics": "org.apache.kafka.tools.TopicCommand",
    "console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "acls": "org.apache.kafka.tools.AclCommand",
    "configs": "kafka.admin.ConfigCommand",
}
"""Tool name (the `kafka-<name>.sh` script of a Kafka release) to its main class in kafka-tools (or the broker)."""
_ON_BROKER_JARS = frozenset({"configs"})

_JVM_OPTS = (
    "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dorg.slf4j.simpleLogger.logFile=System.err",
)  # fmt: skip


def tools_home(version: str = KAFKA_VERSION) -> Path:
    """The cache directory of one Kafka version's tools; its `libs/` holds the class path."""
    return cache_root() / f"kafka-tools-{version}"


def resolve_tools(version: str = KAFKA_VERSION, *, verbose: bool = False) -> Path:
    """The `libs` directory of kafka-tools `version`; Maven runs once when the cache is missing or stale."""
    return resolve_maven_libs(POM, "kafka-tools", tools_home(version), version, verbose=verbose)


def java_command(tool: str, args: Sequence[str], version: str = KAFKA_VERSION) -> list[str]:
    """The argv that runs `tool` (a key of TOOLS) with `args`; resolves the jars if needed."""
    main_class = TOOLS.get(tool)
    if main_class is None:
        raise ConfigError(f"unknown Kafka tool {tool!r}; known: {', '.join(sorted(TOOLS))}")
    java = shutil.which("java")
    if java is None:
        raise KafkaWorkerError("cannot run the Kafka tools: `java` (17 or newer) is not on PATH")
    libs = resolve_jars(version) if tool in _ON_BROKER_JARS else resolve_tools(version)
    extra = os.environ.get("KAFKA_TOOLS_JAVA_OPTS", "").split()
    return [java, *_JVM_OPTS, *extra, "-cp", f"{libs}/*", main_class, *args]


def run_tool(
    tool: str, args: Sequence[str], *, version: str = KAFKA_VERSION, timeout: float | None = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run `tool` to completion and capture its output; the caller checks `returncode`."""
    return subprocess.run(
        java_command(tool, args, version), capture_output=True, text=True, check=False, timeout=timeout
    )


class GroupLag:
    """A probe of one group's committed progress on one topic: `async with GroupLag(bs, g, t) as p`."""

    def __init__(self, bootstrap_servers: str, group: str, topic: str) -> None:
        self.group = group
        self.topic = topic
        self._admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=10000)
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap_servers, enable_auto_commit=False, group_id=None
        )
        self._parts: list[TopicPartition] = []
        self._coordinator: int | None = None  # found once: a look-up per poll doubles the broker's work

    async def __aenter__(self) -> GroupLag:
        await self._admin.start()
        try:
            await self._consumer.start()
            described = await self._admin.describe_topics([self.topic])
            self._parts = [
                TopicPartition(self.topic, int(p["partition"])) for d in described for p in d["partitions"]
            ]
            if not self._parts:
                raise KafkaWorkerError(
                    f"topic {self.topic!r} has no partitions (does it exist?): {described}"
                )
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            await self._consumer.stop()
        await self._admin.close()

    async def committed(self) -> dict[int, int]:
        """The group's committed offset per partition (0 where it has none)."""
        for attempt in itertools.count():
            try:
                if self._coordinator is None:
                    self._coordinator = await self._admin.find_coordinator(self.group)
                got = await self._admin.list_consumer_group_offsets(
                    self.group, self._coordinator, partitions=self._parts
                )
                break
            except KafkaError as exc:  # a fresh cluster creates __consumer_offsets on first use
                self._coordinator = None  # it may have moved (a node failed)
                if not exc.retriable or attempt >= 100:
                    raise
                await asyncio.sleep(0.2)
        return {tp.partition: max(0, got[tp].offset) if tp in got else 0 for tp in self._parts}

    async def lag(self) -> dict[int, int]:
        """End offset minus the committed offset, per partition."""
        ends = await self._consumer.end_offsets(self._parts)
        done = await self.committed()
        return {tp.partition: max(0, ends[tp] - done[tp.partition]) for tp in self._parts}

    async def wait_caught_up(self, *, within_s: float, poll_s: float = 0.1) -> float:
        """Wait until no partition lags; return the seconds waited, or raise TimeoutError naming the lag."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        while True:
            lag = await self.lag()
            if not any(lag.values()):
                return loop.time() - began
            if loop.time() - began > within_s:
                raise TimeoutError(
                    f"group {self.group!r} still lags on {self.topic!r} after {within_s:.0f} s: {lag}"
                )
            await asyncio.sleep(poll_s)


async def committed_lag(bootstrap_servers: str, group: str, topic: str) -> dict[int, int]:
    """Per partition of `topic`: end offset minus the group's committed offset (the whole log if none)."""
    async with GroupLag(bootstrap_servers, group, topic) as probe:
        return await probe.lag()


async def wait_caught_up(
    bootstrap_servers: str, group: str, topic: str, *, within_s: float, poll_s: float = 0.1
) -> float:
    """Wait until the group's committed offsets reach every partition's end; return the seconds waited."""
    async with GroupLag(bootstrap_servers, group, topic) as probe:
        return await probe.wait_caught_up(within_s=within_s, poll_s=poll_s)


def main(argv: list[str] | None = None) -> int:
    """CLI: `python -m devtools.kafka_tools <tool> <args...>` replaces itself with the tool's JVM."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"}:
        names = "\n".join(f"  {name:17} {cls}" for name, cls in TOOLS.items())
        print(
            f"usage: python -m devtools.kafka_tools <tool> [tool args...]\n\ntools (Kafka {KAFKA_VERSION}):\n"
            f"{names}\n  --resolve-only    only fill the jar cache",
            file=sys.stderr,
        )
        return 0 if argv else 2
    if argv[0] == "--resolve-only":
        print(resolve_tools(verbose=True))
        return 0
    try:
        command = java_command(argv[0], argv[1:])
    except (ConfigError, KafkaWorkerError) as exc:
        print(f"kafka_tools: {exc}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    os.execv(command[0], command)
    return 0  # not reached: execv replaces the process


if __name__ == "__main__":
    sys.exit(main())
