"""Every right the worker needs, taken away one at a time on the secured broker: the worker names what is missing
in one ERROR line per back-off step (resource type and name, operation, principal, the README section that grants
it), prints no traceback, commits nothing, stays alive but not ready and counts the refusal; once the right is
granted it continues on its own within 30 s, every run exact.

DescribeConfigs is the one right the worker does without (it says so once and sizes records against
--assumed-max-message-bytes): test_secure_connect.py covers it. Describe on a transactional id is implied by Write,
so the transactional-id row takes Write away."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from devtools.kafka_cluster import free_port
from tests.kafka.conftest import UniqueNames
from tests.kafka.secure_broker import SecureKafka
from tests.kafka.support import (
    ROOT,
    Out,
    Run,
    WorkerProcess,
    assert_exactly_once,
    collect,
    corpus,
    expected_total,
    http_get,
    interleave,
    metric,
    produce,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(480)]  # a guard against hangs: twice the longest seen

# s07_errors holds lines the worker dead-letters, so every row writes to the dead-letter topic too.
_RUNS = ["s01_hello", "s02_tool_roundtrip", "s05_failed", "s07_errors"]
_NAMED_WITHIN_S = 30.0
# The right stays missing this long after it is first named, and then until the worker names it once more: the
# probes are read at the start of a back-off several seconds long, and the grant lands within it.
_DENIED_FOR_S = 8.0
_MAX_LINES = 10  # by then: one line per back-off step, the steps doubling, is far fewer than a retry loop's
_HEALED_WITHIN_S = 30.0
_METRIC = "harness_agui_authorization_failures_total"
# What aiokafka says after a denied right has broken the transaction, instead of the denial itself.
_SAYS_NOTHING = ("IllegalOperation", "not in transaction", "Unexpected error during batch delivery")


@dataclass(frozen=True)
class Right:
    """One right the worker needs: the resource it is granted on (a role among the row's names), the kafka-acls
    operation, the grant as an operator reads it, and the metric's labels. `display`: the display topic is on;
    `after_a_run`: the right bites only once a first worker has written a checkpoint (a rebuild then reads it)."""

    resource: str  # source, output, dlq, changelog, display, group or transactional-id
    operation: str
    grant: str  # with {name} for the resource's name
    labels: tuple[str, str]  # resource_type, operation
    display: bool = False
    after_a_run: bool = False


RIGHTS = {
    "source-read": Right("source", "Read", "READ on Topic '{name}'", ("topic", "read")),
    "output-write": Right("output", "Write", "WRITE on Topic '{name}'", ("topic", "write")),
    "dlq-write": Right("dlq", "Write", "WRITE on Topic '{name}'", ("topic", "write")),
    "changelog-write": Right("changelog", "Write", "WRITE on Topic '{name}'", ("topic", "write")),
    "display-write": Right("display", "Write", "WRITE on Topic '{name}'", ("topic", "write"), display=True),
    "changelog-read": Right("changelog", "Read", "READ on Topic '{name}'", ("topic", "read"), after_a_run=True),
    "group-read": Right("group", "Read", "READ on Group '{name}'", ("group", "read")),
    "transactional-id-write": Right("transactional-id", "Write", "WRITE and DESCRIBE on TransactionalId '{name}'",
                                    ("transactional-id", "write-describe")),
    "changelog-create": Right("changelog", "Create", "CREATE on Topic '{name}'", ("topic", "create")),
    "display-create": Right("display", "Create", "CREATE on Topic '{name}'", ("topic", "create"), display=True),
}  # fmt: skip


@dataclass(frozen=True)
class Resources:
    """A row's topics, group and transactional-id prefix; the changelog and display topics are the worker's to
    create."""

    source: str
    output: str
    dlq: str
    group: str
    prefix: str
    display: str

    @property
    def changelog(self) -> str:
        return f"{self.group}.changelog"

    def acl_resource(self, resource: str) -> list[str]:
        """The kafka-acls arguments naming a resource."""
        if resource == "group":
            return ["--group", self.group]
        if resource == "transactional-id":
            return ["--transactional-id", f"{self.prefix}:", "--resource-pattern-type", "prefixed"]
        return ["--topic", getattr(self, resource)]

    def logged(self, resource: str) -> str:
        """The resource's name as the worker names it: partition 0's transactional id for the prefixed grant."""
        if resource == "transactional-id":
            return f"{self.prefix}:{self.group}:{self.source}:0"
        return self.group if resource == "group" else str(getattr(self, resource))


@pytest.mark.parametrize("row", list(RIGHTS))
def test_a_missing_right_is_named_commits_nothing_and_heals_once_granted(
    secure_kafka: SecureKafka, secure_names: UniqueNames, secure_logs: Path, row: str
) -> None:
    right = RIGHTS[row]
    principal = secure_kafka.scram_user(secure_names("user"))
    names = Resources(
        *(secure_kafka.create_topic(secure_names(role)) for role in ("source", "output", "dlq")),
        group=secure_names("group"),
        prefix=secure_names("txn"),
        display=secure_names("display"),
    )
    secure_kafka.grant_worker(principal, source=names.source, output=names.output, dlq=names.dlq, group=names.group,
                              prefix=names.prefix, changelog=names.changelog,
                              display=names.display if right.display else None)  # fmt: skip
    runs = corpus(names=_RUNS)
    records = interleave(runs)
    first_half, rest = records[: len(records) // 2], records[len(records) // 2 :]
    admin = secure_kafka.admin_options()
    taken = ["--operation", right.operation, *names.acl_resource(right.resource)]
    flags = ["--transactional-id-prefix", names.prefix, *(["--display-topic", names.display] if right.display else [])]
    port = free_port()

    def start(name: str) -> WorkerProcess:
        return secure_kafka.worker(secure_logs, name, principal, names.source, names.output, names.dlq, names.group,
                                   *flags, metrics_port=port).start()  # fmt: skip

    before: tuple[dict[int, int], int] = ({}, 0)  # committed offsets and output records before the right is taken
    workers: list[WorkerProcess] = []
    if right.after_a_run:  # a first worker with every right leaves a checkpoint of half of each run
        workers.append(start("w1"))
        asyncio.run(produce(secure_kafka.bootstrap_servers, names.source, first_half, client=admin))
        _until(lambda: asyncio.run(_committed(secure_kafka, names.group)) == {0: len(first_half)}, 60, workers[0])
        assert workers[0].stop() == 0, workers[0].log()[-3000:]
        before = (
            asyncio.run(_committed(secure_kafka, names.group)),
            len(asyncio.run(_read(secure_kafka, names.output))),
        )
        assert before[1] > 0
        records = rest
    secure_kafka.revoke(principal, *taken)
    worker = start("w2" if workers else "w")
    workers.append(worker)
    try:
        named_by = time.monotonic() + _NAMED_WITHIN_S
        asyncio.run(produce(secure_kafka.bootstrap_servers, names.source, records, client=admin))
        expected = right.grant.format(name=names.logged(right.resource))
        _until(lambda: len(_named(worker, expected)) >= 2, named_by - time.monotonic(), worker)  # two steps
        time.sleep(_DENIED_FOR_S)
        said = len(_named(worker, expected))
        _until(lambda: len(_named(worker, expected)) > said, 15, worker)
        # Just named again: in a back-off (a partition that rebuilt is ready until its next transaction fails).
        assert http_get(port, "/readyz")[0] == 503
        assert http_get(port, "/livez")[0] == 200
        lines = _named(worker, expected)
        assert len(lines) <= _MAX_LINES, f"{len(lines)} lines: no back-off"
        for line in lines:
            assert f"{expected} for {principal.acl_name}" in line, line
            assert "README.md#access-control" in line, line
        others = [r["msg"] for r in worker.log_records() if r.get("level") == "ERROR"
                  and str(r.get("logger")).startswith("worker.") and expected not in r["msg"]]  # fmt: skip
        assert not others, f"every ERROR line of the worker names the missing right; also: {others}"
        assert not [w for w in _SAYS_NOTHING if w in worker.log()], "a refusal is logged by what followed it"
        _assert_the_link_resolves(lines[0])
        assert metric(port, _METRIC, resource_type=right.labels[0], operation=right.labels[1]) >= len(lines)
        assert asyncio.run(_committed(secure_kafka, names.group)) == before[0], "an offset was committed"
        assert len(asyncio.run(_read(secure_kafka, names.output))) == before[1], "output was committed"

        secure_kafka.grant(principal, *taken)
        out = asyncio.run(collect(secure_kafka.bootstrap_servers, names.output, expect=expected_total(runs),
                                  timeout_s=_HEALED_WITHIN_S, settle_s=0.5, client=admin))  # fmt: skip
        assert_exactly_once(out, runs)
        _until(lambda: http_get(port, "/readyz")[0] == 200, 10, worker)
        _assert_dead_letters_exact(asyncio.run(_read(secure_kafka, names.dlq)), runs)
        if right.display:
            assert asyncio.run(_read(secure_kafka, names.display)), "no display record once the right was granted"
    except AssertionError:
        for w in workers:
            print(f"---- {w.log_path.name}\n{w.log()[-6000:]}")
        raise
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    for w in workers:
        assert "Traceback" not in w.log(), w.log()[-3000:]


def _named(worker: WorkerProcess, expected: str) -> list[str]:
    """The worker's ERROR lines that name `expected`."""
    return [str(r["msg"]) for r in worker.log_records() if r.get("level") == "ERROR" and expected in r["msg"]]


def _assert_the_link_resolves(line: str) -> None:
    """The `<file>.md#<anchor>` a refusal names is a heading of that file (as GitHub makes anchors)."""
    [(path, anchor)] = re.findall(r"([\w./-]+\.md)#([\w-]+)", line)
    headings = re.findall(r"^#+ (.+)$", (ROOT / path).read_text(), flags=re.M)
    anchors = {re.sub(r"[^\w -]", "", h.strip().lower()).replace(" ", "-") for h in headings}
    assert anchor in anchors, f"{path} has no heading #{anchor}"


def _assert_dead_letters_exact(dead: list[Out], runs: list[Run]) -> None:
    """Each line the converter rejects or finds mis-keyed is dead-lettered once, as it was produced."""
    want = sorted(line for run in runs for line in (*run.rejected, *run.mis_keyed))
    assert want, "the runs hold lines to dead-letter"
    assert sorted(d.value for d in dead) == want


def _until(condition: Callable[[], bool], seconds: float, worker: WorkerProcess) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert worker.alive, f"worker exited ({worker.proc and worker.proc.returncode}): {worker.log()[-3000:]}"
        assert time.monotonic() < deadline, f"not within {seconds:.0f} s: {worker.log()[-3000:]}"
        time.sleep(0.3)


async def _committed(secure_kafka: SecureKafka, group: str) -> dict[int, int]:
    """The group's committed offset of each source partition that has one."""
    admin = AIOKafkaAdminClient(bootstrap_servers=secure_kafka.bootstrap_servers, **secure_kafka.admin_options())
    await admin.start()
    try:
        return {tp.partition: entry.offset for tp, entry in (await admin.list_consumer_group_offsets(group)).items()}
    finally:
        await admin.close()


async def _read(secure_kafka: SecureKafka, topic: str) -> list[Out]:
    """What a read_committed consumer reads of `topic` within a few seconds."""
    return await collect(secure_kafka.bootstrap_servers, topic, expect=1 << 30, timeout_s=3,
                         client=secure_kafka.admin_options())  # fmt: skip
