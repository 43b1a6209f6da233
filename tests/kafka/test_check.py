"""`python -m worker check` and `worker gateway check` against real brokers: with every right the README grants,
every row passes and the exit status is 0; with one right withheld (on the secured broker), a changelog with
another partition count or `cleanup.policy=delete`, or a memory limit too small, the row at fault fails naming the
problem and its fix, and the exit status is 1. No run of the check writes a record or joins a group: the end
offsets of every topic and the cluster's groups are the same before and after."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from tests.kafka.conftest import TopicFactory, UniqueNames
from tests.kafka.secure_broker import Principal, SecureKafka
from tests.kafka.support import ROOT

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]


@dataclass(frozen=True)
class Layout:
    """One check's topics, group and transactional-id prefix."""

    source: str
    output: str
    dlq: str
    changelog: str
    display: str
    group: str
    prefix: str
    index: str

    def flags(self) -> list[str]:
        return ["--source-topic", self.source, "--output-topic", self.output, "--dlq-topic", self.dlq,
                "--changelog-topic", self.changelog, "--display-topic", self.display, "--group-id", self.group,
                "--transactional-id-prefix", self.prefix, "--thread-index-topic", self.index]  # fmt: skip

    @property
    def topics(self) -> list[str]:
        return [self.source, self.output, self.dlq, self.changelog, self.display, self.index]


def run_check(bootstrap: str, *flags: str, command: tuple[str, ...] = ("check",)) -> tuple[int, dict[str, Any]]:
    """The check's exit status and its JSON report."""
    done = subprocess.run([sys.executable, "-m", "worker", *command, "--bootstrap-servers", bootstrap, *flags,
                           "--json", "--timeout-ms", "20000"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.stdout, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is (done.returncode == 0), (done.returncode, report)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, report


def rows(report: dict[str, Any], status: str) -> dict[str, str]:
    return {row["check"]: row["detail"] for row in report["checks"] if row["status"] == status}


async def _footprint(bootstrap: str, topics: list[str], **client: Any) -> tuple[set[str], dict[str, int], set[str]]:
    """The groups and topic names of this test (named from the test's own stem, as every name the check is given;
    other tests create theirs on the same broker meanwhile), and the end offsets of every partition of `topics`
    that exist."""
    stem = f"{topics[0].rsplit('.', 2)[0]}."
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, **client)
    await admin.start()
    await consumer.start()
    try:
        names = {name for name in await admin.list_topics() if name.startswith(stem)}
        groups = {group[0] for group in await admin.list_consumer_groups() if group[0].startswith(stem)}
        described = await admin.describe_topics([topic for topic in topics if topic in names])
        tps = [TopicPartition(found["topic"], part["partition"]) for found in described for part in found["partitions"]]
        ends = {f"{tp.topic}[{tp.partition}]": end for tp, end in (await consumer.end_offsets(tps)).items()}
        return groups, ends, names
    finally:
        await consumer.stop()
        await admin.close()


# ---- the plain broker: layout and memory ---------------------------------------------------------------------------


@pytest.fixture
def layout(topic_factory: TopicFactory, unique_names: UniqueNames) -> Layout:
    return Layout(
        source=topic_factory("source", partitions=2),
        output=topic_factory("output", partitions=2),
        dlq=topic_factory("dlq"),
        changelog=unique_names("changelog"),
        display=unique_names("display"),
        group=unique_names("group"),
        prefix=unique_names("txn"),
        index=unique_names("index"),
    )


def test_a_ready_cluster_passes_every_check_and_nothing_is_written(
    kafka_bootstrap: str, layout: Layout, tmp_path: Path
) -> None:
    before = asyncio.run(_footprint(kafka_bootstrap, layout.topics))
    status, report = run_check(kafka_bootstrap, *layout.flags(), "--cgroup-root", str(tmp_path))
    assert status == 0, rows(report, "fail")
    assert not rows(report, "skip")
    passed = rows(report, "pass")
    for role, name in (("changelog_topic", layout.changelog), ("display_topic", layout.display),
                       ("thread_index_topic", layout.index)):  # fmt: skip
        assert passed[f"{role} '{name}': Create"].startswith("the brokers would create it: 2 partitions")
    assert passed["memory"].startswith(f"no memory limit under {tmp_path}")
    after = asyncio.run(_footprint(kafka_bootstrap, layout.topics))
    assert after == before, "the check wrote a record, joined a group or created a topic"
    assert layout.group not in after[0] and {layout.changelog, layout.display, layout.index}.isdisjoint(after[2])


def test_a_thread_index_of_another_partition_count_or_deleting_fails_its_row(
    kafka_bootstrap: str, topic_factory: TopicFactory, layout: Layout, tmp_path: Path
) -> None:
    for config, partitions, row, fix in (({"cleanup.policy": "compact"}, 3, "partitions", "--thread-index-topic"),
                                         ({"cleanup.policy": "delete"}, 2, "cleanup.policy",
                                          "--add-config cleanup.policy=compact")):  # fmt: skip
        index = topic_factory("index", partitions=partitions, config=config)
        status, report = run_check(kafka_bootstrap, *layout.flags(), "--thread-index-topic", index,
                                   "--cgroup-root", str(tmp_path))  # fmt: skip
        assert status == 1
        failed = rows(report, "fail")
        assert list(failed) == [f"thread_index_topic '{index}': {row}"], failed
        assert fix in failed[f"thread_index_topic '{index}': {row}"]


def test_a_changelog_with_another_partition_count_fails_its_row(kafka_bootstrap: str, topic_factory: TopicFactory,
                                                               layout: Layout, tmp_path: Path) -> None:  # fmt: skip
    changelog = topic_factory("changelog", partitions=3, config={"cleanup.policy": "compact"})
    flags = [*layout.flags(), "--changelog-topic", changelog, "--cgroup-root", str(tmp_path)]
    before = asyncio.run(_footprint(kafka_bootstrap, [*layout.topics, changelog]))
    status, report = run_check(kafka_bootstrap, *flags)
    assert status == 1
    failed = rows(report, "fail")
    assert list(failed) == [f"changelog_topic '{changelog}': partitions"], failed
    detail = failed[f"changelog_topic '{changelog}': partitions"]
    assert f"has 3 partitions and source_topic '{layout.source}' 2" in detail
    assert "Delete the changelog topic" in detail and "--changelog-topic" in detail  # the fix
    assert asyncio.run(_footprint(kafka_bootstrap, [*layout.topics, changelog])) == before


def test_a_changelog_that_deletes_fails_its_row(kafka_bootstrap: str, topic_factory: TopicFactory, layout: Layout,
                                               tmp_path: Path) -> None:  # fmt: skip
    changelog = topic_factory("changelog", partitions=2, config={"cleanup.policy": "delete"})
    status, report = run_check(kafka_bootstrap, *layout.flags(), "--changelog-topic", changelog,
                               "--cgroup-root", str(tmp_path))  # fmt: skip
    assert status == 1
    failed = rows(report, "fail")
    assert list(failed) == [f"changelog_topic '{changelog}': cleanup.policy"], failed
    detail = failed[f"changelog_topic '{changelog}': cleanup.policy"]
    assert "cleanup.policy=delete" in detail and "--add-config cleanup.policy=compact" in detail


def test_a_memory_limit_too_small_fails_its_row(kafka_bootstrap: str, layout: Layout, tmp_path: Path) -> None:
    (tmp_path / "memory.max").write_text(f"{256 * 1024 * 1024}\n")
    status, report = run_check(kafka_bootstrap, *layout.flags(), "--cgroup-root", str(tmp_path))
    assert status == 1
    failed = rows(report, "fail")
    assert list(failed) == ["memory"], failed
    assert failed["memory"].startswith("memory limit 256 MiB is below this worker's worst case")
    assert "Lower --max-open-streams to 0 or raise the memory limit" in failed["memory"]
    (tmp_path / "memory.max").write_text("max\n")
    status, report = run_check(kafka_bootstrap, *layout.flags(), "--cgroup-root", str(tmp_path))
    assert status == 0, rows(report, "fail")


def test_text_rows_name_each_check_and_the_brokers_refusal(kafka_bootstrap: str, layout: Layout) -> None:
    done = subprocess.run([sys.executable, "-m", "worker", "check", "--bootstrap-servers", kafka_bootstrap,
                           *layout.flags(), "--output-topic", "no-such-topic", "--timeout-ms", "20000"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("✗ output_topic 'no-such-topic': exists, Describe") and "does not exist: create it"
               in line for line in lines), lines  # fmt: skip
    assert lines[-1].startswith(f"{len(lines) - 1} checks: ") and "failed" in lines[-1]
    unreachable = subprocess.run([sys.executable, "-m", "worker", "check", "--bootstrap-servers", "127.0.0.1:1",
                                  "--timeout-ms", "5000"],
                                 cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert unreachable.returncode == 1
    assert unreachable.stdout.startswith("✗ connect") and "not reachable" in unreachable.stdout


def test_gateway_check(kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    output = topic_factory("output", partitions=2)
    display = topic_factory("display", partitions=2, config={"cleanup.policy": "compact"})
    deleting = topic_factory("display", partitions=2, config={"cleanup.policy": "delete"})
    wrong = topic_factory("display", partitions=3, config={"cleanup.policy": "compact"})
    gateway = ("gateway", "check")
    base = ["--output-topic", output, "--insecure-no-auth"]
    status, report = run_check(kafka_bootstrap, *base, "--display-topic", display, command=gateway)
    assert status == 0 and not rows(report, "skip"), report
    status, report = run_check(kafka_bootstrap, *base, "--display-topic", deleting, command=gateway)
    assert status == 1 and list(rows(report, "fail")) == [f"display_topic '{deleting}': cleanup.policy"]
    status, report = run_check(kafka_bootstrap, *base, "--display-topic", wrong, command=gateway)
    assert status == 1 and list(rows(report, "fail")) == [f"display_topic '{wrong}': partitions"]
    index = topic_factory("index", partitions=2, config={"cleanup.policy": "compact"})
    wrong_index = topic_factory("index", partitions=3, config={"cleanup.policy": "compact"})
    status, report = run_check(kafka_bootstrap, *base, "--display-topic", display, "--thread-index-topic", index,
                               command=gateway)  # fmt: skip
    assert status == 0 and f"thread_index_topic '{index}': Read" in rows(report, "pass"), report
    status, report = run_check(kafka_bootstrap, *base, "--display-topic", display, "--thread-index-topic",
                               wrong_index, command=gateway)  # fmt: skip
    assert status == 1 and list(rows(report, "fail")) == [f"thread_index_topic '{wrong_index}': partitions"]


# ---- the secured broker: each right withheld ------------------------------------------------------------------------


@dataclass(frozen=True)
class Withheld:
    """A right taken away: the kafka-acls operations revoked on a resource, and the row that must fail."""

    resource: str  # a Layout field, "group", "transactional-id" or "cluster"
    operations: tuple[str, ...]
    row: str  # with {name} for the resource's name
    grant: str  # the right as the row names it
    missing_topic: bool = False  # the topic does not exist (Create bites only then)
    also: tuple[str, ...] = ()  # rows that fail with it: Kafka's Read implies Describe, so both are taken


WITHHELD = {
    "source-read": Withheld("source", ("Read",), "source_topic '{name}': Read", "READ on Topic '{name}'"),
    "source-describe": Withheld("source", ("Read", "Describe"), "source_topic '{name}': exists, Describe",
                                "DESCRIBE on Topic '{name}'"),
    "output-write": Withheld("output", ("Write",), "output_topic '{name}': Write", "WRITE on Topic '{name}'"),
    "output-describe-configs": Withheld("output", ("DescribeConfigs",), "output_topic '{name}': DescribeConfigs",
                                        "DESCRIBE_CONFIGS on Topic '{name}'"),
    "dlq-write": Withheld("dlq", ("Write",), "dlq_topic '{name}': Write", "WRITE on Topic '{name}'"),
    "changelog-read": Withheld("changelog", ("Read",), "changelog_topic '{name}': Read", "READ on Topic '{name}'"),
    "changelog-write": Withheld("changelog", ("Write",), "changelog_topic '{name}': Write", "WRITE on Topic '{name}'"),
    "changelog-create": Withheld("changelog", ("Create",), "changelog_topic '{name}': Create",
                                 "CREATE on Topic '{name}'", missing_topic=True),
    "display-write": Withheld("display", ("Write",), "display_topic '{name}': Write", "WRITE on Topic '{name}'"),
    "display-create": Withheld("display", ("Create",), "display_topic '{name}': Create", "CREATE on Topic '{name}'",
                               missing_topic=True),
    "index-write": Withheld("index", ("Write",), "thread_index_topic '{name}': Write", "WRITE on Topic '{name}'"),
    "index-create": Withheld("index", ("Create",), "thread_index_topic '{name}': Create", "CREATE on Topic '{name}'",
                             missing_topic=True),
    "group-read": Withheld("group", ("Read",), "group '{name}': Read", "READ on Group '{name}'"),
    "group-describe": Withheld("group", ("Read", "Describe"), "group '{name}': Describe",
                               "DESCRIBE on Group '{name}'", also=("group '{name}': Read",)),
    "transactional-id-write": Withheld("transactional-id", ("Write",), "transactional id '{name}': Write",
                                       "WRITE on TransactionalId '{name}'"),
    "transactional-id-describe": Withheld("transactional-id", ("Write", "Describe"), "transactional id '{name}': "
                                          "Describe", "DESCRIBE on TransactionalId '{name}'"),
    "cluster-describe-configs": Withheld("cluster", ("DescribeConfigs",), "cluster: DescribeConfigs",
                                         "DESCRIBE_CONFIGS on Cluster"),
}  # fmt: skip


@pytest.fixture
def secured(secure_kafka: SecureKafka, secure_names: UniqueNames, tmp_path: Path,
            ) -> Iterator[tuple[Principal, Layout, list[str]]]:  # fmt: skip
    """A principal granted what the README grants, on topics of its own (the changelog and display topics exist),
    and the flags that connect `worker check` as it."""
    principal = secure_kafka.scram_user(secure_names("user"))
    group = secure_names("group")
    names = Layout(
        *(secure_kafka.create_topic(secure_names(role), 2) for role in ("source", "output")),
        dlq=secure_kafka.create_topic(secure_names("dlq")),
        changelog=secure_kafka.create_topic(f"{group}.changelog", 2, {"cleanup.policy": "compact"}),
        display=secure_kafka.create_topic(secure_names("display"), 2, {"cleanup.policy": "compact"}),
        group=group,
        prefix=secure_names("txn"),
        index=secure_kafka.create_topic(secure_names("index"), 2, {"cleanup.policy": "compact"}),
    )
    secure_kafka.grant_worker(principal, source=names.source, output=names.output, dlq=names.dlq, group=group,
                              prefix=f"{names.prefix}:{group}", changelog=names.changelog, display=names.display,
                              index=names.index)  # fmt: skip
    bootstrap, connection = secure_kafka.worker_connection(principal, tmp_path / "secrets")
    yield principal, names, [bootstrap, *connection, "--cgroup-root", str(tmp_path)]


def test_every_right_the_readme_grants_passes_and_each_withheld_fails_its_row(
    secure_kafka: SecureKafka, secured: tuple[Principal, Layout, list[str]], secure_names: UniqueNames
) -> None:
    principal, names, connection = secured
    bootstrap, *flags = connection
    admin = secure_kafka.admin_options()
    before = asyncio.run(_footprint(secure_kafka.bootstrap_servers, names.topics, **admin))
    status, report = run_check(bootstrap, *flags, *names.flags())
    assert status == 0, rows(report, "fail")
    assert not rows(report, "skip"), report
    txn = f"{names.prefix}:{names.group}:{names.source}:0"
    for row, right in WITHHELD.items():
        layout = names
        if right.missing_topic:  # a topic of the same role that does not exist yet, with the same grants
            missing = secure_names(right.resource)
            secure_kafka.grant(principal, "--operation", "Write", "--operation", "Describe", "--operation",
                               "DescribeConfigs", "--operation", "Create", "--topic", missing)  # fmt: skip
            layout = Layout(**{**names.__dict__, right.resource: missing})
        name = {"group": names.group, "transactional-id": txn, "cluster": ""}.get(
            right.resource, getattr(layout, right.resource, ""))
        resource = _acl_resource(right.resource, name, names)
        taken = [arg for operation in right.operations for arg in ("--operation", operation)]
        secure_kafka.revoke(principal, *taken, *resource)
        try:
            status, report = run_check(bootstrap, *flags, *layout.flags())
        finally:
            secure_kafka.grant(principal, *taken, *resource)
        failed = rows(report, "fail")
        where = right.row.format(name=name)
        assert status == 1, (row, report)
        assert where in failed, (row, failed)
        grant = right.grant.format(name=name)
        assert "not authorised to" in failed[where] and f"{grant} for User:{principal.name}" in failed[where], \
            (row, failed[where])  # fmt: skip
        assert "grant it as README.md#access-control shows" in failed[where]
        also = {also.format(name=name) for also in right.also}
        assert set(failed) == {where} | also, (row, failed)
    after = asyncio.run(_footprint(secure_kafka.bootstrap_servers, names.topics, **admin))
    assert after[:2] == before[:2], "a check wrote a record or joined a group"
    assert names.group not in after[0]


def _acl_resource(resource: str, name: str, names: Layout) -> list[str]:
    if resource == "group":
        return ["--group", name]
    if resource == "transactional-id":
        return ["--transactional-id", f"{names.prefix}:{names.group}:", "--resource-pattern-type", "prefixed"]
    if resource == "cluster":
        return ["--cluster"]
    return ["--topic", name]


def test_gateway_check_names_each_right_the_gateway_needs(
    secure_kafka: SecureKafka, secure_names: UniqueNames, tmp_path: Path
) -> None:
    principal = secure_kafka.scram_user(secure_names("gateway"))
    output = secure_kafka.create_topic(secure_names("output"), 2)
    display = secure_kafka.create_topic(secure_names("display"), 2, {"cleanup.policy": "compact"})
    group = secure_names("group")
    secure_kafka.grant(principal, "--operation", "Read", "--operation", "Describe", "--topic", output,
                       "--topic", display)  # fmt: skip
    secure_kafka.grant(principal, "--operation", "Read", "--group", group)
    bootstrap, connection = secure_kafka.worker_connection(principal, tmp_path / "secrets")
    flags = [*connection, "--output-topic", output, "--display-topic", display, "--gateway-group-id", group,
             "--insecure-no-auth"]  # fmt: skip
    gateway = ("gateway", "check")
    status, report = run_check(bootstrap, *flags, command=gateway)
    assert status == 0, report
    # The gateway needs no DescribeConfigs: the display topic's policy is left to the worker, not failed.
    assert list(rows(report, "skip")) == [f"display_topic '{display}': cleanup.policy"]
    for resource, grant, row in ((["--group", group], f"READ on Group '{group}'", f"group '{group}': Read"),
                                 (["--topic", display], f"READ on Topic '{display}'",
                                  f"display_topic '{display}': Read")):  # fmt: skip
        secure_kafka.revoke(principal, "--operation", "Read", *resource)
        try:
            status, report = run_check(bootstrap, *flags, command=gateway)
        finally:
            secure_kafka.grant(principal, "--operation", "Read", *resource)
        assert status == 1
        failed = rows(report, "fail")
        assert list(failed) == [row], failed
        assert f"{grant} for User:{principal.name}" in failed[row]


def test_a_refused_handshake_is_named_by_its_cause(
    secure_kafka: SecureKafka, secured: tuple[Principal, Layout, list[str]], tmp_path: Path
) -> None:
    _, names, connection = secured
    wrong = tmp_path / "wrong.secret"
    wrong.write_text("not-the-password\n")
    flags = [wrong.as_posix() if previous == "--sasl-password-file" else flag
             for previous, flag in zip(["", *connection], connection, strict=False)]  # fmt: skip
    assert str(wrong) in flags
    bootstrap, *rest = flags
    status, report = run_check(bootstrap, *rest, *names.flags())
    assert status == 1
    assert [row["check"] for row in report["checks"]] == ["connect"]
    detail = report["checks"][0]["detail"]
    assert detail.startswith("Kafka brokers refused the connection (authentication): authentication failed"), detail
    assert "not-the-password" not in json.dumps(report)
