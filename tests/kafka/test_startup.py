"""`python -m worker run` refuses settings and topic layouts that cannot work with exit status 2 and one line
naming what to fix, stops the same way when the output topic's partition count changes under it, and waits for
brokers it cannot reach: not ready, one log line per attempt, a clean exit on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from devtools.kafka_cluster import free_port
from tests.kafka.support import (
    ROOT,
    WorkerProcess,
    assert_exactly_once,
    collect,
    corpus,
    expected_total,
    http_get,
    interleave,
    produce,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


def _run(bootstrap: str, source: str, output: str, dlq: str, *extra: str) -> tuple[int, str, str]:
    """Run the worker to its exit; returns its status, the one `worker:` line on stderr, and all its output."""
    proc = subprocess.run(
        [sys.executable, "-m", "worker", "run", "--bootstrap-servers", bootstrap, "--source-topic", source,
         "--output-topic", output, "--dlq-topic", dlq, "--group-id", f"group-{source}", "--metrics-port", "0",
         "--log-format", "json", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("worker: ")]
    everything = proc.stdout + proc.stderr
    assert len(said) <= 1, everything
    return proc.returncode, said[0] if said else "", everything


SETTINGS = [
    pytest.param(("--session-timeout-ms", "60000"),
                 "session_timeout_ms (60000) must be below transaction_timeout_ms (60000)", id="session-vs-txn"),
    pytest.param(("--commit-interval-ms", "5000", "--transaction-timeout-ms", "5000", "--session-timeout-ms", "4000",
                  "--heartbeat-interval-ms", "1000"),
                 "commit_interval_ms (5000) must be below transaction_timeout_ms (5000)", id="commit-vs-txn"),
    pytest.param(("--transaction-timeout-ms", "1000000"),
                 "transaction_timeout_ms (1000000) exceeds the brokers' transaction.max.timeout.ms (900000)",
                 id="txn-over-broker-max"),
    pytest.param(("--session-timeout-ms", "3000", "--heartbeat-interval-ms", "1000"),
                 "session_timeout_ms (3000) lies outside the brokers' group.min.session.timeout.ms",
                 id="session-under-broker-min"),
    pytest.param(("--processor", "tests.processors:no_such_processor"),
                 "processor 'tests.processors:no_such_processor': tests.processors has no attribute "
                 "no_such_processor", id="processor-missing"),
    pytest.param(("--processor", "tests.no_such_module:processor"),
                 "processor 'tests.no_such_module:processor' cannot be imported: ModuleNotFoundError",
                 id="processor-module-missing"),
]


@pytest.mark.parametrize(("extra", "message"), SETTINGS)
def test_settings_that_cannot_work_exit_2_naming_them(
    kafka_bootstrap: str, topic_factory, extra: tuple[str, ...], message: str
) -> None:
    source, output, dlq = topic_factory("source"), topic_factory("output"), topic_factory("dlq")
    status, said, everything = _run(kafka_bootstrap, source, output, dlq, *extra)
    assert status == 2, everything
    assert message in said, everything
    assert "Traceback" not in everything


@pytest.mark.parametrize("missing", ["source", "output", "dlq"])
def test_a_topic_that_does_not_exist_exits_2_naming_it(kafka_bootstrap: str, topic_factory, unique_names,
                                                        missing: str) -> None:
    topics = {role: unique_names(role) if role == missing else topic_factory(role)
              for role in ("source", "output", "dlq")}
    status, said, everything = _run(kafka_bootstrap, topics["source"], topics["output"], topics["dlq"])
    assert status == 2, everything
    role = {"source": "source_topic", "output": "output_topic", "dlq": "dlq_topic"}[missing]
    assert said == (f"worker: {role} {topics[missing]!r} does not exist: create the topics, or name existing ones "
                    "(and grant this client Describe on them)")
    assert "Traceback" not in everything


def test_a_dead_letter_topic_taking_too_small_records_exits_2(kafka_bootstrap: str, topic_factory) -> None:
    dlq = topic_factory("dlq", config={"max.message.bytes": "10000"})
    status, said, everything = _run(kafka_bootstrap, topic_factory("source"), topic_factory("output"), dlq)
    assert status == 2, everything
    assert said == (f"worker: dlq_topic {dlq!r} takes records of at most 10000 bytes (max.message.bytes); the "
                    "worker needs at least 16896: raise the topic's max.message.bytes")


DISPLAY_LAYOUTS = [
    pytest.param({"partitions": 2}, None,
                 "display_topic {display!r} has 2 partitions and output_topic {output!r} 3: a run's display record "
                 "must be in the partition of its events", id="display-partitions"),
    pytest.param({"partitions": 3, "config": {"cleanup.policy": "delete"}}, None,
                 "display_topic {display!r} has cleanup.policy=delete; it must be compacted",
                 id="display-not-compacted"),
    pytest.param({"partitions": 3, "config": {"cleanup.policy": "compact"}}, {"max.message.bytes": "100000"},
                 "changelog_topic {changelog!r} takes records of at most 100000 bytes (max.message.bytes), less than "
                 "display_topic {display!r}", id="changelog-too-small"),
]


@pytest.mark.parametrize(("display_layout", "changelog_config", "message"), DISPLAY_LAYOUTS)
def test_a_display_layout_that_cannot_work_exits_2_naming_the_setting(
    kafka_bootstrap: str, topic_factory, display_layout: dict[str, object], changelog_config: dict[str, str] | None,
    message: str,
) -> None:  # fmt: skip
    source, output, dlq = topic_factory("source", partitions=3), topic_factory("output", partitions=3), topic_factory()
    display = topic_factory("display", **display_layout)
    changelog = topic_factory("changelog", 3, {"cleanup.policy": "compact", **(changelog_config or {})})
    status, said, everything = _run(kafka_bootstrap, source, output, dlq, "--display-topic", display,
                                    "--changelog-topic", changelog)  # fmt: skip
    assert status == 2, everything
    assert said.startswith("worker: " + message.format(display=display, output=output, changelog=changelog)), said
    assert "Traceback" not in everything


def test_a_changelog_not_co_partitioned_with_the_source_exits_2(kafka_bootstrap: str, topic_factory) -> None:
    source, output, dlq = topic_factory("source", partitions=3), topic_factory("output", partitions=3), topic_factory()
    changelog = topic_factory("changelog", 2, {"cleanup.policy": "compact"})
    status, said, everything = _run(kafka_bootstrap, source, output, dlq, "--changelog-topic", changelog)
    assert status == 2, everything
    assert said == (f"worker: changelog_topic {changelog!r} has 2 partitions and source_topic {source!r} 3: the state "
                    "of source partition p lives in changelog partition p. Delete the changelog topic (the next "
                    "rebuilds replay the source instead) or name a new one with --changelog-topic")


def test_a_missing_display_topic_is_created_compacted_like_the_output(
    kafka_bootstrap: str, topic_factory, unique_names, tmp_path: Path
) -> None:
    source, output, dlq = topic_factory("source"), topic_factory("output", partitions=2), topic_factory("dlq")
    display = unique_names("display")
    w = WorkerProcess(tmp_path, "w", kafka_bootstrap, source, output, dlq, f"group-{source}",
                      "--display-topic", display).start()  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not any("display_topic created" in str(r.get("msg")) for r in w.log_records()):
            assert time.monotonic() < deadline and w.alive, w.log()[-3000:]
            time.sleep(0.2)
    finally:
        assert w.stop() == 0

    async def described() -> tuple[int, str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            (topic,) = await admin.describe_topics([display])
            (response,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, display)])
            (resource,) = response.to_object()["resources"]
            configs = {e["config_names"]: e["config_value"] for e in resource["config_entries"]}
            policy = configs["cleanup.policy"]
            return len(topic["partitions"]), policy
        finally:
            await admin.close()

    assert asyncio.run(described()) == (2, "compact")


def test_an_output_topic_whose_partition_count_changes_stops_the_worker_with_exit_2(
    kafka_bootstrap: str, topic_factory, tmp_path: Path
) -> None:
    source, output, dlq = topic_factory("source"), topic_factory("output", partitions=2), topic_factory("dlq")
    runs = corpus(names=["s01_hello"])
    asyncio.run(produce(kafka_bootstrap, source, interleave(runs)))
    port = free_port()
    w = WorkerProcess(tmp_path, "w", kafka_bootstrap, source, output, dlq, f"group-{source}",
                      "--topic-check-interval-ms", "1000", metrics_port=port).start()
    try:
        assert_exactly_once(asyncio.run(collect(kafka_bootstrap, output, expect=expected_total(runs),
                                                timeout_s=60, settle_s=0)), runs)

        async def grow() -> None:
            admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
            await admin.start()
            try:
                await admin.create_partitions({output: NewPartitions(total_count=3)})
            finally:
                await admin.close()

        asyncio.run(grow())
        status = w.wait(30)
        assert status == 2
        said = [ln for ln in w.log().splitlines() if ln.startswith("worker: ")]
        assert said == [
            f"worker: output_topic {output!r} has 3 partitions, 2 when the worker started routing run ids to "
            "them: runs still open would have their events split across partitions. Replay into an output topic "
            "that keeps its partition count, or restart the workers to route by the new count, accepting that "
            "split"
        ]
        assert "Traceback" not in w.log()
    except AssertionError:
        print(w.log()[-4000:])
        raise
    finally:
        w.stop()


def _attempts(w: WorkerProcess) -> list[dict[str, object]]:
    return [r for r in w.log_records() if r.get("logger") == "worker.client"]


def test_unreachable_brokers_are_retried_one_line_an_attempt_while_not_ready_and_sigterm_exits_0(
    tmp_path: Path
) -> None:
    port, nowhere = free_port(), free_port()
    w = WorkerProcess(tmp_path, "w", f"127.0.0.1:{nowhere}", "s", "o", "d", "g", metrics_port=port).start()
    try:
        deadline = time.monotonic() + 30
        while len(_attempts(w)) < 4:
            assert time.monotonic() < deadline and w.alive, w.log()
            time.sleep(0.2)
        assert http_get(port, "/readyz")[0] == 503
        assert http_get(port, "/livez")[0] == 200
        assert w.stop(timeout_s=10) == 0
        attempts = _attempts(w)
        for n, record in enumerate(attempts, 1):
            assert record["level"] == "WARNING"
            assert str(record["msg"]).startswith(f"Kafka brokers not ready (attempt {n}), retrying in "), record
            assert f'Unable connect to "127.0.0.1:{nowhere}"' in str(record["msg"]), record
        log = w.log()
        assert "Traceback" not in log
        assert not [r for r in w.log_records() if str(r.get("logger", "")).startswith("aiokafka")], \
            "the client's own connection errors are folded into the attempt's line"
        assert not [r for r in w.log_records() if r.get("exc")]
    except AssertionError:
        print(w.log()[-4000:])
        raise
    finally:
        w.stop()


@contextlib.contextmanager
def _forwarder(port: int, target: tuple[str, int]) -> Iterator[None]:
    """A TCP forwarder on 127.0.0.1:`port` to `target`, for as long as the block runs."""
    server = socket.create_server(("127.0.0.1", port))
    server.settimeout(0.2)
    stopping = threading.Event()

    def pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def accept() -> None:
        while not stopping.is_set():
            try:
                client, _ = server.accept()
            except TimeoutError:
                continue
            upstream = socket.create_connection(target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stopping.set()
        thread.join(5)
        server.close()


def test_brokers_that_come_back_are_joined_and_the_worker_becomes_ready(
    kafka_bootstrap: str, topic_factory, tmp_path: Path
) -> None:
    source, output, dlq = topic_factory("source"), topic_factory("output"), topic_factory("dlq")
    runs = corpus(names=["s01_hello"])
    asyncio.run(produce(kafka_bootstrap, source, interleave(runs)))
    port, later = free_port(), free_port()
    # Only the bootstrap address is late: once reached, the client talks to the brokers' advertised addresses.
    w = WorkerProcess(tmp_path, "w", f"127.0.0.1:{later}", source, output, dlq, f"group-{source}",
                      metrics_port=port).start()
    try:
        deadline = time.monotonic() + 30
        while len(_attempts(w)) < 3:
            assert time.monotonic() < deadline and w.alive, w.log()
            time.sleep(0.2)
        assert http_get(port, "/readyz")[0] == 503
        host, broker_port = kafka_bootstrap.split(",", maxsplit=1)[0].rsplit(":", 1)
        with _forwarder(later, (host, int(broker_port))):
            assert_exactly_once(asyncio.run(collect(kafka_bootstrap, output, expect=expected_total(runs),
                                                    timeout_s=90)), runs)
            deadline = time.monotonic() + 30
            while http_get(port, "/readyz")[0] != 200:
                assert time.monotonic() < deadline, "the worker never became ready"
                time.sleep(0.3)
            assert w.stop() == 0
        assert "Traceback" not in w.log()
        assert any(str(r.get("msg", "")).startswith("topics checked") for r in w.log_records())
    except AssertionError:
        print(w.log()[-4000:])
        raise
    finally:
        if w.alive:
            w.signal(signal.SIGKILL)
