"""The gateway on the secured broker: it connects with the worker's settings (secrets from files, never a flag), and
a refused handshake or a missing right at start is one ERROR line per retry, naming the cause or the right, while
the gateway stays alive and not ready; once granted, it serves."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from tests.gateway.support import GatewayProcess, Topics, read_stream
from tests.kafka.conftest import UniqueNames
from tests.kafka.secure_broker import Principal, SecureKafka
from tests.kafka.support import corpus, interleave, produce

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]  # a guard against hangs: twice the longest seen


def _until(condition: Callable[[], bool], seconds: float, gateway: GatewayProcess) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert gateway.proc is not None and gateway.proc.poll() is None, f"gateway exited: {gateway.log()[-3000:]}"
        assert time.monotonic() < deadline, f"not within {seconds} s: {gateway.log()[-3000:]}"
        time.sleep(0.3)


def _errors(gateway: GatewayProcess, phrase: str) -> list[str]:
    return [str(r["msg"]) for r in gateway.log_records() if r.get("level") == "ERROR" and phrase in str(r["msg"])]


def _topics(secure_kafka: SecureKafka, secure_names: UniqueNames) -> Topics:
    return Topics(*(secure_kafka.create_topic(secure_names(role), partitions=2 if role != "dlq" else 1,
                                              config={"cleanup.policy": "compact"} if role == "display" else None)
                    for role in ("source", "output", "dlq", "display")))  # fmt: skip


def test_a_missing_right_is_named_per_retry_and_the_gateway_serves_once_granted(
    secure_kafka: SecureKafka, secure_names: UniqueNames, secure_logs: Path
) -> None:
    topics = _topics(secure_kafka, secure_names)
    writer = secure_kafka.scram_user(secure_names("worker"))
    group, prefix = secure_names("group"), secure_names("txn")
    secure_kafka.grant_worker(writer, source=topics.source, output=topics.output, dlq=topics.dlq, group=group,
                              prefix=prefix, display=topics.display)  # fmt: skip
    runs = corpus(names=["s01_hello", "s02_tool_roundtrip"])
    asyncio.run(produce(secure_kafka.bootstrap_servers, topics.source, interleave(runs),
                        client=secure_kafka.admin_options()))  # fmt: skip
    worker = secure_kafka.worker(secure_logs, "w", writer, topics.source, topics.output, topics.dlq, group,
                                 "--no-changelog", "--transactional-id-prefix", prefix, "--display-topic",
                                 topics.display).start()  # fmt: skip
    reader = secure_kafka.scram_user(secure_names("gateway"))
    bootstrap, flags = secure_kafka.worker_connection(reader, secure_logs / "secrets")
    gateway = GatewayProcess(secure_logs, bootstrap, topics, tuple(flags)).start(ready_timeout_s=None)
    try:
        describe = f"DESCRIBE on Topic '{topics.output}' for User:{reader.name}"
        _until(lambda: len(_errors(gateway, describe)) >= 2, 60, gateway)
        assert all("retrying in" in line for line in _errors(gateway, describe))
        assert gateway.probe("/livez")[0] == 200 and gateway.probe("/readyz")[0] == 503

        secure_kafka.grant(reader, "--operation", "Describe", "--topic", topics.output, "--topic", topics.display)
        group = f"READ on Group 'harness-agui-gateway.{topics.output}' for User:{reader.name}"
        _until(lambda: len(_errors(gateway, group)) >= 2, 60, gateway)
        assert all("retrying in" in line for line in _errors(gateway, group))
        assert gateway.probe("/livez")[0] == 200 and gateway.probe("/readyz")[0] == 503

        secure_kafka.grant(reader, "--operation", "Read", "--group", f"harness-agui-gateway.{topics.output}")
        read = "not authorised to read"
        _until(lambda: len(_errors(gateway, read)) >= 2, 60, gateway)
        for line in _errors(gateway, read):
            assert "retrying in" in line
            assert any(f"READ on Topic '{topic}' for User:{reader.name}" in line
                       for topic in (topics.display, topics.output)), line
        assert gateway.probe("/livez")[0] == 200 and gateway.probe("/readyz")[0] == 503

        secure_kafka.grant(reader, "--operation", "Read", "--topic", topics.output, "--topic", topics.display)
        gateway.wait_ready(60)

        async def whole_runs() -> None:
            async with aiohttp.ClientSession() as session:
                for run in runs:
                    for _ in range(300):  # until the worker converted it
                        async with session.get(f"{gateway.url}/runs/{run.key}/display") as resp:
                            if resp.status == 200:
                                break
                        await asyncio.sleep(0.1)
                    status, frames, ended = await read_stream(session, f"{gateway.url}/runs/{run.key}/events")
                    assert status == 200 and ended
                    assert [f.data.encode() for f in frames] == run.events

        asyncio.run(whole_runs())
        assert "Traceback" not in gateway.log()
        assert not [r for r in gateway.log_records() if "Not authorized to read" in str(r.get("msg"))]
    finally:
        assert gateway.stop() == 0, gateway.log()[-3000:]
        assert worker.stop() == 0, worker.log()[-3000:]


def test_a_refused_handshake_is_named_counted_and_retried_while_alive_and_not_ready(
    secure_kafka: SecureKafka, secure_names: UniqueNames, secure_logs: Path
) -> None:
    topics = _topics(secure_kafka, secure_names)
    real = secure_kafka.scram_user(secure_names("gateway"))
    wrong = Principal(real.name, real.mechanism, "not-the-password")
    bootstrap, flags = secure_kafka.worker_connection(wrong, secure_logs / "secrets")
    gateway = GatewayProcess(secure_logs, bootstrap, topics, tuple(flags)).start(ready_timeout_s=None)
    try:
        _until(lambda: len(_errors(gateway, "authentication failed")) >= 2, 60, gateway)
        refusals = [r for r in gateway.log_records() if r.get("level") == "ERROR"]
        assert {r.get("cause") for r in refusals} == {"authentication"}, refusals
        assert all("retrying in" in str(r["msg"]) for r in refusals)
        assert "Traceback" not in gateway.log()
        assert gateway.metric("harness_agui_gateway_authentication_failures_total", cause="authentication") >= 2
        assert gateway.probe("/livez")[0] == 200 and gateway.probe("/readyz")[0] == 503
    finally:
        assert gateway.stop() == 0, gateway.log()[-3000:]
