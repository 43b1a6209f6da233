"""`worker check` and `worker gateway check`: whether a cluster is ready for the settings, proved with requests that
change nothing.

Every right the README grants is asked for by a request the broker authorizes with exactly that right, and that
leaves no trace: Describe on a topic by its metadata (asked without auto-creation), Read by a fetch at the topic's
end, DescribeConfigs by reading the configs, Create by a topic creation the broker only validates, Describe on
the transactional id by finding its coordinator, Write on it (and Read on the group, Write on the topics) by
adding partitions and the group's offsets to a transaction of producer id -1, which no producer holds: the
coordinator answers INVALID_PRODUCER_ID_MAPPING after the authorizer passed the request and before anything is
written. No group is joined and no record written. (Finding a coordinator makes the broker create its internal
`__consumer_offsets` or `__transaction_state` topic if the cluster has none yet, as any first client would.)

The layout is checked with the rules the worker applies at start (`worker/live/topics.py`), and the memory the
settings need (`worker/ops/capacity.py`) against the cgroup's limit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final, Literal

from aiokafka import AIOKafkaClient, AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.client import CoordinationType
from aiokafka.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupAuthorizationFailedError,
    KafkaError,
    NotCoordinatorError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)
from aiokafka.protocol.group import HeartbeatRequest
from aiokafka.protocol.transaction import AddOffsetsToTxnRequest, AddPartitionsToTxnRequest

from worker.cli import quiet_client_logs, readable_settings, settings_parser
from worker.client import (
    ConnectionSettings,
    Denied,
    ErrorCode,
    authorization_error,
    connection_options,
    make_admin,
    make_consumer,
    principal,
    reach_once,
    topic_metadata,
)
from worker.errors import ConfigError, KafkaWorkerError
from worker.live.topics import (
    BROKER_TIMEOUTS,
    CHANGELOG_CONFIGS,
    CHANGELOG_WHY,
    DISPLAY_CONFIGS,
    DISPLAY_WHY,
    INDEX_CONFIGS,
    INDEX_WHY,
    broker_configs,
    check_broker_timeouts,
    check_changelog_policy,
    check_changelog_room,
    check_copartitioned,
    check_display_policy,
    check_index_policy,
    check_record_room,
    config_value,
    record_limit,
)
from worker.ops.capacity import WorstCase, memory_limit
from worker.settings import Settings

__all__ = ["Check", "Status", "add_check_flags", "check_gateway", "check_worker", "main_check", "print_checks"]

Status = Literal["pass", "fail", "skip"]
"""A check's outcome: `skip` when it could not be asked (a right it needs is missing, or it does not apply)."""

_NOT_A_MEMBER: Final = frozenset({ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID,
                                  ErrorCode.GROUP_ID_NOT_FOUND})  # fmt: skip
_RETRIABLE: Final = (CoordinatorNotAvailableError, CoordinatorLoadInProgressError, NotCoordinatorError)
_RETRIABLE_CODES: Final = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                     ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS})  # fmt: skip
_NO_PRODUCER: Final = -1  # a producer id no producer holds: the coordinator refuses it after authorization
_CLEANUP, _MAX_MESSAGE = "cleanup.policy", "max.message.bytes"
_MIB: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Check:
    """One row of the report: what was checked, its status, and what was found or, for a failure, the problem and
    its fix."""

    what: str
    status: Status
    detail: str

    def as_json(self) -> dict[str, str]:
        return {"check": self.what, "status": self.status, "detail": self.detail}


@dataclass(slots=True)
class _Topic:
    """One topic as the check finds it: its role (the setting naming it), the rights the worker needs on it, and
    the base topic whose partition count a topic the worker creates takes."""

    role: str
    name: str
    read: bool = False
    write: bool = False
    configs: bool = False
    base: _Topic | None = None
    code: int = -1  # the metadata answer's error code; -1 before it was asked
    partitions: int = 0
    replication: int = 0
    read_configs: dict[str, str] = field(default_factory=dict)  # the configs that could be read

    @property
    def label(self) -> str:
        return f"{self.role} '{self.name}'"

    @property
    def present(self) -> bool:
        return self.code == 0


class _Report:
    """The rows in the order they were checked."""

    def __init__(self, who: str) -> None:
        self.rows: list[Check] = []
        self.who = who

    def add(self, what: str, status: Status, detail: str) -> None:
        self.rows.append(Check(what, status, detail))

    def denied(self, what: str, resource_type: str, name: str, operations: tuple[str, ...], doing: str) -> None:
        self.add(what, "fail", str(authorization_error((Denied(resource_type, name, operations),), self.who, doing)))

    async def ask(self, what: str, call: Awaitable[None]) -> None:
        """Run one check; a broker error it did not expect fails it with the error's text."""
        try:
            await call
        except ConfigError as exc:
            self.add(what, "fail", str(exc))
        except (KafkaError, KafkaWorkerError, OSError, TimeoutError) as exc:
            text = str(exc)
            self.add(what, "fail", text if text.startswith(type(exc).__name__) else f"{type(exc).__name__}: {text}")


@contextlib.asynccontextmanager
async def _clients(settings: ConnectionSettings) -> AsyncIterator[tuple[AIOKafkaAdminClient, AIOKafkaConsumer,
                                                                        AIOKafkaClient]]:  # fmt: skip
    """An admin client, a group-less read_committed consumer and a bare client, started; closed on exit."""
    name = f"{settings.client_id}-check"
    admin = make_admin(settings, name)
    consumer = make_consumer(settings, name, fetch_max_wait_ms=100)
    client = AIOKafkaClient(client_id=name, **connection_options(settings))
    try:
        await admin.start()
        await consumer.start()
        await client.bootstrap()
        yield admin, consumer, client
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()
        with contextlib.suppress(Exception):
            await admin.close()
        with contextlib.suppress(Exception):
            await client.close()


async def _connected(report: _Report, settings: ConnectionSettings, timeout_s: float) -> bool:
    try:
        await reach_once(settings, timeout_s=timeout_s)
    except KafkaWorkerError as exc:
        report.add("connect", "fail", f"{exc}; check --bootstrap-servers and the security settings "
                   "(docs/access-control.md#credentials)")  # fmt: skip
        return False
    report.add("connect", "pass", f"{settings.bootstrap_servers}" + (f" as {report.who}" if report.who else ""))
    return True


async def _describe(report: _Report, consumer: AIOKafkaConsumer, topic: _Topic, *, created: bool) -> None:
    """Describe on `topic` and whether it exists; a missing topic the worker creates (`created`) passes here and
    is left to the Create check."""
    topic.code, ids = await topic_metadata(consumer, topic.name)
    what = f"{topic.label}: exists, Describe"
    if topic.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
        report.denied(what, "Topic", topic.name, ("DESCRIBE",), f"describe {topic.label}")
    elif topic.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and created:
        report.add(what, "pass", "missing: the worker creates it at start (see the Create check)")
    elif topic.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        report.add(what, "fail", f"{topic.label} does not exist: create it (README.md#topics), or name an existing "
                   "one")  # fmt: skip
    elif topic.code:
        report.add(what, "fail", f"describing {topic.label} failed with error code {topic.code}")
    else:
        topic.partitions = len(ids)
        report.add(what, "pass", f"{topic.partitions} partition{'' if topic.partitions == 1 else 's'}")


async def _replication(admin: AIOKafkaAdminClient, topics: list[_Topic]) -> None:
    present = [topic for topic in topics if topic.present]
    if present:
        for found in await admin.describe_topics([topic.name for topic in present]):
            for topic in present:
                if found["topic"] == topic.name and found["partitions"]:
                    topic.replication = len(found["partitions"][0]["replicas"])


async def _read(report: _Report, consumer: AIOKafkaConsumer, topic: _Topic, deadline: float) -> None:
    """Read on `topic`: a fetch of partition 0 at its end, which returns nothing but is refused without Read."""
    what = f"{topic.label}: Read"
    if not topic.present:
        report.add(what, "skip", "not asked: the topic cannot be described")
        return
    tp = TopicPartition(topic.name, 0)
    consumer.assign([tp])
    try:
        await consumer.seek_to_end(tp)
        while consumer.highwater(tp) is None:  # set by the first fetch answer
            if time.monotonic() > deadline:
                raise TimeoutError(f"no fetch answer for {topic.name}[0]")
            await consumer.getmany(tp, timeout_ms=200)
    except TopicAuthorizationFailedError:
        report.denied(what, "Topic", topic.name, ("READ",), f"read {topic.label}")
        return
    finally:
        consumer.assign([])
    report.add(what, "pass", "a fetch at the end of partition 0 answered")


async def _coordinator(client: AIOKafkaClient, kind: CoordinationType, key: str, deadline: float) -> int:
    """The node id of the coordinator of `key`, asked again while the coordinator is not available yet."""
    while True:
        try:
            return int(await client.coordinator_lookup(kind, key))
        except _RETRIABLE:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def _transactional(
    report: _Report, client: AIOKafkaClient, settings: Settings, written: list[_Topic], deadline: float
) -> None:
    """Describe and Write on the transactional ids, Read on the group and Write on each topic written, asked of
    the transaction coordinator for producer id -1."""
    source = TopicPartition(settings.source_topic, 0)
    txn, group = settings.transactional_id(source.topic, source.partition), settings.group_id
    names = f"TransactionalId '{txn}'"
    try:
        node = await _coordinator(client, CoordinationType.TRANSACTION, txn, deadline)
    except TransactionalIdAuthorizationFailed:
        report.denied(f"transactional id '{txn}': Describe", "TransactionalId", txn, ("DESCRIBE",),
                      "find the transaction coordinator")
        report.add(f"transactional id '{txn}': Write", "skip", "not asked: it needs Describe first")
        report.add(f"group '{group}': Read", "skip", f"not asked: it needs Write on {names} first")
        for topic in written:
            report.add(f"{topic.label}: Write", "skip", f"not asked: it needs Write on {names} first")
        return
    report.add(f"transactional id '{txn}': Describe", "pass", f"its coordinator is broker {node}")
    offsets = await _answer(client, node, AddOffsetsToTxnRequest(txn, _NO_PRODUCER, _NO_PRODUCER, group), deadline)
    code = offsets.error_code
    if code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        report.denied(f"transactional id '{txn}': Write", "TransactionalId", txn, ("WRITE",), "write in transactions")
        report.add(f"group '{group}': Read", "skip", f"not asked: it needs Write on {names} first")
        for topic in written:
            report.add(f"{topic.label}: Write", "skip", f"not asked: it needs Write on {names} first")
        return
    report.add(f"transactional id '{txn}': Write", "pass", "the coordinator authorized a transaction's request")
    if code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
        report.denied(f"group '{group}': Read", "Group", group, ("READ",), "commit offsets in transactions")
    elif code == ErrorCode.INVALID_PRODUCER_ID_MAPPING:
        report.add(f"group '{group}': Read", "pass", "the coordinator authorized adding its offsets to a transaction")
    else:
        report.add(f"group '{group}': Read", "fail", f"adding the group's offsets to a transaction failed with error "
                   f"code {code}")  # fmt: skip
    present = [topic for topic in written if topic.present]
    for topic in written:
        if not topic.present:
            report.add(f"{topic.label}: Write", "skip", "not asked: the topic cannot be described")
    if not present:
        return
    request = AddPartitionsToTxnRequest(txn, _NO_PRODUCER, _NO_PRODUCER, [(topic.name, [0]) for topic in present])
    codes = {name: errors[0][1] for name, errors in (await _answer(client, node, request, deadline)).errors}
    for topic in present:
        code = codes.get(topic.name, -1)
        if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            report.denied(f"{topic.label}: Write", "Topic", topic.name, ("WRITE",), f"write to {topic.label}")
        elif code in (ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.OPERATION_NOT_ATTEMPTED):
            report.add(f"{topic.label}: Write", "pass", "the coordinator authorized adding it to a transaction")
        else:
            report.add(f"{topic.label}: Write", "fail", f"adding it to a transaction failed with error code {code}")


async def _answer(client: AIOKafkaClient, node: int, request: Any, deadline: float) -> Any:
    """The coordinator's answer to `request`, asked again while it is loading or busy."""
    while True:
        answer = await client.send(node, request)
        codes = [answer.error_code] if hasattr(answer, "error_code") else \
            [code for _, errors in answer.errors for _, code in errors]  # fmt: skip
        if not set(codes) & _RETRIABLE_CODES or time.monotonic() > deadline:
            return answer
        await asyncio.sleep(0.5)


async def _group(
    report: _Report, admin: AIOKafkaAdminClient, client: AIOKafkaClient, group: str, deadline: float
) -> None:
    """Describe on the group, by finding its coordinator and describing it (no member joins)."""
    what = f"group '{group}': Describe"
    try:
        node = await _coordinator(client, CoordinationType.GROUP, group, deadline)
        (answer,) = await admin.describe_consumer_groups([group], group_coordinator_id=node)
    except GroupAuthorizationFailedError:
        report.denied(what, "Group", group, ("DESCRIBE",), "describe the group")
        return
    error, _, state, _, _, members, *_ = answer.groups[0]
    if error == ErrorCode.GROUP_AUTHORIZATION_FAILED:
        report.denied(what, "Group", group, ("DESCRIBE",), "describe the group")
    elif error:
        report.add(what, "fail", f"describing the group failed with error code {error}")
    else:
        shown = "no group yet" if state == "Dead" else f"{state}, {len(members)} members"
        report.add(what, "pass", shown)


async def _group_read(report: _Report, client: AIOKafkaClient, group: str, deadline: float) -> None:
    """Read on a group without joining it: a heartbeat of no member, which the broker authorizes with Read and then
    refuses as from an unknown member."""
    what = f"group '{group}': Read"
    try:
        node = await _coordinator(client, CoordinationType.GROUP, group, deadline)
    except GroupAuthorizationFailedError:
        report.denied(what, "Group", group, ("READ",), "join the group")
        return
    code = (await _answer(client, node, HeartbeatRequest(group, -1, ""), deadline)).error_code
    if code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
        report.denied(what, "Group", group, ("READ",), "join the group")
    elif code in _NOT_A_MEMBER or code == 0:
        report.add(what, "pass", "the coordinator authorized a heartbeat (of no member)")
    else:
        report.add(what, "fail", f"a heartbeat failed with error code {code}")


async def _configs(report: _Report, admin: AIOKafkaAdminClient, topics: list[_Topic]) -> None:
    """DescribeConfigs on each topic the worker reads the configs of; the values read are kept on the topic."""
    asked = [topic for topic in topics if topic.present]
    for topic in topics:
        missing = topic.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if topic.configs and not topic.present and (topic.base is None or not missing):
            report.add(f"{topic.label}: DescribeConfigs", "skip", "not asked: the topic cannot be described")
    if not asked:
        return
    resources = [ConfigResource(ConfigResourceType.TOPIC, topic.name, {_CLEANUP: None, _MAX_MESSAGE: None})
                 for topic in asked]  # fmt: skip
    found: dict[str, dict[str, Any]] = {}
    for response in await admin.describe_configs(resources):
        for resource in response.to_object()["resources"]:
            found[resource["resource_name"]] = resource
    for topic in asked:
        resource = found.get(topic.name, {"error_code": -1, "config_entries": []})
        if resource["error_code"] == 0:
            topic.read_configs = {name: value for name in (_CLEANUP, _MAX_MESSAGE)
                                  if (value := config_value(resource, name)) is not None}  # fmt: skip
        if not topic.configs:
            continue
        what = f"{topic.label}: DescribeConfigs"
        if resource["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            report.denied(what, "Topic", topic.name, ("DESCRIBE_CONFIGS",), f"read the configs of {topic.label}")
        elif resource["error_code"]:
            report.add(what, "fail", f"reading its configs failed with error code {resource['error_code']}")
        else:
            report.add(what, "pass", ", ".join(f"{name}={value}" for name, value in sorted(topic.read_configs.items())))


async def _create(
    report: _Report, admin: AIOKafkaAdminClient, topic: _Topic, replication: int, configs: dict[str, str]
) -> None:
    """Create on a missing topic the worker would create, asked as a creation the broker only validates."""
    what = f"{topic.label}: Create"
    base = topic.base
    if base is None or not base.present:
        report.add(what, "skip", "not asked: the topic whose partition count it takes cannot be described")
        return
    new = NewTopic(topic.name, base.partitions, replication or base.replication, topic_configs=configs)
    answer = await admin.create_topics([new], validate_only=True)
    for _, code, *rest in answer.topic_errors:
        if code in (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED):
            report.denied(what, "Topic", topic.name, ("CREATE",), f"create {topic.label} (or create it yourself)")
        elif code in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
            report.add(what, "pass", f"the brokers would create it: {base.partitions} partitions like the "
                       f"{base.role.removesuffix('_topic')}")  # fmt: skip
        else:
            message = rest[0] if rest and rest[0] else f"error code {code}"
            report.add(what, "fail", f"the brokers would not create it: {message}")


def _layout(report: _Report, settings: Settings, topics: dict[str, _Topic]) -> None:
    """The worker's layout rules (`worker/live/topics.py`) on what was read."""
    output, dlq = topics["output_topic"], topics["dlq_topic"]
    changelog, display = topics.get("changelog_topic"), topics.get("display_topic")
    index = topics.get("thread_index_topic")

    def rule(what: str, ready: bool, check: Callable[[], str]) -> None:
        if not ready:
            report.add(what, "skip", "not checked: what it needs could not be read (see the rows above)")
            return
        try:
            report.add(what, "pass", check())
        except ConfigError as exc:
            report.add(what, "fail", str(exc))

    beside = [(topic, why, policy) for topic, why, policy in ((display, DISPLAY_WHY, check_display_policy),
                                                               (index, INDEX_WHY, check_index_policy))
              if topic is not None and topic.present]  # fmt: skip
    for topic in [output, dlq, *(topic for topic, _, _ in beside)]:
        rule(f"{topic.label}: {_MAX_MESSAGE}", _MAX_MESSAGE in topic.read_configs, partial(_room, topic))
    for topic, why, policy in beside:
        rule(f"{topic.label}: partitions", output.present, partial(_copartitioned, topic, output, why))
        rule(f"{topic.label}: {_CLEANUP}", _CLEANUP in topic.read_configs, partial(_policy, topic, policy))
    if changelog is not None and changelog.present:
        source = topics["source_topic"]
        rule(f"{changelog.label}: partitions", source.present,
             partial(_copartitioned, changelog, source, CHANGELOG_WHY))  # fmt: skip
        rule(f"{changelog.label}: {_CLEANUP}", _CLEANUP in changelog.read_configs,
             partial(_policy, changelog, check_changelog_policy))  # fmt: skip
        display_size = display.read_configs.get(_MAX_MESSAGE) if display is not None and display.present else None
        rule(f"{changelog.label}: {_MAX_MESSAGE}",
             _MAX_MESSAGE in changelog.read_configs and (display is None or display_size is not None),
             partial(_changelog_room, settings, changelog, display_size))  # fmt: skip


def _room(topic: _Topic) -> str:
    size = int(topic.read_configs[_MAX_MESSAGE])
    check_record_room(topic.role, topic.name, size)
    return f"{_MAX_MESSAGE}={size}: records up to {record_limit(size)} bytes"


def _copartitioned(topic: _Topic, base: _Topic, why: str) -> str:
    check_copartitioned(topic.role, topic.name, topic.partitions, base_role=base.role, base=base.name,
                        base_partitions=base.partitions, why=why)  # fmt: skip
    return f"{topic.partitions}, as the {base.role.removesuffix('_topic')}"


def _policy(topic: _Topic, check: Callable[[str, str], None]) -> str:
    policy = topic.read_configs[_CLEANUP]
    check(topic.name, policy)
    return f"{_CLEANUP}={policy}"


def _changelog_room(settings: Settings, changelog: _Topic, display_size: str | None) -> str:
    size = int(changelog.read_configs[_MAX_MESSAGE])
    display_bytes = record_limit(int(display_size)) if display_size is not None else None
    limit = check_changelog_room(settings, size, display_bytes)
    beside = "" if display_bytes is None else f", at least the display topic's {display_bytes}"
    return f"{_MAX_MESSAGE}={size}: checkpoint records up to {limit} bytes{beside}"


async def _broker(report: _Report, admin: AIOKafkaAdminClient, settings: Settings) -> None:
    """DescribeConfigs on the cluster, and the worker's timeouts against the brokers' limits."""
    right, timeouts = "cluster: DescribeConfigs", "broker timeouts"
    read = await broker_configs(admin)
    if read is None:
        report.add(right, "fail", "the cluster names no broker")
        return
    node, resource = read
    values = {name: config_value(resource, name) for name in BROKER_TIMEOUTS}
    if resource["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        report.denied(right, "Cluster", "", ("DESCRIBE_CONFIGS",), "read the brokers' timeout limits")
        report.add(timeouts, "skip", "not checked: the brokers' configs cannot be read")
        return
    if any(value is None for value in values.values()):
        report.add(right, "fail", f"broker {node}'s configs are unreadable (error code {resource['error_code']})")
        return
    report.add(right, "pass", f"broker {node}'s configs read")
    txn_max, session_min, session_max = (int(values[name] or 0) for name in BROKER_TIMEOUTS)
    try:
        check_broker_timeouts(settings, txn_max, session_min, session_max)
    except ConfigError as exc:
        report.add(timeouts, "fail", str(exc))
        return
    report.add(timeouts, "pass", f"transaction_timeout_ms {settings.transaction_timeout_ms} <= "
               f"transaction.max.timeout.ms {txn_max}; session_timeout_ms {settings.session_timeout_ms} within "
               f"{session_min} to {session_max}")  # fmt: skip


def _memory(report: _Report, settings: Settings, source: _Topic, cgroup_root: Path) -> None:
    what = "memory"
    if not source.present:
        report.add(what, "skip", "not checked: the source topic's partition count is unknown")
        return
    limit = memory_limit(cgroup_root)
    worst = WorstCase(source.partitions, settings.max_open_streams, settings.closed_stream_memory,
                      display=bool(settings.display_topic))  # fmt: skip
    if limit is None:
        report.add(what, "pass", f"no memory limit under {cgroup_root}; the worst case is {worst.total / _MIB:,.0f} "
                   "MiB")  # fmt: skip
        return
    warning = worst.warning(limit)
    if warning is not None:
        report.add(what, "fail", warning)
    else:
        report.add(what, "pass", f"the worst case of {worst.total / _MIB:,.0f} MiB fits the limit of "
                   f"{limit / _MIB:,.0f} MiB")  # fmt: skip


async def check_worker(settings: Settings, *, cgroup_root: Path = Path("/sys/fs/cgroup"),
                       timeout_s: float = 30.0) -> list[Check]:  # fmt: skip
    """Every check of `worker check` for `settings`, in order; each broker request within `timeout_s`."""
    report = _Report(principal(settings))
    if not await _connected(report, settings, timeout_s):
        return report.rows
    s = settings
    deadline = time.monotonic() + timeout_s
    source = _Topic("source_topic", s.source_topic, read=True)
    output = _Topic("output_topic", s.output_topic, write=True, configs=True)
    topics = {"source_topic": source, "output_topic": output,
              "dlq_topic": _Topic("dlq_topic", s.dlq_topic, write=True, configs=True)}  # fmt: skip
    if s.changelog:
        topics["changelog_topic"] = _Topic("changelog_topic", s.changelog_topic_name, read=True, write=True,
                                           configs=True, base=source)  # fmt: skip
    if s.display_topic:
        topics["display_topic"] = _Topic("display_topic", s.display_topic, write=True, configs=True, base=output)
    if s.thread_index_topic:
        topics["thread_index_topic"] = _Topic("thread_index_topic", s.thread_index_topic, write=True, configs=True,
                                              base=output)  # fmt: skip
    async with _clients(settings) as (admin, consumer, client):
        for topic in topics.values():
            await report.ask(f"{topic.label}: exists, Describe",
                             _describe(report, consumer, topic, created=topic.base is not None))
        await _replication(admin, list(topics.values()))
        for topic in topics.values():
            if topic.read and (topic.present or topic.base is None):
                await report.ask(f"{topic.label}: Read", _read(report, consumer, topic, deadline))
        await report.ask(f"group '{s.group_id}': Describe", _group(report, admin, client, s.group_id, deadline))
        written = [topic for topic in topics.values() if topic.write and (topic.present or topic.base is None)]
        await report.ask("transactional id", _transactional(report, client, s, written, deadline))
        await report.ask("topic configs", _configs(report, admin, list(topics.values())))
        for role, configs, replication in (("changelog_topic", CHANGELOG_CONFIGS, s.changelog_replication_factor),
                                           ("display_topic", DISPLAY_CONFIGS, 0),
                                           ("thread_index_topic", INDEX_CONFIGS, 0)):  # fmt: skip
            created = topics.get(role)
            if created is not None and created.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                await report.ask(f"{created.label}: Create", _create(report, admin, created, replication, configs))
        _layout(report, s, topics)
        await report.ask("cluster: DescribeConfigs", _broker(report, admin, s))
    _memory(report, s, source, cgroup_root)
    return report.rows


async def check_gateway(settings: ConnectionSettings, output_topic: str, display_topic: str, group: str, *,
                        index_topic: str = "", timeout_s: float = 30.0) -> list[Check]:  # fmt: skip
    """Every check of `worker gateway check`: Describe and Read on the output and display topics (and the thread
    index topic, when given), Read on the replicas' `group`, the topics' partition counts equal, and the display
    and index topics compacted when their configs may be read (the gateway needs no DescribeConfigs; the worker
    checks them at start)."""
    report = _Report(principal(settings))
    if not await _connected(report, settings, timeout_s):
        return report.rows
    deadline = time.monotonic() + timeout_s
    output = _Topic("output_topic", output_topic, read=True)
    beside = [(_Topic("display_topic", display_topic, read=True), DISPLAY_WHY, check_display_policy)]
    if index_topic:
        beside.append((_Topic("thread_index_topic", index_topic, read=True), INDEX_WHY, check_index_policy))
    read = [output, *(topic for topic, _, _ in beside)]
    async with _clients(settings) as (admin, consumer, client):
        for topic in read:
            await report.ask(f"{topic.label}: exists, Describe", _describe(report, consumer, topic, created=False))
        for topic in read:
            await report.ask(f"{topic.label}: Read", _read(report, consumer, topic, deadline))
        await report.ask(f"group '{group}': Read", _group_read(report, client, group, deadline))
        for topic, why, policy in beside:
            what = f"{topic.label}: partitions"
            if output.present and topic.present:
                try:
                    report.add(what, "pass", _copartitioned(topic, output, why))
                except ConfigError as exc:
                    report.add(what, "fail", str(exc))
            else:
                report.add(what, "skip", "not checked: a topic cannot be described")
            await report.ask(f"{topic.label}: {_CLEANUP}", _gateway_policy(report, admin, topic, policy))
    return report.rows


async def _gateway_policy(
    report: _Report, admin: AIOKafkaAdminClient, topic: _Topic, check: Callable[[str, str], None]
) -> None:
    what = f"{topic.label}: {_CLEANUP}"
    if not topic.present:
        report.add(what, "skip", "not checked: the topic cannot be described")
        return
    await _configs(report, admin, [topic])
    policy = topic.read_configs.get(_CLEANUP)
    if policy is None:
        report.add(what, "skip", "not checked: no DescribeConfigs on the topic, which the gateway does not need "
                   "(the worker checks it at start)")  # fmt: skip
        return
    try:
        check(topic.name, policy)
    except ConfigError as exc:
        report.add(what, "fail", str(exc))
        return
    report.add(what, "pass", f"{_CLEANUP}={policy}")


_MARKS = {"pass": "✓", "fail": "✗", "skip": "-"}


def add_check_flags(parser: argparse.ArgumentParser) -> None:
    """The flags `check` and `gateway check` take beside the settings."""
    parser.add_argument("--json", action="store_true", help="print the checks as one JSON object")
    parser.add_argument("--timeout-ms", type=int, default=30_000, metavar="MS",
                        help="longest wait for the brokers' answers to one check (default 30000)")


def print_checks(rows: Sequence[Check], as_json: bool) -> int:
    """Print the checks, one row each (what, ✓, ✗ or - for not asked, what was found or the problem and its fix),
    or as JSON; returns the exit status: 0 when none failed, else 1."""
    ok = all(row.status != "fail" for row in rows)
    if as_json:
        text = json.dumps({"ok": ok, "checks": [row.as_json() for row in rows]}, ensure_ascii=False, indent=2)
    else:
        width = min(max((len(row.what) for row in rows), default=0), 64)
        lines = [f"{_MARKS[row.status]} {row.what:<{width}}  {row.detail}" for row in rows]
        failed = sum(row.status == "fail" for row in rows)
        lines.append(f"{len(rows)} checks: " + ("all passed" if ok else f"{failed} failed"))
        text = "\n".join(lines)
    sys.stdout.buffer.write(text.encode() + b"\n")
    sys.stdout.flush()
    return 0 if ok else 1


def main_check(argv: list[str] | None = None) -> int:
    """Entry point of `python -m worker check`: the checks above for `run`'s settings; exit status 0 when every
    check passed, 1 when one failed, 2 for settings that cannot work."""
    parser = settings_parser(Settings, argparse.ArgumentParser(
        prog="python -m worker check",
        description="Check, changing nothing, that the cluster is ready for these settings of `run`.",
    ))  # fmt: skip
    add_check_flags(parser)
    parser.add_argument("--cgroup-root", default="/sys/fs/cgroup", metavar="DIR",
                        help="where the cgroup file system is mounted: the memory limit is read there "
                        "(default /sys/fs/cgroup)")  # fmt: skip
    args = parser.parse_args(argv)
    settings = readable_settings(args, Settings, "check")
    if settings is None:
        return 2
    quiet_client_logs()
    try:
        rows = asyncio.run(check_worker(settings, cgroup_root=Path(args.cgroup_root), timeout_s=args.timeout_ms / 1000))
    except ConfigError as exc:
        print(f"worker check: {exc}", file=sys.stderr)
        return 2
    return print_checks(rows, args.json)
