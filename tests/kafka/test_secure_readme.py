"""The README's access-control commands, run as written with Kafka's own `kafka-acls` class against a broker that
denies whatever no ACL allows, are all the worker needs: a worker with exactly those rights, over SCRAM-SHA-512
and TLS with the display topic on, is killed (-9) mid-stream and its successor finishes every run exactly once."""

from __future__ import annotations

import asyncio
import re
import shlex
from pathlib import Path

import pytest

from devtools.kafka_tools import run_tool
from tests.kafka.secure_broker import SecureKafka
from tests.kafka.support import assert_exactly_once, collect, corpus, expected_total, interleave, produce
from tests.test_readme import _section
from worker.live.topics import record_limit

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(420)]

# The names the README's commands grant on: its defaults.
SOURCE, OUTPUT, DLQ, DISPLAY = "harness.events", "agui.events", "harness.events.dlq", "agui.display"
GROUP = PRINCIPAL = "harness-agui-worker"
OUTPUT_MAX_BYTES = 2_097_152  # what the README's Topics section gives the output and dead-letter topics


def readme_acl_commands(bootstrap: str, principal: str, command_config: Path) -> list[list[str]]:
    """The arguments of every `kafka-acls.sh` line of the README's access-control block, its variables set."""
    [block, *_] = re.findall(r"```bash\n(.*?)```", _section("Access control"), flags=re.S)
    values = {"$BS": bootstrap, "$P": principal, "admin.properties": str(command_config)}
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        if line.startswith("kafka-acls.sh "):
            commands.append([values.get(word, word) for word in shlex.split(line, comments=True)[1:]])
    return commands


def test_the_readme_block_grants_every_resource_the_worker_uses() -> None:
    commands = readme_acl_commands("bs", "User:p", Path("admin.properties"))
    kinds = ("--topic", "--group", "--transactional-id")
    granted = {args[i + 1] for args in commands for i, word in enumerate(args) if word in kinds}
    granted |= {"cluster" for args in commands if "--cluster" in args}
    assert granted >= {SOURCE, OUTPUT, DLQ, DISPLAY, f"{GROUP}.changelog", GROUP, f"{GROUP}:{GROUP}:", "cluster"}
    assert all(args[:4] == ["--bootstrap-server", "bs", "--command-config", "admin.properties"] for args in commands)


def test_the_readme_acls_as_written_carry_an_exactly_once_run_through_a_kill(
    secure_kafka: SecureKafka, secure_logs: Path
) -> None:
    worker_user = secure_kafka.scram_user(PRINCIPAL, "SCRAM-SHA-512")
    for topic in (SOURCE, OUTPUT):
        secure_kafka.create_topic(topic, partitions=3,
                                  config={"max.message.bytes": str(OUTPUT_MAX_BYTES)} if topic == OUTPUT else None)
    secure_kafka.create_topic(DLQ, config={"max.message.bytes": str(OUTPUT_MAX_BYTES)})
    for args in readme_acl_commands(secure_kafka.bootstrap_servers, worker_user.acl_name, secure_kafka.admin_config):
        done = run_tool("acls", args)
        assert done.returncode == 0, f"kafka-acls {args}: {done.stdout}{done.stderr}"

    runs = corpus()
    admin = secure_kafka.admin_options()
    display = ("--display-topic", DISPLAY)
    first = secure_kafka.worker(secure_logs, "w1", worker_user, SOURCE, OUTPUT, DLQ, GROUP, *display).start()

    async def scenario() -> None:
        feeder = asyncio.create_task(produce(secure_kafka.bootstrap_servers, SOURCE, interleave(runs),
                                             pace_s=0.002, client=admin))  # fmt: skip
        await asyncio.sleep(8)
        first.kill()
        await feeder

    asyncio.run(scenario())
    second = secure_kafka.worker(secure_logs, "w2", worker_user, SOURCE, OUTPUT, DLQ, GROUP, *display).start()
    try:
        out = asyncio.run(collect(secure_kafka.bootstrap_servers, OUTPUT, expect=expected_total(runs),
                                  timeout_s=180, client=admin))  # fmt: skip
        assert_exactly_once(out, runs)
    except AssertionError:
        print(f"---- w1\n{first.log()[-3000:]}\n---- w2\n{second.log()[-4000:]}")
        raise
    finally:
        assert second.stop() == 0, second.log()[-3000:]
    messages = [str(r.get("msg", "")) for w in (first, second) for r in w.log_records()]
    assert not [m for m in messages if "unreadable" in m or "denied" in m.lower()], "a right is missing"
    limits = [m for m in messages if m.startswith("topics checked:")]
    assert limits and all(f"records up to {record_limit(OUTPUT_MAX_BYTES)} bytes" in m for m in limits), limits
    assert any(m.startswith("changelog_topic created") for m in messages), "Create on the changelog was used"
    assert any(m.startswith("display_topic created") for m in messages), "Create on the display topic was used"
