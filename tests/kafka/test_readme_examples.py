"""The README's user path on a real broker: its topic settings are accepted, its producer example writes a run,
a worker converts it, and its consumer example prints that run's AG-UI events, each once, in order."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from tests.kafka.conftest import KafkaBroker, TopicFactory, UniqueNames
from tests.kafka.support import WorkerProcess
from tests.test_readme import _section, python_blocks
from worker.live.topics import CHANGELOG_SEGMENT_BYTES
from worker.settings import Settings

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


def readme_topic_commands() -> dict[str, dict[str, str]]:
    """Per topic the README creates with kafka-topics.sh: its --partitions, --replication-factor and --config."""
    [block] = re.findall(r"```bash\n(.*?)```", _section("Topics"), flags=re.S)
    commands = [c for c in block.replace("\\\n", " ").splitlines() if c.startswith("kafka-topics.sh")]
    out: dict[str, dict[str, str]] = {}
    for command in commands:
        words = shlex.split(command)
        options: dict[str, str] = {}
        for flag, value in zip(words, [*words[1:], ""], strict=True):
            if flag == "--config":
                key, _, setting = value.partition("=")
                options[key] = setting
            elif flag in ("--topic", "--partitions", "--replication-factor"):
                options[flag] = value
        out[options.pop("--topic")] = options
    return out


def test_the_readme_creates_the_topics_replicated_and_the_changelog_display_and_index_co_partitioned() -> None:
    topics = readme_topic_commands()
    changelog = f"{Settings().group_id}.changelog"
    assert set(topics) == {"harness.events", "agui.events", "harness.events.dlq", changelog, "agui.display",
                           "agui.threads"}
    policies = {changelog: "compact", "agui.display": "compact,delete", "agui.threads": "compact"}
    for name, options in topics.items():
        assert options["--replication-factor"] == "3" and options["min.insync.replicas"] == "2", name
        assert options["cleanup.policy"] == policies.get(name, "delete"), name
    assert topics[changelog]["--partitions"] == topics["harness.events"]["--partitions"]
    assert topics[changelog]["segment.bytes"] == str(CHANGELOG_SEGMENT_BYTES), "as the worker creates it"
    assert topics["agui.display"]["--partitions"] == topics["agui.events"]["--partitions"]
    assert topics["agui.threads"]["--partitions"] == topics["agui.events"]["--partitions"]
    assert int(topics[changelog]["max.message.bytes"]) >= int(topics["agui.display"].get("max.message.bytes", 1048588))


async def _lines_until(proc: asyncio.subprocess.Process, done: str, within_s: float) -> list[str]:
    """Lines the process prints until one contains `done`; TimeoutError naming what came before."""
    assert proc.stdout is not None
    lines: list[str] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not any(done in line for line in lines):
        try:
            raw = await asyncio.wait_for(proc.stdout.readline(), max(0.1, deadline - loop.time()))
        except TimeoutError:
            raise TimeoutError(f"no line with {done!r} within {within_s:.0f} s; got {lines}") from None
        if not raw:
            break
        lines.append(raw.decode())
    return lines


async def test_the_produce_and_consume_examples_run_against_a_worker(
    kafka_broker: KafkaBroker, topic_factory: TopicFactory, unique_names: UniqueNames, tmp_path: Path
) -> None:
    bs = kafka_broker.bootstrap_servers
    configs = readme_topic_commands()
    # The README's topic settings, on this broker (one node: its own replication and min.insync.replicas).
    source, output, dlq = (
        topic_factory(role, partitions=2, config={k: v for k, v in configs[name].items()
                                                  if not k.startswith("-") and k != "min.insync.replicas"})
        for role, name in (("source", "harness.events"), ("agui", "agui.events"), ("dlq", "harness.events.dlq"))
    )
    [produce_code] = python_blocks("Producing from a Harness host")
    [consume_code] = python_blocks("Consuming AG-UI events")
    (tmp_path / "produce.py").write_text(produce_code)
    (tmp_path / "consume.py").write_text(consume_code)
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bs, "SOURCE_TOPIC": source, "OUTPUT_TOPIC": output,
           "UI_GROUP": unique_names("ui")}

    worker = WorkerProcess(tmp_path, "worker", bs, source, output, dlq, unique_names("group")).start()
    consumer = None
    try:
        produced = await asyncio.create_subprocess_exec(
            sys.executable, str(tmp_path / "produce.py"), env=env, cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(produced.communicate(), 60)
        assert produced.returncode == 0, err.decode()
        run_id = out.decode().strip()
        assert re.fullmatch(r"run-[0-9a-f]{32}", run_id), out

        errors = tmp_path / "consume.err"
        with errors.open("wb") as stderr:
            consumer = await asyncio.create_subprocess_exec(
                sys.executable, str(tmp_path / "consume.py"), env=env, cwd=tmp_path,
                stdout=asyncio.subprocess.PIPE, stderr=stderr)
        try:
            lines = await _lines_until(consumer, f"{run_id}:4 RUN_FINISHED", within_s=120)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\nconsumer stderr:\n{errors.read_text()[-2000:]}\n"
                                 f"worker log:\n{worker.log()[-3000:]}") from None
    finally:
        if consumer is not None and consumer.returncode is None:
            consumer.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(consumer.wait(), 20)
        status = worker.stop()
    assert status == 0, worker.log()[-3000:]

    printed = [line.split(" ", 2) for line in lines]
    assert [(event_id, kind) for event_id, kind, _ in printed] == [
        (f"{run_id}:0", "RUN_STARTED"),
        (f"{run_id}:1", "TEXT_MESSAGE_START"),
        (f"{run_id}:2", "TEXT_MESSAGE_CONTENT"),
        (f"{run_id}:3", "TEXT_MESSAGE_END"),
        (f"{run_id}:4", "RUN_FINISHED"),
    ]
    events = [json.loads(value) for _, _, value in printed]
    assert events[0]["runId"] == run_id
    assert events[2]["delta"] == "Hello"
    assert events[4]["result"] == "Hello" and events[4]["outcome"] == {"type": "success"}
