"""The worker on a secured broker: every mechanism it serves carries an exactly-once run, and each way a handshake
fails at start is named in one line per back-off step, counted, and keeps the worker alive but not ready."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from devtools.kafka_cluster import free_port
from devtools.kafka_security import ThrowawayCA
from tests.kafka.conftest import UniqueNames
from tests.kafka.secure_broker import Principal, SecureKafka
from tests.kafka.support import (
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

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]  # a guard against hangs: twice the longest seen

_RUNS = ["s01_hello", "s02_tool_roundtrip", "s05_failed"]


def _principal(secure_kafka: SecureKafka, mechanism: str, name: str) -> Principal:
    if mechanism.startswith("SCRAM"):
        return secure_kafka.scram_user(name, mechanism)
    if mechanism == "PLAIN":
        return secure_kafka.plain_user("plain-worker")
    if mechanism == "OAUTHBEARER":
        return secure_kafka.oidc_client(name)
    return secure_kafka.tls_client(name)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER", "MTLS"])
def test_each_mechanism_carries_an_exactly_once_run(
    secure_kafka: SecureKafka, secure_names: UniqueNames, secure_logs: Path, mechanism: str
) -> None:
    principal = _principal(secure_kafka, mechanism, secure_names("user"))
    source, output, dlq = (secure_kafka.create_topic(secure_names(role), partitions=2)
                           for role in ("source", "output", "dlq"))  # fmt: skip
    group, prefix = secure_names("group"), secure_names("txn")
    secure_kafka.grant_worker(principal, source=source, output=output, dlq=dlq, group=group, prefix=prefix,
                              changelog=f"{group}.changelog")  # fmt: skip
    runs = corpus(names=_RUNS)
    admin = secure_kafka.admin_options()
    asyncio.run(produce(secure_kafka.bootstrap_servers, source, interleave(runs), client=admin))
    port = free_port()
    worker = secure_kafka.worker(secure_logs, "w", principal, source, output, dlq, group,
                                 "--transactional-id-prefix", prefix, metrics_port=port).start()  # fmt: skip
    try:
        out = asyncio.run(collect(secure_kafka.bootstrap_servers, output, expect=expected_total(runs),
                                  timeout_s=90, settle_s=1.0, client=admin))  # fmt: skip
        assert_exactly_once(out, runs)
        _until(lambda: http_get(port, "/readyz")[0] == 200, 30, worker)
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    if mechanism == "OAUTHBEARER":
        assert secure_kafka.issuer.requests >= 1


def _until(condition: Callable[[], bool], seconds: float, worker: WorkerProcess) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert worker.alive, f"worker exited ({worker.proc and worker.proc.returncode}): {worker.log()[-3000:]}"
        assert time.monotonic() < deadline, f"not within {seconds} s: {worker.log()[-3000:]}"
        time.sleep(0.3)


def _refusals(worker: WorkerProcess) -> list[dict[str, object]]:
    return [r for r in worker.log_records() if r.get("logger") == "worker.client" and r.get("cause")]


@pytest.mark.parametrize(("case", "cause", "phrase"), [
    ("wrong-password", "authentication", "authentication failed"),
    ("unknown-user", "authentication", "authentication failed"),
    ("mechanism-not-offered", "mechanism", "do not offer this SASL mechanism"),
    ("untrusted-ca", "tls-untrusted", "certificate not trusted"),
    ("host-name-mismatch", "tls-hostname", "host name mismatch"),
    ("no-client-certificate", "tls-client-certificate", "refused the client certificate"),
    ("token-endpoint-refuses", "token", "no OAUTHBEARER token"),
    ("token-from-another-issuer", "authentication", "refused the OAUTHBEARER token"),
])  # fmt: skip
def test_a_refused_handshake_is_named_counted_and_retried_while_alive_and_not_ready(
    secure_kafka: SecureKafka, secure_names: UniqueNames, secure_logs: Path, tmp_path: Path, case: str, cause: str,
    phrase: str,
) -> None:
    source, output, dlq = (secure_kafka.create_topic(secure_names(role)) for role in ("source", "output", "dlq"))
    name = secure_names("user")
    if case in ("wrong-password", "host-name-mismatch", "untrusted-ca"):
        principal = secure_kafka.scram_user(name)
        if case == "wrong-password":
            principal = Principal(principal.name, principal.mechanism, "not-the-password")
    elif case == "unknown-user":
        principal = Principal(name, "SCRAM-SHA-512", "no-such-user-password")
    elif case == "mechanism-not-offered":
        principal = secure_kafka.scram_user(name, "SCRAM-SHA-256")
    elif case == "no-client-certificate":
        principal = Principal(name, "MTLS", tls=None)
    elif case == "token-endpoint-refuses":
        principal = Principal(name, "OAUTHBEARER", "a-secret-the-issuer-does-not-know")
    else:
        principal = secure_kafka.oidc_client(name)
    bootstrap, flags = _connection(secure_kafka, principal, case, tmp_path)
    port = free_port()
    worker = WorkerProcess(secure_logs, "w", bootstrap, source, output, dlq, secure_names("group"), *flags,
                           metrics_port=port).start()  # fmt: skip
    (secure_logs / "w.argv").write_text("\0".join(worker.args))
    try:
        _until(lambda: len(_refusals(worker)) >= 2, 60, worker)
        lines = _refusals(worker)
        assert {line["cause"] for line in lines} == {cause}, lines
        assert all(phrase in str(line["msg"]) and line["level"] == "ERROR" for line in lines), lines
        assert "retrying in" in str(lines[1]["msg"])
        assert "Traceback" not in worker.log()
        assert metric(port, "harness_agui_authentication_failures_total", cause=cause) >= 2
        assert http_get(port, "/livez")[0] == 200
        assert http_get(port, "/readyz")[0] == 503
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]


def _connection(secure_kafka: SecureKafka, principal: Principal, case: str, tmp_path: Path) -> tuple[str, list[str]]:
    """The worker's bootstrap servers and flags for one failure case, made wrong in the one way the case names."""
    files = tmp_path / "files"
    if case == "no-client-certificate":
        return secure_kafka.tls_bootstrap_servers, ["--security-protocol", "SSL", "--ssl-cafile",
                                                    str(secure_kafka.ca_file)]  # fmt: skip
    bootstrap, flags = secure_kafka.worker_connection(principal, files)
    if case == "mechanism-not-offered":
        bootstrap = secure_kafka.oauth_bootstrap_servers  # the OAUTHBEARER listener offers no SCRAM
    elif case == "host-name-mismatch":
        bootstrap = bootstrap.replace("127.0.0.1", "localhost")  # the certificates name 127.0.0.1 only
    elif case == "untrusted-ca":
        other = ThrowawayCA(tmp_path / "other-ca", name="another test CA")
        flags[flags.index("--ssl-cafile") + 1] = str(other.ca_file)
    elif case == "token-from-another-issuer":
        from tests.kafka.oidc_issuer import OidcIssuer  # noqa: PLC0415 - only this case serves a rogue issuer

        rogue = OidcIssuer(clients={principal.name: principal.secret})
        flags[flags.index("--oauth-token-endpoint") + 1] = rogue.token_url
    return bootstrap, flags


def test_the_search_for_secrets_finds_one_in_a_log(secure_kafka: SecureKafka, tmp_path: Path) -> None:
    principal = secure_kafka.oidc_client("leak-probe")
    (tmp_path / "w.log").write_text(f'{{"msg": "token request with {principal.secret}"}}\n')
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "leak-probe.secret").write_text(principal.secret)
    assert secure_kafka.leaked(tmp_path) == [f"w.log: {principal.secret[:6]}..."]


def test_without_describe_configs_the_worker_says_so_once_and_uses_the_assumed_limit(
    secure_kafka: SecureKafka, secure_names: UniqueNames, secure_logs: Path
) -> None:
    principal = secure_kafka.scram_user(secure_names("user"))
    big = {"max.message.bytes": str(4 * 1024 * 1024)}
    source = secure_kafka.create_topic(secure_names("source"))
    output, dlq = (secure_kafka.create_topic(secure_names(role), config=big) for role in ("output", "dlq"))
    group, prefix = secure_names("group"), secure_names("txn")
    secure_kafka.grant_worker(principal, source=source, output=output, dlq=dlq, group=group, prefix=prefix,
                              describe_configs=False)  # fmt: skip
    assumed = 2 * 1024 * 1024
    runs = corpus(names=_RUNS)
    admin = secure_kafka.admin_options()
    asyncio.run(produce(secure_kafka.bootstrap_servers, source, interleave(runs), client=admin))
    worker = secure_kafka.worker(secure_logs, "w", principal, source, output, dlq, group, "--no-changelog",
                                 "--transactional-id-prefix", prefix, "--assumed-max-message-bytes", str(assumed),
                                 "--topic-check-interval-ms", "1000")  # fmt: skip
    worker.start()
    try:
        out = asyncio.run(collect(secure_kafka.bootstrap_servers, output, expect=expected_total(runs),
                                  timeout_s=90, settle_s=3.0, client=admin))  # fmt: skip
        assert_exactly_once(out, runs)
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    messages = [str(r.get("msg", "")) for r in worker.log_records()]
    unreadable = [m for m in messages if "max.message.bytes of topic" in m]
    assert sorted(unreadable) == sorted(
        f"max.message.bytes of topic {topic!r} is unreadable (error code 29, no DescribeConfigs right: grant it on "
        f"the topic, or set --assumed-max-message-bytes to its value): using --assumed-max-message-bytes {assumed}"
        for topic in (output, dlq)
    ), "said once per topic, though the topics were read again every second"
    [checked] = [m for m in messages if m.startswith("topics checked:")]
    assert f"records up to {assumed - 512} bytes; dead letters up to {assumed - 512} bytes" in checked
